"""The runner's conditional claims under real contention, on SQLite and Postgres."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from boxcar.crawl_runner import queries as q
from boxcar.shared.clock import utcnow
from boxcar.shared.db.models import (
    QUEUED,
    STARTED,
    ArchiveResult,
    Crawl,
    Snapshot,
    SnapshotTag,
    SnapshotTask,
    Tag,
    TaskStatus,
    dedup_key,
    url_hash,
)
from boxcar.shared.ids import new_id
from boxcar.shared.messages import ResultStatus, Seed


def new_crawl(db, urls: list[str], *, status=STARTED) -> str:
    """A started crawl whose seeds are already snapshots (queued, due now)."""
    now = utcnow()
    crawl = Crawl(id=new_id(), status=status, retry_at=now, output_dir="x", seed_count=len(urls), seeded=len(urls))
    with db.write() as s:
        s.add(crawl)
        s.flush()
        q.insert_snapshots(s, crawl, [Seed.parse(u) for u in urls], depth=0, parent_id=None, now=now)
    return crawl.id


def _crawl_with_snapshot(db) -> tuple[str, str]:
    crawl_id = new_crawl(db, ["https://example.com/"])
    with db.read() as s:
        return crawl_id, s.scalar(select(Snapshot.id).where(Snapshot.crawl_id == crawl_id))


def test_only_one_of_many_concurrent_claims_wins(db):
    crawl_id = new_crawl(db, [f"https://example.com/{i}" for i in range(5)])
    barrier = threading.Barrier(8)
    claimed: list[list[str]] = []

    def claim():
        barrier.wait()
        with db.write() as s:
            claimed.append([x.id for x in q.claim_queued_snapshots(s, crawl_id, 3, utcnow(), timedelta(seconds=60), 1)])

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for batch in claimed for i in batch]
    assert len(ids) == len(set(ids)) == 5, "a snapshot was claimed twice, or one was never claimed"
    with db.read() as s:
        snaps = list(s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id)))
        assert all(x.status == STARTED and x.retry_at > utcnow() and x.attempts == 1 for x in snaps)


def test_a_future_lease_is_never_stolen(db):
    crawl_id, snapshot_id = _crawl_with_snapshot(db)
    now = utcnow()
    with db.write() as s:
        [snap] = q.claim_queued_snapshots(s, crawl_id, 1, now, timedelta(seconds=60), 1)
        lease = snap.retry_at
    with db.read() as s:
        # nothing due: the leased row is not offered to anyone
        assert snapshot_id not in [sid for sid, _ in q.due_started_snapshots(s, now)]
    with db.write() as s:
        assert not q.claim_queued_snapshots(s, crawl_id, 1, now, timedelta(seconds=60), 1)
        # a replica holding a stale view can't take it either
        assert q.claim_started_snapshot(s, snapshot_id, now, now, timedelta(seconds=60)) is None
        # once it expires, exactly one replica may take it over
        later = lease + timedelta(seconds=1)
        assert q.claim_started_snapshot(s, snapshot_id, lease, later, timedelta(seconds=60)) is not None
        assert q.claim_started_snapshot(s, snapshot_id, lease, later, timedelta(seconds=60)) is None


def test_duplicate_completion_and_stale_stage_change_nothing(db):
    crawl_id, snapshot_id = _crawl_with_snapshot(db)
    now = utcnow()
    with db.write() as s:
        [snap] = q.claim_queued_snapshots(s, crawl_id, 1, now, timedelta(seconds=60), 1)
        q.insert_tasks(s, snap, 1, {"fetch": ["wget"]}, now)
        q.insert_tasks(s, snap, 1, {"fetch": ["wget"]}, now)  # planning twice is harmless
    task_id = q.task_id(snapshot_id, 1, 1, "fetch")
    with db.write() as s:
        assert s.scalar(select(func.count()).where(SnapshotTask.snapshot_id == snapshot_id)) == 1
        assert q.lock_snapshot_at_stage(s, snapshot_id, 1, now) is not None
        assert q.complete_task(s, task_id, TaskStatus.SUCCEEDED, "", now)
        assert not q.complete_task(s, task_id, TaskStatus.FAILED, "late", now)
        assert q.lock_snapshot_at_stage(s, snapshot_id, 2, now) is None  # an event for a stage it is not at
    with db.read() as s:
        task = s.get(SnapshotTask, task_id)
        assert task.status == "succeeded" and task.error == ""


def test_the_rows_the_runner_holds_show_what_its_guarded_updates_wrote(db):
    """The snapshot and crawl objects a decision holds are set to what ``record_response``,
    ``move_to_stage``, ``seal_snapshot`` and ``seal_crawl_if_done`` wrote (statements on the
    tables, which the ORM does not synchronise): a later guard sees the stage it moved to, and
    nothing of them is left to flush at the commit."""
    crawl_id, snapshot_id = _crawl_with_snapshot(db)
    now, lease = utcnow(), timedelta(seconds=60)
    with db.write() as s:
        [snap] = q.claim_queued_snapshots(s, crawl_id, 1, now, lease, 1)
        q.record_response(s, snap, 200, "https://example.com/final", "")
        assert (snap.http_status, snap.final_url, snap.network_error) == (200, "https://example.com/final", "")
        assert q.move_to_stage(s, snap, 3, now, lease)
        assert (snap.stage, snap.retry_at, snap.modified_at) == (3, now + lease, now)
        assert q.seal_snapshot(s, snap, now, 7)  # its guard: the stage it was moved to
        assert (snap.status, snap.retry_at, snap.downloaded_at, snap.expected_results) == ("sealed", None, now, 7)
        assert q.seal_crawl_if_done(s, crawl_id, now)
        crawl = s.get(Crawl, crawl_id)
        assert (crawl.status, crawl.retry_at) == ("sealed", None)
        assert not s.dirty
    with db.read() as s:
        row = s.get(Snapshot, snapshot_id)
        assert (row.status, row.stage, row.http_status, row.expected_results) == ("sealed", 3, 200, 7)
        assert row.final_url == "https://example.com/final"
        assert s.get(Crawl, crawl_id).status == "sealed"


def test_a_task_is_marked_picked_up_once_and_only_while_open(db):
    crawl_id, snapshot_id = _crawl_with_snapshot(db)
    now = utcnow()
    with db.write() as s:
        [snap] = q.claim_queued_snapshots(s, crawl_id, 1, now, timedelta(seconds=60), 1)
        q.insert_tasks(s, snap, 1, {"fetch": ["wget"], "extract": ["htmltotext"]}, now)
    fetch, extract = q.task_id(snapshot_id, 1, 1, "fetch"), q.task_id(snapshot_id, 1, 1, "extract")
    with db.write() as s:
        q.mark_dispatched(s, [fetch], now)  # an executor picks up what the stream delivered
        assert q.mark_task_started(s, fetch, now)
        assert not q.mark_task_started(s, fetch, now + timedelta(seconds=5))  # a redelivered task
        assert q.complete_task(s, extract, TaskStatus.SUCCEEDED, "", now)
        assert not q.mark_task_started(s, extract, now)  # completed before any executor said so
    with db.read() as s:
        assert s.get(SnapshotTask, fetch).started_at == now
        assert s.get(SnapshotTask, extract).started_at is None


def test_crawl_seals_only_without_open_snapshots_and_with_every_seed_in(db):
    crawl_id, snapshot_id = _crawl_with_snapshot(db)
    now = utcnow()
    with db.write() as s:
        assert not q.seal_crawl_if_done(s, crawl_id, now)
        assert s.get(Crawl, crawl_id).status == STARTED
    with db.write() as s:
        [snap] = q.claim_queued_snapshots(s, crawl_id, 1, now, timedelta(seconds=60), 3)
        assert q.seal_snapshot(s, snap, now, 0)
        s.get(Crawl, crawl_id).seed_count = 2  # one seed not inserted yet
    with db.write() as s:
        assert not q.seal_crawl_if_done(s, crawl_id, now)
        s.get(Crawl, crawl_id).seeded = 2
    with db.write() as s:
        assert q.seal_crawl_if_done(s, crawl_id, now)
        assert not q.seal_crawl_if_done(s, crawl_id, now)  # sealing twice is a no-op
    with db.read() as s:
        assert s.get(Crawl, crawl_id).status == "sealed"
        assert s.get(Snapshot, snapshot_id).status == "sealed" != QUEUED


def test_claims_seals_and_task_outcomes_count_once_committed_never_when_rolled_back(db):
    """``boxcar_claims_total``, ``boxcar_seals_total`` and ``boxcar_tasks_total`` move when the
    transaction that made the change commits: not before, not for a rolled-back claim, and not for
    a change that another replica had already made (a lost claim counts as lost)."""
    from prometheus_client import REGISTRY

    def value(name: str, **labels: str) -> float:
        return REGISTRY.get_sample_value(name, labels) or 0.0

    def claims(outcome: str) -> float:
        return value("boxcar_claims_total", row="snapshot", outcome=outcome)

    crawl_id, snapshot_id = _crawl_with_snapshot(db)
    now, lease = utcnow(), timedelta(seconds=60)
    won, lost = claims("won"), claims("lost")
    succeeded = value("boxcar_tasks_total", family="fetch", status="succeeded")
    failed = value("boxcar_tasks_total", family="fetch", status="failed")
    seals = value("boxcar_seals_total", row="snapshot")

    class Abort(Exception):
        pass

    with pytest.raises(Abort), db.write() as s:
        assert q.claim_queued_snapshots(s, crawl_id, 1, now, lease, 1)
        raise Abort
    assert claims("won") == won  # rolled back: no claim was made
    with db.write() as s:
        [snap] = q.claim_queued_snapshots(s, crawl_id, 1, now, lease, 1)
        assert claims("won") == won  # not committed yet
    assert claims("won") == won + 1
    with db.write() as s:
        assert q.claim_started_snapshot(s, snapshot_id, now, now, lease) is None  # a stale view: lost
    assert claims("lost") == lost + 1
    with db.write() as s:
        q.insert_tasks(s, snap, 1, {"fetch": ["wget"]}, now)
    task_id = q.task_id(snapshot_id, 1, 1, "fetch")
    with db.write() as s:
        assert q.complete_task(s, task_id, TaskStatus.SUCCEEDED, "", now)
        assert not q.complete_task(s, task_id, TaskStatus.FAILED, "late", now)  # a redelivery
        assert q.seal_snapshot(s, snap, now, 1)
    assert value("boxcar_tasks_total", family="fetch", status="succeeded") == succeeded + 1
    assert value("boxcar_tasks_total", family="fetch", status="failed") == failed
    assert value("boxcar_seals_total", row="snapshot") == seals + 1


def test_inserts_are_batched_and_percent_escape_case_is_one_page(db):
    """Thousands of rows in one call stay under Postgres' 65,535-parameter cap; ``%c3`` and ``%C3``
    are one snapshot (RFC 3986 §6.2.2), fetched as the first one was given."""
    urls = [f"https://example.com/page/{i}" for i in range(5000)]
    urls += ["https://example.com/p%c3%bcr-b.html", "https://example.com/p%C3%BCr-b.html"]
    crawl_id = new_crawl(db, urls)
    with db.read() as s:
        assert s.scalar(select(func.count()).where(Snapshot.crawl_id == crawl_id)) == 5001
        assert s.scalar(select(Snapshot.url).where(Snapshot.url.like("%b.html"))) == urls[-2]


def _snapshots_of(db, url: str) -> list[Snapshot]:
    with db.read() as s:
        return list(s.scalars(select(Snapshot).where(Snapshot.url == url)))


def test_concurrent_only_new_crawls_of_one_url_make_one_snapshot_and_merge_the_rest(db):
    """Five crawls of the same 20 URLs inserting at once (the issue's five ``boxcar add``): the
    unique ``dedup_key`` decides, so there are 20 snapshots; the other 80 seeds are merged, their
    tags on the one snapshot."""
    urls = [f"https://example.com/page/{i}" for i in range(20)]
    now = utcnow()
    crawls = [
        Crawl(id=new_id(), status=STARTED, retry_at=now, output_dir="x", seed_count=20, seeded=20, tags_str=f"t{n}")
        for n in range(5)
    ]
    with db.write() as s:
        s.add_all(crawls)
    barrier = threading.Barrier(5)
    errors = []

    def insert(crawl: Crawl) -> None:
        barrier.wait()
        try:
            with db.write() as s:
                q.insert_snapshots(
                    s, crawl, [Seed.parse(u) for u in urls], depth=0, parent_id=None, now=utcnow(), only_new=True
                )
        except Exception as exc:  # surfaced below: a unique violation escaping would be the bug
            errors.append(exc)

    threads = [threading.Thread(target=insert, args=(c,)) for c in crawls]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Snapshot)) == 20
        merged = dict(s.execute(select(Crawl.id, Crawl.merged)).all())
        assert sum(merged.values()) == 80
        tags = s.scalars(
            select(Tag.name)
            .join(SnapshotTag, SnapshotTag.tag_id == Tag.id)
            .where(SnapshotTag.snapshot_id.in_(select(Snapshot.id).where(Snapshot.url == urls[0])))
        ).all()
        assert sorted(tags) == [f"t{n}" for n in range(5)]  # every crawl's tags reached the one snapshot


def test_a_url_that_archived_nothing_is_captured_again_and_archive_again_is_never_merged(db):
    url = "https://example.com/flaky"
    first = new_crawl(db, [url])
    now = utcnow()
    with db.write() as s:  # the first crawl's snapshot is open: an ONLY_NEW crawl merges into it
        second = Crawl(id=new_id(), status=STARTED, retry_at=now, output_dir="x", seed_count=1, seeded=1)
        s.add(second)
        s.flush()
        s.execute(
            update(Snapshot).where(Snapshot.crawl_id == first).values(dedup_key=dedup_key("system", url_hash(url)))
        )
        created, _ = q.insert_snapshots(s, second, [Seed.parse(url)], depth=0, parent_id=None, now=now, only_new=True)
        assert created == [] and s.get(Crawl, second.id).merged == 1
    with db.write() as s:  # sealed with nothing archived: its key is released, the URL captured again
        s.execute(update(Snapshot).where(Snapshot.crawl_id == first).values(status="sealed", retry_at=None))
        third = Crawl(id=new_id(), status=STARTED, retry_at=now, output_dir="x", seed_count=1, seeded=1)
        s.add(third)
        s.flush()
        created, _ = q.insert_snapshots(s, third, [Seed.parse(url)], depth=0, parent_id=None, now=now, only_new=True)
        assert len(created) == 1
        again = Crawl(id=new_id(), status=STARTED, retry_at=now, output_dir="x", seed_count=1, seeded=1)
        s.add(again)
        s.flush()  # ONLY_NEW off ("archive again"): a snapshot of its own, whatever holds the key
        created, _ = q.insert_snapshots(s, again, [Seed.parse(url)], depth=0, parent_id=None, now=now)
        assert len(created) == 1
    assert len(_snapshots_of(db, url)) == 3


def test_a_url_is_captured_again_only_once_its_sealed_snapshots_results_are_all_in(db):
    """The projector writes a sealed snapshot's results after the seal. Its dedup key used to be
    released while none were in yet (nothing succeeded, so far as the rows said), and a concurrent
    ``ONLY_NEW`` crawl of the URL made a second snapshot of one that had archived it
    (``test_cli``'s five concurrent adds saw 21 snapshots of 20 URLs). Released only once every
    result of its plan is in and none succeeded."""
    url = "https://example.com/page"
    first = new_crawl(db, [url])
    key = dedup_key("system", url_hash(url))
    with db.write() as s:
        s.execute(
            update(Snapshot)
            .where(Snapshot.crawl_id == first)
            .values(dedup_key=key, status="sealed", retry_at=None, attempts=1, expected_results=2)
        )
    (snap,) = _snapshots_of(db, url)

    def add_result(status: str) -> None:
        with db.write() as s:
            s.add(ArchiveResult(id=new_id(), snapshot_id=snap.id, plugin="p", hook_name=new_id(), status=status))

    def another_crawl_makes_a_snapshot() -> bool:
        now = utcnow()
        with db.write() as s:
            crawl = Crawl(id=new_id(), status=STARTED, retry_at=now, output_dir="x", seed_count=1, seeded=1)
            s.add(crawl)
            s.flush()
            seeds = [Seed.parse(url)]
            created, _ = q.insert_snapshots(s, crawl, seeds, depth=0, parent_id=None, now=now, only_new=True)
            return bool(created)

    assert not another_crawl_makes_a_snapshot()  # sealed, no result in yet: merged into it
    add_result(ResultStatus.FAILED)
    assert not another_crawl_makes_a_snapshot()  # one of two in
    add_result(ResultStatus.FAILED)
    assert another_crawl_makes_a_snapshot()  # both in, both failed: captured again
    assert len(_snapshots_of(db, url)) == 2


def test_a_sealed_snapshot_that_archived_something_keeps_its_url(db):
    """A succeeded result keeps the key held, whatever else is still to come."""
    url = "https://example.com/kept"
    first = new_crawl(db, [url])
    with db.write() as s:
        s.execute(
            update(Snapshot)
            .where(Snapshot.crawl_id == first)
            .values(dedup_key=dedup_key("system", url_hash(url)), status="sealed", retry_at=None, expected_results=1)
        )
        (snap,) = s.scalars(select(Snapshot).where(Snapshot.crawl_id == first))
        s.add(ArchiveResult(id=new_id(), snapshot_id=snap.id, plugin="p", hook_name="h", status=ResultStatus.SUCCEEDED))
    with db.write() as s:
        assert q.release_dedup_keys(s, [dedup_key("system", url_hash(url))]) == 0
