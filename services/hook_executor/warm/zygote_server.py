"""Warm Python for hooks: a fork server (zygote) that has imported what hooks import, and forks a
child per hook instead of starting an interpreter.

Most of a Python hook's CPU is not its work but its start: an interpreter, then pydantic and
abx-plugins' config machinery, again for every hook of every snapshot (0.15–0.2 CPU-s each,
against ~0.02 for the work of a hashes or htmltotext run). The zygote pays that once. Each
request (over a Unix socket) carries argv, environment and working dir, and the three standard
streams as file descriptors (``SCM_RIGHTS``); the zygote forks, and the child makes itself what a
fresh process would be — its own session and process group, death with its parent
(``PR_SET_PDEATHSIG``), the streams on 0/1/2, the cwd, exactly the given environment,
``sys.argv``, ``sys.path[0]``, a new interpreter's signal dispositions — then runs the hook file (or
``-c CODE``) in a ``__main__`` module of its own, and ends as ``python`` ends: the program's
``sys.excepthook``, its non-daemon threads joined, its ``atexit`` handlers. The zygote answers with the
child's pid, then its exit status (``-N`` for a signal, as ``subprocess`` reports it). If the
client goes away first, the zygote kills the child's group: a hook never outlives whoever asked
for it.

A zygote with no hook running for ``idle_exit`` seconds removes its socket and exits (the
executor starts it again for the next hook): an idle stack does not keep its warm interpreters'
memory. Whoever finds no zygote at the socket — the executor, or a stand-in interpreter —
starts the program cold instead, so a hook never fails for want of a warm interpreter.

``zygote_client.WarmProcess`` is the client side, shaped like ``asyncio.subprocess.Process`` (``pid``,
``returncode``, ``stdout``/``stderr`` readers, ``wait()``), so ``HookProcess`` runs a hook the same
way warm or cold, and kills it the same way (``killpg``). ``python -I -S zygote_wire.py --client
SOCKET -c CODE …`` (the wire format's own module, standard library only, so it starts fast) is a
stand-in interpreter for hooks that start a second Python (trafilatura's worker): it forwards its
own streams and arguments and exits with the child's status.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import importlib.machinery
import importlib.util
import io
import logging
import os
import selectors
import signal
import socket
import sys
import time
import types
import warnings
from pathlib import Path
from types import CodeType
from typing import NamedTuple

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1
#: What every Python hook imports: loaded once by the zygote. (Measured by recording, in each
#: fork, the modules the hook imported itself: the CLI hooks rich_click and difflib, favicon
#: urllib.request — 7 and 14 ms of CPU per hook, for 4 MiB shared once. ``encodings.idna``, with
#: ``stringprep`` and ``unicodedata``, is what the first connection of a process imports: favicon's
#: hook forks a child per candidate URL, about five a page, and each imported it again — 6.5 → 3.9 ms
#: of CPU a child, 960 → 700 page faults.)
HOOK_PRELOAD = (
    "argparse",
    "json",
    "subprocess",
    "pydantic",
    "pydantic.fields",
    "pydantic.main",
    "abx_plugins.plugins.base.utils",
    "click",
    "rich_click",
    "difflib",
    "pkgutil",
    "urllib.request",
    "encodings.idna",
)


# ----------------------------------------------------------------------------- wire format

if __package__:  # imported as boxcar.hook_executor.warm.zygote_server
    from boxcar.hook_executor.warm import zygote_wire as wire
else:  # run by path (``python -I zygote_server.py --serve``), maybe by a hook venv's Python, which has no boxcar
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import zygote_wire as wire
    finally:
        del sys.path[0]  # this directory's modules (task, media, …) must not shadow what hooks import


# ----------------------------------------------------------------------------- the server


class ZygoteServer:
    """The fork server: ``preload`` modules, then serve ``spawn`` requests on ``path``; with
    ``idle_exit`` seconds (> 0), exit once that long has passed with no child running."""

    def __init__(
        self,
        path: str,
        preload: tuple[str, ...],
        configs: tuple[str, ...] = (),
        warmup: str = "",
        idle_exit: float = 0.0,
    ) -> None:
        self.path = path
        self.preload = preload
        self.configs = configs
        self.warmup = warmup
        self.idle_exit = idle_exit
        self.last_active = time.monotonic()
        self.children: dict[int, socket.socket] = {}  # child pid -> its client's connection
        self.codes = CodeCache()
        self.selector = selectors.DefaultSelector()

    def warm(self) -> None:
        """Import ``preload`` and build each plugin's config model (abx-plugins caches it by
        schema): what every hook would otherwise do first. Nothing is *resolved* here — values
        come from each hook's own environment, after the fork."""
        for name in self.preload:
            try:
                importlib.import_module(name)
            except Exception as exc:  # a module this interpreter lacks: the hooks import it themselves
                log.debug("zygote could not preload %s: %s", name, exc)
        if self.warmup:  # a tool's first run, on local input only (what it compiles, its forks reuse)
            try:
                exec(compile(self.warmup, "<warmup>", "exec", dont_inherit=True), {"__name__": "__warmup__"})  # noqa: S102
            except BaseException as exc:  # the forks still run the tool, only without what it had loaded
                log.warning("zygote warm-up failed, its forks start cold: %s: %s", type(exc).__name__, exc)
        if self.configs:
            try:
                from abx_plugins.plugins.base.utils import load_config
            except ImportError:
                return
            for path in self.configs:
                with contextlib.suppress(BaseException):
                    load_config(path, environ={}, hydrate_binaries=False, hydrate_user_agent=False)
        share_default_https_context()

    def serve(self) -> None:
        self.warm()
        # what was imported moves to the permanent generation: a child's collections never touch
        # those objects, so their pages stay shared with the zygote instead of being copied into
        # every hook (CPython docs, gc.freeze; a hook's private memory: 10 MiB → 3 MiB)
        gc.freeze()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        wire.unix_call(listener, "bind", self.path)
        os.chmod(self.path, 0o600)
        listener.listen(64)
        self.listener = listener
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        self.inherited = {sig: signal.getsignal(sig) for sig in (signal.SIGCHLD, signal.SIGTERM)}  # for the forks
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.selector.register(wake_r, selectors.EVENT_READ, "wake")
        print("ready", flush=True)  # the executor waits for this line
        self.last_active = time.monotonic()  # idle from now, not from before the imports
        while True:
            for key, _ in self.selector.select(timeout=1.0):
                if key.data == "accept":
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        os.read(wake_r, 512)
                else:  # a client connection: readable means it went away (clients send nothing more)
                    self._client_gone(key.data)
            self._reap()
            if self.idle_exit and not self.children and time.monotonic() - self.last_active >= self.idle_exit:
                # the socket goes first: a client from now on finds none and starts its program cold
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.path)
                listener.close()
                return

    def _accept(self) -> None:
        conn, _ = self.listener.accept()
        try:
            request, fds = wire.recv_request(conn, 3)
        except (OSError, ValueError) as exc:
            log.warning("zygote: bad request: %s", exc)
            conn.close()
            return
        self.last_active = time.monotonic()
        argv = request.get("argv")
        program = wire.program_of(argv) if isinstance(argv, list) else None
        compiled = self.codes.get(program) if program is not None else None
        pid = os.fork()
        if pid == 0:
            self._child(conn, request, fds, program, compiled)  # never returns
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.selector.register(conn, selectors.EVENT_READ, pid)
        with contextlib.suppress(OSError):
            wire.send(conn, {"pid": pid})

    def _child(
        self,
        conn: socket.socket,
        request: dict,
        fds: list[int],
        program: tuple[str, str, list[str]] | None,
        compiled: Compiled | None,
    ) -> None:
        code = 1
        interrupted = False
        try:
            os.setsid()
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            signal.set_wakeup_fd(-1)
            _python_signals(self.inherited)
            for target, fd in enumerate(fds):
                os.dup2(fd, target)
            for fd in fds:
                if fd > 2:
                    os.close(fd)
            env = request["env"]
            _fresh_standard_streams(unbuffered=bool(env.get("PYTHONUNBUFFERED")))
            sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
            self.listener.close()
            for other in self.children.values():
                other.close()
            conn.close()
            os.chdir(request["cwd"])
            os.environ.clear()
            os.environ.update(env)
            if program is None:  # the executor and the stand-ins send none: they start such a program cold
                argv = f"{request.get('argv')!r:.200}"
                print(f"zygote: cannot run {argv} in a fork: only a script or -c", file=sys.stderr)
                code = 2  # as python's for a bad command line
            else:
                code = _run(program, compiled)
        except SystemExit as done:
            code = _exit_code(done)
        except BaseException as exc:
            interrupted = isinstance(exc, KeyboardInterrupt)
            tb = _program_traceback(exc.__traceback__)
            with contextlib.suppress(BaseException):  # the program's own hook, as python calls it
                sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # (what it prints is the exception's)
            code = 1
        finally:
            try:  # nothing may unwind into the server's loop: this is a fork
                code = _finalize(code)
                if interrupted:  # python ends an interrupted program by SIGINT itself (3.8+)
                    signal.signal(signal.SIGINT, signal.SIG_DFL)
                    os.kill(os.getpid(), signal.SIGINT)
            finally:
                os._exit(code & 0xFF)  # the status the system keeps, as for python's exit(code)

    def _client_gone(self, pid: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        conn = self.children.get(pid)
        if conn is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is None:
                continue
            self.last_active = time.monotonic()
            code = os.waitstatus_to_exitcode(status)
            with contextlib.suppress(OSError):
                wire.send(conn, {"exit": code})
            with contextlib.suppress(KeyError, ValueError):
                self.selector.unregister(conn)
            conn.close()


def share_default_https_context() -> None:
    """Make ``ssl._create_default_https_context`` — what ``http.client`` and ``urllib.request``
    call for every connection or opener made without a context of its own — hand out one context
    per CA setting instead of a new one each time, and make the zygote's now, before it forks.

    ``ssl.create_default_context()`` loads the whole CA bundle (17.6 ms of CPU here, OpenSSL 3.0),
    and ``urlopen`` builds an opener, so such a context, on its first call in every process — even
    for an ``http:`` URL. Favicon's hook forks a child per candidate URL (five a page), and each
    paid it: those forks took 22.3 CPU-s of a 130-page crawl, 1.6 since. The shared context is
    made by that very function, under the same CA setting — ``SSL_CERT_FILE``, ``SSL_CERT_DIR`` and
    the bundle file's modification time, read at each call; when any differs, a fresh context is
    made (and kept for that setting). Calls with arguments get a fresh context, and a hook that opts out of
    verification by replacing ``ssl._create_default_https_context`` (PEP 476) replaces this too.
    One difference remains: ``http.client`` sets ALPN ``http/1.1`` on the context it gets, so an
    HTTP/1.0 connection after an HTTP/1.1 one in the same process would offer it too.
    """
    import ssl

    make = ssl._create_default_https_context  # create_default_context, unless already replaced
    made: dict[tuple, ssl.SSLContext] = {}
    bundle = ssl.get_default_verify_paths().openssl_cafile

    def shared(*args, **kwargs) -> ssl.SSLContext:
        if args or kwargs:
            return make(*args, **kwargs)
        cafile = os.environ.get("SSL_CERT_FILE")
        try:
            mtime = os.stat(cafile or bundle).st_mtime_ns
        except OSError:
            mtime = None
        key = (cafile, os.environ.get("SSL_CERT_DIR"), mtime)
        context = made.get(key)
        if context is None:
            context = made[key] = make()
        return context

    ssl._create_default_https_context = shared
    shared()


def _fresh_standard_streams(unbuffered: bool = False) -> None:
    """New ``sys.stdin``/``stdout``/``stderr`` on fds 0–2, as a fresh interpreter has: the zygote's
    own wrappers carry its state (its stdout already wrote "ready"), and tools that reconfigure
    their streams (gallery-dl) fail on them. ``unbuffered`` (the hook's ``PYTHONUNBUFFERED``, which
    the embedded stack and the image set): stdout and stderr write through to the file as ``python
    -u`` makes them, so what a hook printed is not lost when it is killed (the zygote ignores the
    variable: it runs with ``-I``)."""
    for fd, name, mode in ((0, "stdin", "r"), (1, "stdout", "w"), (2, "stderr", "w")):
        old = getattr(sys, name)
        with contextlib.suppress(Exception):
            old.flush()
        if unbuffered and mode == "w":  # Python/pylifecycle.c create_stdio: no buffer, write_through
            raw = open(fd, "wb", buffering=0, closefd=False)  # noqa: SIM115 - the process's own stream
            stream = io.TextIOWrapper(raw, encoding=old.encoding, errors=old.errors, write_through=True)  # type: ignore[arg-type]
        else:
            buffering = 1 if name == "stderr" else -1
            stream = open(fd, mode, buffering=buffering, encoding=old.encoding, errors=old.errors, closefd=False)  # noqa: SIM115
        setattr(sys, name, stream)
        setattr(sys, f"__{name}__", stream)


def _program_traceback(tb: types.TracebackType | None) -> types.TracebackType | None:
    """``tb`` from the program's first frame on: without the frames of this module and runpy's that
    ran it, which a traceback of a cold ``python`` program does not show."""
    while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, "<frozen runpy>", _runpy_file()):
        tb = tb.tb_next
    return tb


def _runpy_file() -> str | None:
    """``runpy``'s source file, if it was imported (it is a frozen module on Python 3.11+)."""
    module = sys.modules.get("runpy")
    return getattr(module, "__file__", None) if module is not None else None


def _exit_code(done: SystemExit) -> int:
    if done.code is None:
        return 0
    if isinstance(done.code, int):
        return done.code
    print(done.code, file=sys.stderr)
    return 1


def _python_signals(inherited: dict[signal.Signals, object]) -> None:
    """The signal dispositions a ``python`` started by the zygote's parent would have: the
    zygote's own SIGCHLD and SIGTERM handlers back to what the zygote inherited (``inherited``), the
    rest as the zygote's interpreter set them at its start — SIGPIPE and SIGXFSZ ignored (so a write
    to a closed pipe raises ``BrokenPipeError``), SIGINT raising ``KeyboardInterrupt`` unless it
    came ignored (a shell's background job, an xdist worker), then ignored still (the ``signal``
    module docs)."""
    for sig, disposition in inherited.items():
        signal.signal(sig, disposition if disposition in (signal.SIG_DFL, signal.SIG_IGN) else signal.SIG_DFL)  # type: ignore[arg-type]


def _finalize(code: int) -> int:
    """What ``python`` does when its program has ended, before the process exits
    (``Py_FinalizeEx``): wait for the program's non-daemon threads (``threading._shutdown``, which
    runs ``threading``'s own exit callbacks first, as concurrent.futures' workers need), run its
    ``atexit`` handlers, free its ``__main__``'s objects (a file it wrote and never closed is
    flushed and closed then), flush the standard streams. The fork then leaves with ``os._exit``:
    the rest of the teardown is the zygote's objects. Returns the exit status: ``code``, or 120
    when a standard stream cannot be flushed (as ``python``; a closed one is left alone)."""
    with contextlib.suppress(BaseException):
        if "threading" in sys.modules:
            sys.modules["threading"]._shutdown()
    with contextlib.suppress(BaseException):
        import atexit

        atexit._run_exitfuncs()
    main = sys.modules.get("__main__")
    if main is not None and main.__dict__ is not globals():  # not the zygote's own (a relative script ran by runpy)
        with contextlib.suppress(BaseException):
            main.__dict__.clear()
    for stream in dict.fromkeys((sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__)):
        if stream is None or getattr(stream, "closed", True):
            continue
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - python's own exit status for it
            code = 120
    return code


def _run(program: tuple[str, str, list[str]], compiled: Compiled | None = None) -> int:
    """Run ``program`` (``program_of``'s reading of a request's argv: a script or ``-c`` code, and
    its arguments) as ``__main__``, as ``python`` would; ``compiled`` is the program compiled
    already (``CodeCache``: its compiler warnings are given again here, to this fork's stderr and
    filters, as ``python`` gives them when it compiles), or None (then a script runs through
    ``runpy.run_path``, whose ``__main__`` differs a little: ``__package__`` ``""``, no
    ``__loader__``). Returns 0; the program's own exit (``SystemExit``) and exceptions propagate to
    the fork's end (``ZygoteServer._child``)."""
    kind, text, args = program
    code = None
    if compiled is not None:
        code = compiled.code
        for caught in compiled.warned:
            warnings.warn_explicit(caught.message, caught.category, caught.filename, caught.lineno)
    # the __main__ module and sys.path[0] that ``python`` makes (Python/pythonrun.c and the sys.path
    # docs: the script's directory, or "" — the working directory — for -c), not the zygote's own
    import builtins

    module = types.ModuleType("__main__")
    module.__dict__.update(__package__=None, __spec__=None, __builtins__=builtins, __annotations__={})
    if kind == "-c":
        sys.argv = ["-c", *args]
        sys.path.insert(0, "")
        module.__loader__ = importlib.machinery.BuiltinImporter
        sys.modules["__main__"] = module
        exec(code or compile(text, "<string>", "exec", dont_inherit=True), module.__dict__)  # noqa: S102 - the hook's own code
        return 0
    script = text
    sys.argv = [script, *args]
    sys.path.insert(0, str(Path(script).resolve().parent))
    if code is None:
        import runpy

        runpy.run_path(script, run_name="__main__")
        return 0
    module.__dict__.update(
        __file__=script, __cached__=None, __loader__=importlib.machinery.SourceFileLoader("__main__", script)
    )
    sys.modules["__main__"] = module
    exec(code, module.__dict__)  # noqa: S102 - the hook's own code
    return 0


class Compiled(NamedTuple):
    """A program ``CodeCache`` compiled, with the warnings its compiling raised (``SyntaxWarning``
    for an invalid escape sequence, …), which each fork gives again as ``python`` would."""

    code: CodeType
    warned: tuple[warnings.WarningMessage, ...]


def _compile(source: str | bytes, filename: str) -> Compiled:
    """``compile`` a program as ``python`` does its ``__main__`` (``dont_inherit``: none of this
    module's ``__future__`` flags), catching every warning the compiler raises. Raises what
    ``compile`` raises."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        code = compile(source, filename, "exec", dont_inherit=True)
    return Compiled(code, tuple(caught))


class CodeCache:
    """Hook programs compiled once in the zygote, before its forks: a hook script (under its path
    and the file's device, inode, size, mtime and ctime, so an edited file is compiled again) or a ``-c`` program
    (under its text). Each fork used to compile its hook itself, 0.7–1.8 ms for abx-plugins'
    hooks, about 5 ms a snapshot for the no-browser selection. A program that does not compile is
    not kept: its fork compiles it and fails as ``python`` would. What compiling it warned of is
    kept with it, for each fork to give again (a cold ``python`` compiles its script every time).

    Args:
        size: how many programs are kept (the least recently used go first).
    """

    def __init__(self, size: int = 128) -> None:
        self.size = size
        self._codes: dict[object, Compiled] = {}

    def get(self, program: tuple[str, str, list[str]]) -> Compiled | None:
        """The compiled ``program`` (``program_of``'s reading: an absolute script path or ``-c``
        code), or None: anything else (a relative script path, which names a file only from the
        fork's cwd; a ``.pyc``), or a program that does not compile or cannot be read. Never
        raises: the fork then runs the program as it would have, and fails there if it must."""
        kind, text, _ = program
        try:
            if kind == "-c":
                key: object = text
                code = self._codes.get(key)
                if code is None:
                    code = _compile(text, "<string>")
            elif os.path.isabs(text):
                st = os.stat(text)
                key = (text, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                code = self._codes.get(key)
                if code is None:
                    with open(text, "rb") as source:  # io.open_code, as runpy reads it
                        data = source.read()
                    if data[:4] == importlib.util.MAGIC_NUMBER:  # a .pyc: runpy's own path
                        return None
                    code = _compile(data, text)
            else:
                return None
        except Exception:  # noqa: BLE001 - unreadable, no source, too deep, not text: the fork finds out
            return None
        self._codes.pop(key, None)
        self._codes[key] = code  # the most recent last
        while len(self._codes) > self.size:
            del self._codes[next(iter(self._codes))]
        return code


# ----------------------------------------------------------------------------- the client


def serve_main(argv: list[str]) -> None:
    """``python zygote_server.py --serve SOCKET MODULE,MODULE… [CONFIGS] [WARMUP] [IDLE_EXIT]``: run a
    fork server."""
    socket_path, preload = argv[0], argv[1] if len(argv) > 1 else ""
    configs = argv[2] if len(argv) > 2 else ""
    warmup = argv[3] if len(argv) > 3 else ""
    idle_exit = float(argv[4]) if len(argv) > 4 and argv[4] else 0.0
    ZygoteServer(
        socket_path,
        tuple(p for p in preload.split(",") if p),
        tuple(c for c in configs.split(os.pathsep) if c),
        warmup,
        idle_exit,
    ).serve()


if __name__ == "__main__":
    serve_main(sys.argv[2:])  # ["--serve", SOCKET, …]
