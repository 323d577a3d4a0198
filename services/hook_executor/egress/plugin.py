"""What the egress proxy runs inside proxy.py: ``EgressPolicy`` applied to every upstream
connection (``EgressPolicyPlugin``), upstream data acknowledged at once (``AckingHttpProxy``), and
each client connection's loop (``LeanHttpProtocolHandler``).

Only the proxy process imports this module (and with it proxy.py, ~20 MiB of modules an
executor has no use for); ``boxcar.hook_executor.egress.EgressProxy`` names it on the proxy's command line.
"""

from __future__ import annotations

import json
import logging
import os
import select
import selectors
import socket
import ssl
import time
from collections.abc import Coroutine
from typing import Any

from proxy.http.exception import HttpRequestRejected
from proxy.http.handler import HttpProtocolHandler
from proxy.http.parser import HttpParser, httpParserTypes
from proxy.http.proxy import HttpProxyBasePlugin, HttpProxyPlugin

from boxcar.hook_executor.egress.connections import CONNECTIONS_ENV, ConnectionLog
from boxcar.shared.egress import EgressPolicy, Refused


class EgressPolicyPlugin(HttpProxyBasePlugin):
    """proxy.py plugin: check each upstream (CONNECT or plain HTTP) against ``EgressPolicy``, then
    connect to the very address that was checked. A request is only ever sent to the upstream of
    its own host (``AckingHttpProxy`` opens a new upstream when a keep-alive client asks for
    another host; a request that would still go elsewhere is refused)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.policy = EgressPolicy.from_env()
        self.checked: dict[tuple[str, int], str] = {}
        self.target: tuple[str, int] | None = None
        path = os.environ.get(CONNECTIONS_ENV)
        self.connections = ConnectionLog(path) if path else None

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
        if not request.is_https_tunnel and self.target is not None and _target(request) != self.target:
            raise _refusal("a request for another host than this connection's upstream")
        return request

    def handle_upstream_chunk(self, chunk):
        return chunk

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

    #: set while a pass that swapped upstreams (``on_client_data``) has yet to read the upstreams:
    #: its ready list was polled before the swap, so it says nothing of the new upstream
    _swapped = False

    def on_client_data(self, raw):
        """A keep-alive client's next plain-HTTP request. wget and Chromium reuse their connection
        to a proxy for any host, and proxy.py alone would send every later request to the first
        request's upstream (a cross-host redirect or requisite answered by the wrong server). A
        request for the same host goes to the same upstream (keep-alive kept); one for another host
        gets an upstream of its own, checked by the policy like the first."""
        if self.upstream is None or self.request.is_https_tunnel or self.request.is_connection_upgrade:
            return super().on_client_data(raw)
        parser = self.pipeline_request or HttpParser(httpParserTypes.REQUEST_PARSER)
        parser.parse(raw)
        if not parser.is_complete:
            self.pipeline_request = parser
            return None
        self.pipeline_request = None
        if (parser.host, parser.port) != (self.request.host, self.request.port):
            old, self.upstream = self.upstream, None
            old.close()
            self.request = parser
            self.response = HttpParser(httpParserTypes.RESPONSE_PARSER)
            self.pipeline_response = None
            self.on_request_complete()  # the policy's check, a new upstream, the request sent
            self._swapped = True
            return None
        for plugin in self.plugins.values():
            parser = plugin.handle_client_request(parser)
            if parser is None:
                return None
        self.upstream.queue(memoryview(parser.build()))
        return None

    async def read_from_descriptors(self, r):
        """Read what the upstream sent (proxy.py's), then acknowledge it at once. In the pass in
        which the client asked for another host the new upstream is not read: ``r`` was polled
        before it existed, and the old upstream's descriptor number in it may be the new one's
        (a blocking read of a connection whose request is not sent yet)."""
        upstream = self.upstream
        if self._swapped:
            self._swapped = False
            if upstream is not None and not upstream.closed:
                r = [fd for fd in r if fd != upstream.connection.fileno()]
        upstream_read = upstream is not None and not upstream.closed and upstream.connection.fileno() in r
        teardown = await super().read_from_descriptors(r)
        if _QUICKACK is not None and upstream_read and not teardown and not upstream.closed:
            try:
                upstream.connection.setsockopt(socket.IPPROTO_TCP, _QUICKACK, 1)
            except OSError:
                pass  # the connection went away meanwhile: nothing left to acknowledge
        return teardown


#: Seconds a connection's thread sleeps in ``poll`` with nothing to do: data wakes it at once, so
#: this only paces the idle check (``--timeout``). proxy.py's own loop wakes every 25 ms, which
#: cost ~6 ms of CPU a second for each idle keep-alive connection (Chromium keeps many).
IDLE_WAKE = 1.0

_log = logging.getLogger(__name__)
_READ = select.POLLIN
_WRITE = select.POLLOUT


def run_pass[T](coro: Coroutine[Any, Any, T]) -> T:
    """Run one of proxy.py's handler coroutines to its end without an event loop: in threaded mode
    its HTTP passes (``get_events``, ``handle_events`` and the plugins' hooks) are ``async`` but
    never suspend (they only await coroutines that return at once).

    Raises:
        RuntimeError: the coroutine suspended (a proxy.py release whose pass waits on a future;
            the connection fails, loudly, and ``EgressProxy``'s tests catch it).
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise RuntimeError("a proxy.py handler pass suspended: LeanHttpProtocolHandler cannot run it")


class LeanHttpProtocolHandler(HttpProtocolHandler):
    """proxy.py's per-connection handler (``--work-klass``) for ``--threaded`` mode, with a leaner
    loop than ``HttpProtocolHandler.run``: each pass of that one ran a new asyncio task through
    ``run_until_complete`` (the loop's own ``epoll_wait`` included) and registered and unregistered
    every descriptor with an epoll selector, and it woke every 25 ms while idle. This one runs the
    same passes (``get_events``, ``poll``, ``handle_events``; ``run_pass``) with one ``select.poll``
    object kept up to date (only descriptors or interests that changed), and sleeps ``IDLE_WAKE``
    when idle. What a pass does, and how a connection ends, are proxy.py's own."""

    def run(self) -> None:
        poller = select.poll()
        registered: dict[int, int] = {}
        try:
            self.initialize()
            while not self.is_inactive():
                events = run_pass(self.get_events())
                for fd, mask in events.items():
                    if registered.get(fd) != mask:
                        wanted = _READ if mask & selectors.EVENT_READ else 0
                        poller.register(fd, wanted | (_WRITE if mask & selectors.EVENT_WRITE else 0))
                for fd in registered.keys() - events.keys():
                    poller.unregister(fd)
                registered = events
                readables: list[int] = []
                writables: list[int] = []
                # as selectors.PollSelector reports them: an error or hang-up is readable and
                # writable (the read or the write then sees it), within what the fd was asked for
                for fd, happened in poller.poll(IDLE_WAKE * 1000):
                    if happened & ~_WRITE and registered[fd] & selectors.EVENT_READ:
                        readables.append(fd)
                    if happened & ~_READ and registered[fd] & selectors.EVENT_WRITE:
                        writables.append(fd)
                if run_pass(self.handle_events(readables, writables)):
                    break
        except KeyboardInterrupt:
            pass
        except ssl.SSLError as exc:
            _log.exception("ssl.SSLError", exc_info=exc)
        except Exception as exc:
            _log.exception("Exception while handling connection %r", self.work.connection, exc_info=exc)
        finally:
            self.shutdown()
            if self.selector:
                self.selector.close()
