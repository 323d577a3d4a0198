"""The crawl-runner's own CPU per snapshot: its decisions, over SQLite and Postgres, no NATS.
Figures printed, nothing asserted.

One crawl of N snapshots with the default selection's 21 plugins (the side-by-side runs' default
set) goes through ``Decisions`` as the runner drives it: ``start_snapshots`` (at most
``CRAWL_MAX_CONCURRENT_SNAPSHOTS`` in flight), every task message answered at once by a
``TaskCompleted`` (``record_completion``), the dispatched ones marked (``mark_dispatched``), until
every snapshot is sealed. The process's CPU time (``time.process_time``) is divided by the
snapshots and by the completions: what the runner spends in SQLAlchemy and the database driver
for each, apart from the messaging and the hooks (``bench_flat.py`` and ``../shared/bench`` measure
the whole stack).

Usage: ``python bench/bench_decisions.py [--snapshots 200] [--runs 3] [--profile]``
(Postgres: a throw-away database on ``TEST_PG_DSN`` / ``postgresql://postgres@127.0.0.1:5432``).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import pstats
import tempfile
import time
from collections import deque
from pathlib import Path

from bench_stack import SIDE_BY_SIDE_DEFAULT
from throwaway import sqlalchemy_url, throwaway_database

from boxcar.crawl_runner import queries as q
from boxcar.crawl_runner.decisions import Decisions
from boxcar.shared import bus
from boxcar.shared.clock import utcnow
from boxcar.shared.crawlconfig import CrawlConfig
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl
from boxcar.shared.messages import HookTask, Seed, TaskCompleted
from boxcar.shared.settings import Settings


def _tasks(out: list[bus.Outgoing]) -> list[HookTask]:
    return [o.msg for o in out if isinstance(o.msg, HookTask)]


def crawl_through(url: str, data_dir: Path, snapshots: int) -> tuple[int, float]:
    """Archive ``snapshots`` URLs' worth of decisions on the database at ``url``; returns
    ``(completions, CPU seconds)``."""
    db = Database(url)
    db.upgrade()
    settings = Settings(data_dir=data_dir)
    runner = Decisions(settings, db)
    crawl = Crawl.new(
        user="system",
        first_url="https://bench.example/0",
        seed_count=0,
        plugins=list(SIDE_BY_SIDE_DEFAULT),
        config=CrawlConfig.build(settings, runner.catalog, {}, environ={}).values,
        max_depth=0,
    )
    crawl.status = "started"
    with db.write() as s:
        s.add(crawl)
        s.flush()
        seeds = [Seed.parse(f"https://bench{i % 7}.example/{i}") for i in range(snapshots)]
        q.insert_snapshots(s, crawl, seeds, depth=0, parent_id=None, now=utcnow())
    started = time.process_time()
    pending = deque(_tasks(runner.start_snapshots(crawl.id)))
    runner.mark_dispatched([t.task_id for t in pending])
    completions = 0
    while pending:
        task = pending.popleft()
        completions += 1
        out = runner.record_completion(TaskCompleted.of(task, http_status=200), [])
        if any(o.subject == bus.snapshot_event_subject("sealed") for o in out):
            out += runner.start_snapshots(crawl.id)
        more = _tasks(out)
        if more:
            runner.mark_dispatched([t.task_id for t in more])
        pending.extend(more)
    cpu = time.process_time() - started
    db.dispose()
    return completions, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snapshots", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top functions (SQLite run)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for dialect in ("sqlite", "postgresql"):
                data_dir = Path(tmp, f"run{run}-{dialect}")
                data_dir.mkdir()
                with contextlib.ExitStack() as stack:
                    if dialect == "sqlite":
                        url = f"sqlite:///{data_dir / 'index.sqlite3'}"
                    else:
                        url = sqlalchemy_url(stack.enter_context(throwaway_database()))
                    profile = cProfile.Profile() if args.profile and dialect == "sqlite" and run == 0 else None
                    if profile:
                        profile.enable()
                    try:
                        completions, cpu = crawl_through(url, data_dir, args.snapshots)
                    finally:
                        if profile:
                            profile.disable()
                note = " (under cProfile)" if profile else ""
                print(
                    f"run {run + 1} {dialect}: {args.snapshots} snapshots, {completions} completions, "
                    f"{cpu:.2f} CPU-s: {cpu / args.snapshots * 1000:.1f} ms a snapshot, "
                    f"{cpu / completions * 1000:.2f} ms a completion{note}"
                )
                if profile:
                    pstats.Stats(profile).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
