"""Binaries for hooks, resolved through the binary-resolver before a plugin's first run.

An executor never lets a hook install anything: it asks ``binaries.resolve`` (request/reply)
for each of the plugin's ``required_binaries`` and starts the hook with the answers in its
environment (``<NAME>_BINARY`` = abspath, the binary's dir first on ``PATH``). Answers are cached
for the life of the process; a binary that cannot be had is cached as unavailable for
``NEGATIVE_TTL`` seconds, then asked for again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
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


class BinaryClient:
    """Resolve plugin binaries via the binary-resolver, with a per-process cache.

    Args:
        nc: a connected NATS client.
        machine: this machine's name (binaries are per machine).
        timeout: seconds to wait for one answer (an install may take minutes).
    """

    def __init__(self, nc: NATS, machine: str, timeout: float) -> None:
        self.nc = nc
        self.machine = machine
        self.timeout = timeout
        self._cache: dict[str, tuple[float, BinaryRecord | str]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def env_for(self, plugin: str, records: list[tuple[str | None, dict[str, Any]]]) -> dict[str, str]:
        """Environment additions that let ``plugin``'s hooks find their binaries.

        Args:
            records: ``[(config_key, hydrated required_binaries record)]`` from the catalogue.

        Returns:
            ``{"WGET_BINARY": "/usr/bin/wget", "PATH_PREPEND": "dir1:dir2"}``-style additions;
            ``<VAR>_PREPEND`` lists directories to put in front of ``<VAR>`` (``PATH``,
            ``NODE_PATH``).

        Raises:
            BinaryUnavailable: a binary cannot be had (the hook must be recorded failed).
            ResolverUnreachable: no resolver answered.
        """
        env: dict[str, str] = {}
        paths: dict[str, list[str]] = {"PATH": []}
        for config_key, record in records:
            binary = await self.resolve(plugin, record)
            if config_key:
                env[config_key] = binary.abspath
            for var, entries in {"PATH": binary.bin_dirs, **binary.env_paths}.items():
                paths.setdefault(var, []).extend(e for e in entries if e not in paths.setdefault(var, []))
        for var, entries in paths.items():
            if entries:
                env[f"{var}_PREPEND"] = os.pathsep.join(entries)
        return env

    async def resolve(self, plugin: str, record: dict[str, Any]) -> BinaryRecord:
        key = json.dumps(record, sort_keys=True, default=str)
        lock = self._locks.setdefault(key, asyncio.Lock())
        async with lock:
            cached = self._cache.get(key)
            if cached is not None:
                at, value = cached
                if isinstance(value, BinaryRecord):
                    return value
                if time.monotonic() - at < NEGATIVE_TTL:
                    raise BinaryUnavailable(value)
            request = BinaryRequest(
                name=str(record.get("name", "")),
                binproviders=_providers(record.get("binproviders")),
                min_version=_opt_str(record.get("min_version")),
                max_version=_opt_str(record.get("max_version")),
                overrides=dict(record.get("overrides") or {}),
                min_release_age=record.get("min_release_age"),
                postinstall_scripts=record.get("postinstall_scripts"),
                plugin=plugin,
                machine=self.machine,
            )
            reply_msg = await self._request(request)
            try:
                reply = decode(reply_msg.data, BinaryReply)
            except msgspec.ValidationError as exc:
                raise ResolverUnreachable(f"bad reply from binary-resolver: {exc}") from None
            if reply.ok and reply.binary is not None:
                self._cache[key] = (time.monotonic(), reply.binary)
                log.info("binary %s for %s: %s %s", request.name, plugin, reply.binary.abspath, reply.binary.version)
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
                    bus.SUBJECT_BINARY_RESOLVE, encode(request), timeout=remaining, headers=bus.trace_headers()
                )
            except NoRespondersError:
                log.info("no binary-resolver yet for %s; retrying in %.1fs", request.name, delay)
                await asyncio.sleep(min(delay, max(0.0, remaining)))
                delay = min(delay * 2, 5.0)
            except (NatsTimeoutError, TimeoutError):
                raise ResolverUnreachable(f"binary-resolver did not answer within {self.timeout:.0f}s") from None


def _providers(value: Any) -> str:
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value or "env")


def _opt_str(value: Any) -> str | None:
    return None if value in (None, "") else str(value)
