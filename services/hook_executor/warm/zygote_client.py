"""The executor's side of a warm interpreter: ``Zygote`` starts and talks to a fork server
(``zygote_server``, run by path in the hooks' Python) and ``WarmProcess`` is a process it forked,
shaped like ``asyncio.subprocess.Process`` (``pid``, ``returncode``, ``stdout``/``stderr``
readers, ``wait()``), so ``HookProcess`` runs and kills a hook the same way warm or cold. The
protocol is ``zygote_wire``'s; why a zygote at all is ``zygote_server``'s docstring."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from pathlib import Path

from boxcar.hook_executor.warm import zygote_server
from boxcar.hook_executor.warm import zygote_wire as wire
from boxcar.hook_executor.warm.common import pipe_reader
from boxcar.hook_executor.warm.zygote_server import HOOK_PRELOAD
from boxcar.shared.secrets import public_environ

log = logging.getLogger(__name__)


async def _recv_async(sock: socket.socket) -> dict:
    """``_recv`` on the event loop (``sock`` becomes non-blocking): waiting for a hook's exit
    must not hold one of the default executor's few threads for the hook's whole life — with
    a few hooks running at once that pool runs dry and every ``to_thread`` of the executor
    (starting the next hook included) waits for some hook to end."""
    loop = asyncio.get_running_loop()
    sock.setblocking(False)

    async def exactly(n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = await loop.sock_recv(sock, n - len(buf))
            if not chunk:
                raise ConnectionError("zygote connection closed")
            buf += chunk
        return buf

    return wire.decode(await exactly(wire.length_of(await exactly(wire.LENGTH))))


class Zygote:
    """A running fork server the executor owns (a child process that dies with it).

    Args:
        python: the interpreter it runs with (the hooks' ``sys.executable``, or another venv's).
        socket_path: where it listens.
        preload: modules to import once.
        configs: plugins' ``config.json`` files whose config models it builds once.
        warmup: code it runs once after the imports (on local input only).
        idle_exit: seconds with no hook running after which it exits (0: never; ``start`` again).
    """

    def __init__(
        self,
        python: str,
        socket_path: Path,
        preload: tuple[str, ...] = HOOK_PRELOAD,
        configs: tuple[str, ...] = (),
        warmup: str = "",
        idle_exit: float = 0.0,
    ) -> None:
        self.python = python
        self.socket_path = socket_path
        self.preload = preload
        self.configs = configs
        self.warmup = warmup
        self.idle_exit = idle_exit
        self.proc = None

    def running(self) -> bool:
        """True while it serves: its process lives and its socket is there (an idle one removes
        the socket before it exits)."""
        return self.proc is not None and self.proc.poll() is None and self.socket_path.exists()

    def start(self, env: dict[str, str] | None = None) -> None:
        """Start it and wait until it has preloaded (raises RuntimeError if it does not come up).

        ``env`` defaults to the executor's own without Boxcar's secrets (``public_environ``): a fork
        clears and replaces ``os.environ``, but its ``/proc/self/environ`` is still the zygote's, which
        every hook it runs could read. (Started from a thread, as the executor does, the zygote gets
        ``PR_SET_PDEATHSIG`` from that thread: it dies when the thread ends, i.e. with the event
        loop's default executor.)"""
        import subprocess

        from boxcar.shared.procutil import die_with_parent

        self._reap_previous()
        self.socket_path.parent.mkdir(parents=True, exist_ok=True)
        # the server's file by path: it (and zygote_wire.py beside it) needs only the standard
        # library, so any venv's Python runs it
        argv = [
            self.python,
            "-I",
            zygote_server.__file__,
            "--serve",
            str(self.socket_path),
            ",".join(self.preload),
            os.pathsep.join(self.configs),
            self.warmup,
            str(self.idle_exit),
        ]
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env if env is not None else public_environ(),
            preexec_fn=die_with_parent(signal.SIGKILL),
        )
        line = self.proc.stdout.readline()
        if line.strip() != b"ready":
            self.stop()
            raise RuntimeError(f"the warm interpreter {self.python} did not start")

    def _reap_previous(self) -> None:
        """Wait for the previous server, if any, to end: it removed its socket and is exiting idle."""
        import subprocess

        if self.proc is None:
            return
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()
        self.proc = None

    def ensure(self) -> None:
        if not self.running():
            self.start()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            with contextlib.suppress(Exception):
                self.proc.wait(5)
        with contextlib.suppress(FileNotFoundError):
            self.socket_path.unlink()

    async def spawn(self, argv: list[str], cwd: Path, env: dict[str, str]) -> WarmProcess:
        """A hook process forked by the zygote, its stdout/stderr readable like a subprocess'.

        Raises:
            OSError: the zygote cannot be reached, or it closed the connection before the fork
                (it was exiting idle), or ``argv`` or ``env`` is not one a fork honours
                (``cold_reason``): nothing was started, start the hook cold.
        """
        reason = wire.cold_reason(argv, env)
        if reason is not None:
            raise ConnectionRefusedError(f"a cold interpreter is needed: {reason}")
        loop = asyncio.get_running_loop()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        null = os.open(os.devnull, os.O_RDONLY)
        request = {"argv": argv, "cwd": str(cwd), "env": env}
        try:
            conn, pid = await asyncio.to_thread(self._request, request, [null, out_w, err_w])
        finally:
            for fd in (null, out_w, err_w):
                os.close(fd)
        process = WarmProcess(pid, conn)
        process.stdout, _ = await pipe_reader(loop, out_r)
        process.stderr, _ = await pipe_reader(loop, err_r)
        process._watch = asyncio.create_task(process._await_exit())
        return process

    def _request(self, request: dict, fds: list[int]) -> tuple[socket.socket, int]:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            wire.unix_call(conn, "connect", str(self.socket_path))
            wire.send_request(conn, request, fds)
            return conn, int(wire.recv(conn)["pid"])
        except (ValueError, KeyError, TypeError) as exc:  # not the zygote's answer: nothing started here
            conn.close()
            raise ConnectionError(f"the zygote at {self.socket_path} answered {exc}") from exc
        except BaseException:
            conn.close()
            raise


class WarmProcess:
    """A process the zygote forked, shaped like ``asyncio.subprocess.Process``."""

    def __init__(self, pid: int, conn: socket.socket) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._conn = conn
        self._exited = asyncio.Event()
        self._watch: asyncio.Task | None = None

    async def _await_exit(self) -> None:
        try:
            message = await _recv_async(self._conn)
            self.returncode = int(message["exit"])
        except (ConnectionError, OSError, ValueError, KeyError):
            self.returncode = -signal.SIGKILL  # the zygote died: so did the child (PDEATHSIG)
        finally:
            self._conn.close()
            self._exited.set()

    async def wait(self) -> int:
        await self._exited.wait()
        return self.returncode
