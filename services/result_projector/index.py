"""Each sealed snapshot's ``index.jsonl``: a projection of its rows, written atomically.

The file holds the Snapshot record, then one ArchiveResult record per row, ordered by start time
(ArchiveBox 0.9's ``index.jsonl`` shape: JSON objects with a ``type``). It is written when the
snapshot is sealed and written again whenever a result arrives later; ``Snapshot.indexed_at``
is set when the file matches the rows and NULL while it is missing or stale, so a write that
failed (a full disk) is found and repaired by the projector's sweep. Plugin directories that
stayed empty are removed when the index is written, as abx-dl does.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Snapshot, SnapshotTag, Status, Tag


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value else None


def snapshot_record(snap: Snapshot, tags: list[str]) -> dict[str, Any]:
    """The Snapshot line of ``index.jsonl``."""
    return {
        "type": "Snapshot",
        "id": snap.id,
        "crawl_id": snap.crawl_id,
        "url": snap.url,
        "final_url": snap.final_url,
        "http_status": snap.http_status,
        "depth": snap.depth,
        "parent_snapshot_id": snap.parent_snapshot_id,
        "title": snap.title,
        "tags": tags,
        "bookmarked_at": _iso(snap.bookmarked_at),
        "created_at": _iso(snap.created_at),
        "downloaded_at": _iso(snap.downloaded_at),
        "status": snap.status,
    }


def result_record(r: ArchiveResult) -> dict[str, Any]:
    """An ArchiveResult line of ``index.jsonl``."""
    return {
        "type": "ArchiveResult",
        "id": r.id,
        "snapshot_id": r.snapshot_id,
        "plugin": r.plugin,
        "hook_name": r.hook_name,
        "status": r.status,
        "output_str": r.output_str,
        "output_json": r.output_json,
        "output_files": r.output_files or {},
        "output_size": r.output_size,
        "start_ts": _iso(r.start_ts),
        "end_ts": _iso(r.end_ts),
        "notes": r.notes,
        "process_id": r.process_id,
    }


def index_lines(s: Session, snap: Snapshot) -> list[dict[str, Any]]:
    """The snapshot's index: its record, then its results in the order they ran."""
    tags = list(
        s.scalars(
            select(Tag.name).join(SnapshotTag, SnapshotTag.tag_id == Tag.id).where(SnapshotTag.snapshot_id == snap.id)
        )
    )
    results = s.scalars(select(ArchiveResult).where(ArchiveResult.snapshot_id == snap.id))
    ordered = sorted(results, key=lambda r: (r.start_ts is None, r.start_ts or utcnow(), r.hook_name))
    return [snapshot_record(snap, sorted(tags))] + [result_record(r) for r in ordered]


def write_index(db: Database, store: ArchiveStore, snapshot_id: str) -> bool:
    """Write a sealed snapshot's ``index.jsonl`` (whole or not at all) to ``store`` and set its
    ``indexed_at``; False when the snapshot is not sealed (nothing to do yet).

    Raises:
        OSError: the file could not be written, ``StoreUnavailable`` among them (``indexed_at``
            stays NULL for the repair sweep).
    """
    with db.read() as s:
        snap = s.get(Snapshot, snapshot_id)
        if snap is None or snap.status != Status.SEALED:
            return False
        lines = index_lines(s, snap)
        seen = _results_version(s, snapshot_id)
    store.put_bytes(f"{snap.output_dir}/index.jsonl", "".join(json.dumps(line) + "\n" for line in lines).encode())
    if store.local_root is not None:  # plugin dirs a hook made and left empty (a bucket has no dirs)
        for child in (store.local_root / snap.output_dir).iterdir():
            if child.is_dir() and not any(child.iterdir()):
                child.rmdir()
    with db.write() as s:
        # Only if no result arrived meanwhile (that one marked it stale again and will rewrite it),
        # and only once every result of the plan is in (a late one rewrites the file anyway).
        if _results_version(s, snapshot_id) != seen or seen[0] < snap.expected_results:
            return False
        s.execute(
            update(Snapshot)
            .where(Snapshot.id == snapshot_id)
            .values(indexed_at=utcnow(), modified_at=Snapshot.modified_at)
        )
    return True


def _results_version(s: Session, snapshot_id: str) -> tuple:
    """Changes whenever a result of the snapshot is inserted or updated."""
    return tuple(
        s.execute(
            select(func.count(), func.max(ArchiveResult.modified_at)).where(ArchiveResult.snapshot_id == snapshot_id)
        ).one()
    )


def unindexed(s: Session, sealed_before: datetime, limit: int) -> list[str]:
    """Sealed, captured snapshots whose index is missing or stale (oldest first)."""
    return list(
        s.scalars(
            select(Snapshot.id)
            .where(
                Snapshot.status == Status.SEALED,
                Snapshot.attempts > 0,
                Snapshot.indexed_at.is_(None),
                Snapshot.modified_at <= sealed_before,
            )
            .order_by(Snapshot.modified_at)
            .limit(limit)
        )
    )
