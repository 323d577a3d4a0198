"""Warm interpreters: a hook that starts a second Python (as trafilatura's does) gets a warm one
through the stand-in, with the same output, exit code and streams as a cold start."""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from boxcar.hook_executor.hooks import HookProcess
from boxcar.hook_executor.warm import WarmInterpreters
from boxcar.hook_executor.warm import interpreters as warm
from boxcar.hook_executor.warm.zygote_client import Zygote
from boxcar.shared.plugins import get_catalog, parse_hook

WORKER = "import sys, json; print(json.dumps([sys.argv[1:], 'decimal' in sys.modules])); sys.exit(3)"


@pytest.fixture
def second_python(tmp_path, monkeypatch) -> Path:
    """A venv-like dir: its tool, and the ``python`` beside it (the interpreter the hook starts)."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    (venv / "tool").write_text("#!/bin/sh\nexit 0\n")
    monkeypatch.setitem(warm.SECOND_INTERPRETERS, "TOOL_BINARY", (("decimal",), ""))  # only the warm one has it
    return venv / "tool"


def hook_starting_a_second_python(tmp_path: Path, options: tuple[str, ...] = ()):
    path = tmp_path / "plugins" / "probe" / "on_Snapshot__10_probe.py"
    path.parent.mkdir(parents=True)
    path.write_text(
        textwrap.dedent(
            f"""
            import os, subprocess, sys
            from pathlib import Path
            python = Path(os.environ["TOOL_BINARY"]).resolve().with_name("python")
            argv = [str(python), *{list(options)!r}, "-c", {WORKER!r}, "a", "b c"]
            done = subprocess.run(argv, capture_output=True, text=True)
            print(done.stdout.strip(), done.returncode)
            """
        )
    )
    return parse_hook("probe", path)


@pytest.mark.parametrize(("options", "warm_result"), [((), "true"), (("-u",), "false")])
def test_a_second_python_runs_warm_with_the_same_result(tmp_path, second_python, options, warm_result):
    """Through its stand-in, the second Python runs in a fork of the warm one; with an interpreter
    option before the program (``-u``), which a fork cannot honour, the stand-in runs it cold."""
    hook = hook_starting_a_second_python(tmp_path, options)

    async def run(env: dict[str, str]) -> str:
        return stdout_of(await finished(hook, tmp_path / "snap" / "probe", env))

    async def both() -> tuple[str, str]:
        interpreters = WarmInterpreters(tmp_path / "warm", get_catalog(), [])
        try:
            cold = await run({**os.environ, "TOOL_BINARY": str(second_python)})
            stand_ins = await interpreters.binary_overrides({"TOOL_BINARY": str(second_python)})
            assert set(stand_ins) == {"TOOL_BINARY"} and stand_ins["TOOL_BINARY"] != str(second_python)
            warm_out = await run({**os.environ, **stand_ins})
        finally:
            interpreters.stop()
        return cold, warm_out

    cold, warmed = asyncio.run(both())
    assert cold == '[["a", "b c"], false] 3'
    assert warmed == f'[["a", "b c"], {warm_result}] 3'  # same arguments and exit code


def test_a_console_tool_runs_in_a_warmed_fork_with_its_arguments_and_exit_code(tmp_path, monkeypatch):
    """yt-dlp and gallery-dl (``WARM_TOOLS``): the stand-in binary runs the tool's main in a fork
    of its venv's interpreter after the warm-up ran there (once), with the same argv, streams and
    exit code as the real binary — also where the socket's path is too long to bind directly."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").symlink_to(sys.executable)
    marker = tmp_path / "warmups"
    warmup = f"import builtins; builtins.WARMED = True; open({str(marker)!r}, 'a').write('x')"
    main = "import builtins, sys; print(sys.argv[1:], getattr(builtins, 'WARMED', False)); sys.exit(4)"
    (venv / "tool").write_text(f'#!/bin/sh\nexec {sys.executable} -c "{main}" "$@"\n')
    (venv / "tool").chmod(0o755)
    monkeypatch.setattr(warm, "WARM_TOOLS", {"TOOL_BINARY": ((), warmup, main)})

    async def run() -> list[tuple[str, int]]:
        # under a deep directory: its socket's path is longer than a Unix socket address may be
        interpreters = WarmInterpreters(tmp_path / ("deep" * 25) / "warm", get_catalog(), [])
        try:
            out = []
            for _ in range(2):
                stand_ins = await interpreters.binary_overrides({"TOOL_BINARY": str(venv / "tool")})
                proc = await asyncio.create_subprocess_exec(
                    stand_ins["TOOL_BINARY"], "--flag", "a b", stdout=asyncio.subprocess.PIPE
                )
                stdout, _ = await proc.communicate()
                out.append((stdout.decode().strip(), proc.returncode))
            return out
        finally:
            interpreters.stop()

    import subprocess

    real = subprocess.run([str(venv / "tool"), "--flag", "a b"], capture_output=True, text=True)
    assert (real.stdout.strip(), real.returncode) == ("['--flag', 'a b'] False", 4)
    assert asyncio.run(run()) == [("['--flag', 'a b'] True", 4)] * 2
    assert marker.read_text() == "x"  # warmed once, forked twice


def probe_hook(tmp_path: Path, body: str):
    path = tmp_path / "plugins" / "probe" / "on_Snapshot__10_probe.py"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(body))
    return parse_hook("probe", path)


#: Prints whether the hook's interpreter had pydantic imported before the hook ran (warm) or not.
WARM_PROBE = "import sys\nprint('warm' if 'pydantic' in sys.modules else 'cold')\nsys.exit(2)\n"


async def finished(
    hook, cwd: Path, env: dict[str, str] | None = None, spawner=None, options: tuple[str, ...] = ()
) -> HookProcess:
    """Run ``hook`` (``python *options hook``) in ``cwd`` with ``env`` (default: ours) through
    ``spawner`` (None: cold) to its end; returns its ``HookProcess`` (output tails, exit code)."""
    env = dict(os.environ) if env is None else env
    proc = HookProcess(hook, [sys.executable, *options, hook.path], cwd, env, 30, margin=0, spawner=spawner)
    await proc.start()
    await proc.wait()
    return proc


def stdout_of(proc: HookProcess) -> str:
    """What a finished hook printed (its stdout's tail, lines joined)."""
    return "\n".join(proc._stdout_tail)


async def run_hook(
    hook, tmp_path: Path, spawner, env: dict[str, str] | None = None, options: tuple[str, ...] = ()
) -> tuple[str, int]:
    """``finished`` in ``tmp_path/snap/probe``: (its stdout's tail, its exit code)."""
    proc = await finished(hook, tmp_path / "snap" / "probe", env, spawner, options)
    return stdout_of(proc), proc.proc.returncode


def warm_and_cold(hook, tmp_path: Path) -> tuple[tuple[str, int], tuple[str, int]]:
    """``run_hook`` of ``hook`` in a fork of a zygote started for it, then cold: (warm, cold)."""
    zygote = Zygote(sys.executable, tmp_path / "z.sock")
    try:
        zygote.start()
        return asyncio.run(run_hook(hook, tmp_path, zygote)), asyncio.run(run_hook(hook, tmp_path, None))
    finally:
        zygote.stop()


async def eventually(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.05)


def test_an_idle_zygote_exits_and_the_next_hook_starts_a_new_one(tmp_path):
    """``WARM_IDLE_TIMEOUT``: with no hook for that long the zygote removes its socket and exits
    (its memory goes back); the next hook starts a new one and still runs warm. (One event loop
    throughout: a zygote dies with the thread that started it, as hooks die with their executor.)"""
    hook = probe_hook(tmp_path, WARM_PROBE)

    async def go() -> None:
        interpreters = WarmInterpreters(tmp_path / "warm", get_catalog(), [], idle_exit=0.5)
        try:
            first = await interpreters.for_hook(hook)
            old_pid = first.proc.pid
            assert await run_hook(hook, tmp_path, first) == ("warm", 2)
            await eventually(lambda: first.proc.poll() is not None, 30, "the idle zygote to exit")
            assert not first.socket_path.exists() and not first.running()
            again = await interpreters.for_hook(hook)
            assert again.running() and again.proc.pid != old_pid
            assert await run_hook(hook, tmp_path, again) == ("warm", 2)
        finally:
            interpreters.stop()

    asyncio.run(go())


def test_a_zygote_does_not_exit_while_a_hook_it_forked_runs(tmp_path):
    hook = probe_hook(tmp_path, "import time, sys\ntime.sleep(2.5)\nprint('done')\n")
    zygote = Zygote(sys.executable, tmp_path / "z.sock", idle_exit=0.5)

    async def go() -> None:
        await asyncio.to_thread(zygote.start)
        assert await run_hook(hook, tmp_path, zygote) == ("done", 0)  # 2.5 s: five idle timeouts
        assert zygote.running()  # idle is counted from the hook's end, not its start
        await eventually(lambda: not zygote.running(), 30, "the zygote to exit once idle")

    try:
        asyncio.run(go())
    finally:
        zygote.stop()


def test_with_no_zygote_at_its_socket_hooks_and_stand_ins_start_cold(tmp_path, second_python):
    """A zygote that exited between being handed out and being used: nothing fails, the program
    starts cold with the same output and exit code."""
    hook = probe_hook(tmp_path, WARM_PROBE)
    zygote = Zygote(sys.executable, tmp_path / "z.sock")
    zygote.start()
    zygote.stop()
    assert asyncio.run(run_hook(hook, tmp_path, zygote)) == ("cold", 2)

    interpreters = WarmInterpreters(tmp_path / "warm", get_catalog(), [])
    try:
        stand_ins = asyncio.run(interpreters.binary_overrides({"TOOL_BINARY": str(second_python)}))
    finally:
        interpreters.stop()  # the stand-in now finds no zygote
    second = hook_starting_a_second_python(tmp_path / "second")
    env = {**os.environ, **stand_ins}

    async def go() -> str:
        return stdout_of(await finished(second, tmp_path / "snap2" / "probe", env))

    assert asyncio.run(go()) == '[["a", "b c"], false] 3'


def test_a_forked_hook_starts_with_the_preloaded_objects_frozen(tmp_path):
    """The zygote freezes what it imported (``gc.freeze``) before it forks: a hook's collections
    leave those pages shared instead of copying them into every hook."""
    hook = probe_hook(tmp_path, "import gc\nprint('frozen' if gc.get_freeze_count() > 10000 else 'not frozen')\n")
    zygote = Zygote(sys.executable, tmp_path / "z.sock")

    async def go() -> tuple[str, int]:
        await asyncio.to_thread(zygote.start)
        return await run_hook(hook, tmp_path, zygote)

    try:
        assert asyncio.run(go()) == ("frozen", 0)
    finally:
        zygote.stop()


def test_a_warm_hooks_first_connection_imports_nothing(tmp_path):
    """``socket.create_connection`` with a host name imports ``encodings.idna`` (and
    ``unicodedata``) in a process's first connection; favicon's hook forks a child per candidate
    URL and each paid it (``HOOK_PRELOAD``). Warm, nothing is imported; cold, the idna codec is."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    hook = probe_hook(
        tmp_path,
        "import socket, sys\nbefore = set(sys.modules)\n"
        f"socket.create_connection(('localhost', {port}), timeout=10).close()\n"
        "print(' '.join(sorted(set(sys.modules) - before)) or 'nothing')\n",
    )
    try:
        warm_out, cold_out = warm_and_cold(hook, tmp_path)
    finally:
        listener.close()
    assert warm_out == ("nothing", 0)
    assert "encodings.idna" in cold_out[0].split(), cold_out


def test_a_stand_in_starts_without_site_or_the_servers_imports(tmp_path, second_python):
    """Every call a hook makes to its second Python starts a stand-in: it must stay a small
    interpreter (no ``site``, no asyncio: 0.10 → 0.02 CPU-s and 22 → 11 MiB per call; nor
    ``json``, ``socket`` or what they import: 29 → ~10 ms a call in a crawl's perf profile)."""
    interpreters = WarmInterpreters(tmp_path / "warm", get_catalog(), [])
    try:
        stand_ins = asyncio.run(interpreters.binary_overrides({"TOOL_BINARY": str(second_python)}))
    finally:
        interpreters.stop()
    command = Path(stand_ins["TOOL_BINARY"]).with_name("python").read_text()
    exec_, python, *flags_and_client = shlex.split(command.splitlines()[-1])[:5]
    assert exec_ == "exec" and flags_and_client[:2] == ["-I", "-S"], command
    client = flags_and_client[2]  # exec PYTHON -I -S …/zygote_wire.py --client …
    # what it imports, as it runs: no zygote at the socket, so it execs the cold program
    done = subprocess.run(
        [
            python,
            "-I",
            "-S",
            "-X",
            "importtime",
            client,
            "--client",
            str(tmp_path / "no.sock"),
            "--cold",
            "/bin/true",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    modules = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    heavy = {"site", "asyncio", "boxcar", "logging", "pathlib", "json", "socket", "struct", "enum", "re", "typing"}
    assert "_socket" in modules and not modules & heavy, sorted(modules)


#: What ``http.client`` and ``urllib.request`` get as their default HTTPS context, and the CA
#: certificates in it, as the CA setting changes under the hook (``ca.pem`` lies beside it).
HTTPS_CONTEXT_PROBE = """
import http.client, json, os, ssl, urllib.request
from pathlib import Path

def context():
    return http.client.HTTPSConnection("example.org")._context

def cas():
    return context().cert_store_stats()["x509_ca"]

opener = lambda: next(h for h in urllib.request.build_opener().handlers if isinstance(h, urllib.request.HTTPSHandler))
shared = context() is context() and opener()._context is opener()._context
default = cas()
pem = Path(__file__).with_name("ca.pem")
os.environ["SSL_CERT_FILE"] = str(pem)
one = cas()
first = Path("/etc/ssl/certs/ca-certificates.crt").read_text().split("-----END CERTIFICATE-----")
pem.write_text(first[0] + "-----END CERTIFICATE-----\\n" + first[1] + "-----END CERTIFICATE-----\\n")
os.utime(pem, ns=(1, os.stat(pem).st_mtime_ns + 10**9))  # a changed bundle, whatever the clock's grain
two = cas()
del os.environ["SSL_CERT_FILE"]
back = cas()
ssl._create_default_https_context = ssl._create_unverified_context  # PEP 476's opt-out
print(json.dumps([shared, default > 10, one, two, back == default, context().verify_mode == ssl.CERT_NONE]))
"""


def test_forked_hooks_share_one_default_https_context_per_ca_setting(tmp_path):
    """A default HTTPS context loads the whole CA bundle (~18 ms); a zygote makes it once and
    its hooks reuse it while ``SSL_CERT_FILE``/``SSL_CERT_DIR`` and the bundle stay the same. A
    changed setting or bundle gets a context that honours it, the opt-out still works, and
    apart from the sharing a cold start sees the same."""
    bundle = Path("/etc/ssl/certs/ca-certificates.crt")
    if not bundle.exists():
        pytest.skip("no system CA bundle")
    hook = probe_hook(tmp_path, HTTPS_CONTEXT_PROBE)
    first = bundle.read_text().split("-----END CERTIFICATE-----")[0] + "-----END CERTIFICATE-----\n"
    zygote = Zygote(sys.executable, tmp_path / "z.sock")

    async def go(spawner) -> tuple[str, int]:
        Path(hook.path).with_name("ca.pem").write_text(first)
        if spawner is not None:
            await asyncio.to_thread(spawner.start)
        return await run_hook(hook, tmp_path, spawner)

    try:
        warm_out, cold_out = asyncio.run(go(zygote)), asyncio.run(go(None))
    finally:
        zygote.stop()
    assert warm_out == ("[true, true, 1, 2, true, true]", 0)
    assert cold_out == ("[false, true, 1, 2, true, true]", 0)


#: What a script sees of itself as ``__main__`` (runpy's module attributes) and a version mark.
MAIN_PROBE = """
names = sorted(globals())
import sys
def typed(x: int) -> None: ...
me = sys.modules["__main__"]
facts = [__name__, __file__ == sys.argv[0], __package__, __spec__, type(__loader__).__name__, __cached__, __doc__,
         type(__builtins__).__name__, me.__dict__ is globals(), sys.path[0] == __import__("os").path.dirname(__file__),
         typed.__annotations__["x"] is int, names]
print(repr(facts), "VERSION")
"""


def test_a_hook_compiled_once_by_the_zygote_runs_as_a_script_and_an_edited_one_anew(tmp_path):
    """The zygote compiles a hook once before its forks (``CodeCache``); the fork runs it with the
    ``__main__`` a cold ``python script`` has, and a file changed since is compiled again."""
    hook = probe_hook(tmp_path, MAIN_PROBE.replace("VERSION", "1"))
    cold = subprocess.run([sys.executable, hook.path], capture_output=True, text=True, timeout=30)
    zygote = Zygote(sys.executable, tmp_path / "z.sock")

    async def go() -> list[tuple[str, int]]:
        await asyncio.to_thread(zygote.start)
        runs = [await run_hook(hook, tmp_path, zygote), await run_hook(hook, tmp_path, zygote)]
        Path(hook.path).write_text(textwrap.dedent(MAIN_PROBE.replace("VERSION", "two")))
        runs.append(await run_hook(hook, tmp_path, zygote))
        return runs

    try:
        first, second, edited = asyncio.run(go())
    finally:
        zygote.stop()
    assert first == second == (cold.stdout.strip(), 0), (first, cold.stdout)
    names = ["__annotations__", "__builtins__", "__cached__", "__doc__", "__file__", "__loader__", "__name__"]
    names += ["__package__", "__spec__"]
    facts = ["__main__", True, None, None, "SourceFileLoader", None, None, "module", True, True, True, names]
    assert first[0] == f"{facts!r} 1"  # annotations evaluated: none of the zygote's __future__ flags
    assert edited == (first[0].replace(" 1", " two"), 0)


#: How a program starts and ends: signal dispositions, its own excepthook, its non-daemon threads
#: (one a thread pool never shut down: python's exit stops it) and its atexit handlers.
END_PROBE = """
import atexit, signal, sys, threading
from concurrent.futures import ThreadPoolExecutor
names = ("SIGCHLD", "SIGTERM", "SIGINT", "SIGPIPE", "SIGXFSZ")
print([str(signal.getsignal(getattr(signal, name))) for name in names])
atexit.register(lambda: print("atexit ran", flush=True))
def late():
    threading.main_thread().join()  # python stops the main thread first, then joins the others
    print("thread joined", flush=True)
threading.Thread(target=late).start()
ThreadPoolExecutor(1).submit(print, "pool ran", flush=True).result()
sys.excepthook = lambda kind, value, tb: print("own excepthook:", kind.__name__, value, flush=True)
raise ValueError("boom")
"""


def test_a_forked_hook_starts_and_ends_as_a_python_process_does(tmp_path):
    """A fork begins with a new interpreter's signal dispositions (SIGINT raises unless it came
    ignored, SIGPIPE is ignored; it used to have SIG_DFL for both) and ends as ``python`` does: the program's own
    ``sys.excepthook``, then its non-daemon threads joined, then its ``atexit`` handlers (a fork
    used to print the traceback itself and leave at once)."""
    warm_out, cold_out = warm_and_cold(probe_hook(tmp_path, END_PROBE), tmp_path)
    assert warm_out == cold_out
    # SIG_DFL 0, SIG_IGN 1; SIGINT raises, unless this test's process came with it ignored
    sigint = "1" if signal.getsignal(signal.SIGINT) is signal.SIG_IGN else "<built-in function default_int_handler>"
    signals = f"['0', '0', {sigint!r}, '1', '1']"
    lines = [signals, "pool ran", "own excepthook: ValueError boom", "thread joined", "atexit ran"]
    assert cold_out == ("\n".join(lines), 1)


#: Programs whose ends a fork used to get wrong: (program, extra environment, what a cold python
#: gives: the stdout, the exit status, and the stderr's last line or a file's content).
ENDINGS = {
    "negative status": ("import sys; sys.exit(-2)", {}, ("", 254, "")),
    "status over 255": ("import sys; sys.exit(2**32 + 5)", {}, ("", 5, "")),
    "stdout closed": ("import sys; print('x'); sys.stdout.close()", {}, ("x", 0, "")),
    "a file never closed": ("f = open('left-open.txt', 'w'); f.write('data')", {}, ("", 0, "file: data")),
    "traceback": ("1 / 0", {}, ("", 1, "ZeroDivisionError: division by zero")),
    "killed after a print, unbuffered": (
        "import os, signal; print('said'); os.kill(os.getpid(), signal.SIGKILL)",
        {"PYTHONUNBUFFERED": "1"},
        ("said", -9, ""),
    ),
    "a start-up variable: cold": (WARM_PROBE, {"PYTHONHASHSEED": "0"}, ("cold", 2, "")),
}


@pytest.mark.parametrize("case", ENDINGS)
def test_a_fork_ends_as_python_ends(tmp_path, case):
    """Each program gives the same stdout, exit status, stderr and files warm as cold (and what a
    cold python gives: the cases check the comparison, not only the equality)."""
    program, extra, expected = ENDINGS[case]
    mode = "import sys; open('mode.txt', 'w').write('warm' if 'pydantic' in sys.modules else 'cold')\n"
    hook = probe_hook(tmp_path, mode + program)
    zygote = Zygote(sys.executable, tmp_path / "z.sock")
    env = {**os.environ, **extra}

    async def run(spawner) -> tuple[str, int, str]:
        (tmp_path / "snap").mkdir(exist_ok=True)
        (tmp_path / "snap" / "left-open.txt").unlink(missing_ok=True)
        proc = await finished(hook, tmp_path / "snap", env, spawner)
        left = tmp_path / "snap" / "left-open.txt"
        last = (
            f"file: {left.read_text()}"
            if left.exists()
            else (bytes(proc._stderr).decode().strip().splitlines() or [""])[-1]
        )
        return stdout_of(proc), proc.proc.returncode, last

    try:
        zygote.start()
        warm_out = asyncio.run(run(zygote))
        warm_mode = (tmp_path / "snap" / "mode.txt").read_text()
        cold_out = asyncio.run(run(None))
    finally:
        zygote.stop()
    assert cold_out == expected
    assert warm_out == cold_out
    assert (tmp_path / "snap" / "mode.txt").read_text() == "cold"
    assert warm_mode == ("cold" if "PYTHONHASHSEED" in extra else "warm")


def test_a_warm_traceback_shows_only_the_programs_frames(tmp_path):
    """A traceback names the program's frames only, as a cold one does (not the fork's own)."""
    hook = probe_hook(tmp_path, "def f():\n    1 / 0\nf()\n")
    zygote = Zygote(sys.executable, tmp_path / "z.sock")

    async def run(spawner) -> str:
        return bytes((await finished(hook, tmp_path / "snap", spawner=spawner))._stderr).decode()

    try:
        zygote.start()
        warm_err, cold_err = asyncio.run(run(zygote)), asyncio.run(run(None))
    finally:
        zygote.stop()
    assert "zygote_server" not in warm_err and "runpy" not in warm_err
    assert warm_err == cold_err and cold_err.count('File "') == 2


def test_a_warm_hook_gives_its_compiler_warnings_as_a_cold_one(tmp_path):
    """A script's ``SyntaxWarning`` (an invalid escape sequence) goes to the hook's stderr each
    time, as a cold ``python`` compiling it gives it — also when the zygote compiled it once for
    every fork (it used to go to the zygote's own stderr, and then to no one)."""
    hook = probe_hook(tmp_path, 'import sys\nprint("warm" if "pydantic" in sys.modules else "cold", "\\d")\n')
    zygote = Zygote(sys.executable, tmp_path / "z.sock")

    async def run(spawner) -> tuple[str, str]:
        proc = await finished(hook, tmp_path / "snap", spawner=spawner)
        return stdout_of(proc), bytes(proc._stderr).decode()

    try:
        zygote.start()
        first, again = asyncio.run(run(zygote)), asyncio.run(run(zygote))
        cold = asyncio.run(run(None))
    finally:
        zygote.stop()
    assert cold[0] == "cold \\d" and "SyntaxWarning: invalid escape sequence '\\d'" in cold[1]
    assert first == again == ("warm \\d", cold[1])


#: What a ``-c`` program sees of itself as ``__main__``.
C_PROBE = """
names = sorted(globals())
import sys
me = sys.modules["__main__"]
print(repr([__name__, me.__dict__ is globals(), __package__, __spec__, getattr(__loader__, "__name__", None),
            "__file__" in globals(), sys.path[0], sys.argv, names]))
"""


def test_a_c_program_in_a_fork_gets_the_main_module_and_path_python_c_gives(tmp_path):
    """``python -c`` (trafilatura's worker, through its stand-in) runs in a ``__main__`` module of
    its own, as ``python -c`` makes it — not in the zygote's — with ``""`` first on ``sys.path``:
    a multiprocessing child or a pickled function finds what a cold run would."""
    zygote = Zygote(sys.executable, tmp_path / "z.sock")
    argv = [sys.executable, "-c", C_PROBE, "an arg"]

    async def warm() -> str:
        await asyncio.to_thread(zygote.start)
        proc = await zygote.spawn(argv, tmp_path, dict(os.environ))
        out = await proc.stdout.read()
        assert await proc.wait() == 0
        return out.decode().strip()

    try:
        warm_out = asyncio.run(warm())
    finally:
        zygote.stop()
    cold = subprocess.run(argv, capture_output=True, text=True, timeout=30, cwd=tmp_path)
    names = ["__annotations__", "__builtins__", "__doc__", "__loader__", "__name__", "__package__", "__spec__"]
    assert (
        warm_out
        == cold.stdout.strip()
        == repr(["__main__", True, None, None, "BuiltinImporter", False, "", ["-c", "an arg"], names])
    )


@pytest.mark.parametrize(("plugins", "started"), [(["hashes"], True), (["chrome", "screenshot"], False)])
def test_prestart_starts_the_hooks_fork_server_only_for_plugins_with_python_hooks(tmp_path, plugins, started):
    """An executor starts its Python hooks' fork server at its own start (its first hooks do not
    wait for its imports), but none for plugins whose hooks are all Node (the browser's)."""
    interpreters = WarmInterpreters(tmp_path / "warm", get_catalog(), plugins)

    async def go() -> bool:  # asked inside the loop: the server dies with the loop's thread that started it
        await interpreters.prestart()
        return interpreters.hooks.running()

    try:
        assert asyncio.run(go()) is started
    finally:
        interpreters.stop()


def test_a_hook_with_a_large_environment_still_runs_warm(tmp_path):
    """A request is read whole whatever its size up to ``MAX_REQUEST``: a stream socket hands over
    only its first ~36 KiB with the descriptors, and a larger request used to be a "bad request"
    (the hook started cold). 300 KB of environment here, in variables exec would take too."""
    hook = probe_hook(tmp_path, WARM_PROBE)
    zygote = Zygote(sys.executable, tmp_path / "z.sock")
    env = {**os.environ, **{f"LARGE_{i}": str(i) * 100_000 for i in range(3)}}
    try:
        zygote.start()
        assert asyncio.run(run_hook(hook, tmp_path, zygote, env)) == ("warm", 2)
    finally:
        zygote.stop()


def test_a_hook_with_interpreter_options_starts_cold(tmp_path):
    """``python -u hook``: a fork cannot honour an interpreter option, so the hook starts cold
    (``program_of``); the zygote used to take ``-u`` for the script's path and fail."""
    hook = probe_hook(tmp_path, WARM_PROBE)
    zygote = Zygote(sys.executable, tmp_path / "z.sock")
    try:
        zygote.start()
        assert asyncio.run(run_hook(hook, tmp_path, zygote, options=("-u",))) == ("cold", 2)
        assert asyncio.run(run_hook(hook, tmp_path, zygote)) == ("warm", 2)
    finally:
        zygote.stop()


@pytest.mark.parametrize("argv", [[sys.executable, 5], [sys.executable, b"x"], [sys.executable, "-c", 5], []])
def test_a_request_the_zygote_cannot_read_ends_its_fork_not_the_zygote(tmp_path, argv):
    """An argv with anything but strings in it (or none) is answered with status 2 by the fork (as
    ``python`` answers a bad command line); it used to raise in the zygote's own loop and end it."""
    from boxcar.hook_executor.warm import zygote_wire as wire

    hook = probe_hook(tmp_path, WARM_PROBE)
    zygote = Zygote(sys.executable, tmp_path / "z.sock")
    try:
        zygote.start()
        with open(os.devnull, "rb") as null_in, open(os.devnull, "wb") as null_out:
            conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            conn.connect(str(zygote.socket_path))
            request = {"argv": argv, "cwd": str(tmp_path), "env": {}}
            wire.send_request(conn, request, [null_in.fileno(), null_out.fileno(), null_out.fileno()])
            assert "pid" in wire.recv(conn)
            assert wire.recv(conn)["exit"] == 2
            conn.close()
        assert asyncio.run(run_hook(hook, tmp_path, zygote)) == ("warm", 2)  # the zygote still serves
    finally:
        zygote.stop()


def test_a_warm_hook_cannot_read_the_executors_secrets_from_its_process_environment(tmp_path, monkeypatch):
    """A fork replaces ``os.environ``, but ``/proc/self/environ`` is the zygote's own: the zygote is
    started without Boxcar's secrets (``public_environ``), as a cold hook is."""
    monkeypatch.setenv("SECRET_KEY", "the-executors-own-key")
    monkeypatch.setenv("DATABASE_URL", "postgresql://boxcar:pw@db/boxcar")
    hook = probe_hook(
        tmp_path,
        "import os\nraw = open('/proc/self/environ', 'rb').read()\n"
        "print('leaked' if b'the-executors-own-key' in raw or b'boxcar:pw' in raw else 'clean')\n"
        "print('unset' if 'SECRET_KEY' not in os.environ else 'set')\n",
    )
    zygote = Zygote(sys.executable, tmp_path / "z.sock")
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DATABASE_URL")}
    try:
        zygote.start()
        assert asyncio.run(run_hook(hook, tmp_path, zygote, env)) == ("clean\nunset", 0)
    finally:
        zygote.stop()
