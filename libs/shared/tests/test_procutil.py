"""Child-process hygiene: a program started ``detached`` leads its own session and dies with its
parent, even when the parent is SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

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
def test_a_detached_program_leads_its_session_and_dies_with_its_parent(setpriv):
    if setpriv and procutil.SETPRIV is None:
        pytest.skip("no setpriv (util-linux) here")
    if not setpriv:  # the fallback: what a machine without setpriv runs
        code = PARENT.replace(
            "from boxcar.shared.procutil import detached",
            "from boxcar.shared import procutil\nprocutil.SETPRIV = None\nfrom boxcar.shared.procutil import detached",
        )
    else:
        code = PARENT
    parent = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
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


TREE = textwrap.dedent(
    """
    import subprocess, sys, time
    grandchild = "import time; b = b'x' * (48 << 20); time.sleep(120)"
    child = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {grandchild!r}]); time.sleep(120)"
    subprocess.Popen([sys.executable, "-c", child])
    time.sleep(120)
    """
)


@pytest.mark.parametrize("children_files", [True, False], ids=["proc-children", "psutil"])
def test_tree_rss_counts_every_descendant(children_files, monkeypatch):
    monkeypatch.setattr(procutil, "_CHILDREN_FILES", children_files and procutil._CHILDREN_FILES)
    root = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True)
    deadline = time.monotonic() + 60
    try:
        tree = psutil.Process(root.pid)
        while len(tree.children(recursive=True)) < 2:  # polled: the tree builds itself
            assert root.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        grandchild = tree.children(recursive=True)[-1]
        while grandchild.memory_info().rss < 48 << 20:  # its bytearray is in
            assert time.monotonic() < deadline
            time.sleep(0.01)
        expected = sum(p.memory_info().rss for p in [tree, *tree.children(recursive=True)])
        got = procutil.tree_rss(root.pid)
        assert got > (48 << 20) + tree.memory_info().rss
        assert abs(got - expected) < 2 << 20  # the same processes, read a moment apart
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()
    assert procutil.tree_rss(root.pid) == 0
