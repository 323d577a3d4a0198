"""No orphans: every process an executor starts carries its worker id, and dead workers' leftovers
are killed when any executor on the machine starts.

Hooks run in their own process group and get SIGKILL when their executor dies
(``PR_SET_PDEATHSIG``), but Chromium is started by the chrome launch hook in a *new* session
(``detached``), so neither reaches it. What does reach every descendant is the environment:
each hook gets ``BOXCAR_WORKER_ID``, and Chromium inherits it. Each executor registers itself in
``DATA_DIR/tmp/<machine>/workers/<worker_id>.json`` (pid + process start time, so a reused pid
is not mistaken for the worker); at start, an executor kills every process whose environment
names a worker that is no longer alive, then drops that worker's registration.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from pathlib import Path

import psutil

log = logging.getLogger(__name__)

WORKER_ENV = "BOXCAR_WORKER_ID"
BROWSER_ENV = "BOXCAR_BROWSER_ID"


def _start_time(pid: int) -> float | None:
    try:
        return psutil.Process(pid).create_time()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None


def register(registry: Path, worker_id: str) -> Path:
    """Record this process as the live worker ``worker_id``; returns the registration file."""
    registry.mkdir(parents=True, exist_ok=True)
    path = registry / f"{worker_id}.json"
    path.write_text(json.dumps({"pid": os.getpid(), "started": _start_time(os.getpid())}))
    return path


def processes_with(var: str, values: set[str]) -> list[psutil.Process]:
    """Live processes whose environment sets ``var`` to one of ``values`` (zombies excluded)."""
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(var) in values:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def kill_all(procs: list[psutil.Process]) -> int:
    """SIGKILL the processes (and wait briefly for them); returns how many were signalled."""
    for proc in procs:
        try:
            proc.send_signal(signal.SIGKILL)
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=5)
    return len(procs)


def sweep_dead_workers(registry: Path) -> int:
    """Kill the leftovers of every registered worker that is gone; returns processes killed."""
    if not registry.is_dir():
        return 0
    dead: dict[str, Path] = {}
    for path in registry.glob("*.json"):
        try:
            info = json.loads(path.read_text())
            alive = _start_time(int(info["pid"])) == info.get("started")
        except (OSError, ValueError, KeyError, TypeError):
            alive = False
        if not alive:
            dead[path.stem] = path
    if not dead:
        return 0
    killed = kill_all(processes_with(WORKER_ENV, set(dead)))
    for path in dead.values():
        path.unlink(missing_ok=True)
    if killed:
        log.warning("killed %d process(es) left by dead worker(s) %s", killed, ", ".join(sorted(dead)))
    return killed
