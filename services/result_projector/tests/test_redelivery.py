"""Redelivered and duplicated events never duplicate ArchiveResult, Process or Binary rows."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import nats
from sqlalchemy import func, select

from boxcar.crawl_runner import queries as q
from boxcar.result_projector.projector import ResultProjector
from boxcar.shared import bus
from boxcar.shared.db.models import STARTED, ArchiveResult, Binary, Crawl, Process, Snapshot, utcnow
from boxcar.shared.ids import new_id
from boxcar.shared.messages import ArchiveResultRecord, BinaryRecord, OutputFile, ProcessRecord
from boxcar.shared.settings import Settings


def _snapshot(db) -> str:
    now = utcnow()
    crawl = Crawl(id=new_id(), status=STARTED, retry_at=now, seeds=[], output_dir="x")
    with db.write() as s:
        s.add(crawl)
        s.flush()
        return q.insert_snapshots(
            s, crawl, [q.NewSnapshot("https://example.com/a")], depth=0, parent_id=None, now=now, user="system"
        )[0]


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
        await asyncio.to_thread(projector._apply, [(m.subject, m.data) for m in msgs])
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
