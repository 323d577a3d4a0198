"""Fetches Boxcar makes itself (feeds now; favicons and webhooks later), under the egress policy.

``policy_client`` is an ``httpx.AsyncClient`` whose transport connects only to addresses
``EgressPolicy.check`` returned: the first request's host and every redirect's, each resolved
once and connected to exactly as checked, with no environment proxy in between
(``trust_env=False``). TLS still verifies the certificate for, and sends SNI of, the URL's host
name: httpcore takes those from the request, not from the address it connects to.

Kept apart from ``boxcar.shared.egress`` so the egress proxy process, which imports the policy,
never loads httpx.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import anyio.to_thread
import httpcore
import httpx
from httpcore._backends.base import SOCKET_OPTION

from boxcar.shared.egress import EgressPolicy, Refused

#: httpx's own default pool limits
DEFAULT_LIMITS = httpx.Limits(max_connections=100, max_keepalive_connections=20)


class PolicyBackend(httpcore.AsyncNetworkBackend):
    """httpcore's network backend, connecting a TCP stream only to the address the policy checked.

    Raises (``connect_tcp``):
        httpcore.ConnectError: the policy refuses the host (the message is the refusal); httpx
            raises it as ``httpx.ConnectError``.
    """

    def __init__(self, policy: EgressPolicy) -> None:
        self.policy = policy
        self.inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            address = await anyio.to_thread.run_sync(self.policy.check, host, port)
        except Refused as exc:
            raise httpcore.ConnectError(f"refused by the egress policy: {exc}") from None
        return await self.inner.connect_tcp(
            address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[SOCKET_OPTION] | None = None
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class PolicyTransport(httpx.AsyncHTTPTransport):
    """httpx's default transport over a connection pool that uses ``PolicyBackend`` (httpx takes
    no network backend argument, so the pool it built is replaced by one built the same way)."""

    def __init__(
        self,
        policy: EgressPolicy,
        limits: httpx.Limits = httpx.Limits(max_connections=100, max_keepalive_connections=20),
    ) -> None:
        super().__init__(trust_env=False, limits=limits)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=httpx.create_ssl_context(trust_env=False),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=PolicyBackend(policy),
        )


def policy_client(policy: EgressPolicy, **kwargs: Any) -> httpx.AsyncClient:
    """An ``httpx.AsyncClient`` that fetches only what ``policy`` allows, redirects included.

    Args:
        kwargs: more ``httpx.AsyncClient`` arguments (``timeout``, ``follow_redirects``,
            ``max_redirects``, ``headers``).

    A refused connection raises ``httpx.ConnectError`` saying why.
    """
    return httpx.AsyncClient(transport=PolicyTransport(policy), trust_env=False, **kwargs)
