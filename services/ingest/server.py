"""The HTTP server the API and the archive origin run in: uvicorn, ticking once a second.

uvicorn's ``Server.main_loop`` wakes every 0.1 s to refresh the ``Date`` header (once a second)
and to notice ``should_exit``; two servers in the embedded stack made that twenty wake-ups a
second, the largest share of an idle stack's CPU. Ticking once a second keeps the ``Date``
header exact to the second, as uvicorn's own refresh does; setting ``should_exit`` wakes the
loop at once, so a stop does not wait for the next tick (a stopping ``boxcar add`` waited half a
second on average for it).

Behind a reverse proxy uvicorn replaces the request's client address with the one the proxy put in
``X-Forwarded-For`` (when the proxy is in ``FORWARDED_ALLOW_IPS``, default loopback). Logins are
throttled by that address, but trusted-header single sign-on must judge the TCP peer itself
(``accounts.trusted_header_user``), so ``RecordPeer`` keeps it in the scope before uvicorn's
proxy-headers middleware rewrites the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Iterator
from typing import Any

import uvicorn
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

from boxcar.ingest.web.accounts import PEER_SCOPE_KEY

#: Seconds between two ticks (uvicorn: 0.1).
TICK = 1.0


class Server(uvicorn.Server):
    """``uvicorn.Server`` with a one-second tick.

    Args:
        config: uvicorn's ``Config``.
        handle_signals: False when the process stops the server itself (``should_exit = True``):
            the one-process stack and the ingest's second (archive origin) server.
    """

    def __init__(self, config: uvicorn.Config, *, handle_signals: bool = True) -> None:
        self._exit = asyncio.Event()
        super().__init__(config)
        self.handle_signals = handle_signals

    @property
    def should_exit(self) -> bool:
        """uvicorn's stop flag (set by its signal handler, or by whoever runs the server); setting
        it also wakes ``main_loop``."""
        return self._exit.is_set()

    @should_exit.setter
    def should_exit(self, value: bool) -> None:
        if value:
            self._exit.set()
        else:
            self._exit.clear()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        """uvicorn's signal handling (SIGTERM and SIGINT stop the server), without its raising the
        caught signal again once the server has shut down (uvicorn ≥ 0.29): that ended the ingest
        process by the signal before its own clean-up ran (the spans still buffered, the database,
        the archive origin's server), and made a clean stop look like a kill (exit status -15)."""
        if not self.handle_signals:
            yield
            return
        with super().capture_signals():
            try:
                yield
            finally:
                self._captured_signals.clear()

    async def main_loop(self) -> None:
        # uvicorn's on_tick refreshes the Date header when ``counter % 10 == 0``: count in tenths.
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 10) % 864000
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._exit.wait(), TICK)
            should_exit = await self.on_tick(counter)


class RecordPeer:
    """ASGI middleware: the connection's TCP peer ``(host, port)`` kept in
    ``scope[PEER_SCOPE_KEY]``, then uvicorn's proxy-headers middleware (``FORWARDED_ALLOW_IPS``,
    as uvicorn would apply it) and the app."""

    def __init__(self, app: Any) -> None:
        trusted = os.environ.get("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")
        self.app = ProxyHeadersMiddleware(app, trusted_hosts=trusted)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            scope[PEER_SCOPE_KEY] = scope.get("client")
        await self.app(scope, receive, send)


def server(app, host: str, port: int, *, handle_signals: bool = True) -> Server:
    """A server for one Litestar app on ``host:port``: warnings only, logged through the service's
    own handler (``setup_logging``), no access log (requests are traced instead), lifespan events
    on (the app opens and closes its NATS connection there), the TCP peer recorded before proxy
    headers are applied (``RecordPeer``)."""
    return Server(
        uvicorn.Config(
            RecordPeer(app),
            host=host,
            port=port,
            log_level="warning",
            log_config=None,  # its loggers go to the service's handler (setup_logging), not uvicorn's
            access_log=False,
            lifespan="on",
            proxy_headers=False,  # RecordPeer applies them, after noting the peer
        ),
        handle_signals=handle_signals,
    )
