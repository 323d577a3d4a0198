"""The archive out: a selection of snapshots (one, a crawl, a tag, a search) as WACZ, JSON Lines,
JSON, CSV, Netscape bookmarks, RSS or Atom — for the CLI (``boxcar export``), the API
(``GET /api/v1/exports/{format}``) and the UI (``/export/{format}``), all from here.

- **WACZ 1.1.1** (Webrecorder's packaging: the WARCs, a CDXJ index, ``pages/pages.jsonl`` with
  titles and readable text, ``datapackage.json`` with hashes, ``datapackage-digest.json``) is
  written by py-wacz (``wacz create``) from the WARCs Boxcar's hooks wrote; it streams WARC records
  into the zip, so an export never holds the archive in memory.
- **JSON Lines / JSON** carry ArchiveBox's ``list --json`` fields (``url``, ``timestamp``,
  ``title``, ``tags`` as a comma string, ``bookmarked_at``, ``created_at``, ``downloaded_at``)
  plus Boxcar's (``id``, ``crawl_id``, ``status``, ``results``).
- **Netscape bookmarks** (``<!DOCTYPE NETSCAPE-Bookmark-file-1>``, ``ADD_DATE``, ``TAGS``) import
  into browsers and back into Boxcar with the same URLs, titles and tags.
- **RSS 2.0 / Atom 1.0** by feedgen: the newest snapshots of a tag or a search, each linking to its
  snapshot page (``base_url``).
"""

from __future__ import annotations

import contextlib
import csv
import io
import json
import tempfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from pathlib import Path

from sqlalchemy import select

from boxcar.ingest.access import Viewer
from boxcar.ingest.library import SnapshotLibrary
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.archive_text import readable_text
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Crawl, Snapshot, SnapshotTag, Tag
from boxcar.shared.messages import ResultStatus

#: format name → (media type, file extension)
FORMATS: dict[str, tuple[str, str]] = {
    "wacz": ("application/wacz", "wacz"),
    "jsonl": ("application/x-ndjson", "jsonl"),
    "json": ("application/json", "json"),
    "csv": ("text/csv", "csv"),  # Litestar adds "; charset=utf-8" to text/*
    "html": ("text/html", "html"),
    "rss": ("application/rss+xml", "xml"),
    "atom": ("application/atom+xml", "xml"),
}
#: the most snapshots one export takes (a feed: the newest ``FEED_SIZE``)
MAX_EXPORT = 100_000
FEED_SIZE = 50
CSV_FIELDS = ("timestamp", "url", "title", "tags", "bookmarked_at", "created_at", "downloaded_at", "status", "id")


class ExportError(ValueError):
    """An export that cannot be made: an unknown format, nothing selected, no WARC to package."""


@dataclass(frozen=True)
class Selection:
    """Which snapshots: one (``snapshot_id``), a crawl's, a tag's, or a search's (``q``, with
    ``tag`` narrowing it); all of them when nothing is given."""

    snapshot_id: str = ""
    crawl_id: str = ""
    tag: str = ""
    q: str = ""

    def describe(self) -> str:
        """The selection in words, for titles and file names."""
        parts = [
            f"snapshot {self.snapshot_id}" if self.snapshot_id else "",
            f"crawl {self.crawl_id}" if self.crawl_id else "",
            f"tag {self.tag}" if self.tag else "",
            f"search {self.q!r}" if self.q else "",
        ]
        return ", ".join(p for p in parts if p) or "all snapshots"


def selected_ids(
    db: Database, library: SnapshotLibrary, selection: Selection, viewer: Viewer, limit: int = MAX_EXPORT
) -> list[str]:
    """The ids of the selected snapshots ``viewer`` may read, newest first (a search: best match
    first)."""
    if selection.q:
        return [r.id for r in library.search(selection.q, selection.tag, limit=min(limit, 10_000), viewer=viewer)]
    with db.read() as s:
        query = select(Snapshot.id).where(library.readable(viewer))
        if selection.snapshot_id:
            query = query.where(Snapshot.id == selection.snapshot_id)
        if selection.crawl_id:
            query = query.where(Snapshot.crawl_id == selection.crawl_id)
        if selection.tag:
            query = query.join(SnapshotTag, SnapshotTag.snapshot_id == Snapshot.id).join(
                Tag, (Tag.id == SnapshotTag.tag_id) & (Tag.name == selection.tag)
            )
        return list(s.scalars(query.order_by(Snapshot.created_at.desc(), Snapshot.id).limit(limit)))


def records(library: SnapshotLibrary, ids: list[str], viewer: Viewer) -> Iterator[dict]:
    """One record per snapshot ``viewer`` may read (JSON Lines, JSON, CSV, bookmarks, feeds), in
    ``ids``' order, read a thousand at a time."""
    for i in range(0, len(ids), 1000):
        chunk = ids[i : i + 1000]
        rows = {r["id"]: r for r in library.export_rows(chunk, viewer=viewer)}
        for sid in chunk:
            if sid in rows:
                yield rows[sid]


def _epoch(iso: str | None) -> str:
    return str(int(datetime.fromisoformat(iso).timestamp())) if iso else ""


def jsonl(rows: Iterable[dict]) -> Iterator[str]:
    """JSON Lines, one snapshot a line."""
    for row in rows:
        yield json.dumps(row, ensure_ascii=False) + "\n"


def json_array(rows: Iterable[dict]) -> Iterator[str]:
    """One JSON array, written as it goes."""
    yield "["
    for n, row in enumerate(rows):
        yield ("," if n else "") + "\n" + json.dumps(row, ensure_ascii=False)
    yield "\n]\n"


def csv_rows(rows: Iterable[dict]) -> Iterator[str]:
    """CSV with a header (``CSV_FIELDS``; ArchiveBox's ``list --csv`` default is timestamp,url)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_FIELDS)
    for row in rows:
        writer.writerow([row.get(f, "") if f != "tags" else ",".join(row["tags"]) for f in CSV_FIELDS])
        yield buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
    yield buffer.getvalue()


def netscape(rows: Iterable[dict]) -> Iterator[str]:
    """Netscape bookmark HTML: ``<DT><A HREF ADD_DATE TAGS>title</A>`` per snapshot."""
    yield (
        "<!DOCTYPE NETSCAPE-Bookmark-file-1>\n"
        '<META HTTP-EQUIV="Content-Type" CONTENT="text/html; charset=UTF-8">\n'
        "<TITLE>Bookmarks</TITLE>\n<H1>Bookmarks</H1>\n<DL><p>\n"
    )
    for row in rows:
        added = _epoch(row.get("bookmarked_at") or row.get("created_at"))
        tags = escape(",".join(row["tags"]), quote=True)
        title = escape(row["title"] or row["url"])
        yield f'    <DT><A HREF="{escape(row["url"], quote=True)}" ADD_DATE="{added}" TAGS="{tags}">{title}</A>\n'
    yield "</DL><p>\n"


def feed(rows: Iterable[dict], kind: str, *, title: str, base_url: str, self_url: str) -> str:
    """An RSS 2.0 (``kind="rss"``) or Atom 1.0 (``"atom"``) feed of the snapshots, made by feedgen;
    each entry links to its snapshot page under ``base_url``."""
    from feedgen.feed import FeedGenerator

    gen = FeedGenerator()
    gen.id(self_url)
    gen.title(title)
    gen.link(href=base_url + "/", rel="alternate")
    gen.link(href=self_url, rel="self")
    gen.description(f"Snapshots archived by Boxcar: {title}")
    gen.language("en")
    for row in reversed(list(rows)):  # feedgen puts each new entry first: newest ends on top
        entry = gen.add_entry()
        page = f"{base_url}/snapshots/{row['id']}"
        entry.id(page)
        entry.title(row["title"] or row["url"])
        entry.link(href=page, rel="alternate")
        entry.link(href=row["url"], rel="related")
        entry.published(datetime.fromisoformat(row["created_at"]).replace(tzinfo=UTC))
        entry.description(f"{row['url']}" + (f" — tags: {', '.join(row['tags'])}" if row["tags"] else ""))
        for tag in row["tags"]:
            entry.category(term=tag)
    out = gen.atom_str(pretty=True) if kind == "atom" else gen.rss_str(pretty=True)
    return out.decode("utf-8")


# --------------------------------------------------------------------------- WACZ


def _warcs_and_pages(db: Database, store: ArchiveStore, cache: Path, ids: list[str]) -> tuple[list[Path], list[dict]]:
    """The WARC files of the snapshots (local paths: ``store.local_copy`` under ``cache``) and one
    ``pages.jsonl`` record per snapshot that has one (url, ts, title, and its readable text:
    ``archive_text.readable_text``)."""
    warcs: list[Path] = []
    pages: list[dict] = []
    for i in range(0, len(ids), 500):
        chunk = ids[i : i + 500]
        with db.read() as s:
            snaps = {x.id: x for x in s.scalars(select(Snapshot).where(Snapshot.id.in_(chunk)))}
            results = list(
                s.scalars(
                    select(ArchiveResult).where(
                        ArchiveResult.snapshot_id.in_(chunk), ArchiveResult.status == ResultStatus.SUCCEEDED
                    )
                )
            )
        by_snapshot: dict[str, list[ArchiveResult]] = {}
        for r in results:
            by_snapshot.setdefault(r.snapshot_id, []).append(r)
        for sid in chunk:
            snap = snaps.get(sid)
            if snap is None:
                continue
            base = store.local_copy(snap.output_dir, cache)
            own = [
                base / r.plugin / rel
                for r in by_snapshot.get(sid, [])
                for rel in (r.output_files or {})
                if rel.endswith((".warc.gz", ".warc"))
            ]
            own = [p for p in own if p.is_file()]
            if not own:
                continue
            warcs += own
            text = readable_text(store, snap.output_dir, by_snapshot.get(sid, []))
            when = snap.downloaded_at or snap.created_at
            pages.append(
                {
                    "id": sid,
                    "url": snap.final_url or snap.url,
                    "ts": when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    "title": snap.title or snap.url,
                    **({"text": text} if text else {}),
                }
            )
    return warcs, pages


def write_wacz(
    db: Database,
    store: ArchiveStore,
    cache: Path,
    ids: list[str],
    out: Path,
    *,
    title: str,
    progress: Callable[[str], None] = lambda _: None,
) -> int:
    """Package the selected snapshots' WARCs as a WACZ at ``out`` with py-wacz; returns the count
    of pages in it.

    Raises:
        ExportError: none of the snapshots has a WARC (no wget or other WARC-writing result), or
            py-wacz refused the input (its message).
    """
    from wacz.main import main as wacz_main

    with store.pinned():  # every copy stays until the WACZ is written, however many (STORE_CACHE_MAX)
        progress(f"collecting the WARCs of {len(ids)} snapshot(s)")
        warcs, pages = _warcs_and_pages(db, store, cache, ids)
        if not warcs:
            raise ExportError("none of the selected snapshots has a WARC (the wget plugin writes them)")
        names: dict[str, Path] = {}
        for path in warcs:  # a WACZ keeps them all in one archive/ folder: a second of a name would be lost
            if names.setdefault(path.name, path) != path:
                raise ExportError(f"two WARCs are named {path.name} ({names[path.name]} and {path}): rename one")
        with tempfile.TemporaryDirectory(prefix="boxcar-wacz-") as tmp:
            pages_file = Path(tmp) / "pages.jsonl"
            with pages_file.open("w") as fh:
                header = {"format": "json-pages-1.0", "id": "pages", "title": title, "hasText": True}
                fh.write(json.dumps(header) + "\n")
                for page in pages:
                    fh.write(json.dumps(page, ensure_ascii=False) + "\n")
            progress(f"indexing {len(warcs)} WARC file(s) into {out.name}")
            noise = io.StringIO()
            args = ["create", "-o", str(out), "-p", str(pages_file), "--copy-pages", "--title", title[:200]]
            with contextlib.redirect_stdout(noise):
                code = wacz_main([*args, *map(str, warcs)])
            if code:
                raise ExportError(f"py-wacz could not package the WARCs: {noise.getvalue().strip()[-500:]}")
        progress(f"wrote {out} ({out.stat().st_size:,} bytes, {len(pages)} page(s))")
        return len(pages)


def crawl_exists(db: Database, crawl_id: str) -> bool:
    """Whether there is a crawl ``crawl_id`` (the CLI's check: the operator sees every crawl)."""
    with db.read() as s:
        return s.get(Crawl, crawl_id) is not None
