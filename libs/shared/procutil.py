"""Child-process hygiene: children that die with their parent, in their own process group."""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
from typing import Any

_PR_SET_PDEATHSIG = 1
try:
    _libc = ctypes.CDLL(None, use_errno=True)  # loaded now: a forked child must not dlopen
except OSError:  # pragma: no cover - non-glibc platforms
    _libc = None


def die_with_parent(sig: int = signal.SIGKILL):
    """A ``preexec_fn`` for ``subprocess``: new session (own process group, so the parent can
    signal the whole tree with ``killpg``) and ``sig`` delivered when the parent dies — even by
    SIGKILL — so no child outlives the service that started it (Linux ``PR_SET_PDEATHSIG``)."""

    def preexec() -> None:
        os.setsid()
        if _libc is not None:
            _libc.prctl(_PR_SET_PDEATHSIG, sig)

    return preexec


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
