"""Warm Node hosts for the browser's hooks (part of ``WARM_HOOKS``).

Each browser hook used to be a Node process of its own that, before doing its work, started Node
(~20 ms of CPU here) and loaded puppeteer-core (~50 ms from the bundle, ~140 ms without:
``nodebundle``). A host (``node_host.js``) is a long-lived Node process that has loaded
puppeteer-core once and runs hooks one after another, each as it would run as a program of its
own (its argv, environment, cwd, ``require.main``, fd 1 and 2 on pipes of its own, ``process.exit``
ending it, SIGTERM reaching its handlers; ``node_host.js`` says how). ``NodeHosts`` keeps a pool of
them per executor: a hook takes an idle host (or starts one), and gives it back when it exits,
unless the host retires (a run that left a socket, a timer, an error or a lock naming its pid
behind: the next hook gets a fresh host). A listener (a background hook) holds its host until the
executor stops it, so a pool holds about as many hosts as Node hooks run at once, as many Node
processes as ran before.

Only the hooks in ``HOSTED`` run there: the browser's foreground hooks, its listeners and the tab
daemon, which end with ``process.exit`` after closing what they opened. The launch daemon, SingleFile
(a program of its own) and any other hook run as processes, as before. To the executor a
hosted hook looks like a process (``HostedProcess``: ``pid`` is its host's, ``wait()``, two stream
readers, ``signal_group``); a SIGKILL (a deadline, a cancel, ``MEMORY_LIMIT``) kills its host.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import time
from collections.abc import Mapping
from pathlib import Path

from boxcar.hook_executor.warm.common import PER_RUN_ENV, RETRY_AFTER, StartFailures, pipe_reader
from boxcar.shared.ids import new_id
from boxcar.shared.plugins import Hook
from boxcar.shared.procutil import detached

log = logging.getLogger(__name__)

HOST = Path(__file__).with_name("node_host.js")

#: Hooks (the part of the name after ``on_Snapshot__NN_``, without its flags) that run in a host:
#: the browser's foreground hooks, and its listeners (background hooks the executor stops with
#: SIGTERM: their handler flushes and exits), all of which end with ``process.exit`` after
#: closing what they opened, and the tab daemon. A hook that ends by running out of work (no
#: ``process.exit``) would wait in a host until its deadline: every path of these calls
#: ``process.exit`` (abx-plugins 1.13); check that before adding one. The tab daemon and staticfile
#: take lock files that name their pid (``acquireSessionLock``); a run that ends holding one retires
#: its host (``node_host.js``), so the lock's pid is dead for the next taker as after a process's
#: exit. Hosting them takes a Node start and puppeteer-core's load off the start of every browser
#: task: the listeners started 0.44 s sooner and navigate 0.67 s sooner (40 pages, default set).
#: Not hosted: the launch daemon (it starts and owns Chromium, once per crawl), SingleFile (a
#: program of its own) and the rest. A hosted tab daemon has the host's command line and cwd, so
#: abx-plugins' ``killZombieChrome`` (``on_CrawlSetup__89_chrome_kill_zombies``, which Boxcar does
#: not run) would not see it.
HOSTED = frozenset(
    {
        "chrome_navigate",
        "title",
        "screenshot",
        "pdf",
        "dom",
        "seo",
        "chrome_mhtml",
        "accessibility",
        "parse_dom_outlinks",
        # listeners
        "consolelog",
        "dns",
        "headers",
        "redirects",
        "responses",
        "sslcerts",
        "staticfile",
        # the tab daemon
        "chrome_tab",
    }
)

#: Signals a hosted hook gets as a process would (the rest kill its host).
FORWARDED = frozenset({signal.SIGTERM, signal.SIGINT, signal.SIGHUP})

#: V8 flags of a host. A long-lived Node grows its young generation to the largest semi-space
#: (16 MiB) and keeps it; hooks allocate in short bursts. With 1 MiB a host ran the default
#: selection's hooks in 23–25 MiB of heap instead of 37–50, the pool's peak memory fell by about
#: 550 MiB (20 corpus pages, 3 tabs, ~20 hosts), and Node's CPU did not rise.
HOST_FLAGS = ("--max-semi-space-size=1",)

#: What a host loads before its first hook (each resolved through the hooks' ``NODE_PATH``).
PRELOAD = ("puppeteer-core",)

#: Seconds a host may take to start and preload.
START_TIMEOUT = 30.0

#: Idle hosts a pool keeps per key once they have been idle ``SPARE_IDLE`` seconds (``reap``
#: stops the rest): a crawl's hosts are taken again at once, and after it only a few stay.
MAX_IDLE = 4
SPARE_IDLE = 20.0

#: Hooks one host runs before it is replaced (what the modules kept between hooks may gather).
MAX_RUNS = 200


def hostable(hook: Hook) -> bool:
    """True for the snapshot hooks that run in a host (``HOSTED``)."""
    return hook.language == "node" and hook.event == "Snapshot" and hook.desc in HOSTED


class _Host:
    """One running ``node_host.js``."""

    def __init__(
        self, proc: asyncio.subprocess.Process, control: asyncio.StreamReader | None, key: tuple[str, str]
    ) -> None:
        self.proc = proc
        self.control = control
        self.key = key
        self.idle_since = time.monotonic()
        self.runs = 0

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.returncode is None

    async def message(self) -> dict:
        """The host's next control message. Raises ConnectionError when it has exited."""
        if self.control is None:
            raise ConnectionError("the Node host is not connected")
        line = await self.control.readline()
        if not line:
            raise ConnectionError("the Node host exited")
        return json.loads(line)

    def stop(self) -> None:
        """SIGKILL its group: an idle host has nothing to flush, and a late callback of an earlier
        run may have added a SIGTERM listener (no event loop needed: the executor may stop after
        its loop)."""
        if not self.alive():  # reaped: its pid may be another process's by now
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)


class NodeHosts:
    """The warm Node hosts of one executor, started on first use.

    Args:
        root: a private directory (the runs' FIFOs live there for a moment).
        idle_exit: seconds without a hook after which ``reap`` stops a host (0: never).
        retry_after: seconds after a host failed to start before one is tried again (meanwhile
            ``spawn`` raises OSError at once: the hooks start cold).
    """

    def __init__(self, root: Path, idle_exit: float = 0.0, retry_after: float = RETRY_AFTER) -> None:
        self.root = root
        self.idle_exit = idle_exit
        self._idle: dict[tuple[str, str], list[_Host]] = {}
        self._busy: set[_Host] = set()
        self._failed = StartFailures(retry_after)
        self._all: list[_Host] = []
        self.started = 0  # hosts started (for benchmarks and tests)
        self.configs_handed = 0  # abx-plugins configs a host handed to a run (node_host.js; tests)

    async def spawn(self, argv: list[str], cwd: Path, env: Mapping[str, str]) -> HostedProcess:
        """Run ``argv`` (``[node, hook.js, args…]``) in a host, shaped like a subprocess.

        Raises:
            OSError: no host could be started or reached; nothing ran: start the hook cold.
        """
        key = (argv[0], env.get("NODE_PATH", ""))
        if self._failed.blocked(key):
            raise OSError(f"the Node host failed to start less than {self._failed.retry_after:g} s ago")
        host = await self._checkout(key, env)
        fifo_dir = self.root / "fifos"
        fifo_dir.mkdir(parents=True, exist_ok=True)
        run_id = new_id()
        paths = [fifo_dir / f"{run_id}.out", fifo_dir / f"{run_id}.err"]
        loop = asyncio.get_running_loop()
        readers: list[asyncio.StreamReader] = []
        transports: list[asyncio.BaseTransport] = []
        try:
            for path in paths:
                os.mkfifo(path, 0o600)
                reader, transport = await pipe_reader(loop, os.open(path, os.O_RDONLY | os.O_NONBLOCK))
                readers.append(reader)
                transports.append(transport)
            request = {
                "argv": list(argv),
                "cwd": str(cwd),
                "env": dict(env),
                "per_run_env": list(PER_RUN_ENV),
                "stdout": str(paths[0]),
                "stderr": str(paths[1]),
            }
            assert host.proc.stdin is not None
            host.proc.stdin.write(json.dumps(request).encode() + b"\n")
            await host.proc.stdin.drain()
            message = await asyncio.wait_for(host.message(), START_TIMEOUT)
            if "started" not in message:
                raise ConnectionError(f"the Node host refused the hook: {message.get('error')}")
        except BaseException as exc:  # a cancel too: no host is left running a hook nobody reads
            self._busy.discard(host)
            host.stop()
            for transport in transports:  # a FIFO no writer opened never reaches EOF: close it here
                transport.close()
            if isinstance(exc, (OSError, ConnectionError, TimeoutError, ValueError)):
                raise OSError(f"the Node host could not run the hook: {exc}") from exc
            raise
        finally:
            for path in paths:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()
        process = HostedProcess(self, host, int(message["started"]))
        process.stdout, process.stderr = readers
        process._watch = asyncio.create_task(process._await_exit())
        return process

    async def _checkout(self, key: tuple[str, str], env: Mapping[str, str]) -> _Host:
        idle = self._idle.get(key, [])
        while idle:
            host = idle.pop()
            if host.alive():
                self._busy.add(host)
                return host
        host = await self._start(key, env)
        self._busy.add(host)
        return host

    async def _start(self, key: tuple[str, str], env: Mapping[str, str]) -> _Host:
        """A new host, started with ``env`` (the hook's that asked for it) but for its per-run keys
        (``PER_RUN_ENV``): a host outlives that hook and runs others', each with its own whole
        environment, so its process must not name the first one's snapshot, crawl or trace
        (``/proc/<pid>/environ`` would, for its whole life)."""
        env = {k: v for k, v in env.items() if k not in PER_RUN_ENV}
        read_fd, write_fd = os.pipe()
        argv, detach = detached([key[0], *HOST_FLAGS, str(HOST), f"--control={write_fd}", *PRELOAD])
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                cwd=self.root,
                env=env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=None,
                pass_fds=(write_fd,),
                **detach,
            )
        except OSError:
            os.close(read_fd)
            self._failed.record(key)
            raise
        finally:
            os.close(write_fd)
        host = _Host(proc, None, key)
        self._all = [h for h in self._all if h.alive()] + [host]  # aclose stops it even if cancelled below
        try:
            host.control, _transport = await pipe_reader(asyncio.get_running_loop(), read_fd)
            message = await asyncio.wait_for(host.message(), START_TIMEOUT)
            if "ready" not in message:
                raise ConnectionError(str(message))
        except BaseException as exc:
            host.stop()
            if not isinstance(exc, (ConnectionError, TimeoutError, ValueError)):
                raise
            self._failed.record(key)
            retry = self._failed.retry_after
            log.warning("the warm Node host did not start (%s): browser hooks start cold for %g s", exc, retry)
            raise OSError(str(exc)) from exc
        self.started += 1
        return host

    def _checkin(self, host: _Host, retire: bool) -> None:
        self._busy.discard(host)
        host.runs += 1
        if retire or not host.alive() or host.runs >= MAX_RUNS:
            host.stop()
            return
        idle = self._idle.setdefault(host.key, [])  # no cap here: as many as ran at once, until reap
        host.idle_since = time.monotonic()
        idle.append(host)

    def reap(self) -> None:
        """Stop hosts idle for longer than ``idle_exit``, and those beyond ``MAX_IDLE`` per key idle
        for longer than ``SPARE_IDLE``; forget those that exited."""
        now = time.monotonic()
        for key, idle in self._idle.items():
            keep = []
            for host in sorted(idle, key=lambda h: h.idle_since, reverse=True):  # the most recent first
                if not host.alive():
                    continue
                idle_for = now - host.idle_since
                if (self.idle_exit and idle_for > self.idle_exit) or (len(keep) >= MAX_IDLE and idle_for > SPARE_IDLE):
                    host.stop()
                    continue
                keep.append(host)
            self._idle[key] = keep[::-1]  # checkout pops the most recent

    def stop(self) -> None:
        """Stop every host (busy ones too: their hooks are killed)."""
        for idle in self._idle.values():
            for host in idle:
                host.stop()
        self._idle.clear()
        for host in list(self._busy):
            host.stop()
        self._busy.clear()

    async def aclose(self) -> None:
        """``stop``, then wait until every host has exited."""
        self.stop()
        for host in self._all:
            await host.proc.wait()
        self._all.clear()


class HostedProcess:
    """A hook running in a host, shaped like ``asyncio.subprocess.Process`` (``pid`` is the
    host's; ``returncode`` negative for a signal, as asyncio's). ``signal_group`` signals the hook
    while it runs and does nothing once it has exited (the host lives on for the next hook)."""

    def __init__(self, pool: NodeHosts, host: _Host, run: int) -> None:
        self.pool = pool
        self.host = host
        self.run = run
        self.pid = host.pid
        self.returncode: int | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._exited = asyncio.Event()
        self._watch: asyncio.Task | None = None

    async def _await_exit(self) -> None:
        retire = True
        try:
            message = await self.host.message()
            self.returncode = -int(message["signal"]) if message.get("signal") else int(message["exit"])
            retire = bool(message.get("retire"))
            self.pool.configs_handed += int(message.get("handed") or 0)
            if retire:
                log.debug("Node host %d retires: the hook left behind %s", self.pid, message.get("left"))
        except (ConnectionError, OSError, ValueError, KeyError):
            self.returncode = -signal.SIGKILL  # the host died (killed at a deadline, or crashed)
        finally:
            self.pool._checkin(self.host, retire)
            self._exited.set()

    def signal_group(self, sig: int) -> None:
        """Signal the hook while it runs: SIGTERM, SIGINT and SIGHUP reach the handlers it added
        (a listener flushes what it saw and exits; one with none dies of it, with its host); any
        other signal (SIGKILL) kills its host. A foreground hook's handler at its deadline may keep
        an export-page lease naming the host's pid, which outlives the run: the tab daemon's sweep
        closes such pages when the lease expires or the tab closes, instead of at once."""
        if self.returncode is not None:
            return
        stdin = self.host.proc.stdin
        if sig in FORWARDED and stdin is not None and not stdin.is_closing() and self.host.alive():
            request = {"signal": signal.Signals(sig).name, "run": self.run}
            stdin.write(json.dumps(request).encode() + b"\n")  # a line: the pipe takes it whole
            return
        self.host.stop()

    async def wait(self) -> int:
        await self._exited.wait()
        assert self.returncode is not None
        return self.returncode
