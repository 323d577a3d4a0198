"""The archive as the web UI, ``boxcar search`` and ``boxcar remove`` see it: listing, searching,
one snapshot in full, tags, and deleting.

Reads only, except two writes that belong to ingest (DESIGN.md: ingest owns tags; a delete is not
a status transition, so it is not the crawl-runner's):

- ``set_tags`` replaces a snapshot's tags and tells the result-projector (``events.tags.changed``)
  to project its ``index.jsonl`` and search document again;
- ``delete`` removes a snapshot's rows (the snapshot, its results, task records and tag links
  through foreign keys, its Process rows, its search document) and then its directory; a
  snapshot being captured (``started``) is refused (``SnapshotBusy``), by a conditional DELETE, so
  a runner claiming it at the same moment wins or loses cleanly.

The list is newest first with keyset pagination on ``(created_at, id)``: a page costs the same at
row 100,000 as at row 1, and every filter has an index (migration 0005).
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import msgspec
from sqlalchemy import and_, delete, func, or_, select, tuple_
from sqlalchemy.orm import Session

from boxcar.ingest.access import Viewer, own_crawls, readable_snapshots, writable_snapshots
from boxcar.shared import search
from boxcar.shared.archive_store import ArchiveStore, StoreUnavailable
from boxcar.shared.archive_text import readable_text
from boxcar.shared.db import Database, attach_tags
from boxcar.shared.db.models import (
    ArchiveResult,
    Crawl,
    Process,
    Snapshot,
    SnapshotTag,
    Status,
    Tag,
    url_hash,
)
from boxcar.shared.messages import ResultStatus, Seed, clean_tags, clean_text
from boxcar.shared.quirks import hook_label
from boxcar.shared.urls import InvalidURL, url_domain

PAGE_SIZE = 50

log = logging.getLogger("boxcar.ingest")


class SnapshotBusy(Exception):
    """The snapshot is being captured right now; it can be deleted once it is sealed."""


@dataclass
class SnapshotFilter:
    """What the list shows: every field optional; ``date_from``/``date_to`` bound ``created_at``.

    Its text is cleaned here, where every filter enters (the API and the web UI): the tag as tags
    are stored (``clean_tags``: ``"no\x00pe"`` finds tag ``nope``), the rest without NUL or other
    control characters and cut to their columns' lengths — Postgres refuses NUL in a query's text.
    """

    tag: str = ""
    crawl_id: str = ""
    status: str = ""
    domain: str = ""
    date_from: datetime | None = None
    date_to: datetime | None = None
    q: str = ""

    def __post_init__(self) -> None:
        self.tag = next(iter(clean_tags(self.tag)), "")
        self.crawl_id = clean_text(self.crawl_id)[:32]
        self.status = clean_text(self.status)[:16]
        self.domain = clean_text(self.domain)[:255]
        self.q = clean_text(self.q)[: search.MAX_QUERY]


@dataclass
class SnapshotRow:
    """One line of the list."""

    id: str
    url: str
    title: str
    domain: str
    status: str
    http_status: int | None
    created_at: datetime
    crawl_id: str
    tags: list[str] = field(default_factory=list)
    #: plugin → status, e.g. {"screenshot": "succeeded", "wget": "failed"}
    results: dict[str, str] = field(default_factory=dict)
    has_screenshot: bool = False
    snippet_html: str = ""

    @property
    def summary(self) -> ResultSummary:
        """The results in one line: counts by status, the failed plugins named."""
        counts: dict[str, int] = defaultdict(int)
        for status in self.results.values():
            counts[status] += 1
        failed = sorted(p for p, st in self.results.items() if st == ResultStatus.FAILED)
        return ResultSummary(
            succeeded=counts[ResultStatus.SUCCEEDED],
            failed=failed,
            pending=counts[ResultStatus.STARTED] + counts[ResultStatus.QUEUED],
            other=sum(counts.values())
            - counts[ResultStatus.SUCCEEDED]
            - len(failed)
            - counts[ResultStatus.STARTED]
            - counts[ResultStatus.QUEUED],
        )


@dataclass(frozen=True)
class ResultSummary:
    """A snapshot's results at a glance (list and grid): ``succeeded`` plugins, the ``failed``
    ones by name, ``pending`` (queued or running) and ``other`` (skipped, no results)."""

    succeeded: int
    failed: list[str]
    pending: int
    other: int


@dataclass
class SnapshotList:
    rows: list[SnapshotRow]
    #: cursor of the next page ("" on the last one); for a search, the next offset
    next_cursor: str = ""


@dataclass
class ResultDetail:
    plugin: str
    hook_name: str
    status: str
    output_str: str
    output_files: dict
    output_size: int
    start_ts: datetime | None
    end_ts: datetime | None
    notes: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    #: what the hook is, in words, when its name does not say (``quirks.hook_label``)
    label: str = ""

    @property
    def files(self) -> list[str]:
        """Its output files, as paths inside the snapshot dir (the first 50)."""
        return [f"{self.plugin}/{rel}" for rel in list(self.output_files)[:50]]

    @property
    def duration(self) -> float | None:
        if self.start_ts and self.end_ts:
            return (self.end_ts - self.start_ts).total_seconds()
        return None


@dataclass
class SnapshotDetail:
    snapshot: Snapshot
    crawl: Crawl | None
    tags: list[str]
    results: list[ResultDetail]
    #: name → path inside the snapshot dir, of the outputs that exist (screenshot, pdf, dom, …)
    links: dict[str, str]


@dataclass
class TextChanges:
    """What changed in a page's readable text since the previous snapshot of its URL: a unified
    diff (``lines``, cut at ``DIFF_LINES``), with counts of added and removed lines."""

    previous_id: str
    previous_at: datetime
    added: int
    removed: int
    lines: list[str]
    truncated: bool = False


#: diff lines shown
DIFF_LINES = 400


def encode_cursor(row: SnapshotRow) -> str:
    return f"{row.created_at.isoformat()}~{row.id}"


def decode_cursor(cursor: str) -> tuple[datetime, str] | None:
    """The ``(created_at, id)`` of a cursor, None for a malformed one (the first page is shown)."""
    try:
        when, sid = cursor.split("~", 1)
        return datetime.fromisoformat(when), sid[:32]
    except ValueError:
        return None


class SnapshotLibrary:
    """The archive's snapshots for people: list, search, detail, tags, delete."""

    def __init__(
        self,
        db: Database,
        data_dir: Path,
        public_reads: bool = False,
        operator_name: str = "system",
        store: ArchiveStore | None = None,
    ) -> None:
        """Args:
        data_dir: ``DATA_DIR`` (with a bucket for ``store``, the local cache of its files).
        public_reads: ``PUBLIC_READS`` (admins' archives readable by anybody).
        operator_name: ``ARCHIVE_USER``, who acts as an admin.
        store: where the files are (default: ``data_dir`` itself).

        Every method takes the caller as ``viewer`` (``access.Viewer``) and answers only with what
        it may read (``access.readable_snapshots``) or change (``access.writable_snapshots``): the
        rest reads as if it did not exist."""
        self.db = db
        self.data_dir = data_dir
        self.store = store or ArchiveStore.local(data_dir)
        self.public_reads = public_reads
        self.operator_name = operator_name

    def readable(self, viewer: Viewer):
        """The condition on ``Snapshot`` of what ``viewer`` may read here."""
        return readable_snapshots(viewer, self.public_reads, self.operator_name)

    # ------------------------------------------------------------------ list and search

    def list(
        self, filters: SnapshotFilter, cursor: str = "", limit: int = PAGE_SIZE, *, viewer: Viewer
    ) -> SnapshotList:
        """A page of snapshots, newest first (or, with ``filters.q``, best match first)."""
        if filters.q.strip():
            return self._search(filters, int(cursor) if cursor.isdigit() else 0, limit, viewer)
        with self.db.read() as s:
            query = self._filtered(s, select(Snapshot), filters, viewer)
            after = decode_cursor(cursor) if cursor else None
            if after is not None:
                query = query.where(tuple_(Snapshot.created_at, Snapshot.id) < tuple_(*after))
            snaps = list(s.scalars(query.order_by(Snapshot.created_at.desc(), Snapshot.id.desc()).limit(limit + 1)))
            rows = self._rows(s, snaps[:limit])
        return SnapshotList(rows, encode_cursor(rows[-1]) if len(snaps) > limit else "")

    def _filtered(self, s: Session, query, f: SnapshotFilter, viewer: Viewer):
        query = query.where(self.readable(viewer))
        if f.tag:
            tag_id = s.scalar(select(Tag.id).where(Tag.name == f.tag))
            query = query.where(
                Snapshot.id.in_(select(SnapshotTag.snapshot_id).where(SnapshotTag.tag_id == (tag_id or -1)))
            )
        if f.crawl_id:
            query = query.where(Snapshot.crawl_id == f.crawl_id)
        if f.status:
            query = query.where(Snapshot.status == f.status)
        if f.domain:
            query = query.where(Snapshot.domain == f.domain.lower().strip())
        if f.date_from:
            query = query.where(Snapshot.created_at >= f.date_from)
        if f.date_to:
            query = query.where(Snapshot.created_at < f.date_to)
        return query

    def _search(self, f: SnapshotFilter, offset: int, limit: int, viewer: Viewer) -> SnapshotList:
        with self.db.read() as s:
            only = None if viewer.is_admin else self.readable(viewer)
            hits = search.search(s, f.q, tag=f.tag or None, limit=limit + 1, offset=offset, only=only)
            wanted = [h.snapshot_id for h in hits[:limit]]
            query = self._filtered(s, select(Snapshot), SnapshotFilter(**{**f.__dict__, "tag": "", "q": ""}), viewer)
            snaps = {x.id: x for x in s.scalars(query.where(Snapshot.id.in_(wanted)))}
            rows = self._rows(s, [snaps[i] for i in wanted if i in snaps])
        snippets = {h.snapshot_id: h.snippet_html for h in hits}
        for row in rows:
            row.snippet_html = snippets.get(row.id, "")
        return SnapshotList(rows, str(offset + limit) if len(hits) > limit else "")

    def search(self, q: str, tag: str = "", limit: int = 20, offset: int = 0, *, viewer: Viewer) -> list[SnapshotRow]:
        """Ranked matches of ``q`` (web-search syntax), each with its highlighted snippet."""
        return self._search(SnapshotFilter(q=q, tag=tag), offset, limit, viewer).rows

    def _rows(self, s: Session, snaps: list[Snapshot]) -> list[SnapshotRow]:
        ids = [x.id for x in snaps]
        tags: dict[str, list[str]] = defaultdict(list)
        results: dict[str, dict[str, str]] = defaultdict(dict)
        if ids:
            for sid, name in s.execute(
                select(SnapshotTag.snapshot_id, Tag.name)
                .join(Tag, Tag.id == SnapshotTag.tag_id)
                .where(SnapshotTag.snapshot_id.in_(ids))
                .order_by(Tag.name)
            ):
                tags[sid].append(name)
            for sid, plugin, status in s.execute(
                select(ArchiveResult.snapshot_id, ArchiveResult.plugin, ArchiveResult.status).where(
                    ArchiveResult.snapshot_id.in_(ids)
                )
            ):
                if results[sid].get(plugin) != ResultStatus.SUCCEEDED:  # a plugin with several hooks: its best
                    results[sid][plugin] = status
        return [
            SnapshotRow(
                id=x.id,
                url=x.url,
                title=x.title or "",
                domain=x.domain or url_domain(x.url),
                status=x.status,
                http_status=x.http_status,
                created_at=x.created_at,
                crawl_id=x.crawl_id,
                tags=tags[x.id],
                results=dict(sorted(results[x.id].items())),
                has_screenshot=results[x.id].get("screenshot") == ResultStatus.SUCCEEDED,
            )
            for x in snaps
        ]

    def tags(self, *, viewer: Viewer) -> list[str]:
        """The names of the tags on snapshots ``viewer`` may read, for the filter."""
        query = select(Tag.name).order_by(Tag.name).limit(1000)
        if not viewer.is_admin:
            readable = select(Snapshot.id).where(self.readable(viewer))
            query = query.where(Tag.id.in_(select(SnapshotTag.tag_id).where(SnapshotTag.snapshot_id.in_(readable))))
        with self.db.read() as s:
            return list(s.scalars(query))

    def _get(self, s: Session, snapshot_id: str, condition) -> Snapshot | None:
        return s.scalar(select(Snapshot).where(Snapshot.id == snapshot_id, condition))

    def owner(self, snapshot_id: str, *, viewer: Viewer) -> str | None:
        """The user name a snapshot ``viewer`` may read belongs to; None when it may not."""
        with self.db.read() as s:
            return s.scalar(
                select(Crawl.created_by)
                .join(Snapshot, Snapshot.crawl_id == Crawl.id)
                .where(Snapshot.id == snapshot_id, self.readable(viewer))
            )

    def can_change(self, snapshot_id: str, *, viewer: Viewer) -> bool:
        """Whether ``viewer`` may change the snapshot (tag, delete, share). Archiving its URL
        again is anyone's who may read it: that makes a new crawl of the viewer's own."""
        with self.db.read() as s:
            return self._get(s, snapshot_id, writable_snapshots(viewer)) is not None

    # ------------------------------------------------------------------ one snapshot

    def detail(self, snapshot_id: str, *, viewer: Viewer) -> SnapshotDetail | None:
        """A snapshot with its crawl, tags, every result (and, for failures, the hook's output),
        and links to the outputs on disk; None when there is no such snapshot (for ``viewer``)."""
        with self.db.read() as s:
            snap = self._get(s, snapshot_id, self.readable(viewer))
            if snap is None:
                return None
            crawl = s.get(Crawl, snap.crawl_id)
            tags = self._rows(s, [snap])[0].tags
            rows = list(
                s.scalars(
                    select(ArchiveResult)
                    .where(ArchiveResult.snapshot_id == snapshot_id)
                    .order_by(ArchiveResult.start_ts.is_(None), ArchiveResult.start_ts, ArchiveResult.hook_name)
                )
            )
            pids = [r.process_id for r in rows if r.process_id]
            procs = {p.id: p for p in s.scalars(select(Process).where(Process.id.in_(pids)))}
        results = []
        for r in rows:
            proc = procs.get(r.process_id or "")
            detail = msgspec.convert(r, ResultDetail, from_attributes=True)
            detail = dataclasses.replace(detail, label=hook_label(r.plugin, r.hook_name))
            if proc is not None:  # the hook's own words
                detail = dataclasses.replace(detail, stdout=proc.stdout, stderr=proc.stderr, exit_code=proc.exit_code)
            results.append(detail)
        return SnapshotDetail(snap, crawl, tags, results, self._links(snap, results))

    def _links(self, snap: Snapshot, results: list[ResultDetail]) -> dict[str, str]:
        """The viewable outputs: name → path relative to the snapshot dir."""
        ok = {r.plugin: r for r in results if r.status == ResultStatus.SUCCEEDED}
        links: dict[str, str] = {}

        def first(plugin: str, suffixes: tuple[str, ...], prefer: str = "") -> None:
            r = ok.get(plugin)
            if r is None:
                return
            files = sorted(r.output_files)
            if prefer in files:
                links[plugin] = f"{plugin}/{prefer}"
                return
            for rel in files:
                if rel.lower().endswith(suffixes):
                    links[plugin] = f"{plugin}/{rel}"
                    return

        first("screenshot", (".png", ".jpg", ".jpeg", ".webp"), "screenshot.png")
        first("pdf", (".pdf",), "output.pdf")
        first("dom", (".html",), "output.html")
        first("htmltotext", (".txt",), "htmltotext.txt")
        first("trafilatura", (".txt", ".md"), "content.txt")
        first("headers", (".json",), "headers.json")
        first("staticfile", ("",))

        def warc(name: str, plugin: str) -> None:  # wget's, and the browser's (hook_executor.warc)
            r = ok.get(plugin)
            warcs = sorted(rel for rel in (r.output_files if r else ()) if rel.startswith("warc/") and ".warc" in rel)
            if warcs:
                links[name] = f"{plugin}/{warcs[0]}"

        wget = ok.get("wget")
        if wget is not None:
            pages = sorted(
                (rel for rel in wget.output_files if rel.endswith((".html", ".htm")) and not rel.startswith("warc/")),
                key=lambda rel: (rel.count("/"), len(rel)),
            )
            if pages:
                links["wget"] = f"wget/{pages[0]}"
        warc("warc", "wget")
        warc("browser_warc", "responses")
        # replay shows what the browser saw where it ran (scripts' fetches included), else wget's capture
        if "browser_warc" in links or "warc" in links:
            links["replay"] = links.get("browser_warc") or links["warc"]
        return links

    def find(self, id_or_url: str, *, viewer: Viewer) -> list[str]:
        """Ids of the snapshots ``viewer`` may change matching an id, or a URL (every crawl's
        snapshot of it)."""
        mine = writable_snapshots(viewer)
        with self.db.read() as s:
            if len(id_or_url) == 32 and self._get(s, id_or_url, mine) is not None:
                return [id_or_url]
            try:
                canonical = Seed.parse(id_or_url).url
            except InvalidURL:
                return []
            return list(s.scalars(select(Snapshot.id).where(Snapshot.url_hash == url_hash(canonical), mine)))

    # ------------------------------------------------------------------ writes that are ingest's

    def set_tags(self, snapshot_id: str, tags: list[str], *, viewer: Viewer) -> list[str] | None:
        """Replace a snapshot's tags; returns them cleaned, None when there is no such snapshot
        ``viewer`` may change. The caller then publishes ``events.tags.changed``
        (``Signals.tags_changed``)."""
        names = clean_tags(tags)
        with self.db.write() as s:
            if self._get(s, snapshot_id, writable_snapshots(viewer)) is None:
                return None
            attach_tags(s, {snapshot_id: names})
            ids = list(s.scalars(select(Tag.id).where(Tag.name.in_(names)))) if names else []
            s.execute(
                delete(SnapshotTag).where(
                    SnapshotTag.snapshot_id == snapshot_id, SnapshotTag.tag_id.not_in(ids) if ids else True
                )
            )
        return names

    def changes(self, snapshot_id: str, *, viewer: Viewer) -> TextChanges | None:
        """The readable-text diff against the newest earlier snapshot of the same URL with a text
        that ``viewer`` may read; None when there is none (or either text is empty)."""
        import difflib

        with self.db.read() as s:
            snap = self._get(s, snapshot_id, self.readable(viewer))
            if snap is None:
                return None
            earlier = list(
                s.scalars(
                    select(Snapshot)
                    .where(
                        Snapshot.url_hash == snap.url_hash,
                        Snapshot.id != snap.id,
                        self.readable(viewer),
                        Snapshot.created_at <= snap.created_at,
                    )
                    .order_by(Snapshot.created_at.desc())
                    .limit(5)
                )
            )
            ids = [snap.id, *(x.id for x in earlier)]
            results: dict[str, list[ArchiveResult]] = defaultdict(list)
            for r in s.scalars(select(ArchiveResult).where(ArchiveResult.snapshot_id.in_(ids))):
                results[r.snapshot_id].append(r)
        now_text = readable_text(self.store, snap.output_dir, results[snap.id])
        before = next(((x, t) for x in earlier if (t := readable_text(self.store, x.output_dir, results[x.id]))), None)
        if not now_text or before is None:
            return None
        previous, old_text = before
        diff = list(difflib.unified_diff(old_text.splitlines(), now_text.splitlines(), lineterm="", n=1))[2:]
        added = sum(1 for line in diff if line.startswith("+"))
        removed = sum(1 for line in diff if line.startswith("-"))
        return TextChanges(
            previous.id, previous.created_at, added, removed, diff[:DIFF_LINES], truncated=len(diff) > DIFF_LINES
        )

    def trace_id(self, crawl_id: str, *, viewer: Viewer) -> str:
        """The crawl's trace id (from ``Crawl.trace_context``); "" for no such crawl (of
        ``viewer``'s) or none."""
        from boxcar.shared.spanlog import trace_id_of

        with self.db.read() as s:
            crawl = s.scalar(select(Crawl).where(Crawl.id == crawl_id, own_crawls(viewer)))
            return trace_id_of(dict(crawl.trace_context or {})) if crawl is not None else ""

    def add_tags(self, snapshot_ids: list[str], tags: list[str], *, viewer: Viewer) -> list[str]:
        """Add tags to many snapshots (bulk action); returns the ids ``viewer`` may change. The
        caller then publishes ``events.tags.changed``."""
        names = clean_tags(tags)
        with self.db.write() as s:
            found = list(
                s.scalars(select(Snapshot.id).where(Snapshot.id.in_(snapshot_ids), writable_snapshots(viewer)))
            )
            if names:
                attach_tags(s, {sid: names for sid in found})
        return found

    def remove_tags(self, snapshot_ids: list[str], tags: list[str], *, viewer: Viewer) -> list[str]:
        """Remove tags from many snapshots (bulk action); returns the ids ``viewer`` may change."""
        names = clean_tags(tags)
        with self.db.write() as s:
            found = list(
                s.scalars(select(Snapshot.id).where(Snapshot.id.in_(snapshot_ids), writable_snapshots(viewer)))
            )
            ids = list(s.scalars(select(Tag.id).where(Tag.name.in_(names)))) if names else []
            if ids and found:
                s.execute(delete(SnapshotTag).where(SnapshotTag.snapshot_id.in_(found), SnapshotTag.tag_id.in_(ids)))
        return found

    def export_rows(self, snapshot_ids: list[str], *, viewer: Viewer) -> list[dict]:
        """The selected snapshots ``viewer`` may read as JSON records (bulk export), in
        ArchiveBox's ``list --json`` spirit: url, title, timestamp fields, tags, status and where
        the files are."""
        with self.db.read() as s:
            snaps = list(
                s.scalars(
                    select(Snapshot)
                    .where(Snapshot.id.in_(snapshot_ids), self.readable(viewer))
                    .order_by(Snapshot.created_at)
                )
            )
            rows = {r.id: r for r in self._rows(s, snaps)}
        return [
            {
                "id": x.id,
                "url": x.url,
                #: ArchiveBox's snapshot timestamp: the bookmark time in epoch seconds, as a string
                "timestamp": str(int((x.bookmarked_at or x.created_at).timestamp())),
                "title": x.title,
                "domain": rows[x.id].domain,
                "tags": rows[x.id].tags,
                "tags_str": ",".join(rows[x.id].tags),
                "status": x.status,
                "http_status": x.http_status,
                "crawl_id": x.crawl_id,
                "created_at": x.created_at.isoformat(),
                "bookmarked_at": x.bookmarked_at.isoformat() if x.bookmarked_at else None,
                "downloaded_at": x.downloaded_at.isoformat() if x.downloaded_at else None,
                "output_dir": x.output_dir,
                "results": rows[x.id].results,
            }
            for x in snaps
        ]

    def delete(self, snapshot_id: str, *, viewer: Viewer) -> bool:
        """Delete a snapshot's rows and then its directory; False when there is no such snapshot
        ``viewer`` may change.

        Raises:
            SnapshotBusy: it is being captured (``started``); try again once it is sealed.
        """
        with self.db.write() as s:
            snap = self._get(s, snapshot_id, writable_snapshots(viewer))
            if snap is None:
                return False
            output_dir = snap.output_dir
            gone = s.execute(
                delete(Snapshot)
                .where(Snapshot.id == snapshot_id, Snapshot.status != Status.STARTED)
                .execution_options(synchronize_session=False)
            ).rowcount
            if not gone:
                raise SnapshotBusy(f"snapshot {snapshot_id} is being captured; delete it once it is sealed")
            s.execute(delete(Process).where(Process.snapshot_id == snapshot_id))
            search.remove_documents(s, [snapshot_id])
        self._remove_dir(output_dir)
        return True

    def _remove_dir(self, output_dir: str) -> None:
        if self.store.is_remote and output_dir.startswith("archive/"):
            try:
                self.store.delete_tree(output_dir)  # and the local cache of it below
            except StoreUnavailable as exc:  # the rows are gone; the files are left, said so
                log.warning("files of deleted snapshot dir %s left in the store: %s", output_dir, exc)
        archive = (self.data_dir / "archive").resolve()
        path = (self.data_dir / output_dir).resolve() if output_dir else None
        if path is not None and path != archive and path.is_relative_to(archive) and path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
            self.store.forget_copy(output_dir)

    # ------------------------------------------------------------------ crawls

    def crawls(self, cursor: str = "", limit: int = PAGE_SIZE, *, viewer: Viewer) -> tuple[list[dict], str]:
        """``viewer``'s crawls newest first, each with its snapshots counted by status; and the
        next cursor."""
        with self.db.read() as s:
            query = select(Crawl).where(own_crawls(viewer)).order_by(Crawl.created_at.desc(), Crawl.id.desc())
            after = decode_cursor(cursor) if cursor else None
            if after is not None:
                query = query.where(
                    or_(Crawl.created_at < after[0], and_(Crawl.created_at == after[0], Crawl.id < after[1]))
                )
            crawls = list(s.scalars(query.limit(limit + 1)))
            page = crawls[:limit]
            counts: dict[str, dict[str, int]] = defaultdict(dict)
            for cid, status, n in s.execute(
                select(Snapshot.crawl_id, Snapshot.status, func.count())
                .where(Snapshot.crawl_id.in_([c.id for c in page]))
                .group_by(Snapshot.crawl_id, Snapshot.status)
            ):
                counts[cid][status] = n
        rows = [
            {
                "id": c.id,
                "label": c.label,
                "status": c.status,
                "created_at": c.created_at,
                "seeds": c.seed_count,
                "tags": [t for t in c.tags_str.split(",") if t],
                "cancelled": c.cancelled_at is not None,
                "error": c.error,
                "snapshots": counts[c.id],
                "total": sum(counts[c.id].values()),
            }
            for c in page
        ]
        nxt = f"{page[-1].created_at.isoformat()}~{page[-1].id}" if len(crawls) > limit else ""
        return rows, nxt
