"""Benchmark: the web UI's snapshot list and search at 100,000 snapshots, on SQLite and Postgres.

Fills a fresh database with N snapshots (a few results and tags each, a search document with a
paragraph of text), then times requests to the ingest app in-process (Litestar's test client: the
whole request — routing, guards, queries, Jinja2 — without network): the first page, a page deep
in the keyset pagination, each filter (tag, status, domain, crawl, date range) and a search.
Figures are printed, nothing asserted (the machine is shared and noisy).

Usage: ``python bench/bench_ui_list.py [--snapshots 100000] [--db sqlite,postgres] [--runs 15]``
(Postgres: ``TEST_PG_DSN``, default ``postgresql://postgres@127.0.0.1:5432``).
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from litestar.testing import TestClient
from sqlalchemy import insert
from throwaway import sqlalchemy_url, throwaway_database

from boxcar.ingest.app import create_app
from boxcar.shared import search
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Crawl, Snapshot, SnapshotTag, Tag
from boxcar.shared.settings import Settings

WORDS = (
    "archive kestrel river meadow quarry lantern harbour copper violet thunder garden orchard glacier ember "
    "saffron canyon pebble willow falcon marble compass lichen tundra beacon cobalt fern ridge harvest"
).split()
PLUGINS = ("screenshot", "wget", "htmltotext", "title")


def fill(db: Database, count: int, batch: int = 2000) -> None:
    """``count`` sealed snapshots over 20 crawls and 200 domains, 4 results and 1–2 tags each."""
    rng = random.Random(7)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    crawls = [Crawl.new(user="system", first_url="http://bench.test/", seed_count=0, now=start) for _ in range(20)]
    with db.write() as s:
        s.add_all(crawls)
        s.execute(insert(Tag), [{"id": i + 1, "name": f"tag{i}"} for i in range(50)])
    for offset in range(0, count, batch):
        snaps, results, tags, docs = [], [], [], []
        for n in range(offset, min(offset + batch, count)):
            sid = uuid.uuid4().hex
            domain = f"site{n % 200}.example"
            url = f"https://{domain}/post/{n}"
            created = start + timedelta(seconds=n * 30)
            title = " ".join(rng.choice(WORDS) for _ in range(5)).capitalize()
            snaps.append(
                {
                    "id": sid, "crawl_id": crawls[n % 20].id, "url": url, "url_hash": uuid.uuid4().hex * 2,
                    "title": title, "status": "sealed", "http_status": 200, "domain": domain,
                    "created_at": created, "modified_at": created, "bookmarked_at": created,
                    "output_dir": f"archive/users/system/snapshots/{created:%Y%m%d}/{domain}/{sid}",
                }
            )  # fmt: skip
            for plugin in PLUGINS:
                results.append(
                    {"id": uuid.uuid4().hex, "snapshot_id": sid, "plugin": plugin, "hook_name": f"on_{plugin}",
                     "status": "succeeded" if rng.random() > 0.05 else "failed", "output_files": {}}
                )  # fmt: skip
            tags += [{"snapshot_id": sid, "tag_id": t} for t in {rng.randint(1, 50), rng.randint(1, 50)}]
            body = " ".join(rng.choice(WORDS) for _ in range(150)) + f" unique{n}"
            docs.append(search.SearchDocument(sid, title, url, (), body))
        with db.write() as s:
            s.execute(insert(Snapshot), snaps)
            s.execute(insert(ArchiveResult), results)
            s.execute(insert(SnapshotTag), tags)
            search.index_documents(s, docs)


def timed(client: TestClient, path: str, runs: int) -> tuple[float, float]:
    """Median and max milliseconds of ``runs`` GETs (after one warm-up)."""
    assert client.get(path).status_code == 200, path
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - t0) * 1000)
        assert response.status_code == 200
    return statistics.median(times), max(times)


def bench(url: str, data_dir: Path, count: int, runs: int, label: str) -> None:
    db = Database(url)
    db.upgrade()
    t0 = time.perf_counter()
    fill(db, count)
    print(f"\n{label}: {count:,} snapshots written in {time.perf_counter() - t0:.0f}s")
    if db.is_sqlite:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
    else:
        with db.engine.connect() as conn:
            conn.exec_driver_sql("ANALYZE")
            conn.commit()
    settings = Settings(data_dir=data_dir, public_reads=True, nats_url="nats://127.0.0.1:9")
    with TestClient(create_app(settings, db)) as client:
        first = client.get("/").text
        cursor = first.split("cursor=")[1].split('"')[0].replace("&amp;", "&") if "cursor=" in first else ""
        with db.read() as s:
            middle = s.query(Snapshot.created_at, Snapshot.id).order_by(Snapshot.created_at).offset(count // 2).first()
            crawl_id = s.query(Crawl.id).first()[0]
        deep = f"{middle[0].isoformat()}~{middle[1]}"
        cases = [
            ("first page", "/"),
            ("second page (cursor)", f"/?cursor={cursor}"),
            (f"page at row {count // 2:,}", f"/?cursor={deep.replace('+', '%2B')}"),
            ("tag filter", "/?tag=tag7"),
            ("status filter", "/?status=sealed"),
            ("domain filter", "/?domain=site42.example"),
            ("crawl filter", f"/?crawl_id={crawl_id}"),
            ("date range", "/?date_from=2025-01-10&date_to=2025-01-12"),
            ("search (2 words)", "/?q=kestrel+lantern"),
            ("search (rare word)", f"/?q=unique{count // 3}"),
            ("search API", "/api/v1/search?q=kestrel+lantern&limit=20"),
        ]
        print(f"{'request':<26}{'median ms':>10}{'max ms':>10}")
        for name, path in cases:
            med, worst = timed(client, path, runs)
            print(f"{name:<26}{med:>10.1f}{worst:>10.1f}")
    db.dispose()


def main() -> None:
    import logging

    logging.getLogger("httpx").setLevel(logging.WARNING)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshots", type=int, default=100_000)
    parser.add_argument("--db", default="sqlite,postgres")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    for kind in args.db.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            if kind == "sqlite":
                bench(f"sqlite:///{tmp}/index.sqlite3", Path(tmp), args.snapshots, args.runs, "SQLite")
                continue
            with throwaway_database() as url:
                bench(sqlalchemy_url(url), Path(tmp), args.snapshots, args.runs, "Postgres")


if __name__ == "__main__":
    main()
