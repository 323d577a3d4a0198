"""The egress proxy's cost per request, against an origin that writes a response's headers and
body in two sends with Nagle's algorithm on (Python's ``http.server``, like the corpus server and
many small sites). Figures printed, nothing asserted (compare within one run).

Each client makes ``--requests`` small requests one after another on one keep-alive connection
(what wget does for a page's requisites), directly and through ``EgressProxy``. A receiver that
delays its ACK stalls every such response by up to 40 ms (Linux); the proxy acknowledges upstream
data at once (``AckingHttpProxy``), so through it the stall is gone for any client.

It also prints the proxy's CPU (its processes' user + system time) per request on that connection,
and per second while ``--idle`` keep-alive connections, each used once, sit open (Chromium keeps
many; each connection has a thread of its own, which sleeps in ``poll`` for ``IDLE_WAKE``).

Usage: ``python bench/bench_egress.py [--requests 200] [--idle 20]``.
"""

from __future__ import annotations

import argparse
import http.client
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from boxcar.hook_executor.egress import EgressProxy
from boxcar.shared.egress import EgressPolicy
from boxcar.shared.procutil import tree_pids


class SplitWrites(BaseHTTPRequestHandler):
    """404 with a tiny body; headers and body in two sends (``http.server``'s own way)."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = b"not found\n"
        self.send_response(404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


def per_request_ms(port: int, requests: int, proxy_port: int | None) -> float:
    """Milliseconds per request, ``requests`` GETs on one keep-alive connection."""
    host, target_port = ("127.0.0.1", proxy_port) if proxy_port else ("127.0.0.1", port)
    conn = http.client.HTTPConnection(host, target_port, timeout=30)
    prefix = f"http://127.0.0.1:{port}" if proxy_port else ""
    started = time.perf_counter()
    for i in range(requests):
        conn.request("GET", f"{prefix}/missing-{i}.png", headers={"Host": f"127.0.0.1:{port}"})
        response = conn.getresponse()
        response.read()
        if response.status != 404:
            raise SystemExit(f"unexpected status {response.status}")
    conn.close()
    return (time.perf_counter() - started) / requests * 1000


def proxy_cpu_s(pid: int) -> float:
    """User + system CPU-s so far of process ``pid`` and its children (the forked acceptor)."""
    total = 0.0
    for each in tree_pids(pid):
        fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")  # utime, stime
    return total


def idle_cpu_ms_per_s(port: int, proxy: EgressProxy, connections: int, seconds: float) -> float:
    """The proxy's CPU-ms a second while ``connections`` keep-alive connections, each used once,
    sit idle for ``seconds``."""
    clients = [http.client.HTTPConnection("127.0.0.1", proxy.port, timeout=30) for _ in range(connections)]
    try:
        for conn in clients:
            conn.request("GET", f"http://127.0.0.1:{port}/idle.png", headers={"Host": f"127.0.0.1:{port}"})
            conn.getresponse().read()
        before = proxy_cpu_s(proxy.proc.pid)
        threading.Event().wait(seconds)
        return (proxy_cpu_s(proxy.proc.pid) - before) / seconds * 1000
    finally:
        for conn in clients:
            conn.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--idle", type=int, default=20, help="idle keep-alive connections")
    parser.add_argument("--idle-seconds", type=float, default=5.0)
    args = parser.parse_args()
    origin = ThreadingHTTPServer(("127.0.0.1", 0), SplitWrites)
    threading.Thread(target=origin.serve_forever, daemon=True).start()
    proxy = EgressProxy(EgressPolicy(allow_private=True), Path(tempfile.mkdtemp(prefix="bench-egress-")))
    proxy.start()
    try:
        port = origin.server_address[1]
        direct = per_request_ms(port, args.requests, None)
        cpu_before = proxy_cpu_s(proxy.proc.pid)
        proxied = per_request_ms(port, args.requests, proxy.port)
        cpu_per_request = (proxy_cpu_s(proxy.proc.pid) - cpu_before) / args.requests * 1000
        idle = idle_cpu_ms_per_s(port, proxy, args.idle, args.idle_seconds)
    finally:
        proxy.stop()
        origin.shutdown()
    print(f"{args.requests} small responses, headers and body in two sends, one keep-alive connection:")
    print(f"  direct:             {direct:7.2f} ms/request")
    print(f"  via the egress proxy: {proxied:5.2f} ms/request  ({direct / proxied:.0f}x faster)")
    print(f"  the proxy's CPU:      {cpu_per_request:5.2f} ms/request")
    print(f"{args.idle} idle keep-alive connections: the proxy's CPU {idle:.1f} ms a second")


if __name__ == "__main__":
    main()
