"""HookProcess against real subprocesses: the real wget hook on a local site, and small hook
scripts that exercise each exit path of the protocol (skip, fail, timeout, background). Every test
runs twice: hooks started cold (a fresh interpreter) and warm (forked by the zygote), which must
be indistinguishable."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import socket
import sys
import textwrap
import time
from pathlib import Path

import pytest

from boxcar.hook_executor.hooks import HookProcess, scan_files
from boxcar.hook_executor.warm.zygote_client import Zygote
from boxcar.shared.messages import encode
from boxcar.shared.plugins import Hook, get_catalog, parse_hook


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


SPAWNER = None  # the zygote while a test runs warm


@pytest.fixture(autouse=True, params=["cold", "warm"], scope="module")
def mode(request, tmp_path_factory):
    """Run the module's tests with hooks started cold, then warm."""
    global SPAWNER
    if request.param == "warm":
        SPAWNER = Zygote(sys.executable, tmp_path_factory.mktemp("zygote") / "z.sock")
        SPAWNER.start()
    yield request.param
    if SPAWNER is not None:
        SPAWNER.stop()
    SPAWNER = None


def script_hook(tmp_path: Path, body: str, name: str = "on_Snapshot__10_probe.py") -> Hook:
    plugin_src = tmp_path / "plugins" / "probe"
    plugin_src.mkdir(parents=True, exist_ok=True)
    path = plugin_src / name
    path.write_text("import json, os, sys, time, signal, subprocess\n" + textwrap.dedent(body))
    return parse_hook("probe", path)


def run(hook: Hook, tmp_path: Path, timeout: int = 10, url: str = "https://example.com/", **limits) -> HookProcess:
    async def go() -> HookProcess:
        snap = tmp_path / "snap"
        proc = HookProcess(
            hook,
            [sys.executable, hook.path, f"--url={url}", "--snapshot-id=S1", "--depth=0"],
            snap / hook.plugin,
            {**os.environ, "SNAP_DIR": str(snap)},
            timeout,
            margin=0,
            kill_grace=1,
            spawner=SPAWNER,
            **limits,
        )
        await proc.start()
        if hook.is_background:
            await proc.wait_ready()
            await proc.stop()
        else:
            await proc.wait()
        return proc

    return asyncio.run(go())


def test_records_files_and_discovered_urls(tmp_path):
    hook = script_hook(
        tmp_path,
        """
        print("some log line")
        open("out.txt", "w").write("hello")
        print(json.dumps({"type": "Snapshot", "url": "https://example.com/next", "title": "Next", "tags": "a,b"}))
        print(json.dumps({"type": "Tag", "name": "found"}))
        print(json.dumps({"type": "ArchiveResult", "status": "success", "output_str": "probe/out.txt"}))
    """,
    )
    proc = run(hook, tmp_path)
    result = proc.archive_result("S1", "C1")
    assert (result.status, result.output_str, result.output_size) == ("succeeded", "probe/out.txt", 5)
    assert result.output_files["out.txt"].mimetype == "text/plain"
    [found] = proc.discovered()
    assert (found.url, found.title, found.tags) == ("https://example.com/next", "Next", ("a", "b"))
    assert proc.tags() == ["found"]
    record = proc.process_record("S1", "C1", "m1")
    assert record.exit_code == 0 and "some log line" in record.stdout


def test_exit_10_is_skipped_and_other_codes_fail_with_stderr(tmp_path):
    assert run(script_hook(tmp_path, "sys.exit(10)"), tmp_path).archive_result("S", "C").status == "skipped"
    failed = run(script_hook(tmp_path, "print('boom: no such thing', file=sys.stderr); sys.exit(3)"), tmp_path)
    result = failed.archive_result("S", "C")
    assert result.status == "failed" and "exit code 3" in result.notes and "boom: no such thing" in result.notes
    assert run(script_hook(tmp_path, "pass"), tmp_path).archive_result("S", "C").status == "noresults"


def test_a_hook_over_its_memory_limit_is_killed_and_says_why(tmp_path):
    hook = script_hook(tmp_path, "hog = bytearray(400 * 2**20); hog[::4096] = b'x' * len(hog[::4096]); time.sleep(60)")
    proc = run(hook, tmp_path, timeout=30, memory_limit=100 * 2**20, limits_interval=0.2)
    result = proc.archive_result("S", "C")
    assert result.status == "failed" and "over MEMORY_LIMIT (100 MiB)" in result.notes, result.notes


def test_the_limits_watcher_never_holds_a_finished_hook_back(tmp_path):
    """A hook that ends at once reports at once, not when the watcher next looks (it used to add
    up to a whole interval to every hook: 1 s each in production). With a 60 s interval the old
    code ended only at the 5 s cap on waiting for the readers, so 4 s separates the two."""
    proc = run(script_hook(tmp_path, "pass"), tmp_path, memory_limit=2**30, limits_interval=60)
    assert (proc.ended_at - proc.started_at).total_seconds() < 4


def test_timeout_kills_the_whole_process_group(tmp_path):
    pid_file = tmp_path / "child.pid"
    hook = script_hook(
        tmp_path,
        f"""
        child = subprocess.Popen(["sleep", "60"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(60)
    """,
    )
    proc = run(hook, tmp_path, timeout=1)
    result = proc.archive_result("S", "C")
    assert result.status == "failed" and result.notes == "Hook timed out after 1 seconds"
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while alive(child):  # SIGKILLed with the group; init reaps it
        assert time.monotonic() < deadline, f"grandchild {child} survived the hook's timeout"
        time.sleep(0.05)


def test_background_hook_finishes_its_work_after_sigterm(tmp_path):
    hook = script_hook(
        tmp_path,
        """
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # like wget: finish within the timeout
        print("download started", flush=True)
        time.sleep(1)
        open("page.html", "w").write("<html></html>")
        print(json.dumps({"type": "ArchiveResult", "status": "succeeded", "output_str": "probe/page.html"}))
    """,
        name="on_Snapshot__10_probe.finite.bg.py",
    )
    assert hook.is_background
    proc = run(hook, tmp_path, timeout=20)
    result = proc.archive_result("S", "C")
    assert result.status == "succeeded" and "page.html" in result.output_files


def test_real_wget_hook_on_a_local_page(tmp_path, demo_site):
    [hook] = get_catalog()["wget"].snapshot_hooks()
    proc = run(hook, tmp_path, timeout=30, url=demo_site)
    result = proc.archive_result("S1", "C1")
    assert result.status == "succeeded", result.notes
    assert any(p.endswith("index.html") for p in result.output_files)
    assert any(p.startswith("warc/") and p.endswith(".warc.gz") for p in result.output_files)


def test_a_file_name_that_is_not_utf8_is_carried_as_text(tmp_path):
    """wget names a file after a Latin-1 query (raw byte 0xF6); the result must still encode."""
    hook = script_hook(
        tmp_path,
        """
        open(b"page@q=H\\xf6he.html", "w").write("<html></html>")
        print(json.dumps({"type": "ArchiveResult", "status": "succeeded", "output_str": "probe/x"}))
    """,
    )
    result = run(hook, tmp_path).archive_result("S", "C")
    assert list(result.output_files) == ["page@q=H\\xf6he.html"]
    assert encode(result)  # msgspec refuses lone surrogates: this is what crashed the fetch task


def test_scan_files_lists_regular_files_at_any_depth_and_no_symlink(tmp_path):
    """``{relpath: (size, mtime_ns)}`` of every file below the root, in subdirectories too;
    symlinks (to a file or to a directory) neither listed nor followed, nor a FIFO or a socket (a
    reader of outputs would block on one); a name that is not UTF-8 as text; a missing root or a
    file as the root: nothing."""
    root = tmp_path / "plugin"
    (root / "sub" / "deeper").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a.txt").write_bytes(b"abc")
    (root / "sub" / "b.bin").write_bytes(b"12345")
    (root / "sub" / "deeper" / "c").write_bytes(b"")
    with open(os.path.join(os.fsencode(root), b"H\xf6he"), "wb") as f:
        f.write(b"x")
    (root / "link-to-file").symlink_to(root / "a.txt")
    (root / "link-to-dir").symlink_to(root / "sub", target_is_directory=True)
    (tmp_path / "outside.txt").write_bytes(b"out")
    (root / "sub" / "link-outside").symlink_to(tmp_path / "outside.txt")
    os.mkfifo(root / "sub" / "fifo")
    listening = socket.socket(socket.AF_UNIX)
    listening.bind(str(root / "sock"))
    listening.close()

    def meta(*parts: str | bytes) -> tuple[int, int]:
        st = os.lstat(os.path.join(os.fsencode(root), *(os.fsencode(p) for p in parts)))
        return st.st_size, st.st_mtime_ns

    assert scan_files(root) == {
        "a.txt": meta("a.txt"),
        "sub/b.bin": meta("sub", "b.bin"),
        "sub/deeper/c": meta("sub", "deeper", "c"),
        "H\\xf6he": meta(b"H\xf6he"),
    }
    assert scan_files(tmp_path / "missing") == {}
    assert scan_files(root / "a.txt") == {}


def test_a_daemon_stopped_after_its_deadline_still_reports(tmp_path):
    """A background hook asked to stop after its deadline passed gets its grace, and its own
    record stands (it is not reported as timed out)."""
    hook = script_hook(
        tmp_path,
        """
        def stop(*_):
            print(json.dumps({"type": "ArchiveResult", "status": "succeeded", "output_str": "probe/done"}), flush=True)
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        print("listening", flush=True)
        time.sleep(60)
    """,
        name="on_Snapshot__10_probe.daemon.bg.py",
    )

    async def go() -> HookProcess:
        snap = tmp_path / "snap"
        proc = HookProcess(
            hook, [sys.executable, hook.path], snap / "probe", dict(os.environ), 1, margin=0, kill_grace=3
        )
        await proc.start()
        await proc.wait_ready()
        await asyncio.sleep(1.5)  # the foreground hooks ran past this one's deadline
        await proc.stop()
        return proc

    result = asyncio.run(go()).archive_result("S", "C")
    assert (result.status, result.output_str) == ("succeeded", "probe/done")


def test_a_cancel_kills_the_hook_and_records_it_skipped(tmp_path):
    hook = script_hook(tmp_path, "time.sleep(60)")

    async def go() -> HookProcess:
        proc = HookProcess(
            hook,
            [sys.executable, hook.path],
            tmp_path / "snap" / "probe",
            dict(os.environ),
            60,
            kill_grace=1,
            spawner=SPAWNER,
        )
        cancelled = asyncio.Event()
        await proc.start()
        asyncio.get_running_loop().call_later(0.5, cancelled.set)
        started = time.monotonic()
        await proc.wait(cancelled)
        assert time.monotonic() - started < 5
        return proc

    proc = asyncio.run(go())
    assert not alive(proc.pid)
    result = proc.archive_result("S", "C")
    assert (result.status, result.output_str) == ("skipped", "cancelled")


def test_does_not_apply_is_skipped_not_noresults(tmp_path):
    body = """print(json.dumps({"type": "ArchiveResult", "status": "noresults", "output_str": "%s"}))"""
    for reason, status in (
        ("Browser document is not HTML", "skipped"),
        ("staticfile already handled", "skipped"),
        ("Main response was HTTP 200 text/html (not staticfile)", "skipped"),
        ("No title found", "noresults"),
    ):
        result = run(script_hook(tmp_path, body % reason), tmp_path).archive_result("S", "C")
        assert (result.status, result.output_str) == (status, reason)


def test_running_hooks_hold_no_thread_so_the_next_hook_still_starts(tmp_path):
    """Hooks running at once (4 tasks × their background hooks) must not each hold a thread of the
    default executor until they exit: ``HookProcess.start`` uses that pool, so once it ran dry the
    next hook waited for some running one to end (a cancel then found hooks "started" after it)."""
    hook = script_hook(tmp_path, "print('{}', flush=True); time.sleep(60)\n")

    async def go() -> None:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=2))
        procs = [
            HookProcess(
                hook,
                [sys.executable, hook.path],
                tmp_path / f"snap{i}" / hook.plugin,
                dict(os.environ),
                60,
                margin=0,
                kill_grace=1,
                spawner=SPAWNER,
            )
            for i in range(4)  # twice the pool's threads
        ]
        try:
            for proc in procs:
                await asyncio.wait_for(proc.start(), 20)
                await asyncio.wait_for(proc.wait_ready(), 20)
            assert all(alive(p.pid) for p in procs)
        finally:
            await asyncio.gather(*(p.kill(grace=0) for p in procs if p.proc is not None))

    asyncio.run(go())
