"""Binaries are asked for and answered within one ``BINARIES_SITE``: with a binary-resolver on
each of two hosts (each its own ``ABXPKG_LIB_DIR``), an executor's request is answered only by its
own host's resolver, never by the other's (whose path would not exist there). Two real resolvers
on one real NATS server, each its own machine name."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats

from boxcar.binary_resolver.resolver import BinaryResolver
from boxcar.hook_executor.binaries import BinaryClient
from boxcar.shared.messages import BinaryRequest
from boxcar.shared.settings import Settings

ASKED = 12  # requests per site: with one shared subject, each would go to either resolver


async def _answered_by(nats_url: str, tmp_path: Path) -> dict[str, set[str]]:
    resolvers = {
        site: BinaryResolver(
            Settings(
                data_dir=tmp_path / (site or "main"),
                nats_url=nats_url,
                binaries_site=site,
                machine_name=f"host-{site or 'main'}",
                binary_install_providers=[],
            )
        )
        for site in ("", "minipc")
    }
    running = [asyncio.create_task(r.run()) for r in resolvers.values()]
    nc = await nats.connect(nats_url)
    try:
        seen: dict[str, set[str]] = {}
        for site in resolvers:
            for _ in range(ASKED):  # a client of its own each time: its cache would answer the second
                client = BinaryClient(nc, f"executor-{site}", timeout=30, site=site)
                binary = await client.resolve(BinaryRequest(name="wget", plugin="test", machine=client.machine))
                seen.setdefault(site, set()).add(binary.machine)
        return seen
    finally:
        await nc.close()
        for resolver in resolvers.values():
            resolver.stop()
        await asyncio.gather(*running)


def test_an_executor_is_answered_only_by_the_binary_resolver_of_its_site(nats_url, tmp_path):
    machines = asyncio.run(_answered_by(nats_url, tmp_path))
    assert machines == {"": {"host-main"}, "minipc": {"host-minipc"}}, machines
