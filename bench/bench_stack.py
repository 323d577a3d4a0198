"""The embedded stack's fixed costs: a one-URL crawl's latency on an already-started stack, and
what the stack costs while it waits (CPU share of a core, resident memory). Figures printed,
nothing asserted (compare within one run; these machines are shared).

- latency: ``POST /api/v1/crawls`` of one local page → sealed with every result indexed, polled
  every 20 ms (the API's view), median of ``--repeat``; and ``boxcar add --wait URL`` as a user
  types it (CLI start-up included); the time to each result (as the API first shows it final) and
  to the *first look* (title and screenshot, what the snapshot page shows first);
- idle: after the work, the stack's processes (services, NATS, zygotes, egress proxy) measured over
  ``--idle`` seconds: CPU seconds per second, and RSS / PSS summed, per process and in all — twice:
  right after the work (warm interpreters still up) and once they have exited idle
  (``WARM_IDLE_TIMEOUT``: ``--warm-idle-timeout``, by default just longer than the first window).

Usage: ``python bench/bench_stack.py [--shape one|processes] [--plugins wget,favicon,…] [--idle 60]
[--warm-idle-timeout S]``; ``--plugins default`` is the default selection (``DEFAULT_PLUGINS``).
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
from boxcar.shared.settings import DEFAULT_PLUGINS, Settings

NOCHROME = "wget,favicon,htmltotext,trafilatura,hashes"
#: The side-by-side runs' default set (``../shared/bench``, ``PLUGINS=`` in the README): the default
#: selection without what ArchiveBox cannot run there too (SingleFile's extension, git, media
#: downloaders, the Readability and Defuddle extractors), 21 plugins.
SIDE_BY_SIDE_DEFAULT = tuple(
    p for p in DEFAULT_PLUGINS if p not in {"singlefile", "git", "ytdlp", "gallerydl", "readability", "defuddle"}
)


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


def idle_window(roots: list[int], seconds: float, title: str) -> None:
    """Print the CPU share and memory of the stack's processes over ``seconds`` of nothing to do."""
    procs = tree(roots)
    before = {p.pid: sum(p.cpu_times()[:2]) for p in procs if p.is_running()}
    time.sleep(seconds)
    cpu = 0.0
    rss = pss = 0
    per_process = []
    for p in procs:
        try:
            used = sum(p.cpu_times()[:2]) - before.get(p.pid, 0.0)
            mem = p.memory_full_info()
        except psutil.Error:
            continue
        per_process.append((used, mem.rss, mem.pss, _label(p)))
        cpu += used
        rss += mem.rss
        pss += mem.pss
    print(
        f"{title}, over {seconds:.0f} s: {100 * cpu / seconds:.2f}% of a core, "
        f"RSS {rss / 2**20:.0f} MiB, PSS {pss / 2**20:.0f} MiB, {len(per_process)} processes"
    )
    for used, p_rss, p_pss, label in sorted(per_process, reverse=True):
        share = 100 * used / seconds
        print(f"  {label:<40} {share:5.2f}% CPU  RSS {p_rss / 2**20:4.0f} MiB  PSS {p_pss / 2**20:4.0f} MiB")


#: Result statuses after which a result no longer changes.
FINAL = {"succeeded", "failed", "skipped", "noresults"}


def one_url(client: BoxcarClient, url: str, plugins: list[str]) -> tuple[float, dict[str, float]]:
    """One crawl of ``url``: seconds from ``POST /api/v1/crawls`` to sealed with every result
    indexed, and ``{what: seconds}`` at which the API first showed each plugin's final result
    (``"title"``: the snapshot's title; ``"first look"``: both the title and a succeeded
    screenshot, what the UI's snapshot page needs to show the page)."""
    started = time.perf_counter()
    crawl_id = client.create_crawl({"urls": [url], "plugins": plugins, "only_new": False})["id"]
    seen: dict[str, float] = {}
    while True:
        now = time.perf_counter() - started
        for snap in client.snapshots(crawl_id):
            if snap.get("title") and "title" not in seen:
                seen["title"] = now
            for result in snap["results"]:
                if result["status"] in FINAL:
                    seen.setdefault(f"{result['plugin']} ({result['status']})", now)
                    if result["plugin"] == "screenshot" and result["status"] == "succeeded":
                        seen.setdefault("screenshot", now)
        if "first look" not in seen and "title" in seen and "screenshot" in seen:
            seen["first look"] = now
        state = client.crawl(crawl_id)
        if state["status"] == "sealed" and not state.get("results_pending"):
            return time.perf_counter() - started, seen
        time.sleep(0.02)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--shape", default="one", choices=["one", "processes"])
    parser.add_argument("--plugins", default=NOCHROME)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--idle", type=float, default=60.0)
    parser.add_argument("--warm-idle-timeout", type=float, help="default: --idle + 15 s")
    args = parser.parse_args()
    if args.warm_idle_timeout is None:  # the warm interpreters outlive the first window
        args.warm_idle_timeout = args.idle + 15
    if args.plugins == "default":
        args.plugins = ",".join(DEFAULT_PLUGINS)
    plugins = [p for p in args.plugins.split(",") if p]
    os.environ.update(PLUGINS=args.plugins, URL_ALLOW_PRIVATE="true", WARM_IDLE_TIMEOUT=str(args.warm_idle_timeout))
    with tempfile.TemporaryDirectory() as tmp, serve_demo_site() as site:
        stack = EmbeddedStack(Settings(data_dir=Path(tmp) / "data"), shape=args.shape)
        stack.start()
        try:
            client = BoxcarClient(stack.api_url, stack.token)
            one_url(client, site, plugins)  # warm-up: binaries resolved, interpreters started
            runs = [one_url(client, site, plugins) for _ in range(args.repeat)]
            api = sorted(total for total, _ in runs)
            keys = sorted(
                {k for _, seen in runs for k in seen},
                key=lambda k: statistics.median([seen[k] for _, seen in runs if k in seen]),
            )
            print(f"[{args.shape}] time to each result after POST /api/v1/crawls (median of {args.repeat}):")
            for key in keys:
                times = [seen[key] for _, seen in runs if key in seen]
                print(f"  {key:<34} {statistics.median(times):6.2f} s  ({len(times)}/{len(runs)} runs)")
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
            time.sleep(5)  # let the last work settle before the idle window
            idle_window(roots, args.idle, f"[{args.shape}] idle right after the work")
            deadline = time.monotonic() + args.warm_idle_timeout + 30
            while any("zygote" in _label(p) for p in tree(roots)) and time.monotonic() < deadline:
                time.sleep(1)
            idle_window(
                roots, args.idle, f"[{args.shape}] idle once the warm interpreters exited (WARM_IDLE_TIMEOUT reached)"
            )
        finally:
            stack.stop()


if __name__ == "__main__":
    try:
        main()
    except httpx.HTTPError as exc:
        sys.exit(f"the stack did not answer: {exc}")
