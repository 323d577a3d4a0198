"""Binaries for hooks, resolved through the binary-resolver before a plugin's first run.

An executor never lets a hook install anything: it asks ``binaries.resolve`` (request/reply)
for each of the plugin's ``required_binaries`` and starts the hook with the answers in its
environment (``<NAME>_BINARY`` = abspath, the binary's dir first on ``PATH``). Answers are cached
for the life of the process; a binary that cannot be had is cached as unavailable for
``NEGATIVE_TTL`` seconds, then asked for again.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Iterable
from typing import Any

import msgspec
from nats.aio.client import Client as NATS
from nats.errors import NoRespondersError
from nats.errors import TimeoutError as NatsTimeoutError

from boxcar.shared import bus
from boxcar.shared.messages import BinaryRecord, BinaryReply, BinaryRequest, decode, encode

log = logging.getLogger(__name__)

NEGATIVE_TTL = 300.0


class BinaryUnavailable(Exception):
    """A required binary cannot be resolved; ``str()`` names it and says why."""


class ResolverUnreachable(Exception):
    """No binary-resolver answered (it may be starting): retry the task later."""


class BinaryEnv(msgspec.Struct):
    """What a hook's environment needs to find its binaries.

    ``values`` are set as they are (``WGET_BINARY=/usr/bin/wget``); ``paths`` lists directories
    to put in front of a search-path variable (``PATH``, ``NODE_PATH``), first entries first.

    One precedence rule, ``layered``'s, builds every env: what comes first wins (its values, its
    directories in front). So a plugin's first binary comes before its second (``of``), the
    plugins a plugin requires before the plugin itself (``environment.binary_env``: chrome's pinned
    Node before pdf's ``/usr/bin``), the bundled puppeteer's shadow ``node_modules`` before
    everything (``warm.interpreters``), and warm stand-ins before the binaries they stand for
    (``task``).
    """

    values: dict[str, str] = {}
    paths: dict[str, list[str]] = {}

    @classmethod
    def layered(cls, envs: Iterable[BinaryEnv]) -> BinaryEnv:
        """``envs`` as one, the first taking precedence: a value set by an earlier env is kept, and
        an earlier env's directories come first; each directory once, variables with no directory
        left out."""
        values: dict[str, str] = {}
        paths: dict[str, list[str]] = {}
        for env in envs:
            for key, value in env.values.items():
                values.setdefault(key, value)
            for var, dirs in env.paths.items():
                paths[var] = list(dict.fromkeys([*paths.get(var, []), *dirs]))
        return cls(values, {var: dirs for var, dirs in paths.items() if dirs})

    @classmethod
    def of(cls, resolved: Iterable[tuple[str | None, BinaryRecord]]) -> BinaryEnv:
        """What a hook needs to find its resolved binaries, ``[(config_key, binary)]`` in the
        plugin's order (``layered``: the first binary first): each ``config_key`` (``WGET_BINARY``;
        None for none) set to its binary's abspath, and each binary's ``bin_dirs`` in front of
        ``PATH`` and its ``env_paths`` (``NODE_PATH``, …) in front of theirs."""
        return cls.layered(
            cls({config_key: binary.abspath} if config_key else {}, {"PATH": binary.bin_dirs, **binary.env_paths})
            for config_key, binary in resolved
        )

    def apply(self, env: dict[str, str]) -> dict[str, str]:
        """``env`` with the values set and the directories prepended."""
        out = {**env, **self.values}
        for var, dirs in self.paths.items():
            if dirs:
                out[var] = os.pathsep.join([*dirs, *([out[var]] if out.get(var) else [])])
        return out


class BinaryClient:
    """Resolve plugin binaries via the binary-resolver, with a per-process cache.

    Args:
        nc: a connected NATS client.
        machine: this machine's name (binaries are per machine).
        timeout: seconds to wait for one answer (an install may take minutes).
        site: ``BINARIES_SITE``: only that site's binary-resolvers are asked.
    """

    def __init__(self, nc: NATS, machine: str, timeout: float, site: str = "") -> None:
        self.nc = nc
        self.machine = machine
        self.timeout = timeout
        self.subject = bus.binary_resolve_subject(site)
        self._cache: dict[str, tuple[float, BinaryRecord | str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def env_for(self, plugin: str, records: list[tuple[str | None, dict[str, Any]]]) -> BinaryEnv:
        """What lets ``plugin``'s hooks find their binaries.

        Args:
            records: ``[(config_key, hydrated required_binaries record)]`` from the catalogue.

        Raises:
            BinaryUnavailable: a binary cannot be had (the hook must be recorded failed).
            ResolverUnreachable: no resolver answered.
        """
        resolved = [
            (config_key, await self.resolve(BinaryRequest.from_record(record, plugin=plugin, machine=self.machine)))
            for config_key, record in records
        ]
        return BinaryEnv.of(resolved)

    async def tool(self, record: dict[str, Any], plugin: str) -> str:
        """The path of a tool Boxcar itself runs for ``plugin``'s hooks (a ``required_binaries``-shaped
        ``record`` such as ``boxcar.shared.binaries.ESBUILD``), resolved like a plugin's binary.

        Raises:
            BinaryUnavailable, ResolverUnreachable: as ``env_for``.
        """
        request = BinaryRequest.from_record(record, plugin=plugin, machine=self.machine)
        return (await self.resolve(request)).abspath

    async def resolve(self, request: BinaryRequest) -> BinaryRecord:
        """The binary for ``request`` (cached; an unavailable one is retried after ``NEGATIVE_TTL``).

        Raises:
            BinaryUnavailable, ResolverUnreachable: as ``env_for``.
        """
        key = request.cache_key
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            cached = self._cache.get(key)
            if cached is not None:
                at, value = cached
                if isinstance(value, BinaryRecord):
                    return value
                if time.monotonic() - at < NEGATIVE_TTL:
                    raise BinaryUnavailable(value)
            reply_msg = await self._request(request)
            try:
                reply = decode(reply_msg.data, BinaryReply)
            except msgspec.ValidationError as exc:
                raise ResolverUnreachable(f"bad reply from binary-resolver: {exc}") from None
            if reply.ok and reply.binary is not None:
                self._cache[key] = (time.monotonic(), reply.binary)
                log.info(
                    "binary %s for %s: %s %s", request.name, request.plugin, reply.binary.abspath, reply.binary.version
                )
                return reply.binary
            reason = f"binary {request.name!r} unavailable: {reply.error or 'not found'}"
            self._cache[key] = (time.monotonic(), reason)
            raise BinaryUnavailable(reason)

    async def _request(self, request: BinaryRequest):
        """Ask a resolver; while none is up (e.g. still starting), keep asking until the timeout."""
        deadline = time.monotonic() + self.timeout
        delay = 0.5
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ResolverUnreachable(f"no binary-resolver answered within {self.timeout:.0f}s")
            try:
                return await self.nc.request(
                    self.subject, encode(request), timeout=remaining, headers=bus.trace_headers()
                )
            except NoRespondersError:
                log.info("no binary-resolver yet for %s; retrying in %.1fs", request.name, delay)
                await asyncio.sleep(min(delay, max(0.0, remaining)))
                delay = min(delay * 2, 5.0)
            except (NatsTimeoutError, TimeoutError):
                raise ResolverUnreachable(f"binary-resolver did not answer within {self.timeout:.0f}s") from None
