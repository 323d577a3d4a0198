"""The egress proxy's proxy.py plugin: ``EgressPolicy`` applied to every upstream connection.

Only the proxy process imports this module (and with it proxy.py, ~20 MiB of modules an
executor has no use for); ``boxcar.hook_executor.egress.EgressProxy`` names it on the proxy's command line.
"""

from __future__ import annotations

import json
import os
import socket
import time

from proxy.http.exception import HttpRequestRejected
from proxy.http.proxy import HttpProxyBasePlugin, HttpProxyPlugin

from boxcar.hook_executor.egress.connections import CONNECTIONS_ENV, ConnectionLog
from boxcar.shared.egress import EgressPolicy, Refused


class EgressPolicyPlugin(HttpProxyBasePlugin):
    """proxy.py plugin: check each upstream (CONNECT or plain HTTP) against ``EgressPolicy``, then
    connect to the very address that was checked.

    One client connection carries requests for one upstream only. proxy.py forwards every later
    request on a keep-alive client connection to the upstream the first one opened, whatever host
    it names: wget and Chromium reuse their connection to a proxy across hosts, so a plain-HTTP
    redirect or requisite on another host would be answered by the first host (and never checked
    against the policy). So plain-HTTP requests go upstream with ``Connection: close`` (the client
    sees it on the response and opens a new connection for its next request), and a request for
    another host on the same connection is refused.
    """

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.policy = EgressPolicy.from_env()
        self.checked: dict[tuple[str, int], str] = {}
        self.target: tuple[str, int] | None = None
        path = os.environ.get(CONNECTIONS_ENV)
        self.connections = ConnectionLog(path) if path else None
        self.close_pending = False  # the response head still to be marked ``Connection: close``

    def before_upstream_connection(self, request):
        host, port = _target(request)
        try:
            self.checked[(host, port)] = address = self.policy.check(host, port)
        except Refused as exc:
            raise _refusal(str(exc)) from None
        self.target = (host, port)
        if self.connections is not None:
            self.connections.append(host, port, address, time.time())
        return request

    def resolve_dns(self, host: str, port: int):
        return self.checked.get((host, port)), None

    def handle_client_request(self, request):
        if request.is_https_tunnel:
            return request
        if self.target is not None and _target(request) != self.target:
            raise _refusal("one connection per host: open a new proxy connection for another host")
        if not request.is_connection_upgrade:
            request.del_headers([b"connection", b"keep-alive", b"proxy-connection"])
            request.add_header(b"Connection", b"close")
            self.close_pending = True
        return request

    def handle_upstream_chunk(self, chunk):
        """Mark the response's head ``Connection: close`` (the first chunk holding the whole head;
        a head split over chunks is left alone: the closed connection says the same)."""
        if not self.close_pending:
            return chunk
        data = bytes(chunk)
        end = data.find(b"\r\n\r\n")
        if end == -1:
            self.close_pending = False
            return chunk
        if data.startswith((b"HTTP/1.1 1", b"HTTP/1.0 1")):
            return chunk  # an interim response (100 Continue): mark the final one
        self.close_pending = False
        lines = [
            line
            for line in data[:end].split(b"\r\n")
            if not line.lower().startswith((b"connection:", b"keep-alive:", b"proxy-connection:"))
        ]
        return memoryview(b"\r\n".join([*lines, b"Connection: close"]) + data[end:])

    def on_upstream_connection_close(self) -> None:
        pass


def _target(request) -> tuple[str, int]:
    host = (request.host or b"").decode("idna") if isinstance(request.host, bytes) else str(request.host or "")
    return host, int(request.port or 80)


def _refusal(reason: str) -> HttpRequestRejected:
    body = json.dumps({"error": "refused by Boxcar's egress policy", "reason": reason}).encode()
    return HttpRequestRejected(
        status_code=403, reason=b"Forbidden", headers={b"Content-Type": b"application/json"}, body=body
    )


_QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux only


class AckingHttpProxy(HttpProxyPlugin):
    """proxy.py's HTTP proxy (run with ``--disable-http-proxy`` and this in ``--plugins``) that
    acknowledges what an upstream sent at once (``TCP_QUICKACK`` after every read).

    Many small origin servers (Python's ``http.server``, for one) send a response's headers and
    its body in two writes with Nagle's algorithm on: the body waits until the headers are
    acknowledged, and a receiver that delays its ACK (Linux: up to 40 ms) stalls every such
    response. wget fetching a page's requisites one after another on a keep-alive connection pays
    it once per requisite — 470 small 404s made one corpus page take 18.5 s instead of 0.2 s.
    Browsers and curl pay it too; a proxy is where one setting can spare all of them."""

    async def read_from_descriptors(self, r):
        upstream = self.upstream
        upstream_read = upstream is not None and not upstream.closed and upstream.connection.fileno() in r
        teardown = await super().read_from_descriptors(r)
        if _QUICKACK is not None and upstream_read and not teardown and not upstream.closed:
            try:
                upstream.connection.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            except OSError:
                pass  # the connection went away meanwhile: nothing left to acknowledge
        return teardown
