"""Child-process hygiene: children that die with their parent, in their own process group; the
memory of a process tree; glibc malloc's arenas capped and free pages given back in Boxcar's own
long-lived processes; their start and exit without the collector's and the interpreter's
work on objects that live as long as the process."""

from __future__ import annotations

import atexit
import ctypes
import gc
import os
import shutil
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

import psutil

_PR_SET_PDEATHSIG = 1
_libc: ctypes.CDLL | None
try:
    _libc = ctypes.CDLL(None, use_errno=True)  # loaded now: a forked child must not dlopen
except OSError:  # pragma: no cover - non-glibc platforms
    _libc = None


def die_with_parent(sig: int = signal.SIGKILL) -> Callable[[], None]:
    """A ``preexec_fn`` for ``subprocess``: new session (own process group, so the parent can
    signal the whole tree with ``killpg``) and ``sig`` delivered when the parent dies — even by
    SIGKILL — so no child outlives the service that started it (Linux ``PR_SET_PDEATHSIG``)."""

    def preexec() -> None:
        os.setsid()
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, sig)

    return preexec


#: glibc's ``mallopt`` parameter ``M_ARENA_MAX`` (malloc.h).
_M_ARENA_MAX = -8


def limit_malloc_arenas(arenas: int = 2) -> bool:
    """Cap this process's glibc malloc arenas at ``arenas`` (``mallopt(M_ARENA_MAX)``) unless
    ``MALLOC_ARENA_MAX`` is set in the environment (glibc reads that itself; an operator's choice wins).

    glibc gives threads their own arenas, up to 8 per core, and keeps what each arena once held:
    a service whose threads come and go (``asyncio.to_thread``, SQLite's connection threads,
    the egress proxy's thread per connection) ends up holding several half-empty heaps. Capped
    at 2 — what gunicorn's and Heroku's guides recommend for Python servers — the egress proxy's
    forked acceptor held 12–14 instead of 17–23 MiB at the peak of a 130-page crawl and the
    one-process stack ~7 MiB less, with no change in speed beyond run-to-run noise (README,
    Performance). Call it first thing, before threads start. Only this process: exec'd children
    (hooks) keep glibc's default; forked ones inherit it.

    Returns:
        True when the cap was set here; False where the environment sets it or there is no
        glibc ``mallopt`` (musl, macOS).
    """
    if os.environ.get("MALLOC_ARENA_MAX") or _libc is None or not hasattr(_libc, "mallopt"):
        return False
    return bool(_libc.mallopt(_M_ARENA_MAX, arenas))


def release_free_memory() -> None:
    """Collect garbage, then hand the heap's free pages back to the kernel (glibc's
    ``malloc_trim(0)``; a no-op without glibc). For a process about to sit on a long wait after a
    busy start: ``boxcar add --wait`` holds 4 MiB less for the whole crawl (39 → 35 MiB
    anonymous memory, the start-up's temporaries — HTTP clients polled until the API answered,
    the input file — given back)."""
    gc.collect()
    if _libc is not None and hasattr(_libc, "malloc_trim"):
        _libc.malloc_trim(0)


def freeze_imports() -> None:
    """Move every object alive now into the collector's permanent generation (``gc.freeze``) and
    turn the collector back on: for a long-lived process to call once its imports are done,
    after ``gc.disable()`` before them.

    The one-process stack's imports (1,500 modules) make about a million objects that live as
    long as the process. With the collector on, they cost two full collections during the imports
    (~0.1 s of its 1.1 s start) and are scanned again by every later full collection (a 130-page
    crawl: 0.37 s in three, 0.17 s once frozen). CPython's ``gc.freeze`` docs give the same use
    (before a fork; here before a long life)."""
    gc.freeze()
    gc.enable()


def exit_without_teardown(code: int = 0) -> NoReturn:
    """End the process with ``code`` as a normal exit would (``atexit`` handlers run: logging's
    flush and close among them; stdout and stderr flushed), but without the interpreter's teardown
    of every module and object, which only gives memory back to a process that is ending: 0.47 s
    of the one-process stack's 0.72 s stop (1,500 modules), paid by every ``boxcar add``.

    Call it only once the process has stopped its own work (its files closed, its children
    stopped). When a thread other than a daemon one is still alive, this is ``sys.exit(code)``
    instead, so that the interpreter waits for it as usual.

    Raises:
        SystemExit: in that case only.
    """
    main = threading.main_thread()
    if any(t.is_alive() and not t.daemon for t in threading.enumerate() if t is not main):
        sys.exit(code)
    atexit._run_exitfuncs()  # what the interpreter runs at exit, before its teardown
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (AttributeError, OSError, ValueError):
            pass
    os._exit(code)


#: util-linux's ``setpriv`` (``--pdeathsig``: util-linux ≥ 2.33), or None.
SETPRIV = shutil.which("setpriv", path="/usr/bin:/bin")


def detached(argv: list[str], sig: int = signal.SIGKILL) -> tuple[list[str], dict[str, Any]]:
    """``(argv, subprocess keyword arguments)`` that start ``argv`` as ``die_with_parent(sig)``
    does — its own session, ``sig`` when the parent dies — without a ``preexec_fn``.

    A ``preexec_fn`` makes ``subprocess`` fork, copying the parent's page tables and stopping its
    event loop meanwhile: for a 150 MiB parent 11.5 ms and 5.3 ms of its CPU per start, against
    1.7 ms and 0.17 ms here, where ``subprocess`` can vfork (``start_new_session``) and
    ``setpriv --pdeathsig`` sets the signal, then execs the program (the signal survives exec; the
    pid is the program's). Where ``setpriv`` is missing, the ``preexec_fn`` is used.
    """
    if SETPRIV is None:
        return list(argv), {"preexec_fn": die_with_parent(sig)}
    name = signal.Signals(sig).name.removeprefix("SIG")
    return [SETPRIV, "--pdeathsig", name, "--", *argv], {"start_new_session": True}


#: Linux's per-thread child lists (``CONFIG_PROC_CHILDREN``, in Debian's kernels and most others).
_CHILDREN_FILES = os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
_PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_pids(pid: int) -> list[int]:
    """``pid`` and all its descendants' pids, ``pid`` first (``[]`` when ``pid`` is gone), as
    psutil's ``children(recursive=True)`` finds them.

    The descendants are found from ``/proc/<pid>/task/<tid>/children``: work proportional to the
    tree. psutil reads every process's ``stat`` file on the machine to map parents — for the
    executor's once-a-second memory check of each running hook, that was ~6 % of the one-process
    stack's CPU during a browser crawl. Like psutil's, the walk misses a process that has left the
    tree (re-parented by a double fork) and may miss one born or dying while it reads; where the
    kernel has no child lists, psutil does the walk.
    """
    if not _CHILDREN_FILES:
        try:
            root = psutil.Process(pid)
            return [pid, *(p.pid for p in root.children(recursive=True))]
        except psutil.Error:
            return []
    found: list[int] = []
    todo, seen = [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        try:
            threads = os.listdir(f"/proc/{current}/task")
        except OSError:  # it exited meanwhile
            continue
        found.append(current)
        for tid in threads:
            try:
                with open(f"/proc/{current}/task/{tid}/children", "rb") as children:
                    todo.extend(int(child) for child in children.read().split())
            except (OSError, ValueError):  # that thread ended meanwhile: its children are its process's
                continue
    return found


def tree_rss(pid: int) -> int:
    """Resident bytes of ``pid`` and all its descendants (``tree_pids``; 0 when ``pid`` is gone),
    as psutil's ``memory_info().rss`` summed over ``children(recursive=True)`` gives them."""
    total = 0
    for each in tree_pids(pid):
        try:
            with open(f"/proc/{each}/statm", "rb") as statm:
                total += int(statm.read().split()[1]) * _PAGE
        except (OSError, ValueError, IndexError):  # it exited meanwhile
            continue
    return total
