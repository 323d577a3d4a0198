"""The projector's full-text indexing: a snapshot's search document from its rows and files.

A document (``boxcar.shared.search``) is the snapshot's title, URL and final URL, tag names, and
its readable text: ``htmltotext``'s text, else ``trafilatura``'s, else a document's own text (a
PDF kept by ``staticfile``, read with pypdf), at most ``search.MAX_BODY_CHARS``. The projector
writes it when a result that feeds it arrives (``INDEXED_PLUGINS``), when the snapshot is
sealed, and when its tags change; ``reindex`` rebuilds every document from rows and files
(``boxcar reindex``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.orm import Session

from boxcar.shared import search
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Snapshot, SnapshotTag, Tag
from boxcar.shared.messages import ResultStatus

log = logging.getLogger("boxcar.result_projector")

#: results whose arrival changes a snapshot's document (its text, or its title)
INDEXED_PLUGINS = frozenset({"htmltotext", "trafilatura", "staticfile", "title", "seo"})
TEXT_PLUGINS = ("htmltotext", "trafilatura")
MAX_FILE_BYTES = 4 * 1024 * 1024  # read at most this much of one text file


def build_documents(s: Session, data_dir: Path, snapshot_ids: Iterable[str]) -> list[search.SearchDocument]:
    """The documents of the snapshots that exist (read from their rows, then their files)."""
    ids = list(dict.fromkeys(snapshot_ids))
    if not ids:
        return []
    snaps = {x.id: x for x in s.scalars(select(Snapshot).where(Snapshot.id.in_(ids)))}
    tags: dict[str, list[str]] = {i: [] for i in snaps}
    for sid, name in s.execute(
        select(SnapshotTag.snapshot_id, Tag.name)
        .join(Tag, Tag.id == SnapshotTag.tag_id)
        .where(SnapshotTag.snapshot_id.in_(list(snaps)))
    ):
        tags[sid].append(name)
    results: dict[str, dict[str, ArchiveResult]] = {i: {} for i in snaps}
    for r in s.scalars(
        select(ArchiveResult).where(
            ArchiveResult.snapshot_id.in_(list(snaps)),
            ArchiveResult.plugin.in_([*TEXT_PLUGINS, "staticfile"]),
            ArchiveResult.status == ResultStatus.SUCCEEDED,
        )
    ):
        results[r.snapshot_id][r.plugin] = r
    docs = []
    for sid, snap in snaps.items():
        urls = [snap.url] + ([snap.final_url] if snap.final_url and snap.final_url != snap.url else [])
        docs.append(
            search.SearchDocument(
                snapshot_id=sid,
                title=snap.title or "",
                url=" ".join(urls),
                tags=tuple(sorted(tags[sid])),
                body=readable_text(data_dir / snap.output_dir, results[sid]),
            )
        )
    return docs


def readable_text(snap_dir: Path, results: dict[str, ArchiveResult]) -> str:
    """The snapshot's readable text: the first text extractor's output, else a PDF's text."""
    for plugin in TEXT_PLUGINS:
        if plugin in results:
            for path in _files(snap_dir / plugin, results[plugin], (".txt", ".md")):
                body = _read_text(path)
                if body.strip():
                    return body
    if "staticfile" in results:
        for path in _files(snap_dir / "staticfile", results["staticfile"], (".pdf",)):
            return _pdf_text(path)
    return ""


def _files(plugin_dir: Path, result: ArchiveResult, suffixes: tuple[str, ...]) -> Iterator[Path]:
    """A result's output files with these suffixes, inside its plugin dir only."""
    root = plugin_dir.resolve()
    for rel in sorted(result.output_files or {}):
        if not rel.lower().endswith(suffixes):
            continue
        path = (plugin_dir / rel).resolve()
        if path.is_relative_to(root) and path.is_file():
            yield path


def _read_text(path: Path) -> str:
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES)
    except OSError as exc:
        log.warning("cannot read %s for the search index: %s", path, exc)
        return ""
    return data.decode("utf-8", "replace")[: search.MAX_BODY_CHARS]


def _pdf_text(path: Path) -> str:
    from pypdf import PdfReader

    out: list[str] = []
    size = 0
    try:
        for page in PdfReader(path).pages:
            text = page.extract_text() or ""
            out.append(text)
            size += len(text)
            if size >= search.MAX_BODY_CHARS:
                break
    except Exception as exc:  # a damaged PDF is still archived, just not searchable
        log.warning("no text from %s for the search index: %s", path, exc)
    return "\n".join(out)[: search.MAX_BODY_CHARS]


def index_snapshots(db: Database, data_dir: Path, snapshot_ids: Iterable[str]) -> int:
    """(Re)write the search documents of these snapshots; returns how many were written."""
    ids = list(dict.fromkeys(snapshot_ids))
    if not ids:
        return 0
    with db.read() as s:
        docs = build_documents(s, data_dir, ids)
    with db.write() as s:
        return search.index_documents(s, docs)


def reindex(db: Database, data_dir: Path, *, batch: int = 200, progress=None) -> int:
    """Rebuild the whole index from rows and files (``boxcar reindex``): every snapshot's document
    is written again (searches keep answering meanwhile), documents of snapshots that are gone
    dropped, and SQLite's FTS5 index rebuilt from the documents. Returns the count."""
    with db.read() as s:
        ids = list(s.scalars(select(Snapshot.id).order_by(Snapshot.created_at)))
    done = 0
    for start in range(0, len(ids), batch):
        done += index_snapshots(db, data_dir, ids[start : start + batch])
        if progress is not None:
            progress(done, len(ids))
    with db.write() as s:
        search.drop_orphans(s)
    return done
