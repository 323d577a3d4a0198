"""What ingest tells the rest of Boxcar over NATS, in one place (controllers never publish).

- ``crawl.queued``: a crawl is due now (a core-NATS wake-up for crawl-runners; best effort, as
  runners also look at the database when their timers fire);
- ``feeds.due``: a feed subscription is due (the runners' feed loop);
- ``control.crawl.<id>`` / ``control.schedule.<id>``: pause, resume, cancel, poll, on the
  ``CONTROL`` stream (durable: the runner applies it even if it is restarting);
- ``events.tags.changed``: a user edited snapshots' tags; the result-projector projects their
  ``index.jsonl`` and search documents again.
"""

from __future__ import annotations

import msgspec
from nats.aio.client import Client as NATS

from boxcar.shared import bus
from boxcar.shared.messages import CrawlQueued, TagsChanged, encode


class BusUnavailable(Exception):
    """NATS is not reachable: a control request cannot be queued (nothing was changed)."""


class Signals:
    """Ingest's NATS messages; ``nats`` is set once the background connection is up."""

    def __init__(self) -> None:
        self.nats: NATS | None = None

    @property
    def connected(self) -> bool:
        return self.nats is not None and self.nats.is_connected

    async def crawl_queued(self, crawl_id: str) -> None:
        """Wake crawl-runners for a new crawl (dropped silently while NATS is away)."""
        if self.connected:
            await self.nats.publish(
                bus.SUBJECT_CRAWL_QUEUED, encode(CrawlQueued(crawl_id=crawl_id)), headers=bus.trace_headers()
            )

    async def feed_due(self, schedule_id: str) -> None:
        """Wake the runners' feed loop for a new or changed subscription."""
        if self.connected:
            await self.nats.publish(bus.SUBJECT_FEED_DUE, schedule_id.encode(), headers=bus.trace_headers())

    async def control(self, kind: str, target: str, msg: msgspec.Struct) -> None:
        """Queue a control request (``kind`` ``crawl`` or ``schedule``) for the crawl-runner.

        Raises:
            BusUnavailable: NATS is unreachable.
        """
        if not self.connected:
            raise BusUnavailable("message bus unavailable; try again")
        await bus.publish(self.nats.jetstream(), bus.control_subject(kind, target), msg)

    async def tags_changed(self, snapshot_ids: list[str]) -> bool:
        """Tell the result-projector that these snapshots' tags changed. Best effort: the tags are
        saved already; while NATS is away only their search text and ``index.jsonl`` lag (until
        ``boxcar reindex``). Returns whether it was sent."""
        if not self.connected:
            return False
        await bus.publish(self.nats.jetstream(), bus.SUBJECT_TAGS_CHANGED, TagsChanged(snapshot_ids=snapshot_ids))
        return True
