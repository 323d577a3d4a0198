"""A real S3 API server for tests: moto's server mode (``moto_server``), from PyPI.

MinIO's and Garage's servers cannot be had from the registries here; moto's can. It is installed
once into its own virtualenv (``~/.cache/boxcar/moto-server``: moto's botocore wants a
python-dateutil older than Boxcar's), never into Boxcar's. What it does not prove about MinIO or
Garage: their consistency under concurrent writers, their multipart limits and error bodies, and
their performance; moto keeps objects in memory and answers every signed request.
"""

from __future__ import annotations

import fcntl
import os
import selectors
import socket
import socketserver
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from boxcar.cli.stack import free_port, wait_for_port

MOTO_SPEC = "moto[server]==5.2.5"
VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "boxcar" / "moto-server"
#: what the server accepts for any request (moto checks signatures' form, not the keys)
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "boxcar-test", "AWS_SECRET_ACCESS_KEY": "boxcar-test-secret"}


def moto_server_binary() -> str:
    """``moto_server`` from its own venv, installed there on first use (about 30 s)."""
    binary = VENV / "bin" / "moto_server"
    VENV.parent.mkdir(parents=True, exist_ok=True)
    with open(VENV.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two test workers at once: one installs, the other waits
        if not binary.exists():
            subprocess.run([sys.executable, "-m", "venv", "--clear", str(VENV)], check=True)
            subprocess.run(
                [str(VENV / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", MOTO_SPEC],
                check=True,
                timeout=600,
            )
    return str(binary)


class S3Server:
    """One ``moto_server`` on a free loopback port; ``endpoint`` is its URL. Stoppable and
    startable again on the same port; its objects do not survive a stop. With ``gated``, clients
    reach it through a ``Gate`` (``endpoint`` is the gate's), which a test closes for an outage
    that keeps the objects."""

    def __init__(self, gated: bool = False) -> None:
        self.server_port = free_port()
        self.gate = Gate(free_port(), self.server_port) if gated else None
        self.port = self.gate.port if self.gate else self.server_port
        self.proc: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [moto_server_binary(), "-H", "127.0.0.1", "-p", str(self.server_port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for_port(self.server_port, 60, self.proc)
        if self.gate:
            self.gate.open()

    def create_bucket(self, name: str) -> None:
        """``PUT /<name>`` (path style; moto takes it unsigned)."""
        urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}/{name}", method="PUT"), timeout=10).close()

    def stop(self) -> None:
        if self.gate:
            self.gate.close()
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)


class Gate:
    """A TCP forwarder on ``port`` to ``127.0.0.1:target``: ``close()`` refuses new connections
    and cuts the open ones (to its clients the server is down: connection refused), ``open()``
    lets them through again on the same port. The fault tests' way to take a store away without
    losing what it holds."""

    def __init__(self, port: int, target: int) -> None:
        self.port = port
        self.target = target
        self.server: socketserver.ThreadingTCPServer | None = None
        self.open_sockets: set[socket.socket] = set()
        self.lock = threading.Lock()

    def open(self) -> None:
        gate = self

        class Forward(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                try:
                    upstream = socket.create_connection(("127.0.0.1", gate.target), timeout=10)
                except OSError:
                    return
                with gate.lock:
                    gate.open_sockets.update((self.request, upstream))
                try:
                    gate.pump(self.request, upstream)
                finally:
                    with gate.lock:
                        gate.open_sockets.difference_update((self.request, upstream))
                    upstream.close()

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", self.port), Forward)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @staticmethod
    def pump(a: socket.socket, b: socket.socket) -> None:
        """Copy bytes both ways until either side closes."""
        with selectors.DefaultSelector() as sel:
            sel.register(a, selectors.EVENT_READ, b)
            sel.register(b, selectors.EVENT_READ, a)
            while True:
                for key, _ in sel.select():
                    try:
                        data = key.fileobj.recv(65536)
                        if not data:
                            return
                        key.data.sendall(data)
                    except OSError:
                        return

    def close(self) -> None:
        if self.server is None:
            return
        self.server.shutdown()
        self.server.server_close()
        self.server = None
        with self.lock:
            for sock in self.open_sockets:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self.open_sockets.clear()
