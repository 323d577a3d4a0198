"""The egress proxy's proxy.py plugin: ``EgressPolicy`` applied to every upstream connection.

Only the proxy process imports this module (and with it proxy.py, ~20 MiB of modules an
executor has no use for); ``egress.EgressProxy`` names it on the proxy's command line.
"""

from __future__ import annotations

import json
import socket

from proxy.http.exception import HttpRequestRejected
from proxy.http.proxy import HttpProxyBasePlugin, HttpProxyPlugin

from boxcar.hook_executor.egress import EgressPolicy, Refused


class EgressPolicyPlugin(HttpProxyBasePlugin):
    """proxy.py plugin: check each upstream (CONNECT or plain HTTP) against ``EgressPolicy``, then
    connect to the very address that was checked."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.policy = EgressPolicy.from_env()
        self.checked: dict[tuple[str, int], str] = {}

    def before_upstream_connection(self, request):
        host = (request.host or b"").decode("idna") if isinstance(request.host, bytes) else str(request.host or "")
        port = int(request.port or 80)
        try:
            self.checked[(host, port)] = self.policy.check(host, port)
        except Refused as exc:
            body = json.dumps({"error": "refused by Boxcar's egress policy", "reason": str(exc)}).encode()
            raise HttpRequestRejected(
                status_code=403, reason=b"Forbidden", headers={b"Content-Type": b"application/json"}, body=body
            ) from None
        return request

    def resolve_dns(self, host: str, port: int):
        return self.checked.get((host, port)), None

    def handle_client_request(self, request):
        return request

    def handle_upstream_chunk(self, chunk):
        return chunk

    def on_upstream_connection_close(self) -> None:
        pass


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
