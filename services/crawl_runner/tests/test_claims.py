"""The runner's conditional claims under real contention, on SQLite and Postgres."""

from __future__ import annotations

import threading
from datetime import timedelta

from sqlalchemy import select

from boxcar.crawl_runner import queries as q
from boxcar.shared.db.models import QUEUED, STARTED, Crawl, Snapshot, SnapshotTask, utcnow
from boxcar.shared.ids import new_id


def _crawl_with_snapshot(db) -> tuple[str, str]:
    now = utcnow()
    crawl = Crawl(id=new_id(), status=STARTED, retry_at=now, seeds=[], output_dir="x")
    with db.write() as s:
        s.add(crawl)
        s.flush()
        ids = q.insert_snapshots(
            s, crawl, [q.NewSnapshot("https://example.com/")], depth=0, parent_id=None, now=now, user="system"
        )
    return crawl.id, ids[0]


def test_only_one_of_many_concurrent_claims_wins(db):
    crawl_id, snapshot_id = _crawl_with_snapshot(db)
    with db.read() as s:
        seen = s.get(Snapshot, snapshot_id).retry_at
    barrier = threading.Barrier(8)
    wins: list[bool] = []

    def claim():
        barrier.wait()
        with db.write() as s:
            wins.append(q.claim_queued_snapshot(s, snapshot_id, seen, utcnow(), timedelta(seconds=60), 1) is not None)

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wins.count(True) == 1 and len(wins) == 8
    with db.read() as s:
        snap = s.get(Snapshot, snapshot_id)
        assert snap.status == STARTED and snap.retry_at > utcnow()


def test_a_future_lease_is_never_stolen(db):
    _, snapshot_id = _crawl_with_snapshot(db)
    now = utcnow()
    with db.read() as s:
        seen = s.get(Snapshot, snapshot_id).retry_at
    with db.write() as s:
        assert q.claim_queued_snapshot(s, snapshot_id, seen, now, timedelta(seconds=60), 1)
    with db.read() as s:
        lease = s.get(Snapshot, snapshot_id).retry_at
        # nothing due: the leased row is not offered to anyone
        assert snapshot_id not in [sid for sid, _ in q.due_started_snapshots(s, now)]
    with db.write() as s:
        # a replica holding a stale view can't take it either
        assert q.claim_started_snapshot(s, snapshot_id, seen, now, timedelta(seconds=60)) is None
        # once it expires, exactly one replica may take it over
        later = lease + timedelta(seconds=1)
        assert q.claim_started_snapshot(s, snapshot_id, lease, later, timedelta(seconds=60)) is not None
        assert q.claim_started_snapshot(s, snapshot_id, lease, later, timedelta(seconds=60)) is None


def test_duplicate_completion_and_stale_stage_change_nothing(db):
    _, snapshot_id = _crawl_with_snapshot(db)
    now = utcnow()
    with db.write() as s:
        snap = q.claim_queued_snapshot(
            s, snapshot_id, s.get(Snapshot, snapshot_id).retry_at, now, timedelta(seconds=60), 1
        )
        q.insert_tasks(s, snap, 1, {"fetch": ["wget"]}, now)
        q.insert_tasks(s, snap, 1, {"fetch": ["wget"]}, now)  # planning twice is harmless
    with db.write() as s:
        assert len(list(s.scalars(select(SnapshotTask).where(SnapshotTask.snapshot_id == snapshot_id)))) == 1
        assert q.lock_snapshot_at_stage(s, snapshot_id, 1, now) is not None
        assert q.complete_task(s, q.task_id(snapshot_id, 1, "fetch"), "succeeded", [], "", now)
        assert not q.complete_task(s, q.task_id(snapshot_id, 1, "fetch"), "failed", [], "late", now)
        assert q.lock_snapshot_at_stage(s, snapshot_id, 2, now) is None  # an event for a stage it is not at
    with db.read() as s:
        task = s.get(SnapshotTask, q.task_id(snapshot_id, 1, "fetch"))
        assert task.status == "succeeded" and task.error == ""


def test_crawl_seals_only_without_open_snapshots(db):
    crawl_id, snapshot_id = _crawl_with_snapshot(db)
    now = utcnow()
    with db.write() as s:
        assert not q.seal_crawl_if_done(s, crawl_id, now)
        assert s.get(Crawl, crawl_id).status == STARTED
    with db.write() as s:
        snap = s.get(Snapshot, snapshot_id)
        snap.status, snap.stage = STARTED, 99
    with db.write() as s:
        assert q.seal_snapshot(s, s.get(Snapshot, snapshot_id), now)
        assert q.seal_crawl_if_done(s, crawl_id, now)
        assert not q.seal_crawl_if_done(s, crawl_id, now)  # sealing twice is a no-op
    with db.read() as s:
        assert s.get(Crawl, crawl_id).status == "sealed"
        assert s.get(Snapshot, snapshot_id).status == "sealed" != QUEUED
