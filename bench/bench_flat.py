"""Long imports stay flat: one crawl of many corpus URLs on the embedded stack, throughput and the
stack's memory per window of snapshots. Figures printed, nothing asserted (compare the first and the
last window of one run; these machines are shared).

The corpus has 130 pages; the bench repeats them under new URLs (``…/pages/<name>/?copy=<k>``: the
corpus server ignores the query, Boxcar keeps it, so each is a snapshot of its own). For every
``--window`` snapshots sealed it prints the window's snapshots/min, at its end the summed RSS
and PSS of the stack's processes (the one-process stack or each service, NATS, warm interpreters,
egress proxy; not the short-lived hooks) and their CPU per snapshot in the window; at the end the
last window against the first and the CPU seconds per snapshot of everything the stack ran (its
processes and every hook: ``getrusage(RUSAGE_CHILDREN)`` once the stack has exited).

Usage: ``python bench/bench_flat.py [--urls 10000] [--window 1000] [--plugins wget,favicon,…]``
(issue 31: 10,000 URLs with the no-browser selection; about an hour on 2 cores).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_pipeline import corpus_urls  # noqa: E402
from bench_stack import NOCHROME, tree  # noqa: E402

from boxcar.cli.client import BoxcarClient  # noqa: E402
from boxcar.cli.stack import EmbeddedStack  # noqa: E402
from boxcar.shared.settings import Settings  # noqa: E402

#: Processes younger than this are taken for hooks (short-lived), not the stack.
LONG_LIVED_S = 20.0


def stack_sample(roots: list[int]) -> tuple[float, int, int]:
    """Of ``roots`` and their descendants older than ``LONG_LIVED_S`` (the stack's own processes,
    not the hooks it is running): summed user + system CPU seconds, RSS and PSS in bytes."""
    cpu, rss, pss = 0.0, 0, 0
    now = time.time()
    for proc in tree(roots):
        try:
            if proc.pid not in roots and now - proc.create_time() < LONG_LIVED_S:
                continue
            times, mem = proc.cpu_times(), proc.memory_full_info()
        except psutil.Error:
            continue
        cpu += times.user + times.system
        rss += mem.rss
        pss += mem.pss
    return cpu, rss, pss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--urls", type=int, default=10_000)
    parser.add_argument("--window", type=int, default=1000)
    parser.add_argument("--plugins", default=NOCHROME)
    parser.add_argument("--shape", default="one", choices=["one", "processes"])
    parser.add_argument("--data-dir", type=Path, help="keep the archive and logs here (default: a temporary dir)")
    args = parser.parse_args()
    pages, server, ctx = corpus_urls(1000)
    urls = [f"{page}?copy={k}" for k in range(args.urls // len(pages) + 1) for page in pages][: args.urls]
    os.environ.update(
        PLUGINS=args.plugins, URL_ALLOW_PRIVATE="true", CRAWL_MAX_URLS="0", CRAWL_MAX_CONCURRENT_SNAPSHOTS="16"
    )
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("NATS_URL", None)
    print(f"{len(urls)} URLs ({len(pages)} corpus pages repeated), plugins {args.plugins}, shape {args.shape}")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = args.data_dir.resolve() if args.data_dir else Path(tmp) / "data"
            stack = EmbeddedStack(Settings(data_dir=data_dir), shape=args.shape)
            stack.start()
            try:
                client = BoxcarClient(stack.api_url, stack.token, timeout=300)
                roots = [c.proc.pid for c in stack.children if c.proc]
                roots += [stack.nats_proc.pid] if stack.nats_proc else []
                started = time.monotonic()
                crawl_id = client.create_crawl({"urls": urls, "plugins": args.plugins.split(","), "only_new": False})[
                    "id"
                ]
                print(f"crawl created in {time.monotonic() - started:.1f} s")
                windows: list[tuple[float, float, int, int]] = []  # (seconds, snapshots/min, rss, pss)
                mark, mark_t, mark_cpu = 0, started, stack_sample(roots)[0]
                while True:
                    state = client.crawl(crawl_id)
                    sealed = state["snapshots"]["sealed"]
                    now = time.monotonic()
                    while sealed >= mark + args.window:
                        cpu, rss, pss = stack_sample(roots)
                        rate = args.window / ((now - mark_t) / 60)
                        windows.append((now - started, rate, rss, pss))
                        print(
                            f"  {mark + args.window:6d} sealed at {now - started:7.1f} s: {rate:6.1f} snapshots/min "
                            f"in this window; stack RSS {rss / 2**20:.0f} MiB, PSS {pss / 2**20:.0f} MiB; "
                            f"stack CPU {1000 * (cpu - mark_cpu) / args.window:.0f} ms per snapshot",
                            flush=True,
                        )
                        mark, mark_t, mark_cpu = mark + args.window, now, cpu
                    if state["status"] == "sealed" and not state.get("results_pending"):
                        break
                    time.sleep(1)
                total = time.monotonic() - started
                print(f"all {sealed} sealed in {total:.0f} s ({sealed / (total / 60):.1f} snapshots/min); {state}")
                if len(windows) >= 2:
                    first, last = windows[0], windows[-1]
                    print(
                        f"last window against the first: throughput {last[1] / first[1]:.2f}×, "
                        f"RSS {last[2] / first[2]:.2f}× ({(last[2] - first[2]) / 2**20:+.0f} MiB), "
                        f"PSS {last[3] / first[3]:.2f}× ({(last[3] - first[3]) / 2**20:+.0f} MiB)"
                    )
            finally:
                stack.stop()
            # everything the stack started, hooks included, once it has exited and been waited for
            # (the corpus server, still running, is not in it)
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            per = (used.ru_utime + used.ru_stime) / max(sealed, 1)
            print(f"CPU of the stack and its hooks: {per:.3f} s per snapshot")
    finally:
        if server is not None:
            server.terminate()
        if ctx is not None:
            ctx.__exit__(None, None, None)


if __name__ == "__main__":
    try:
        main()
    except httpx.HTTPError as exc:
        sys.exit(f"the stack did not answer: {exc}")
