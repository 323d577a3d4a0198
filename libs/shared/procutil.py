"""Child-process hygiene: children that die with their parent, in their own process group."""

from __future__ import annotations

import ctypes
import os
import signal

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
