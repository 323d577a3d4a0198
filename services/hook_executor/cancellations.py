"""Which crawls are stopped: the ``CANCELLED`` key-value bucket, watched by every executor.

The crawl-runner puts a crawl's id there when a user cancels it (or the crawl is given up). An
executor asks before it starts a task (``is_cancelled``: a direct read, so a just-started
executor cannot miss one), and a watch on the bucket sets a per-crawl event that running tasks
wait on, so their hooks are killed within moments of the cancel.

The watch is a plain subscription to the bucket's subjects (``$KV.CANCELLED.>``: every put is a
message there), not nats-py's ``watchall``: that one's ordered consumer checks its flow control
four times a second for as long as it lives — most of an idle executor's CPU. Puts made while
this executor was disconnected are picked up by reading the bucket's keys again every
``RESYNC`` seconds (and at start, after subscribing, so none falls between the two).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

from nats.js.errors import KeyNotFoundError, NoKeysError

from boxcar.shared.bus import CANCELLED_BUCKET

log = logging.getLogger(__name__)

#: Seconds between two reads of every key (puts missed while NATS was away).
RESYNC = 60.0


class Cancellations:
    """The executor's view of the ``CANCELLED`` bucket.

    Args:
        nc: the executor's NATS connection (for the subscription).
        bucket: the bucket, as ``bus.cancelled_bucket`` returns it.
    """

    def __init__(self, nc, bucket) -> None:
        self.nc = nc
        self.bucket = bucket
        self.known: set[str] = set()
        self._events: dict[str, asyncio.Event] = {}
        self._users: dict[str, int] = {}
        self._watch_task: asyncio.Task | None = None

    async def start(self) -> None:
        """Start watching the bucket (in the background until ``close``)."""
        self._watch_task = asyncio.create_task(self._watch())

    async def close(self) -> None:
        if self._watch_task:
            self._watch_task.cancel()
            await asyncio.gather(self._watch_task, return_exceptions=True)

    async def _watch(self) -> None:
        prefix = f"$KV.{CANCELLED_BUCKET}."

        async def on_put(msg) -> None:
            if msg.data:  # a delete or purge marker has no value
                self._mark(msg.subject[len(prefix) :])

        sub = await self.nc.subscribe(prefix + ">", cb=on_put)
        try:
            with contextlib.suppress(Exception):  # NATS away: the subscription is renewed on reconnect
                await self.nc.flush()  # the server has the subscription: no put falls before it
            while True:
                try:
                    for crawl_id in await self.bucket.keys():
                        self._mark(crawl_id)
                except NoKeysError:
                    pass
                except asyncio.CancelledError:
                    raise
                except Exception as exc:  # NATS away: the next read catches up
                    log.warning("reading cancellations failed (%s); reading again in %.0f s", exc, RESYNC)
                await asyncio.sleep(RESYNC)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    def _mark(self, crawl_id: str) -> None:
        if crawl_id not in self.known:
            log.info("crawl %s is cancelled: stopping its hooks", crawl_id)
        self.known.add(crawl_id)
        self.event(crawl_id).set()

    def event(self, crawl_id: str) -> asyncio.Event:
        """The event set once ``crawl_id`` is cancelled."""
        event = self._events.get(crawl_id)
        if event is None:
            event = self._events[crawl_id] = asyncio.Event()
            if crawl_id in self.known:
                event.set()
        return event

    @contextlib.contextmanager
    def watching(self, crawl_id: str) -> Iterator[asyncio.Event]:
        """The crawl's cancel event while a task of it runs here; forgotten when the last one ends
        (memory stays bounded by the tasks in flight)."""
        self._users[crawl_id] = self._users.get(crawl_id, 0) + 1
        try:
            yield self.event(crawl_id)
        finally:
            self._users[crawl_id] -= 1
            if not self._users[crawl_id]:
                del self._users[crawl_id]
                self._events.pop(crawl_id, None)

    async def is_cancelled(self, crawl_id: str) -> bool:
        """Whether ``crawl_id`` is cancelled (a direct read of the bucket).

        Raises:
            whatever NATS raises when the bucket cannot be read (the task is retried later).
        """
        if crawl_id in self.known:
            return True
        try:
            entry = await self.bucket.get(crawl_id)
        except KeyNotFoundError:
            return False
        if entry.value:
            self._mark(crawl_id)
            return True
        return False
