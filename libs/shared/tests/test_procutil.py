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
    grandchild = "import time; b = b'x' * (48 << 20); print('ready', flush=True); time.sleep(120)"
    child = (
        "import subprocess, sys, time; "
        f"p = subprocess.Popen([sys.executable, '-c', {grandchild!r}], stdout=subprocess.PIPE, text=True); "
        "print(p.stdout.readline().strip(), flush=True); time.sleep(120)"
    )
    p = subprocess.Popen([sys.executable, "-c", child], stdout=subprocess.PIPE, text=True)
    print(p.stdout.readline().strip(), flush=True)
    time.sleep(120)
    """
)
"""Three generations; "ready" travels up once the grandchild holds its 48 MiB, so every process
has finished starting (and stopped growing) before the test reads its memory."""


@pytest.mark.parametrize("children_files", [True, False], ids=["proc-children", "psutil"])
def test_tree_pids_and_rss_count_every_descendant(children_files, monkeypatch):
    monkeypatch.setattr(procutil, "_CHILDREN_FILES", children_files and procutil._CHILDREN_FILES)
    root = subprocess.Popen([sys.executable, "-c", TREE], start_new_session=True, stdout=subprocess.PIPE, text=True)
    try:
        assert root.stdout.readline().strip() == "ready"  # EOF ("") if the tree failed to build
        tree = psutil.Process(root.pid)
        assert len(tree.children(recursive=True)) == 2
        expected = sum(p.memory_info().rss for p in [tree, *tree.children(recursive=True)])
        pids = procutil.tree_pids(root.pid)
        descendants = [c.pid for c in tree.children(recursive=True)]
        assert pids[0] == root.pid and sorted(pids) == sorted([root.pid, *descendants])
        got = procutil.tree_rss(root.pid)
        assert got > (48 << 20) + tree.memory_info().rss
        assert abs(got - expected) < 2 << 20  # the same processes, read a moment apart
    finally:
        os.killpg(root.pid, signal.SIGKILL)
        root.wait()
        root.stdout.close()
    assert procutil.tree_rss(root.pid) == 0
    assert procutil.tree_pids(root.pid) == []


ARENAS = textwrap.dedent(
    """
    import ctypes, os, re, sys, tempfile, threading
    from boxcar.shared.procutil import limit_malloc_arenas
    capped = limit_malloc_arenas() if sys.argv[1] == "cap" else "default"
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.fopen.restype = ctypes.c_void_p
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    together = threading.Barrier(9)

    def work():  # a thread's first malloc takes a new arena while glibc's cap allows one
        libc.malloc(1000)
        together.wait()  # every thread alive at once: none hands its arena back
        together.wait()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    together.wait()
    handle, path = tempfile.mkstemp()
    os.close(handle)
    fp = libc.fopen(path.encode(), b"w")
    libc.malloc_info(0, fp)
    libc.fclose(fp)
    together.wait()
    for t in threads:
        t.join()
    print(capped, len(re.findall('<heap nr=', open(path).read())))
    os.unlink(path)
    """
)


@pytest.mark.parametrize(
    ("call", "environ", "says", "heaps"),
    [
        ("cap", {}, "True", range(2, 3)),
        ("cap", {"MALLOC_ARENA_MAX": "4"}, "False", range(4, 5)),
        # what the cap is there to prevent: glibc's default (8 per core) gives the threads heaps of their own
        ("none", {}, "default", range(5, 100)),
    ],
    ids=["capped", "operator-set", "uncapped"],
)
def test_limit_malloc_arenas_caps_the_heaps_threads_get_unless_the_environment_says(call, environ, says, heaps):
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | environ
    out = subprocess.run([sys.executable, "-c", ARENAS, call], env=env, capture_output=True, text=True, check=True)
    capped, counted = out.stdout.split()  # nine threads, a malloc each, all alive when the heaps are counted
    assert capped == says and int(counted) in heaps, out.stdout


TRIM = textwrap.dedent(
    """
    def anon_kib():
        return next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("RssAnon:"))
    from boxcar.shared.procutil import release_free_memory
    chunks = [bytes(4000) for _ in range(10_000)]  # ~40 MB from malloc (not pymalloc: > 512 bytes)
    kept = chunks[::50]  # every 50th stays: the heap is holed, its top never free, nothing trimmed by itself
    del chunks
    before = anon_kib()
    release_free_memory()
    print(before, anon_kib(), len(kept))
    """
)


def test_release_free_memory_gives_a_holed_heap_back_to_the_kernel():
    out = subprocess.run([sys.executable, "-c", TRIM], capture_output=True, text=True, check=True)
    before, after, _ = map(int, out.stdout.split())
    assert before - after > 20_000, out.stdout  # KiB: most of the 40 MB freed by `del` is resident until trimmed


EXIT = textwrap.dedent(
    """
    import atexit, logging, sys, threading, time
    from boxcar.shared.procutil import exit_without_teardown
    mode, log_path = sys.argv[1], sys.argv[2]
    logging.basicConfig(filename=log_path, level=logging.INFO)  # a buffered file: closed by logging's atexit
    atexit.register(lambda: print("atexit ran", flush=False))
    class Teardown:  # the interpreter's teardown would say so; exit_without_teardown skips it
        def __del__(self):
            print("teardown ran")
    keep = Teardown()
    if mode == "thread":  # a thread still working: the interpreter waits for it as at any exit
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
    logging.info("logged before exit")
    sys.stdout.write("unflushed ")
    exit_without_teardown(3)
    """
)


@pytest.mark.parametrize("mode", ["alone", "thread"])
def test_exit_without_teardown_runs_atexit_and_flushes_but_skips_the_teardown(mode, tmp_path):
    log_path = tmp_path / "log.txt"
    out = subprocess.run([sys.executable, "-c", EXIT, mode, str(log_path)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 3, out
    assert "unflushed " in out.stdout and "atexit ran" in out.stdout, out.stdout
    assert "logged before exit" in log_path.read_text()
    if mode == "alone":
        assert "teardown ran" not in out.stdout, out.stdout
    else:  # the fallback: sys.exit, so the thread finished and the interpreter tore down as usual
        assert "thread done" in out.stdout and "teardown ran" in out.stdout, out.stdout


FREEZE = textwrap.dedent(
    """
    import gc, sys
    import boxcar.cli.allinone  # imported (not run): it must leave the collector as it found it
    imported_enabled = gc.isenabled()
    from boxcar.shared.procutil import freeze_imports
    gc.disable()
    junk = [[i] for i in range(1000)]
    freeze_imports()
    print(imported_enabled, gc.isenabled(), gc.get_freeze_count() >= 1000)
    """
)


def test_freeze_imports_freezes_what_lives_and_turns_the_collector_back_on():
    out = subprocess.run([sys.executable, "-c", FREEZE], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True"], out


RUN_MAIN = textwrap.dedent(
    """
    import sys
    from boxcar.shared.service import run_main
    class Teardown:
        def __del__(self):
            print("teardown ran")
    keep = Teardown()
    async def main():
        import gc
        print("main ran", gc.get_freeze_count() > 0, gc.isenabled())
        if sys.argv[1] == "fail":
            raise RuntimeError("the service failed")
    run_main(main())
    """
)


@pytest.mark.parametrize("mode", ["stop", "fail"])
def test_a_services_main_freezes_its_imports_and_ends_without_the_teardown_unless_it_failed(mode):
    """``service.run_main``, every service's ``python -m`` entry: a service that stopped exits 0
    without the teardown; one whose main raised exits 1 with its traceback, as before."""
    out = subprocess.run([sys.executable, "-c", RUN_MAIN, mode], capture_output=True, text=True, timeout=60)
    assert "main ran True True" in out.stdout, out
    if mode == "stop":
        assert out.returncode == 0 and "teardown ran" not in out.stdout, out
    else:
        assert out.returncode == 1 and "RuntimeError: the service failed" in out.stderr, out
