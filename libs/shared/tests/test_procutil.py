"""Child-process hygiene: a program started ``detached`` leads its own session and dies with its
parent, even when the parent is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import psutil
import pytest

from boxcar.shared import procutil

PARENT = textwrap.dedent(
    """
    import subprocess, sys, time
    from boxcar.shared.procutil import detached
    argv, kwargs = detached([sys.executable, "-c", "import time; print('up', flush=True); time.sleep(120)"])
    child = subprocess.Popen(argv, **kwargs)
    print(child.pid, flush=True)
    time.sleep(120)
    """
)


@pytest.mark.parametrize("setpriv", [True, False], ids=["setpriv", "preexec_fn"])
def test_a_detached_program_leads_its_session_and_dies_with_its_parent(setpriv, monkeypatch):
    if setpriv and procutil.SETPRIV is None:
        pytest.skip("no setpriv (util-linux) here")
    env = dict(os.environ)
    if not setpriv:  # the fallback: what a machine without setpriv runs
        env["PATH"] = ""
        code = PARENT.replace(
            "from boxcar.shared.procutil import detached",
            "from boxcar.shared import procutil\nprocutil.SETPRIV = None\nfrom boxcar.shared.procutil import detached",
        )
    else:
        code = PARENT
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env)
    try:
        lines = {parent.stdout.readline().strip() for _ in range(2)}  # its pid, and the child's "up"
        assert "up" in lines, lines
        pid = int((lines - {"up"}).pop())
        child = psutil.Process(pid)
        assert os.getsid(pid) == pid and os.getpgid(pid) == pid  # its own session and process group
        assert child.cmdline()[:2] == [sys.executable, "-c"]  # the program itself, not a wrapper
        parent.send_signal(signal.SIGKILL)
        parent.wait(30)
        child.wait(30)  # raises TimeoutExpired if it outlived its parent
    finally:
        parent.kill()
        parent.wait()
