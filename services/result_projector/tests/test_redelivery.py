"""Redelivered and duplicated events never duplicate ArchiveResult, Process or Binary rows."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import nats
from sqlalchemy import func, select

from boxcar.crawl_runner import queries as q
from boxcar.result_projector.projector import ResultProjector, refresh_snapshots
from boxcar.shared import bus
from boxcar.shared.clock import utcnow
from boxcar.shared.db.models import STARTED, ArchiveResult, Binary, Crawl, Process, Snapshot
from boxcar.shared.ids import new_id
from boxcar.shared.messages import (
    ArchiveResultRecord,
    BinaryRecord,
    OutputFile,
    ProcessRecord,
    Seed,
    SnapshotEvent,
    encode,
)
from boxcar.shared.settings import Settings


def _snapshot(db) -> str:
    now = utcnow()
    crawl = Crawl(id=new_id(), status=STARTED, retry_at=now, output_dir="x")
    with db.write() as s:
        s.add(crawl)
        s.flush()
        return q.insert_snapshots(s, crawl, [Seed.parse("https://example.com/a")], depth=0, parent_id=None, now=now)[0][
            0
        ]


async def _drained(js, timeout: float = 30) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        info = await js.consumer_info(bus.EVENTS_STREAM, bus.PROJECTOR_CONSUMER)
        if info.num_pending == 0 and info.num_ack_pending == 0:
            return
        assert loop.time() < deadline, f"projector still has {info.num_pending} pending"
        await asyncio.sleep(0.1)


def test_duplicates_and_redeliveries_upsert_once(db, db_url, nats_url, monkeypatch):
    monkeypatch.setenv("NATS_URL", nats_url)
    snapshot_id = _snapshot(db)
    t0 = utcnow()
    process = ProcessRecord(
        id=new_id(),
        snapshot_id=snapshot_id,
        plugin="wget",
        hook_name="on_Snapshot__35_wget.finite.bg",
        cmd=["wget"],
        exit_code=0,
        started_at=t0,
        ended_at=t0,
        machine="m1",
    )
    newer = ArchiveResultRecord(
        id=new_id(),
        snapshot_id=snapshot_id,
        plugin="wget",
        hook_name=process.hook_name,
        status="succeeded",
        output_str="wget/index.html",
        start_ts=t0 + timedelta(seconds=5),
        output_files={"index.html": OutputFile(size=1234, mimetype="text/html")},
        output_size=1234,
        process_id=process.id,
    )
    older = ArchiveResultRecord(
        id=new_id(),
        snapshot_id=snapshot_id,
        plugin="wget",
        hook_name=process.hook_name,
        status="failed",
        notes="an earlier attempt",
        start_ts=t0,
    )
    binary = BinaryRecord(name="wget", abspath="/usr/bin/wget", version="1.21.3", sha256="ab" * 32, machine="m1")

    async def scenario() -> None:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        await bus.ensure_streams(js)
        await bus.ensure_consumer(js, bus.EVENTS_STREAM, bus.PROJECTOR_CONSUMER, "events.>")
        # every event twice (different msg ids, so the stream keeps both), and the stale result last
        for n in range(2):
            await bus.publish(js, bus.SUBJECT_PROCESS_COMPLETED, process, msg_id=f"p{n}")
            await bus.publish(js, bus.SUBJECT_ARCHIVERESULT, newer, msg_id=f"a{n}")
            await bus.publish(js, bus.SUBJECT_BINARY_RESOLVED, binary, msg_id=f"b{n}")
        await bus.publish(js, bus.SUBJECT_ARCHIVERESULT, older, msg_id="old")

        projector = ResultProjector(Settings(), db)
        # a projector that applies a batch and dies before acking: JetStream redelivers all of it
        sub = await bus.pull(js, bus.EVENTS_STREAM, bus.PROJECTOR_CONSUMER)
        msgs = await sub.fetch(100, timeout=2)
        assert len(msgs) == 7
        await asyncio.to_thread(projector.apply, [(m.subject, m.data) for m in msgs])
        for m in msgs:
            await m.nak()
        await sub.unsubscribe()

        runner = asyncio.create_task(projector.run())
        await _drained(js)
        projector.stop()
        await asyncio.wait_for(runner, 10)
        info = await js.consumer_info(bus.EVENTS_STREAM, bus.PROJECTOR_CONSUMER)
        assert info.delivered.consumer_seq >= 14  # 7 first deliveries + 7 redeliveries
        await nc.close()

    asyncio.run(scenario())
    with db.read() as s:
        assert s.scalar(select(func.count()).select_from(Process)) == 1
        assert s.scalar(select(func.count()).select_from(Binary)) == 1
        rows = list(s.scalars(select(ArchiveResult)))
        assert len(rows) == 1
        assert rows[0].status == "succeeded" and rows[0].output_str == "wget/index.html"  # the stale one lost
        assert rows[0].output_files == {"index.html": {"size": 1234, "mimetype": "text/html"}}
        assert s.get(Snapshot, snapshot_id).output_size == 1234


def _sealed_snapshot(db) -> str:
    snapshot_id = _snapshot(db)
    with db.write() as s:
        snap = s.get(Snapshot, snapshot_id)
        snap.status, snap.attempts = "sealed", 1
    return snapshot_id


def _wget_result(snapshot_id: str) -> ArchiveResultRecord:
    return ArchiveResultRecord(
        id=new_id(),
        snapshot_id=snapshot_id,
        plugin="wget",
        hook_name="h1",
        status="succeeded",
        output_str="wget/index.html",
        start_ts=utcnow(),
    )


def test_fallbacks_never_replace_a_real_result_and_the_index_follows_the_rows(db, tmp_path):
    snapshot_id = _sealed_snapshot(db)
    projector = ResultProjector(Settings(data_dir=tmp_path), db)
    real = _wget_result(snapshot_id)
    stand_in = ArchiveResultRecord.stand_in(
        snapshot_id=snapshot_id, crawl_id="", plugin="wget", hook_name="h1", status="failed", reason="task failed"
    )
    other = ArchiveResultRecord.stand_in(
        snapshot_id=snapshot_id, crawl_id="", plugin="favicon", hook_name="h2", status="failed", reason="task failed"
    )
    sealed = encode(SnapshotEvent(snapshot_id=snapshot_id, crawl_id="", status="sealed"))
    # the stand-in first, the real result later: the real one replaces it
    projector.apply([(bus.SUBJECT_ARCHIVERESULT, encode(stand_in)), ("events.snapshot.sealed", sealed)])
    projector.apply([(bus.SUBJECT_ARCHIVERESULT, encode(real))])
    # a stand-in after the real result changes nothing; one for a hook with no result is kept
    projector.apply([(bus.SUBJECT_ARCHIVERESULT, encode(stand_in)), (bus.SUBJECT_ARCHIVERESULT, encode(other))])
    with db.read() as s:
        rows = {r.hook_name: r for r in s.scalars(select(ArchiveResult))}
        snap = s.get(Snapshot, snapshot_id)
    assert rows["h1"].status == "succeeded" and rows["h2"].status == "failed" and rows["h2"].output_str == "task failed"
    assert snap.indexed_at is not None
    lines = [json.loads(line) for line in (tmp_path / snap.output_dir / "index.jsonl").read_text().splitlines()]
    assert lines[0]["type"] == "Snapshot" and lines[0]["id"] == snapshot_id
    assert {(r["hook_name"], r["status"]) for r in lines[1:]} == {("h1", "succeeded"), ("h2", "failed")}


def test_only_sealed_snapshots_are_marked_stale_and_reindexed(db, tmp_path):
    sealed_id, archiving_id = _sealed_snapshot(db), _snapshot(db)
    with db.write() as s:
        assert refresh_snapshots(s, {sealed_id, archiving_id}) == {sealed_id}
    projector = ResultProjector(Settings(data_dir=tmp_path), db)
    projector.apply([(bus.SUBJECT_ARCHIVERESULT, encode(_wget_result(sid))) for sid in (sealed_id, archiving_id)])
    with db.read() as s:
        sealed, archiving = s.get(Snapshot, sealed_id), s.get(Snapshot, archiving_id)
    assert sealed.indexed_at is not None and (tmp_path / sealed.output_dir / "index.jsonl").is_file()
    assert archiving.indexed_at is None and not (tmp_path / archiving.output_dir / "index.jsonl").exists()


def test_refreshing_snapshots_sums_sizes_fills_missing_domains_and_keeps_modified_at(db, tmp_path):
    """``refresh_snapshots``: ``output_size`` is the sum of the snapshot's results, ``domain`` is
    filled only where it is empty, ``modified_at`` (the runner's) does not move, and only sealed
    snapshots are returned (their ``indexed_at`` cleared)."""
    sealed_id, archiving_id = _sealed_snapshot(db), _snapshot(db)
    then = utcnow() - timedelta(hours=1)
    with db.write() as s:
        s.get(Snapshot, sealed_id).domain = ""  # not filled yet
        s.get(Snapshot, archiving_id).domain = "kept.example"
        for sid, hook, size in ((sealed_id, "h1", 100), (sealed_id, "h2", 23), (archiving_id, "h1", 7)):
            s.add(
                ArchiveResult(
                    id=new_id(), snapshot_id=sid, plugin="wget", hook_name=hook, status="succeeded", output_size=size
                )
            )
    with db.write() as s:  # last, on its own: a later flush of other changes would set onupdate's now
        for sid in (sealed_id, archiving_id):
            snap = s.get(Snapshot, sid)
            snap.modified_at, snap.indexed_at = then, then
    with db.write() as s:
        assert refresh_snapshots(s, {sealed_id, archiving_id}) == {sealed_id}
    with db.read() as s:
        sealed, archiving = s.get(Snapshot, sealed_id), s.get(Snapshot, archiving_id)
        assert (sealed.output_size, archiving.output_size) == (123, 7)
        assert (sealed.domain, archiving.domain) == ("example.com", "kept.example")
        assert sealed.indexed_at is None and archiving.indexed_at == then
        assert sealed.modified_at == archiving.modified_at == then


def test_a_failed_index_write_is_repaired_by_the_sweep(db, tmp_path):
    snapshot_id = _sealed_snapshot(db)
    with db.read() as s:
        snap_dir = tmp_path / s.get(Snapshot, snapshot_id).output_dir
    snap_dir.parent.mkdir(parents=True)
    snap_dir.write_text("a file where the snapshot dir should be: writing the index fails")
    projector = ResultProjector(Settings(data_dir=tmp_path), db)
    sealed = encode(SnapshotEvent(snapshot_id=snapshot_id, crawl_id="", status="sealed"))
    projector.apply([("events.snapshot.sealed", sealed)])
    with db.read() as s:
        assert s.get(Snapshot, snapshot_id).indexed_at is None
    snap_dir.unlink()  # space is back
    with db.write() as s:
        s.get(Snapshot, snapshot_id).modified_at = utcnow() - timedelta(minutes=1)
    assert projector.repair() == 1
    assert (snap_dir / "index.jsonl").is_file()


def test_one_batch_applies_each_hooks_events_in_their_order(db, tmp_path):
    """A batch is upserted as one executemany per run of fallbacks or results: a hook's events that
    share a batch are still applied one after another, as if projected one by one."""
    snapshot_id = _snapshot(db)
    projector = ResultProjector(Settings(data_dir=tmp_path), db)
    t0 = utcnow()

    def result(hook: str, status: str, start: int, note: str = "") -> bytes:
        return encode(
            ArchiveResultRecord(
                id=new_id(),
                snapshot_id=snapshot_id,
                plugin="wget",
                hook_name=hook,
                status=status,
                notes=note,
                start_ts=t0 + timedelta(seconds=start),
            )
        )

    def stand_in(hook: str) -> bytes:
        return encode(
            ArchiveResultRecord.stand_in(
                snapshot_id=snapshot_id, crawl_id="", plugin="wget", hook_name=hook, status="failed", reason="lost"
            )
        )

    def process(pid: str, exit_code: int) -> bytes:
        return encode(
            ProcessRecord(
                id=pid, snapshot_id=snapshot_id, plugin="wget", hook_name="h", exit_code=exit_code, machine="m"
            )
        )

    pid = new_id()
    ar, pr = bus.SUBJECT_ARCHIVERESULT, bus.SUBJECT_PROCESS_COMPLETED
    projector.apply(
        [
            (ar, stand_in("a")),  # a stand-in, then the real result: the real one
            (ar, result("a", "succeeded", 1)),
            (ar, result("b", "succeeded", 1)),  # a real result, then a stand-in: still the real one
            (ar, stand_in("b")),
            (ar, result("c", "failed", 1, "first")),  # three runs: the newest start wins, not the last
            (ar, result("c", "succeeded", 3, "newest")),
            (ar, result("c", "failed", 2, "middle")),
            (ar, stand_in("d")),  # only a stand-in: kept
            (ar, result("e", "failed", 1, "earlier event")),  # the same start: the later event wins
            (ar, result("e", "succeeded", 1, "later event")),
            (pr, process(pid, 1)),
            (pr, process(pid, 0)),  # a process's last event is its row
        ]
    )
    with db.read() as s:
        rows = {r.hook_name: r for r in s.scalars(select(ArchiveResult))}
        procs = list(s.scalars(select(Process)))
    assert {h: r.status for h, r in rows.items()} == {
        "a": "succeeded",
        "b": "succeeded",
        "c": "succeeded",
        "d": "failed",
        "e": "succeeded",
    }
    assert rows["c"].notes == "newest" and rows["d"].output_str == "lost" and rows["e"].notes == "later event"
    assert [(p.id, p.exit_code) for p in procs] == [(pid, 0)]
