"""The webhook-sender: turns sealed snapshots, sealed or failed crawls and feed polls that found
new items into signed POSTs to the
webhooks that want them, retried with back-off, each attempt recorded (DESIGN.md: it owns the
``WebhookDelivery`` rows; ingest owns ``Webhook`` rows).

Two halves, so a crawl never waits for a webhook:

- the consumers (``webhooks-snapshot``, ``webhooks-crawl``, ``webhooks-feed``): for each event, read what the body
  says (the snapshot's URL, title, status; the crawl's owner, label, status) and insert one
  pending delivery per matching webhook, idempotently on (webhook, event key), then ack;
- the delivery loop: claim due deliveries (``queries.claim``: a lease, so two replicas never send
  one at once), POST each through the egress policy (``fetch.policy_client``), then record it
  delivered, due again after ``WEBHOOK_RETRY_SECONDS`` × 2^(attempt-1), or failed after
  ``WEBHOOK_MAX_ATTEMPTS``.

Each request carries ``X-Boxcar-Event``, ``X-Boxcar-Delivery`` (the delivery id: a receiver
may see one twice if a sender dies between sending and recording) and
``X-Boxcar-Signature-256: sha256=<hex HMAC-SHA256 of the raw body with the webhook's secret>``
(GitHub's scheme).
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
from datetime import datetime, timedelta
from typing import Any

import httpx
import msgspec
from sqlalchemy import select

from boxcar.shared import bus, metrics, secrets
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database, after_commit
from boxcar.shared.db.models import Crawl, CrawlSchedule, Snapshot, Webhook, WebhookDelivery
from boxcar.shared.egress import EgressPolicy
from boxcar.shared.fetch import policy_client
from boxcar.shared.messages import CrawlEvent, FeedNewItems, SnapshotEvent, decode
from boxcar.shared.settings import Settings
from boxcar.webhook_sender import queries as q

log = logging.getLogger("boxcar.webhook_sender")

#: crawl statuses that are webhook events (``crawl.<status>``)
CRAWL_EVENTS = ("sealed", "failed")
TIMEOUT = 10.0
#: deliveries one replica sends at once, and claims per round
CONCURRENCY = 8
#: how long a claimed delivery is leased for its attempt (the request's timeout and then some)
LEASE = timedelta(seconds=60)
POLL = 1.0


def sign(secret: str, body: bytes) -> str:
    """``sha256=<hex>``: the HMAC-SHA256 of ``body`` with ``secret`` (``X-Boxcar-Signature-256``)."""
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def backoff(settings: Settings, attempt: int) -> timedelta:
    """Wait after failed attempt ``attempt`` (1, 2, …): ``WEBHOOK_RETRY_SECONDS`` doubled each
    time, at most a day."""
    return timedelta(seconds=min(86400.0, settings.webhook_retry_seconds * 2 ** max(0, attempt - 1)))


class WebhookSender:
    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self.policy = EgressPolicy.from_settings(settings)
        self._stop = asyncio.Event()
        self._wake = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    async def run(self) -> None:
        nc, js = await bus.open_jetstream(self.settings, "webhook-sender")
        max_deliver = self.settings.runner_max_deliver
        consumers = (
            (bus.WEBHOOK_SNAPSHOT_CONSUMER, bus.SUBJECT_SNAPSHOT_SEALED),
            (bus.WEBHOOK_CRAWL_CONSUMER, bus.SUBJECT_CRAWL_EVENTS),
            (bus.WEBHOOK_FEED_CONSUMER, bus.SUBJECT_FEED_NEW_ITEMS),
        )
        loops = []
        for durable, subject in consumers:
            await bus.ensure_consumer(js, bus.EVENTS_STREAM, durable, subject, ack_wait=30, max_deliver=max_deliver)
            sub = await bus.pull(js, bus.EVENTS_STREAM, durable)
            loops.append(bus.consume(js, sub, self.handle, consumer=durable, stop=self._stop, max_deliver=max_deliver))
        log.info("webhook-sender ready")
        try:
            async with policy_client(self.policy, timeout=TIMEOUT, follow_redirects=False) as client:
                await asyncio.gather(*loops, self._delivery_loop(client))
        finally:
            await nc.close()

    # ------------------------------------------------------------------ events → deliveries

    async def handle(self, msg: Any) -> None:
        if await asyncio.to_thread(self.record, msg.subject, msg.data):
            self._wake.set()

    def record(self, subject: str, data: bytes) -> int:
        """Insert the deliveries an event calls for (committed before the ack); returns how many."""
        now = utcnow()
        if subject == bus.SUBJECT_SNAPSHOT_SEALED:
            snap_event = decode(data, SnapshotEvent)
            with self.db.write() as s:
                found = s.execute(
                    select(Snapshot, Crawl)
                    .join(Crawl, Crawl.id == Snapshot.crawl_id)
                    .where(Snapshot.id == snap_event.snapshot_id)
                ).first()
                if found is None:  # deleted since
                    return 0
                snap, crawl = found
                at = snap_event.at or now
                hooks = q.matching_webhooks(s, "snapshot.sealed", crawl.created_by, at, self.settings.archive_user)
                return q.add_deliveries(
                    s,
                    hooks,
                    "snapshot.sealed",
                    f"snapshot.sealed:{snap.id}",
                    lambda d: self.payload("snapshot.sealed", d, at, crawl, snap),
                    now,
                )
        if subject == bus.SUBJECT_FEED_NEW_ITEMS:
            return self.record_feed(decode(data, FeedNewItems), now)
        crawl_event = decode(data, CrawlEvent)
        if crawl_event.status not in CRAWL_EVENTS:
            return 0
        name = f"crawl.{crawl_event.status}"
        with self.db.write() as s:
            crawl = s.get(Crawl, crawl_event.crawl_id)
            if crawl is None:
                return 0
            at = crawl_event.at or now
            hooks = q.matching_webhooks(s, name, crawl.created_by, at, self.settings.archive_user)
            return q.add_deliveries(
                s, hooks, name, f"{name}:{crawl.id}", lambda d: self.payload(name, d, at, crawl, None), now
            )

    def record_feed(self, notice: FeedNewItems, now: datetime) -> int:
        """``feed.new_items``: the subscription, how many new items, and the crawl made of them."""
        with self.db.write() as s:
            schedule, crawl = s.get(CrawlSchedule, notice.schedule_id), s.get(Crawl, notice.crawl_id)
            if schedule is None or crawl is None:
                return 0
            at = notice.at or now
            base = self.settings.public_url.rstrip("/")
            feed = {
                "id": schedule.id,
                "url": schedule.feed_url,
                "label": schedule.label,
                "new_items": notice.new_items,
                "links": {"api": f"{base}/api/v1/feeds/{schedule.id}", "ui": f"{base}/feeds"},
            }

            def body(delivery_id: str) -> dict[str, Any]:
                return {**self.payload("feed.new_items", delivery_id, at, crawl, None), "feed": feed}

            hooks = q.matching_webhooks(s, "feed.new_items", schedule.created_by, at, self.settings.archive_user)
            return q.add_deliveries(s, hooks, "feed.new_items", f"feed.new_items:{crawl.id}", body, now)

    def payload(
        self, event: str, delivery_id: str, at: datetime, crawl: Crawl, snap: Snapshot | None
    ) -> dict[str, Any]:
        """The JSON body: the event, this delivery's id, when it happened, the crawl and (for
        ``snapshot.sealed``) the snapshot, with links (absolute with ``PUBLIC_URL``)."""
        base = self.settings.public_url.rstrip("/")
        body: dict[str, Any] = {
            "event": event,
            "delivery_id": delivery_id,
            "occurred_at": at.isoformat(),
            "crawl": {
                "id": crawl.id,
                "status": "failed" if event == "crawl.failed" else crawl.status,
                "label": crawl.label,
                "error": crawl.error,
                "links": {"api": f"{base}/api/v1/crawls/{crawl.id}", "ui": f"{base}/crawls/{crawl.id}"},
            },
        }
        if snap is not None:
            body["snapshot"] = {
                "id": snap.id,
                "url": snap.url,
                "title": snap.title or "",
                "status": snap.status,
                "http_status": snap.http_status,
                "links": {"ui": f"{base}/snapshots/{snap.id}", "api": f"{base}/api/v1/crawls/{crawl.id}"},
            }
        return body

    # ------------------------------------------------------------------ deliveries → requests

    async def _delivery_loop(self, client: httpx.AsyncClient) -> None:
        while not self._stop.is_set():
            try:
                sent = await self.deliver_due(client)
            except Exception as exc:  # the database away for a moment: try again next round
                log.warning("delivery round failed: %s", exc)
                sent = 0
            if sent:
                continue
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), POLL)
            except TimeoutError:
                pass

    async def deliver_due(self, client: httpx.AsyncClient) -> int:
        """Claim and send the due deliveries (up to ``CONCURRENCY``); returns how many were tried."""
        claimed = await asyncio.to_thread(self._claim)
        await asyncio.gather(*(self._send(client, *item) for item in claimed))
        return len(claimed)

    def _claim(self) -> list[tuple[str, int, str, str, str, dict[str, Any]]]:
        now = utcnow()
        out = []
        with self.db.write() as s:
            for delivery_id in q.due_deliveries(s, now, CONCURRENCY):
                if not q.claim(s, delivery_id, now, now + LEASE):
                    continue
                d, hook = s.execute(
                    select(WebhookDelivery, Webhook)
                    .join(Webhook, Webhook.id == WebhookDelivery.webhook_id)
                    .where(WebhookDelivery.id == delivery_id)
                ).one()
                out.append((d.id, d.attempts, d.event, hook.url, hook.secret_sealed, dict(d.payload)))
        return out

    async def _send(
        self,
        client: httpx.AsyncClient,
        delivery_id: str,
        attempt: int,
        event: str,
        url: str,
        sealed: str,
        payload: dict,
    ) -> None:
        body = msgspec.json.encode(payload)
        status: int | None = None
        error = ""
        try:
            secret = secrets.unseal(sealed)
            headers = {
                "Content-Type": "application/json",
                "User-Agent": "Boxcar-Webhook/1",
                "X-Boxcar-Event": event,
                "X-Boxcar-Delivery": delivery_id,
                "X-Boxcar-Signature-256": sign(secret, body),
            }
            response = await client.post(url, content=body, headers=headers)
            status = response.status_code
            if not 200 <= status < 300:
                error = f"HTTP {status}: {response.text[:300]}"
        except Exception as exc:  # refused by the policy, unreachable, timed out, a bad secret
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        await asyncio.to_thread(self._record_outcome, delivery_id, attempt, status, error, event)

    def _record_outcome(self, delivery_id: str, attempt: int, status: int | None, error: str, event: str) -> None:
        """Record an attempt: delivered, due again later, or failed after the last attempt
        (counted in ``boxcar_webhook_deliveries_total`` once committed, unless another replica
        had recorded it already)."""
        now = utcnow()
        with self.db.write() as s:
            if not error:
                recorded, outcome = q.mark_delivered(s, delivery_id, attempt, status or 0, now), "delivered"
            elif attempt >= self.settings.webhook_max_attempts:
                recorded, outcome = q.mark_failed(s, delivery_id, attempt, status, error), "failed"
                log.warning("webhook delivery %s failed after %d attempts: %s", delivery_id, attempt, error[:300])
            else:
                at = now + backoff(self.settings, attempt)
                recorded, outcome = q.retry_later(s, delivery_id, attempt, status, error, at), "retrying"
            if recorded:
                after_commit(s, metrics.WEBHOOK_DELIVERIES.labels(event, outcome).inc)
