"""Two crawl-runner replicas on one database: no snapshot claimed or dispatched twice."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter

import nats

from boxcar.shared.db import Database
from boxcar.shared.families import load_families
from boxcar.shared.messages import HookTask, SnapshotEvent, decode
from tests.helpers import load_crawl, submit, wait_sealed


class Tap:
    """A core-NATS subscriber seeing every publish on a subject, even ones JetStream dedups."""

    def __init__(self, url: str, subjects: list[str]) -> None:
        self.messages: list[tuple[str, bytes]] = []
        self._ready = threading.Event()
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=asyncio.run, args=(self._run(url, subjects),), daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "tap did not connect"

    async def _run(self, url: str, subjects: list[str]) -> None:
        self._stop = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        nc = await nats.connect(url)

        async def keep(msg):
            self.messages.append((msg.subject, msg.data))

        for subject in subjects:
            await nc.subscribe(subject, cb=keep)
        await nc.flush()
        self._ready.set()
        await self._stop.wait()
        await nc.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(10)


def test_two_runners_never_claim_or_dispatch_twice(pg_url, nats_url, make_stack, site_urls):
    plugins = ["wget", "htmltotext", "parse_html_urls", "hashes"]  # no browser: claims are what this tests
    stack = make_stack(pg_url, nats_url, env={"CRAWL_MAX_CONCURRENT_SNAPSHOTS": "4", "PLUGINS": ",".join(plugins)})
    stack.add_replica("crawl-runner")
    tap = Tap(nats_url, ["tasks.hooks.>", "events.snapshot.started"])
    try:
        urls = site_urls(20)
        crawl_id = submit(stack, urls=urls)
        wait_sealed(stack, crawl_id, timeout=600)
    finally:
        tap.close()
    _, snaps, results = load_crawl(Database(pg_url), crawl_id)
    assert len(snaps) == len(urls) and all(s.status == "sealed" for s in snaps)

    tasks = [decode(data, HookTask) for subject, data in tap.messages if subject.startswith("tasks.")]
    dispatched = Counter(t.task_id for t in tasks)
    assert dispatched and max(dispatched.values()) == 1, [k for k, v in dispatched.items() if v > 1]
    # every snapshot went through each stage's families exactly once
    plan = load_families().plan(plugins)
    per_snapshot = Counter(t.snapshot_id for t in tasks)
    assert set(per_snapshot.values()) == {sum(len(f) for _, f in plan)}
    assert set(per_snapshot) == {s.id for s in snaps}

    started = [decode(data, SnapshotEvent) for subject, data in tap.messages if subject == "events.snapshot.started"]
    claims = Counter(e.snapshot_id for e in started)
    assert set(claims.values()) == {1} and len(claims) == len(urls)
    print("claims per runner:", Counter(e.runner for e in started))
    assert Counter((r.snapshot_id, r.plugin, r.hook_name) for r in results).most_common(1)[0][1] == 1
