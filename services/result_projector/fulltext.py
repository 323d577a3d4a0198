"""The projector's full-text indexing: a snapshot's search document from its rows and files.

A document (``boxcar.shared.search``) is the snapshot's title, URL and final URL, tag names, and
its readable text (``archive_text.readable_text``: ``htmltotext``'s, else ``trafilatura``'s, else
a document's own, a PDF kept by ``staticfile`` read with pypdf), read through the archive store,
at most ``search.MAX_BODY_CHARS``. The projector
writes it when a result that feeds it arrives (``INDEXED_PLUGINS``), when the snapshot is
sealed, and when its tags change; ``reindex`` rebuilds every document from rows and files
(``boxcar reindex``).
"""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import select
from sqlalchemy.orm import Session

from boxcar.shared import search
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.archive_text import readable_text
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Snapshot, SnapshotTag, Tag
from boxcar.shared.messages import ResultStatus
from boxcar.shared.quirks import text_sources

#: results whose arrival changes a snapshot's document (its text, or its title)
INDEXED_PLUGINS = frozenset({"htmltotext", "trafilatura", "staticfile", "title", "seo"})


def build_documents(s: Session, store: ArchiveStore, snapshot_ids: Iterable[str]) -> list[search.SearchDocument]:
    """The documents of the snapshots that exist (read from their rows, then their files in
    ``store``).

    Raises:
        StoreUnavailable: the store did not answer (the documents are written on a later pass).
    """
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
    results: dict[str, list[ArchiveResult]] = {i: [] for i in snaps}
    for r in s.scalars(
        select(ArchiveResult).where(
            ArchiveResult.snapshot_id.in_(list(snaps)),
            ArchiveResult.plugin.in_(text_sources()),
            ArchiveResult.status == ResultStatus.SUCCEEDED,
        )
    ):
        results[r.snapshot_id].append(r)
    docs = []
    for sid, snap in snaps.items():
        urls = [snap.url] + ([snap.final_url] if snap.final_url and snap.final_url != snap.url else [])
        docs.append(
            search.SearchDocument(
                snapshot_id=sid,
                title=snap.title or "",
                url=" ".join(urls),
                tags=tuple(sorted(tags[sid])),
                body=readable_text(store, snap.output_dir, results[sid]),
            )
        )
    return docs


def index_snapshots(db: Database, store: ArchiveStore, snapshot_ids: Iterable[str]) -> int:
    """(Re)write the search documents of these snapshots; returns how many were written."""
    ids = list(dict.fromkeys(snapshot_ids))
    if not ids:
        return 0
    with db.read() as s:
        docs = build_documents(s, store, ids)
    with db.write() as s:
        return search.index_documents(s, docs)


def reindex(db: Database, store: ArchiveStore, *, batch: int = 200, progress=None) -> int:
    """Rebuild the whole index from rows and files (``boxcar reindex``): every snapshot's document
    is written again (searches keep answering meanwhile), documents of snapshots that are gone
    dropped, and SQLite's FTS5 index rebuilt from the documents. Returns the count."""
    with db.read() as s:
        ids = list(s.scalars(select(Snapshot.id).order_by(Snapshot.created_at)))
    done = 0
    for start in range(0, len(ids), batch):
        done += index_snapshots(db, store, ids[start : start + batch])
        if progress is not None:
            progress(done, len(ids))
    with db.write() as s:
        search.drop_orphans(s)
    return done
