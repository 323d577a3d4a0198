"""Feed subscriptions: polling due CrawlSchedules and turning new items into crawls.

A schedule is claimed like any other row (conditional update, lease on ``retry_at``). Its feed is
fetched with conditional GET (``If-None-Match``/``If-Modified-Since`` from the last response)
under the egress policy hooks fetch under (``boxcar.shared.fetch.policy_client``: every address and
every redirect checked, so a feed never reaches the stack's own services or cloud metadata),
within ``FEED_FETCH_TIMEOUT`` seconds in all (a server that drips a byte at a time cannot hold a
poll) and at most ``MAX_FEED_BYTES``; up to ``FEED_POLL_CONCURRENCY`` feeds are fetched at once,
so one slow feed never holds up the others. Relative item links are resolved against the feed's
URL; an item that still gives no archivable URL is counted on the subscription with the reason.

Items are keyed by GUID, else by link. An item is new when no earlier poll recorded it, or when
the crawl that took it ended without archiving it (cancelled, never captured): a feed item counts
as seen once it is archived, not once it is read. New items become one crawl (titles, dates and
categories kept, the subscription's tags added). A failed poll is retried with exponential
back-off (1 min, 2, 4, … at most 6 h) and its error is kept on the schedule; the next success
resets both.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import httpx
import msgspec

from boxcar.crawl_runner import queries as q
from boxcar.shared import bus, importers, metrics, secrets, telemetry
from boxcar.shared.admission import admit, archived_keys
from boxcar.shared.clock import utcnow
from boxcar.shared.crawlconfig import CrawlConfig
from boxcar.shared.db import insert_seeds
from boxcar.shared.db.models import Crawl, CrawlSchedule
from boxcar.shared.egress import EgressPolicy
from boxcar.shared.fetch import policy_client
from boxcar.shared.messages import FeedNewItems, Seed
from boxcar.shared.schedules import backoff, next_run

if TYPE_CHECKING:
    from boxcar.crawl_runner.runner import CrawlRunner

log = logging.getLogger("boxcar.crawl_runner.feeds")
tracer = telemetry.tracer("boxcar.crawl_runner")

USER_AGENT = "Boxcar feed poller (+https://github.com/boxcar-archiver)"
MAX_FEED_BYTES = 20 * 1024 * 1024
FEED_FETCH_TIMEOUT = 60.0
FEED_POLL_CONCURRENCY = 4
FEED_LEASE_SECONDS = 2 * FEED_FETCH_TIMEOUT


class FeedResponse:
    """One poll's outcome: ``not_modified``, or ``content`` with its validators."""

    def __init__(
        self,
        *,
        not_modified: bool = False,
        content: bytes = b"",
        etag: str = "",
        last_modified: str = "",
        url: str = "",
    ) -> None:
        self.url = url  # after redirects: what relative item links resolve against
        self.not_modified = not_modified
        self.content = content
        self.etag = etag
        self.last_modified = last_modified


async def fetch_feed(client: httpx.AsyncClient, url: str, etag: str, last_modified: str) -> FeedResponse:
    """GET a feed conditionally, within ``FEED_FETCH_TIMEOUT`` seconds and ``MAX_FEED_BYTES``.

    Raises:
        httpx.HTTPError / ValueError / TimeoutError: network failure, an error status, an over-large
            body or a too slow server (the message is what the schedule's ``last_error`` shows).
    """
    headers = {
        "User-Agent": USER_AGENT,
        "Accept": "application/rss+xml, application/atom+xml, application/feed+json, application/xml;q=0.9, */*;q=0.8",
    }
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified

    async def fetch() -> FeedResponse:
        async with client.stream("GET", url, headers=headers) as response:
            if response.status_code == 304:
                return FeedResponse(not_modified=True, etag=etag, last_modified=last_modified)
            if response.status_code >= 400:
                raise ValueError(f"HTTP {response.status_code} from {url}")
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body.extend(chunk)
                if len(body) > MAX_FEED_BYTES:
                    raise ValueError(f"feed larger than {MAX_FEED_BYTES // (1024 * 1024)} MiB")
            return FeedResponse(
                url=str(response.url),
                content=bytes(body),
                etag=response.headers.get("etag", ""),
                last_modified=response.headers.get("last-modified", ""),
            )

    try:
        return await asyncio.wait_for(fetch(), FEED_FETCH_TIMEOUT)
    except TimeoutError:
        raise TimeoutError(f"feed took longer than {FEED_FETCH_TIMEOUT:.0f}s to download") from None


def item_key(entry: importers.Entry, seed: Seed) -> str:
    """A feed item's key: sha256 of its GUID, else of its (canonical) URL."""
    return hashlib.sha256((entry.guid or seed.url).encode("utf-8")).hexdigest()


def feed_items(content: bytes, feed_url: str) -> tuple[dict[str, Seed], list[importers.Rejected]]:
    """Parse a feed into ``({item_key: seed}, rejected items)``; relative links resolve against
    ``feed_url``; URL credentials are sealed.

    Raises:
        ValueError: the content is not a feed.
    """
    result = importers.parse(content, base_url=feed_url)
    if result.format not in importers.FEED_FORMATS:
        raise ValueError(f"not a feed (the content looks like {result.format})")
    pairs, bad = result.seeds(seal=secrets.seal)
    return {item_key(entry, seed): seed for entry, seed in pairs}, list(result.rejected) + bad


class FeedPoller:
    """The crawl-runner's feed loop (its own loop: a slow feed never delays snapshots)."""

    def __init__(self, runner: CrawlRunner) -> None:
        self.runner = runner
        self.db = runner.db
        self.settings = runner.settings
        self._wake = asyncio.Event()
        self._slots = asyncio.Semaphore(FEED_POLL_CONCURRENCY)
        self._polling: set[asyncio.Task] = set()

    def wake(self) -> None:
        self._wake.set()

    async def on_wakeup(self, msg) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Poll due feeds until ``stop``; polls in flight are cancelled at shutdown (their leases
        expire and another replica polls again)."""
        timeout = httpx.Timeout(20.0, connect=10.0)
        policy = EgressPolicy.from_settings(self.settings)  # the hooks' policy, for every address and redirect
        async with policy_client(policy, timeout=timeout, follow_redirects=True, max_redirects=10) as http:
            self.http = http
            try:
                while not stop.is_set():
                    self._wake.clear()
                    try:
                        await self._start_due_polls()
                    except Exception:
                        log.exception("feed polling failed; retrying")
                    waiters = {asyncio.create_task(self._wake.wait()), asyncio.create_task(stop.wait())}
                    await asyncio.wait(
                        waiters,
                        timeout=await asyncio.to_thread(self._seconds_until_due),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    for waiter in waiters:
                        waiter.cancel()
            finally:
                for poll in self._polling:
                    poll.cancel()
                await asyncio.gather(*self._polling, return_exceptions=True)

    def _seconds_until_due(self) -> float:
        with self.db.read() as s:
            nearest = q.earliest_schedule_due(s)
        if nearest is None:
            return 300.0
        return min(300.0, max(1.0, (nearest - utcnow()).total_seconds()))

    async def _start_due_polls(self) -> None:
        now = utcnow()
        with self.db.read() as s:
            due = q.due_schedules(s, now, limit=FEED_POLL_CONCURRENCY * 4)
        for schedule_id, status, seen in due:
            if self._slots.locked():
                break
            with self.db.write() as s:
                schedule = q.claim_schedule(s, schedule_id, status, seen, now, timedelta(seconds=FEED_LEASE_SECONDS))
            if schedule is None:
                continue
            if not schedule.feed_url:  # a URL schedule: one crawl of its URLs, made here at once
                crawl_id = await asyncio.to_thread(self._run_url_schedule, schedule, schedule.retry_at)
                if crawl_id:
                    log.info("schedule %s ran → crawl %s", schedule.id, crawl_id)
                    self.runner._wake.set()
                continue
            await self._slots.acquire()
            task = asyncio.create_task(self._poll(schedule))
            self._polling.add(task)
            task.add_done_callback(lambda t: (self._polling.discard(t), self._slots.release(), self._wake.set()))

    async def _poll(self, schedule: CrawlSchedule) -> None:
        lease_until = schedule.retry_at
        with tracer.start_as_current_span("feed.poll") as span:
            span.set_attribute("url.full", schedule.feed_url)
            span.set_attribute("boxcar.schedule_id", schedule.id)
            try:
                response = await fetch_feed(self.http, schedule.feed_url, schedule.etag, schedule.last_modified)
                parsed = (
                    None if response.not_modified else feed_items(response.content, response.url or schedule.feed_url)
                )
                created = await asyncio.to_thread(self._record_poll, schedule, lease_until, response, parsed)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # network, HTTP status, not a feed, bad config: the schedule shows why
                reason = str(exc) if isinstance(exc, (ValueError, TimeoutError)) else f"{type(exc).__name__}: {exc}"
                log.warning("feed %s (%s) failed: %s", schedule.id, schedule.feed_url, reason[:300])
                await asyncio.to_thread(self._record_failure, schedule, lease_until, reason)
                metrics.FEED_POLLS.labels("failed").inc()
                return
        outcome = "new_items" if created else "not_modified" if response.not_modified else "no_new_items"
        metrics.FEED_POLLS.labels(outcome).inc()
        if created:
            metrics.FEED_ITEMS.inc(created[1])
            log.info("feed %s: %d new item(s) → crawl %s", schedule.id, created[1], created[0])
            self.runner._wake.set()
            notice = FeedNewItems(schedule_id=schedule.id, crawl_id=created[0], new_items=created[1], at=utcnow())
            try:  # after the commit; the crawl is made whether or not this notice gets out
                await self.runner._publish(
                    [bus.Outgoing.make(bus.SUBJECT_FEED_NEW_ITEMS, notice, f"feed.{created[0]}.new_items")]
                )
            except Exception as exc:
                log.warning("feed %s: the new-items event was not published: %s", schedule.id, exc)

    def _record_poll(
        self, schedule: CrawlSchedule, lease_until: datetime, response: FeedResponse, parsed
    ) -> tuple[str, int] | None:
        """Record a successful poll: new items become one crawl; returns ``(crawl_id, n)`` or None.

        Raises:
            ConfigError: the subscription's config is no longer valid here (e.g. a cookies file
                was removed): the poll fails and shows it.
        """
        now = utcnow()
        template = schedule.template or {}
        config = CrawlConfig.build(self.settings, self.runner.catalog, template.get("config") or {})
        tags = list(template.get("tags") or [])
        by_key, rejected = parsed if parsed else ({}, [])
        crawl = None
        with self.db.write() as s:
            keys = list(by_key)
            fresh = q.unseen_feed_keys(s, schedule.id, keys) | q.feed_keys_to_retry(s, schedule.id, keys)
            admission = admit((by_key[k] for k in keys if k in fresh), config.url_filter())
            if config.only_new:
                admission = admission.without(archived_keys(s, admission.seeds, schedule.created_by))
            taken = {seed.key for seed in admission.seeds}
            if admission.seeds:
                tagged = [
                    msgspec.structs.replace(seed, tags=tuple(dict.fromkeys([*tags, *seed.tags])))
                    for seed in admission.seeds
                ]
                crawl = Crawl.new(
                    user=schedule.created_by,
                    first_url=tagged[0].url,
                    seed_count=len(tagged),
                    now=now,
                    max_depth=int(template.get("max_depth") or 0),
                    tags_str=",".join(tags),
                    plugins=list(template.get("plugins") or self.settings.plugins),
                    config=config.values,
                    label=f"feed: {schedule.label or schedule.feed_url}"[:256],
                    schedule_id=schedule.id,
                    trace_context=telemetry.current_carrier(),
                )
                s.add(crawl)
                s.flush()
                insert_seeds(s, crawl.id, tagged)
            q.record_feed_items(
                s,
                schedule.id,
                {k: (by_key[k].url, crawl.id if crawl and by_key[k].key in taken else None) for k in fresh},
                now,
            )
            extra = {"last_run_at": now} if crawl else {}
            if parsed is not None:
                extra["items_rejected"] = len(rejected) + len(admission.rejected)
                reasons = [r.reason for r in rejected] + [r.reason for r in admission.rejected]
                extra["last_rejection"] = reasons[-1][:500] if reasons else ""
            if not q.finish_schedule_poll(
                s,
                schedule,
                lease_until,
                now,
                next_run(schedule.schedule, now),
                etag=response.etag,
                last_modified=response.last_modified,
                failures=0,
                last_error="",
                **extra,
            ):
                s.rollback()  # paused, deleted or taken over while we fetched: its next poll redoes this
                return None
        return (crawl.id, crawl.seed_count) if crawl else None

    def _run_url_schedule(self, schedule: CrawlSchedule, lease_until: datetime | None) -> str | None:
        """One run of a URL schedule (``UrlScheduleService``): a crawl of its URLs with
        ``ONLY_NEW`` off (every run new snapshots), and the next run time; returns the crawl id, or
        None when the schedule was paused or removed meanwhile, or its settings no longer hold (the
        schedule then shows why and tries again later)."""
        now = utcnow()
        template = schedule.template or {}
        with tracer.start_as_current_span("schedule.run") as span:
            span.set_attribute("boxcar.schedule_id", schedule.id)
            try:
                config = CrawlConfig.build(
                    self.settings, self.runner.catalog, {**(template.get("config") or {}), "ONLY_NEW": False}
                )
            except ValueError as exc:
                self._record_failure(schedule, lease_until, str(exc))
                return None
            tags = tuple(template.get("tags") or [])
            seeds = [
                Seed(url=u["url"], tags=tags, source=f"schedule {schedule.id}", credentials=u.get("credentials", ""))
                for u in template.get("urls") or []
            ]
            admission = admit(seeds, config.url_filter())
            with self.db.write() as s:
                crawl = None
                if admission.seeds:
                    crawl = Crawl.new(
                        user=schedule.created_by,
                        first_url=admission.seeds[0].url,
                        seed_count=len(admission.seeds),
                        now=now,
                        max_depth=int(template.get("max_depth") or 0),
                        tags_str=",".join(tags),
                        plugins=list(template.get("plugins") or self.settings.plugins),
                        config=config.values,
                        label=f"schedule: {schedule.label or admission.seeds[0].url}"[:256],
                        schedule_id=schedule.id,
                        trace_context=telemetry.current_carrier(),
                    )
                    s.add(crawl)
                    s.flush()
                    insert_seeds(s, crawl.id, admission.seeds)
                rejected = "; ".join(f"{r.value}: {r.reason}" for r in admission.rejected)[:2000]
                if not q.finish_schedule_poll(
                    s,
                    schedule,
                    lease_until,
                    now,
                    next_run(schedule.schedule, now),
                    failures=0,
                    last_error=rejected,
                    **({"last_run_at": now} if crawl else {}),
                ):
                    s.rollback()  # paused or removed meanwhile: no run
                    return None
            return crawl.id if crawl else None

    def _record_failure(self, schedule: CrawlSchedule, lease_until: datetime, reason: str) -> None:
        now = utcnow()
        failures = schedule.failures + 1
        with self.db.write() as s:
            q.finish_schedule_poll(
                s, schedule, lease_until, now, now + backoff(failures), failures=failures, last_error=reason[:2000]
            )
