"""The embedded stack's fixed costs: a one-URL crawl's latency on an already-started stack, and
what the stack costs while it waits (CPU share of a core, resident memory). Figures printed,
nothing asserted (compare within one run; these machines are shared).

- latency: ``POST /api/v1/crawls`` of one local page → sealed with every result indexed, polled
  every 20 ms (the API's view), median of ``--repeat``; and ``boxcar add --wait URL`` as a user
  types it (CLI start-up included);
- idle: after the work, the stack's processes (services, NATS, zygote, egress proxy) measured over
  ``--idle`` seconds: CPU seconds per second, and RSS / PSS summed.

Usage: ``python bench/bench_stack.py [--shape one|processes] [--plugins wget,favicon,…] [--idle 60]``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil

from boxcar.cli.client import BoxcarClient
from boxcar.cli.demo import serve_demo_site
from boxcar.cli.stack import EmbeddedStack
from boxcar.shared.settings import Settings

NOCHROME = "wget,favicon,htmltotext,trafilatura,hashes"


def tree(pids: list[int]) -> list[psutil.Process]:
    out = []
    for pid in pids:
        try:
            root = psutil.Process(pid)
            out += [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
    return out


def _label(proc: psutil.Process) -> str:
    """A short name for a process of the stack: its program and the module or script it runs."""
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return proc.name()
    words = [Path(cmd[0]).name] if cmd else [proc.name()]
    for arg in cmd[1:4]:
        if not arg.startswith("-") or arg == "-m":
            words.append(arg if len(arg) < 40 else Path(arg).name)
    return " ".join(words)[:40]


def one_url(client: BoxcarClient, url: str, plugins: list[str]) -> float:
    started = time.perf_counter()
    crawl_id = client.create_crawl({"urls": [url], "plugins": plugins, "only_new": False})["id"]
    while True:
        state = client.crawl(crawl_id)
        if state["status"] == "sealed" and not state.get("results_pending"):
            return time.perf_counter() - started
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="one", choices=["one", "processes"])
    parser.add_argument("--plugins", default=NOCHROME)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--idle", type=float, default=60.0)
    args = parser.parse_args()
    plugins = [p for p in args.plugins.split(",") if p]
    os.environ.update(PLUGINS=args.plugins, URL_ALLOW_PRIVATE="true")
    with tempfile.TemporaryDirectory() as tmp, serve_demo_site() as site:
        stack = EmbeddedStack(Settings(data_dir=Path(tmp) / "data"), shape=args.shape)
        stack.start()
        try:
            client = BoxcarClient(stack.api_url, stack.token)
            one_url(client, site, plugins)  # warm-up: binaries resolved, interpreters started
            api = sorted(one_url(client, site, plugins) for _ in range(args.repeat))
            cli = []
            env = {**os.environ, "BOXCAR_API_URL": stack.api_url, "BOXCAR_API_TOKEN": stack.token}
            for _ in range(args.repeat):
                started = time.perf_counter()
                subprocess.run(
                    [
                        str(Path(sys.executable).parent / "boxcar"),
                        "add",
                        "--wait",
                        "--no-only-new",
                        "--plugins",
                        args.plugins,
                        site,
                    ],
                    env=env,
                    check=True,
                    capture_output=True,
                )
                cli.append(time.perf_counter() - started)
            print(
                f"[{args.shape}] one-URL crawl ({args.plugins}): API {statistics.median(api):.2f} s median "
                f"(min {api[0]:.2f}); `boxcar add --wait` {statistics.median(cli):.2f} s median"
            )
            roots = [c.proc.pid for c in stack.children if c.proc] + ([stack.nats_proc.pid] if stack.nats_proc else [])
            time.sleep(10)  # let the last work settle before the idle window
            procs = tree(roots)
            before = {p.pid: sum(p.cpu_times()[:2]) for p in procs if p.is_running()}
            time.sleep(args.idle)
            cpu = 0.0
            rss = pss = 0
            per_process = []
            for p in procs:
                try:
                    used = sum(p.cpu_times()[:2]) - before.get(p.pid, 0.0)
                    mem = p.memory_full_info()
                    per_process.append((used, mem.rss, mem.pss, _label(p)))
                    cpu += used
                    rss += mem.rss
                    pss += mem.pss
                except psutil.Error:
                    continue
            for used, p_rss, p_pss, label in sorted(per_process, reverse=True):
                print(
                    f"  {label:<40} {100 * used / args.idle:5.2f}% CPU  "
                    f"RSS {p_rss / 2**20:4.0f} MiB  PSS {p_pss / 2**20:4.0f} MiB"
                )
            print(
                f"[{args.shape}] idle over {args.idle:.0f} s: {100 * cpu / args.idle:.2f}% of a core, "
                f"RSS {rss / 2**20:.0f} MiB, PSS {pss / 2**20:.0f} MiB, {len(procs)} processes"
            )
        finally:
            stack.stop()


if __name__ == "__main__":
    try:
        main()
    except httpx.HTTPError as exc:
        sys.exit(f"the stack did not answer: {exc}")
