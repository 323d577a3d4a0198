"""Rows per second the result-projector writes on Postgres, draining a backlog of hook events.
Figures printed, nothing asserted.

A throw-away Postgres database gets ``--snapshots`` queued snapshots (the crawl-runner's own
insert, as ``bench_claims.py`` fills them); a private ``nats-server`` gets, for each snapshot,
``--hooks`` pairs of a ``ProcessRecord`` and an ``ArchiveResultRecord`` (what a hook executor
publishes per hook), all before the projector starts. Then ``--replicas`` real projector
processes (``python -m boxcar.result_projector``) drain them; the figure is rows (ArchiveResult +
Process) from the first row to the last, per second. It is the capacity a deployment's projectors
have (README, "A hundred million snapshots, on paper"); full-text indexing of readable text is not
exercised (the synthetic results have no files).

Usage: ``python bench/bench_projector.py [--snapshots 2000] [--hooks 10] [--replicas 1]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nats
from sqlalchemy import func, select

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_claims import fill  # noqa: E402 - the same snapshots as the claims benchmark
from throwaway import throwaway_database  # noqa: E402

from boxcar.cli.stack import free_port, nats_server_binary, wait_for_port  # noqa: E402
from boxcar.shared import bus  # noqa: E402
from boxcar.shared.clock import utcnow  # noqa: E402
from boxcar.shared.db import Database  # noqa: E402
from boxcar.shared.db.models import ArchiveResult, Process, Snapshot  # noqa: E402
from boxcar.shared.ids import new_id  # noqa: E402
from boxcar.shared.messages import ArchiveResultRecord, ProcessRecord, ResultStatus  # noqa: E402


async def publish_backlog(nats_url: str, snapshots: list[tuple[str, str]], hooks: int) -> int:
    """Publish ``hooks`` Process + ArchiveResult events per ``(snapshot_id, crawl_id)``; returns
    how many events."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    await bus.ensure_streams(js)
    now = utcnow()
    batch: list[bus.Outgoing] = []
    sent = 0
    for snapshot_id, crawl_id in snapshots:
        for h in range(hooks):
            plugin, hook = f"plugin{h}", f"on_Snapshot__{10 + h}_plugin{h}"
            process = ProcessRecord(
                id=new_id(),
                snapshot_id=snapshot_id,
                crawl_id=crawl_id,
                plugin=plugin,
                hook_name=hook,
                cmd=["node", f"{hook}.js", "--url=https://bench.example/"],
                pid=1000 + h,
                exit_code=0,
                stdout="ok\n",
                started_at=now,
                ended_at=now,
                timeout=60,
                machine="bench",
            )
            result = ArchiveResultRecord(
                id=new_id(),
                snapshot_id=snapshot_id,
                crawl_id=crawl_id,
                plugin=plugin,
                hook_name=hook,
                status=ResultStatus.SUCCEEDED,
                output_str=f"{plugin}/output.txt",
                start_ts=now,
                end_ts=now,
                process_id=process.id,
            )
            batch.append(bus.Outgoing.make(bus.SUBJECT_PROCESS_COMPLETED, process, f"process.{process.id}"))
            batch.append(bus.Outgoing.make(bus.SUBJECT_ARCHIVERESULT, result, f"archiveresult.{result.id}"))
        if len(batch) >= 500:
            await bus.publish_many(js, batch, timeout=60)
            sent += len(batch)
            batch = []
    await bus.publish_many(js, batch, timeout=60)
    sent += len(batch)
    await nc.close()
    return sent


def run(url: str, snapshots: int, hooks: int, replicas: int) -> None:
    """``url``: the database as libpq takes it (``postgresql://…``), as the projector's DATABASE_URL."""
    db = Database(url.replace("postgresql://", "postgresql+psycopg://"))
    db.upgrade()
    crawl_ids = fill(db, snapshots, crawls=4)
    with db.read() as s:
        pairs = [(sid, cid) for sid, cid in s.execute(select(Snapshot.id, Snapshot.crawl_id))]
    assert len(crawl_ids) == 4 and len(pairs) == snapshots, (len(crawl_ids), len(pairs))
    expected = 2 * snapshots * hooks
    with tempfile.TemporaryDirectory(prefix="boxcar-bench-projector-") as tmp:
        port = free_port()
        server = subprocess.Popen(
            [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", f"{tmp}/nats"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for_port(port, 20, server)
            nats_url = f"nats://127.0.0.1:{port}"
            started = time.perf_counter()
            events = asyncio.run(publish_backlog(nats_url, pairs, hooks))
            print(f"published {events:,} events in {time.perf_counter() - started:.1f} s")
            env = dict(os.environ, DATABASE_URL=url, NATS_URL=nats_url, DATA_DIR=f"{tmp}/data", SPAN_LOG="false")
            procs = [
                subprocess.Popen(
                    [sys.executable, "-m", "boxcar.result_projector"],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=open(f"{tmp}/projector-{n}.log", "w"),  # noqa: SIM115 - the child's for its life
                )
                for n in range(replicas)
            ]
            try:
                first = last = None
                rows = 0
                deadline = time.monotonic() + 1800
                while rows < expected and time.monotonic() < deadline:
                    with db.read() as s:
                        rows = s.scalar(select(func.count()).select_from(ArchiveResult)) or 0
                        rows += s.scalar(select(func.count()).select_from(Process)) or 0
                    now = time.perf_counter()
                    if rows and first is None:
                        first = (now, rows)
                    last = (now, rows)
                    time.sleep(0.2)  # sampling the row count, not waiting on an event
                cpu = sum(_cpu_seconds(p.pid) for p in procs)
            finally:
                for p in procs:
                    p.terminate()
                for p in procs:
                    p.wait(30)
        finally:
            server.terminate()
            server.wait(10)
    assert first and last
    seconds = max(last[0] - first[0], 1e-3)
    print(
        f"{replicas} projector(s): {last[1]:,} of {expected:,} rows (ArchiveResult + Process, {snapshots:,} "
        f"snapshots x {hooks} hooks) in {seconds:.1f} s = {(last[1] - first[1]) / seconds:,.0f} rows/s; "
        f"projector CPU {cpu:.1f} s = {cpu * 1000 / max(last[1], 1):.2f} ms per row"
    )
    db.dispose()


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a live process (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snapshots", type=int, default=2000)
    parser.add_argument("--hooks", type=int, default=10)
    parser.add_argument("--replicas", type=int, default=1)
    args = parser.parse_args()
    with throwaway_database() as url:
        run(url, args.snapshots, args.hooks, args.replicas)


if __name__ == "__main__":
    main()
