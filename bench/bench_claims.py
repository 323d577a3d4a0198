"""Snapshot claims per second on Postgres (or SQLite), N runner replicas at once, and no double
claim. Figures printed, nothing asserted.

Each "replica" is a thread with its own connection pool running the crawl-runner's own claim
statement (``queries.claim_queued_snapshots``: ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP
LOCKED LIMIT n) RETURNING``) in a loop until the queue is empty; the claimed ids of all replicas are
then compared. This is the claim itself — what the runner does per snapshot after it (planning
tasks, publishing) is measured by the pipeline benchmarks.

Usage: ``python bench/bench_claims.py [--snapshots 20000] [--replicas 2] [--batch 100] [--db URL]``
(default: a throw-away database on ``TEST_PG_DSN`` / ``postgresql://postgres@127.0.0.1:5432``).
"""

from __future__ import annotations

import argparse
import threading
import time
from collections import Counter
from datetime import timedelta

from throwaway import sqlalchemy_url, throwaway_database

from boxcar.crawl_runner import queries as q
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl
from boxcar.shared.ids import new_id
from boxcar.shared.messages import Seed


def fill(db: Database, snapshots: int, crawls: int) -> list[str]:
    """``crawls`` started crawls holding ``snapshots`` queued snapshots in all."""
    now = utcnow()
    ids = []
    per = snapshots // crawls
    for c in range(crawls):
        crawl = Crawl(id=new_id(), status="started", retry_at=now, output_dir="x", seed_count=per, seeded=per)
        with db.write() as s:
            s.add(crawl)
            s.flush()
            seeds = [Seed.parse(f"https://bench.example/{c}/{i}") for i in range(per)]
            q.insert_snapshots(s, crawl, seeds, depth=0, parent_id=None, now=now)
        ids.append(crawl.id)
    return ids


def run(url: str, snapshots: int, replicas: int, batch: int, crawls: int) -> None:
    db = Database(url)
    db.upgrade()
    crawl_ids = fill(db, snapshots, crawls)
    claimed: list[list[str]] = [[] for _ in range(replicas)]
    barrier = threading.Barrier(replicas + 1)

    def replica(n: int) -> None:
        mine = Database(url)
        barrier.wait()
        empty = 0
        while empty < len(crawl_ids):
            empty = 0
            for crawl_id in crawl_ids:
                with mine.write() as s:
                    got = q.claim_queued_snapshots(s, crawl_id, batch, utcnow(), timedelta(minutes=5), 1)
                claimed[n].extend(x.id for x in got)
                empty += not got
        mine.dispose()

    threads = [threading.Thread(target=replica, args=(n,)) for n in range(replicas)]
    for t in threads:
        t.start()
    barrier.wait()
    started = time.perf_counter()
    for t in threads:
        t.join()
    seconds = time.perf_counter() - started
    every = Counter(i for mine in claimed for i in mine)
    doubles = sum(n - 1 for n in every.values() if n > 1)
    print(
        f"{db.engine.dialect.name}: {len(every)} of {snapshots} snapshots claimed by {replicas} replicas "
        f"in {seconds:.2f} s = {len(every) / seconds:,.0f} claims/s (batch {batch}); "
        f"per replica {[len(m) for m in claimed]}; double claims: {doubles}"
    )
    db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--snapshots", type=int, default=20_000)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--crawls", type=int, default=4)
    parser.add_argument("--db", default="")
    args = parser.parse_args()
    if args.db:
        run(args.db, args.snapshots, args.replicas, args.batch, args.crawls)
        return
    with throwaway_database() as url:
        run(sqlalchemy_url(url), args.snapshots, args.replicas, args.batch, args.crawls)


if __name__ == "__main__":
    main()
