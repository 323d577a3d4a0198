"""The egress proxy process: what it imports, what it refuses, what it forwards."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from boxcar.hook_executor.egress import EgressProxy
from boxcar.shared.egress import EgressPolicy
from boxcar.shared.procutil import tree_pids
from tests.helpers import tls_files, wait_until


class Answering(BaseHTTPRequestHandler):
    """Keep-alive, headers and body in two sends (``http.server``'s way): ``answer`` for each GET."""

    protocol_version = "HTTP/1.1"

    def answer(self) -> tuple[int, bytes]:
        raise NotImplementedError

    def do_GET(self) -> None:
        status, body = self.answer()
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


class SplitWrites(Answering):
    """The path echoed; 404 for a path with ``missing`` in it."""

    def answer(self) -> tuple[int, bytes]:
        return 404 if "missing" in self.path else 200, self.path.encode()


@pytest.fixture
def origin():
    server = ThreadingHTTPServer(("127.0.0.1", 0), SplitWrites)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def proxied_get(proxy: EgressProxy, port: int, paths: list[str]) -> list[tuple[int, bytes]]:
    """GET each path of ``127.0.0.1:port`` through ``proxy`` as a client reusing its connection
    would (``http.client`` opens a new one after a ``Connection: close`` response)."""
    conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
    out = []
    try:
        for path in paths:
            conn.request("GET", f"http://127.0.0.1:{port}{path}")
            response = conn.getresponse()
            out.append((response.status, response.read()))
    finally:
        conn.close()
    return out


def test_the_proxy_process_leaves_proxy_py_s_test_helpers_and_plugins_unimported(tmp_path):
    """The proxy skips the ``proxy`` package's ``__init__`` (test helpers, every bundled plugin,
    httpx: ~8 MiB per proxy process) but still has every flag its start-up reads."""
    proxy = EgressProxy(EgressPolicy(), tmp_path / "egress")
    proxy.start()
    try:
        argv = list(proxy.proc.args)
    finally:
        proxy.stop()
    # the very command it ran, asked only for its version (proxy.py's start-up, then exit)
    done = subprocess.run(
        [argv[0], "-X", "importtime", *argv[1:], "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr[-2000:]
    modules = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "proxy.proxy" in modules and "proxy.http.proxy.server" in modules
    assert not modules & {"httpx", "proxy.testing", "proxy.plugin.cloudflare_dns"}, sorted(modules)


def test_the_proxy_forwards_many_responses_and_refuses_private_addresses(tmp_path, origin):
    allowed = EgressProxy(EgressPolicy(allow_private=True), tmp_path / "allowed")
    refusing = EgressProxy(EgressPolicy(allow_private=False), tmp_path / "refusing")
    allowed.start()
    refusing.start()
    try:
        paths = [f"/missing-{i}.png" for i in range(50)] + ["/page/"]
        assert proxied_get(allowed, origin, paths) == [(404, p.encode()) for p in paths[:-1]] + [(200, b"/page/")]
        [(status, body)] = proxied_get(refusing, origin, ["/page/"])
        assert status == 403
        assert json.loads(body)["error"] == "refused by Boxcar's egress policy"
    finally:
        allowed.stop()
        refusing.stop()


def _wakeups(pid: int) -> int:
    """Voluntary context switches so far of every thread of ``pid`` and of its children's (the
    proxy's forked acceptor): how often they went to sleep, so how often they woke."""
    total = 0
    pids = tree_pids(pid)
    assert len(pids) > 1, "the proxy's acceptor (its connections' threads) was not found"
    for each in pids:
        for status in Path("/proc").glob(f"{each}/task/*/status"):
            with contextlib.suppress(FileNotFoundError):  # a thread that ended meanwhile
                for line in status.read_text().splitlines():
                    if line.startswith("voluntary_ctxt_switches:"):
                        total += int(line.split()[1])
    return total


def test_idle_keep_alive_connections_leave_the_proxy_asleep(tmp_path, origin):
    """Each connection's thread sleeps in ``poll`` while its client is idle (``IDLE_WAKE``, not
    proxy.py's 25 ms polling: ~6 ms of CPU a second per idle connection). Eight keep-alive
    connections, each used once and left open, over one second: at 25 ms their threads would wake
    some 320 times; a few wake-ups are allowed for the acceptor and the idle check."""
    proxy = EgressProxy(EgressPolicy(allow_private=True), tmp_path / "egress")
    proxy.start()
    clients = [http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30) for _ in range(8)]
    try:
        for conn in clients:
            conn.request("GET", f"http://127.0.0.1:{origin}/page/")
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, b"/page/")
        before = _wakeups(proxy.proc.pid)
        threading.Event().wait(1.0)  # the window measured, nothing to wait for
        woke = _wakeups(proxy.proc.pid) - before
        assert woke < 40, f"the proxy's threads woke {woke} times in 1 s with every connection idle"
        # and an idle connection still answers at once when used again
        clients[0].request("GET", f"http://127.0.0.1:{origin}/again/")
        response = clients[0].getresponse()
        assert (response.status, response.read()) == (200, b"/again/")
    finally:
        for conn in clients:
            conn.close()
        proxy.stop()


def test_a_handler_pass_runs_to_its_end_without_an_event_loop_or_says_it_cannot():
    """``LeanHttpProtocolHandler`` runs proxy.py's passes with ``run_pass``: a coroutine that
    returns at once gives its value; one that suspends is refused loudly, not left half run."""
    from boxcar.hook_executor.egress.plugin import run_pass

    class Suspend:
        def __await__(self):
            yield

    async def returns() -> int:
        async def inner() -> int:
            return 7

        return await inner()

    async def suspends() -> None:
        await Suspend()

    assert run_pass(returns()) == 7
    with pytest.raises(RuntimeError, match="suspended"):
        run_pass(suspends())


class Large(Answering):
    """3 MB of a pattern per GET, the path first: more than socket buffers hold, so the proxy's
    loop must wait to write."""

    body = bytes(range(256)) * (3 * 4096)

    def answer(self) -> tuple[int, bytes]:
        return 200, self.path.encode() + self.body


def test_large_responses_come_through_whole_in_plain_http_and_in_a_connect_tunnel(tmp_path):
    """Through the proxy's loop (``LeanHttpProtocolHandler``): large bodies on a keep-alive plain
    HTTP connection, and HTTPS through a ``CONNECT`` tunnel to a TLS origin (the certificate checked
    end to end, as a browser's would be), each byte as the origin sent it."""
    ca, cert, key, _other = tls_files(tmp_path)
    plain = ThreadingHTTPServer(("127.0.0.1", 0), Large)
    secure = ThreadingHTTPServer(("127.0.0.1", 0), Large)
    server_tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_tls.load_cert_chain(cert, key)
    secure.socket = server_tls.wrap_socket(secure.socket, server_side=True)
    for server in (plain, secure):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    proxy = EgressProxy(EgressPolicy(allow_private=True), tmp_path / "egress")
    proxy.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30)
        for i in range(3):
            conn.request("GET", f"http://127.0.0.1:{plain.server_address[1]}/plain-{i}")
            response = conn.getresponse()
            assert (response.status, response.read()) == (200, f"/plain-{i}".encode() + Large.body)
        conn.close()
        client_tls = ssl.create_default_context(cafile=str(ca))
        tunnel = http.client.HTTPSConnection("127.0.0.1", proxy.port, timeout=30, context=client_tls)
        tunnel.set_tunnel("127.0.0.1", secure.server_address[1])
        for i in range(2):
            tunnel.request("GET", f"/secure-{i}")
            response = tunnel.getresponse()
            assert (response.status, response.read()) == (200, f"/secure-{i}".encode() + Large.body)
        tunnel.close()
    finally:
        proxy.stop()
        for server in (plain, secure):
            server.shutdown()
            server.server_close()


class Named(Answering):
    """Answers ``<its server's name> <path>``."""

    def answer(self) -> tuple[int, bytes]:
        return 200, f"{self.server.name} {self.path}".encode()


@contextlib.contextmanager
def named_origins(handler: type[Named] = Named):
    """Two origins named ``first`` and ``second`` answering with ``handler``; yields their ports."""
    servers = []
    try:
        for name in ("first", "second"):
            server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
            server.name = name
            threading.Thread(target=server.serve_forever, daemon=True).start()
            servers.append(server)
        yield [s.server_address[1] for s in servers]
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


@pytest.fixture
def two_origins():
    with named_origins() as ports:
        yield ports


def test_a_request_for_another_host_is_never_answered_by_the_first_host(tmp_path, two_origins):
    """wget and Chromium reuse one proxy connection across hosts; proxy.py alone would send the
    second host's request to the first host's upstream (a cross-host redirect captured from the
    wrong server). Each request goes to its own host's upstream, keep-alive kept: the same host's
    next request on the same upstream, another host's on a new one, checked like the first."""
    first, second = two_origins
    policy = EgressPolicy(allow_private=True, services=[("127.0.0.1", second)])  # the second: refused
    proxy = EgressProxy(EgressPolicy(allow_private=True), tmp_path / "egress")
    refusing = EgressProxy(policy, tmp_path / "refusing")
    proxy.start()
    refusing.start()
    try:

        def exchange(port: int, targets: list[tuple[int, str]]) -> list[bytes]:
            answers = []
            with socket.create_connection(("127.0.0.1", port), timeout=30) as raw:
                for target_port, path in targets:
                    target = f"127.0.0.1:{target_port}"
                    raw.sendall(f"GET http://{target}{path} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
                    answer = b""
                    while not answer.endswith(path.encode()) and b"refused" not in answer:
                        chunk = raw.recv(65536)
                        if not chunk:
                            break
                        answer += chunk
                    answers.append(answer)
            return answers

        answers = exchange(proxy.port, [(first, "/a"), (first, "/b"), (second, "/c"), (first, "/d")])
        assert [a.rpartition(b"\r\n\r\n")[2] for a in answers] == [b"first /a", b"first /b", b"second /c", b"first /d"]
        assert all(a.startswith(b"HTTP/1.1 200") for a in answers)
        # another host on the same connection is checked by the policy like a first request
        refused = exchange(refusing.port, [(first, "/a"), (second, "/c")])
        assert (
            refused[0].endswith(b"first /a") and refused[1].startswith(b"HTTP/1.1 403") and b"second" not in refused[1]
        )
    finally:
        proxy.stop()
        refusing.stop()


def _all_stopped(pid: int) -> bool:
    """Every thread of ``pid`` and its children is stopped (SIGSTOP lands asynchronously: a
    thread may run on for a moment after ``kill`` returns)."""
    states = []
    for each in tree_pids(pid):
        for stat in Path("/proc").glob(f"{each}/task/*/stat"):
            with contextlib.suppress(FileNotFoundError):
                states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
    return bool(states) and all(state in ("T", "t") for state in states)


def test_a_request_for_another_host_in_the_pass_that_finds_the_first_host_closing(tmp_path):
    """The client's request for a second host and the first host closing its keep-alive connection
    land in one poll (the proxy stopped meanwhile, so they arrive together for sure): the proxy
    swaps upstreams while reading the client, and the new upstream, which reuses the closed
    one's descriptor number, must not be read in that pass from the poll's stale ready list (it
    has nothing to say yet: proxy.py's read failed and the client's connection was closed,
    unanswered). The second host's answer comes back."""
    release, closed = threading.Event(), threading.Event()

    class ClosesWhenReleased(Named):
        def do_GET(self) -> None:
            super().do_GET()
            if self.server.name == "first":
                self.wfile.flush()
                release.wait(30)
                self.connection.shutdown(socket.SHUT_WR)  # the FIN: its upstream is readable
                closed.set()
                self.close_connection = True

    def read_until(raw: socket.socket, end: bytes) -> bytes:
        answer = b""
        while not answer.endswith(end):
            chunk = raw.recv(65536)
            assert chunk, f"the proxy closed the connection after {answer!r}"
            answer += chunk
        return answer

    with contextlib.ExitStack() as cleanup:
        first, second = (f"127.0.0.1:{p}" for p in cleanup.enter_context(named_origins(ClosesWhenReleased)))
        cleanup.callback(release.set)  # before the origins shut down
        proxy = EgressProxy(EgressPolicy(allow_private=True), tmp_path / "egress")
        proxy.start()
        cleanup.callback(proxy.stop)
        raw = cleanup.enter_context(socket.create_connection(("127.0.0.1", proxy.port), timeout=30))
        raw.sendall(f"GET http://{first}/a HTTP/1.1\r\nHost: {first}\r\n\r\n".encode())
        read_until(raw, b"first /a")
        os.killpg(proxy.proc.pid, signal.SIGSTOP)
        with contextlib.ExitStack() as resume:
            resume.callback(os.killpg, proxy.proc.pid, signal.SIGCONT)
            wait_until(lambda: _all_stopped(proxy.proc.pid), 10, "the proxy's threads to stop")
            release.set()
            assert closed.wait(30)
            raw.sendall(f"GET http://{second}/b HTTP/1.1\r\nHost: {second}\r\n\r\n".encode())
        assert read_until(raw, b"second /b").startswith(b"HTTP/1.1 200")
