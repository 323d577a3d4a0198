"""What the fault suite measures and checks, around real processes.

- ``NatsServer``: a JetStream server on a fixed port and store that a test can stop and start
  again (an outage), unlike the conftest's throw-away one; ``NatsCluster``: three of them in one
  JetStream cluster, any one of which a test can kill and start again.
- ``MemorySampler``: the stack's peak memory (RSS of every service process and its children:
  hooks, Chromium), sampled in a thread while a scenario runs.
- ``outcome``: the invariants every scenario must end with (each URL sealed once, one result per
  hook of the plan, nothing started, no orphan hook process) and the figures the closing note's
  table reports, printed as one line per scenario.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil
from sqlalchemy import select

from boxcar.cli.stack import free_port, nats_server_binary, wait_for_port
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Crawl, Snapshot
from boxcar.shared.plugins import get_catalog
from tests.helpers import hook_processes

#: Plugins of the fault scenarios: every family but the browser's, fast on 2 cores.
PLUGINS = ["wget", "favicon", "htmltotext", "parse_html_urls", "hashes"]

#: The ``FAULT …`` lines of the running test; conftest moves them onto its report after it (an
#: xdist worker's reports reach the controller) and prints them all in pytest's terminal summary.
REPORT: list[str] = []


class NatsServer:
    """``nats-server -js`` on one port and store, stoppable and restartable."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [nats_server_binary(), "-a", "127.0.0.1", "-p", str(self.port), "-js", "-sd", str(self.store)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.port, 20, self.proc)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class NatsCluster:
    """Three ``nats-server -js`` in one cluster (JetStream clustering: a server name each, routes
    to the others), each on its own client port and store, each killable and restartable.

    ``url`` is what ``NATS_URL`` takes for the cluster (every server, comma-separated)."""

    def __init__(self, root: Path, size: int = 3) -> None:
        self.root = root
        self.names = [f"n{i + 1}" for i in range(size)]
        self.ports = {name: free_port() for name in self.names}
        self.routes = {name: free_port() for name in self.names}
        self.procs: dict[str, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return ",".join(f"nats://127.0.0.1:{self.ports[name]}" for name in self.names)

    def start(self, name: str | None = None) -> None:
        """Start every server (or one, after ``kill``) and wait until its client port answers."""
        for each in [name] if name else self.names:
            config = self.root / f"{each}.conf"
            routes = ", ".join(f"nats-route://127.0.0.1:{self.routes[n]}" for n in self.names if n != each)
            self.root.mkdir(parents=True, exist_ok=True)
            config.write_text(
                f"server_name: {each}\nlisten: 127.0.0.1:{self.ports[each]}\n"
                f'jetstream {{ store_dir: "{self.root / each}" }}\n'
                f"cluster {{ name: boxcar, listen: 127.0.0.1:{self.routes[each]}, routes: [{routes}] }}\n"
            )
            log = open(self.root / f"{each}.log", "ab")  # noqa: SIM115 - the server's for its life
            self.procs[each] = subprocess.Popen([nats_server_binary(), "-c", str(config)], stdout=log, stderr=log)
            wait_for_port(self.ports[each], 20, self.procs[each])

    def kill(self, name: str) -> None:
        """SIGKILL one server (no clean shutdown: its peers find out by missed heartbeats)."""
        self.procs[name].kill()
        self.procs[name].wait(10)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.terminate()
                proc.wait(10)


class MemorySampler:
    """Peak resident memory (bytes) of ``roots`` and all their descendants, sampled every 0.5 s."""

    def __init__(self, roots) -> None:
        self.roots = roots
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.5):
            total = 0
            for pid in self.roots():
                with contextlib.suppress(psutil.Error):
                    root = psutil.Process(pid)
                    total += sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            self.peak = max(self.peak, total)

    def __enter__(self) -> MemorySampler:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def stack_pids(stack) -> list[int]:
    """The stack's service processes right now (restarted ones included)."""
    return [c.proc.pid for c in stack.children if c.proc and c.proc.poll() is None]


@dataclass
class Outcome:
    """How a scenario ended (the closing note's table row)."""

    scenario: str
    sealed: int
    total: int
    lost: int
    duplicated: int
    orphans: int
    recovery: float | None
    peak_mib: float
    problems: list[str] = field(default_factory=list)

    def line(self) -> str:
        recovery = "-" if self.recovery is None else f"{self.recovery:.1f}"
        return (
            f"FAULT {self.scenario}: sealed {self.sealed}/{self.total}, lost {self.lost}, duplicated {self.duplicated},"
            f" orphans {self.orphans}, recovery {recovery} s, peak {self.peak_mib:.0f} MiB"
        )


def index_mismatches(db: Database, data_dir: Path | ArchiveStore, crawl_id: str) -> list[str]:
    """Sealed snapshots whose ``index.jsonl`` (in ``data_dir``, or a bucket's store) does not list
    exactly their ArchiveResult rows."""
    store = data_dir if isinstance(data_dir, ArchiveStore) else ArchiveStore.local(data_dir)
    bad = []
    with db.read() as s:
        snaps = list(s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id, Snapshot.attempts > 0)))
        rows = Counter(
            (sid, plugin, hook, status)
            for sid, plugin, hook, status in s.execute(
                select(ArchiveResult.snapshot_id, ArchiveResult.plugin, ArchiveResult.hook_name, ArchiveResult.status)
                .join(Snapshot, Snapshot.id == ArchiveResult.snapshot_id)
                .where(Snapshot.crawl_id == crawl_id)
            )
        )
    for snap in snaps:
        try:
            lines = [json.loads(line) for line in store.get_bytes(f"{snap.output_dir}/index.jsonl").splitlines()]
        except OSError:
            bad.append(f"{snap.id}: no index.jsonl")
            continue
        listed = Counter((snap.id, r["plugin"], r["hook_name"], r["status"]) for r in lines[1:])
        mine = Counter({k: v for k, v in rows.items() if k[0] == snap.id})
        if listed != mine:
            bad.append(f"{snap.id}: index {sorted(listed)} != rows {sorted(mine)}")
    return bad


def outcome(
    db: Database,
    crawl_id: str,
    urls: list[str],
    scenario: str,
    *,
    restarted_at: datetime | None,
    peak: int,
    data_dir: Path | ArchiveStore | None = None,
    plugins: list[str] = PLUGINS,
) -> Outcome:
    """Check a finished crawl: every URL one sealed snapshot, one result per hook of the plan,
    nothing open, no orphan, each ``index.jsonl`` equal to its rows (with ``data_dir``);
    ``recovery`` is the first seal after ``restarted_at``."""
    hooks = {h.name for h in get_catalog().snapshot_hooks(plugins)}
    with db.read() as s:
        crawl = s.get(Crawl, crawl_id)
        snaps = list(s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id, Snapshot.depth == 0)))
        results = list(
            s.execute(
                select(ArchiveResult.snapshot_id, ArchiveResult.hook_name).where(
                    ArchiveResult.snapshot_id.in_([x.id for x in snaps])
                )
            )
        )
    per_url = Counter(x.url for x in snaps)
    per_key = Counter(results)
    problems = []
    if crawl.status != "sealed":
        problems.append(f"crawl is {crawl.status}")
    if sorted(per_url) != sorted(urls):
        problems.append(f"URLs differ: {set(urls) ^ set(per_url)}")
    if data_dir is not None:
        problems += index_mismatches(db, data_dir, crawl_id)
    missing = [(x.url, sorted(hooks - {h for sid, h in per_key if sid == x.id})) for x in snaps]
    missing = [(url, names) for url, names in missing if names]
    lost = sum(len(names) for _, names in missing)
    if missing:
        problems.append(f"results missing: {missing[:5]}")
    duplicated = sum(n - 1 for n in per_url.values()) + sum(n - 1 for n in per_key.values())
    recovery = None
    if restarted_at is not None:
        later = [x.downloaded_at for x in snaps if x.downloaded_at and x.downloaded_at > restarted_at]
        recovery = (min(later) - restarted_at).total_seconds() if later else None
    result = Outcome(
        scenario=scenario,
        sealed=sum(x.status == "sealed" for x in snaps),
        total=len(urls),
        lost=lost,
        duplicated=duplicated,
        orphans=len(hook_processes(crawl_id, db)),
        recovery=recovery,
        peak_mib=peak / 2**20,
        problems=problems,
    )
    print(result.line())
    REPORT.append(result.line())
    return result


def assert_clean(result: Outcome, max_recovery: float = 30.0) -> None:
    """The invariants of every scenario."""
    assert not result.problems, result.problems
    assert result.sealed == result.total, result.line()
    assert result.lost == 0 and result.duplicated == 0 and result.orphans == 0, result.line()
    if result.recovery is not None:
        assert result.recovery <= max_recovery, result.line()


def wait_progress(db: Database, crawl_id: str, sealed: int, timeout: float = 300) -> None:
    """Wait until ``sealed`` snapshots of the crawl are sealed (a crawl well under way)."""
    deadline = time.monotonic() + timeout
    while True:
        with db.read() as s:
            done = s.scalar(
                select(Snapshot.id)
                .where(Snapshot.crawl_id == crawl_id, Snapshot.status == "sealed")
                .limit(1)
                .offset(sealed - 1)
            )
        if done:
            return
        assert time.monotonic() < deadline, f"{sealed} snapshots not sealed within {timeout:.0f}s"
        time.sleep(0.2)
