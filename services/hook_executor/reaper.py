"""No orphans: every process an executor starts carries its worker id, and dead workers' leftovers
are killed when any executor on the machine starts.

Hooks run in their own process group and get SIGKILL when their executor dies
(``PR_SET_PDEATHSIG``), but Chromium is started by the chrome launch hook in a *new* session
(``detached``), so neither reaches it. What does reach every descendant is the environment:
each hook gets ``BOXCAR_WORKER_ID``, and Chromium inherits it. Each executor registers itself in
``DATA_DIR/tmp/<machine>/workers/<worker_id>.json`` (pid + process start time, so a reused pid
is not mistaken for the worker); at start, an executor kills every process whose environment
names a worker that is no longer alive, then drops that worker's registration.

The registration also lists the reply subjects of the tasks the worker holds, so the executor
that finds a dead one hands its tasks back to JetStream at once (a ``-NAK`` to each) instead of
leaving them until their ack deadline: a crashed stack resumes the moment it is restarted.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
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


class Registration:
    """This process as the live worker ``worker_id`` in ``registry``, with the tasks it holds."""

    def __init__(self, registry: Path, worker_id: str) -> None:
        registry.mkdir(parents=True, exist_ok=True)
        self.path = registry / f"{worker_id}.json"
        self.held: set[str] = set()
        self.started = _start_time(os.getpid())  # written with every change: read once
        self._write()

    def _write(self) -> None:
        data = {"pid": os.getpid(), "started": self.started, "held": sorted(self.held)}
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data))
        os.replace(tmp, self.path)

    def hold(self, reply: str | None) -> None:
        """A task (its ack reply subject) is now in this worker's hands."""
        if reply:
            self.held.add(reply)
            self._write()

    def release(self, reply: str | None) -> None:
        """The task was acked, nak'ed or terminated."""
        if reply in self.held:
            self.held.discard(reply)
            self._write()

    def remove(self) -> None:
        """Clean shutdown: nothing is left to hand back."""
        self.path.unlink(missing_ok=True)


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


def scratch_dir(tmp_root: Path, worker_id: str) -> Path:
    """Where ``worker_id``'s tasks capture when the archive is in a bucket (a dir per task under
    it); ``tmp_root`` is the machine's (``registry``'s parent). Removed with a dead worker's
    leftovers."""
    return tmp_root / "scratch" / worker_id


def sweep_dead_workers(registry: Path) -> list[str]:
    """Kill the leftovers of every registered worker that is gone, drop its registration, and
    return the reply subjects of the tasks it held (to hand back)."""
    if not registry.is_dir():
        return []
    dead: dict[str, Path] = {}
    held: list[str] = []
    for path in registry.glob("*.json"):
        try:
            info = json.loads(path.read_text())
            alive = _start_time(int(info["pid"])) == info.get("started")
        except (OSError, ValueError, KeyError, TypeError):
            info, alive = {}, False
        if not alive:
            dead[path.stem] = path
            held.extend(r for r in info.get("held") or [] if isinstance(r, str) and r.startswith("$JS.ACK."))
    if not dead:
        return []
    killed = kill_all(processes_with(WORKER_ENV, set(dead)))
    for worker_id, path in dead.items():
        path.unlink(missing_ok=True)
        shutil.rmtree(scratch_dir(registry.parent, worker_id), ignore_errors=True)  # its tasks' captures
    if killed or held:
        log.warning(
            "dead worker(s) %s: killed %d leftover process(es), handing back %d task(s)",
            ", ".join(sorted(dead)),
            killed,
            len(held),
        )
    return held
