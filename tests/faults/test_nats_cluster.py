"""A crawl on a three-server NATS cluster (issue 32): the services are given every server
(``NATS_URL`` comma-separated) and create their streams and buckets with three replicas
(``NATS_REPLICAS=3``); mid-crawl the server that leads the ``TASKS`` stream is SIGKILLed together
with a hook executor, the crawl goes on on the other two, and the server comes back later. Every
URL is sealed once with one result per hook, as in the other fault scenarios (``FAULT …`` line)."""

from __future__ import annotations

import asyncio

import nats
import pytest
from nats.js.errors import ServiceUnavailableError

from boxcar.shared import bus
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from tests.faults.harness import (
    PLUGINS,
    MemorySampler,
    NatsCluster,
    assert_clean,
    outcome,
    stack_pids,
    wait_progress,
)
from tests.faults.test_crashes import ENV, FAMILIES, PAGES, kill
from tests.helpers import submit, wait_sealed


@pytest.fixture
def cluster(tmp_path):
    made = NatsCluster(tmp_path / "nats-cluster")
    made.start()
    asyncio.run(_jetstream_ready(made.url.split(",")))
    yield made
    made.stop()


async def _jetstream_ready(servers: list[str], timeout: float = 30.0) -> None:
    """Wait until the cluster has elected its JetStream meta leader (account info answers)."""
    nc = await nats.connect(servers)
    try:
        async with asyncio.timeout(timeout):
            while True:
                try:
                    await nc.jetstream().account_info()
                    return
                except (ServiceUnavailableError, nats.errors.TimeoutError):
                    await asyncio.sleep(0.2)  # polling the election; nothing to subscribe to
    finally:
        await nc.close()


#: Boxcar's streams and its two buckets' streams
ALL_STREAMS = [c.name for c in bus.STREAMS] + [f"KV_{bus.CANCELLED_BUCKET}", f"OBJ_{bus.DISCOVERED_BUCKET}"]


async def _one_copy_each(servers: list[str]) -> None:
    """Streams and buckets as a deployment on one server made them (one copy each)."""
    nc = await nats.connect(servers)
    try:
        js = nc.jetstream()
        await bus.ensure_streams(js, 1)
        await bus.cancelled_bucket(js, 1)
        await bus.discovered_store(js, 1)
    finally:
        await nc.close()


async def _streams(servers: list[str]) -> dict[str, tuple[int, str]]:
    """``{stream: (replicas, leader server name)}`` of Boxcar's streams and buckets."""
    nc = await nats.connect(servers)
    try:
        js = nc.jetstream()
        found = {}
        for name in ALL_STREAMS:
            info = await js.stream_info(name)
            found[name] = (info.config.num_replicas, info.cluster.leader if info.cluster else "")
        return found
    finally:
        await nc.close()


def test_a_nats_server_of_the_cluster_and_an_executor_killed_mid_crawl(pg_url, cluster, make_stack, site_urls):
    asyncio.run(_one_copy_each(cluster.url.split(",")))  # NATS_REPLICAS raised later: copies follow
    stack = make_stack(pg_url, cluster.url, families=FAMILIES, env={**ENV, "NATS_REPLICAS": "3"})
    db, urls = Database(pg_url), site_urls(PAGES)
    streams = asyncio.run(_streams(cluster.url.split(",")))
    assert {name: replicas for name, (replicas, _) in streams.items()} == dict.fromkeys(ALL_STREAMS, 3)
    leader = streams[bus.TASKS_STREAM][1]
    assert leader in cluster.names, streams
    with MemorySampler(lambda: stack_pids(stack)) as memory:
        crawl_id = submit(stack, urls=urls, plugins=PLUGINS)
        wait_progress(db, crawl_id, 3)
        cluster.kill(leader)
        kill(next(c for c in stack.children if c.name == "hook-executor-fetch"))
        killed_at = utcnow()
        assert "hook-executor-fetch" in stack.supervise_once()
        wait_progress(db, crawl_id, 8)  # the crawl goes on with two of three servers
        cluster.start(leader)
        wait_sealed(stack, crawl_id, timeout=600)
    after = asyncio.run(_streams(cluster.url.split(",")))
    print(f"TASKS leader {leader} killed; after: {after[bus.TASKS_STREAM]}")
    assert_clean(
        outcome(
            db,
            crawl_id,
            urls,
            f"NATS cluster: leader {leader} + fetch executor SIGKILLed",
            restarted_at=killed_at,
            peak=memory.peak,
            data_dir=stack.data_dir,
        )
    )


def test_replicas_on_a_single_server_are_refused_with_what_to_set(nats_url):
    async def ensure() -> None:
        nc = await nats.connect(nats_url)
        try:
            await bus.ensure_streams(nc.jetstream(), 3)
        finally:
            await nc.close()

    with pytest.raises(RuntimeError, match="NATS_REPLICAS=3 needs a NATS cluster.*set NATS_REPLICAS=1"):
        asyncio.run(ensure())
