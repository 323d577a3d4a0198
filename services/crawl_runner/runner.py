"""The crawl-runner: advances Crawls and Snapshots through their lifecycle.

It is the only service that changes Crawl/Snapshot status (DESIGN.md rule 2). Work arrives three
ways, and every path is a conditional update in ``queries`` followed by publishing:

1. **Due rows** (polled every ``RUNNER_POLL_INTERVAL`` s, or at once on a ``crawl.queued``
   wake-up): queued crawls get their seed snapshots; queued snapshots are claimed and their first
   stage dispatched; expired leases are taken over; planned-but-unpublished tasks are published.
2. **Task completions** (durable consumer ``runner`` on ``events.task.completed.>``): the task is
   recorded, discovered URLs become child snapshots (up to ``max_depth``), and when a stage has
   no open task left the snapshot moves to its next stage, to finalize, or is sealed.
3. **Dead tasks** (``TASK_DEAD``: JetStream's max-deliveries advisories): the task is recorded
   as failed so its snapshot still seals.

Messages are published after the transaction commits and acked only after that, so a crash at
any point leaves either a due row or an unacked message for any replica to pick up.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from datetime import datetime, timedelta

import httpx
import msgspec
from nats.js import JetStreamContext

from boxcar.crawl_runner import feeds
from boxcar.crawl_runner import queries as q
from boxcar.crawl_runner.planner import Plan, plan_for
from boxcar.shared import bus, telemetry
from boxcar.shared.admission import Candidate, admit, config_flag
from boxcar.shared.db import Database
from boxcar.shared.db.models import FINALIZE_STAGE, Crawl, Snapshot, SnapshotTask, utcnow
from boxcar.shared.families import FamilyTable, load_families
from boxcar.shared.ids import new_id
from boxcar.shared.messages import (
    CrawlControl,
    CrawlEvent,
    HookTask,
    ResultSummary,
    ScheduleControl,
    SnapshotEvent,
    SnapshotInfo,
    TaskCompleted,
    decode,
)
from boxcar.shared.plugins import PluginCatalog, get_catalog
from boxcar.shared.schedules import backoff, next_run
from boxcar.shared.settings import Settings
from boxcar.shared.urls import InvalidURL, UrlFilter, canonicalize

log = logging.getLogger("boxcar.crawl_runner")
tracer = telemetry.tracer("boxcar.crawl_runner")

STALE_PLANNED_AFTER = timedelta(seconds=20)


def seed_snapshot(seed: dict) -> q.NewSnapshot:
    """A ``Crawl.seeds`` entry (canonical URL, optional title/tags/ISO date) as a snapshot to create."""
    when = seed.get("bookmarked_at")
    return q.NewSnapshot(
        seed["url"], seed.get("title"), seed.get("tags") or [], datetime.fromisoformat(when) if when else None
    )


class CrawlRunner:
    """One crawl-runner replica. Any number may run against the same database and NATS."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        catalog: PluginCatalog | None = None,
        families: FamilyTable | None = None,
    ) -> None:
        self.settings = settings
        self.db = db
        self.catalog = catalog or get_catalog()
        self.families = families or load_families()
        self.runner_id = f"{socket.gethostname()}:{os.getpid()}:{new_id()[-6:]}"
        self.snapshot_lease = timedelta(seconds=settings.snapshot_lease_seconds)
        self.crawl_lease = timedelta(seconds=settings.crawl_lease_seconds)
        self.feed_lease = timedelta(seconds=120)  # longer than one feed fetch can take
        self._plans: dict[str, Plan] = {}
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self.js: JetStreamContext | None = None

    # ------------------------------------------------------------------ service loop

    async def run(self) -> None:
        """Connect, make sure streams and consumers exist, and work until ``stop()``."""
        nc = await bus.connect(self.settings.nats_url, f"crawl-runner {self.runner_id}")
        self.js = nc.jetstream()
        await bus.ensure_streams(self.js)
        await bus.ensure_consumer(self.js, bus.EVENTS_STREAM, bus.RUNNER_CONSUMER, bus.SUBJECT_TASK_COMPLETED_ALL)
        await bus.ensure_consumer(self.js, bus.TASK_DEAD_STREAM, bus.RUNNER_DEAD_CONSUMER, bus.MAX_DELIVERIES_ADVISORY)
        await bus.ensure_consumer(self.js, bus.CONTROL_STREAM, bus.RUNNER_CONTROL_CONSUMER, "control.>")
        await nc.subscribe(bus.SUBJECT_CRAWL_QUEUED, cb=self._on_wakeup)
        completions = await bus.pull(self.js, bus.EVENTS_STREAM, bus.RUNNER_CONSUMER)
        dead = await bus.pull(self.js, bus.TASK_DEAD_STREAM, bus.RUNNER_DEAD_CONSUMER)
        control = await bus.pull(self.js, bus.CONTROL_STREAM, bus.RUNNER_CONTROL_CONSUMER)
        self.http = httpx.AsyncClient(timeout=httpx.Timeout(30.0), follow_redirects=True)
        log.info("crawl-runner %s ready", self.runner_id)
        try:
            await asyncio.gather(
                self._poll_loop(),
                self._feed_loop(),
                self._consume(completions, self._on_completed),
                self._consume(dead, self._on_dead_task),
                self._consume(control, self._on_control),
            )
        finally:
            await self.http.aclose()
            await nc.close()

    def stop(self) -> None:
        """Ask the loops to finish their current step and return."""
        self._stop.set()
        self._wake.set()

    async def _feed_loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self._poll_due_feeds()
            except Exception:
                log.exception("feed polling failed; retrying")
            try:
                await asyncio.wait_for(self._stop.wait(), self.settings.runner_poll_interval)
            except TimeoutError:
                pass

    async def _on_wakeup(self, msg) -> None:
        self._wake.set()

    async def _poll_loop(self) -> None:
        while not self._stop.is_set():
            try:
                await self.tick()
            except Exception:
                log.exception("runner tick failed; retrying")
            try:
                await asyncio.wait_for(self._wake.wait(), self.settings.runner_poll_interval)
            except TimeoutError:
                pass
            self._wake.clear()

    async def _consume(self, sub, handler) -> None:
        while not self._stop.is_set():
            try:
                msgs = await sub.fetch(20, timeout=1)
            except TimeoutError:
                continue
            except Exception as exc:  # connection blips: nats-py reconnects underneath
                log.warning("fetch failed: %s", exc)
                await asyncio.sleep(1)
                continue
            for msg in msgs:
                try:
                    await handler(msg)
                    await msg.ack()
                except Exception:
                    log.exception("handling %s failed; it will be redelivered", msg.subject)
                    await msg.nak(delay=2)

    async def tick(self) -> None:
        """One pass over every kind of due row (feeds have their own loop: a slow feed must not hold
        up snapshots)."""
        for step in (
            self._start_due_crawls,
            self._start_due_snapshots,
            self._recover_expired_snapshots,
            self._check_due_crawls,
            self._republish_planned,
        ):
            out = await asyncio.to_thread(step)
            await self._publish(out)

    async def _publish(self, out: list[bus.Outgoing]) -> None:
        if not out:
            return
        await bus.publish_many(self.js, out)
        task_ids = [o.msg.task_id for o in out if isinstance(o.msg, HookTask)]
        if task_ids:
            await asyncio.to_thread(self._mark_dispatched, task_ids)
        if any(isinstance(o.msg, SnapshotEvent) and o.msg.status == "sealed" for o in out):
            self._wake.set()  # a seal frees a concurrency slot for the next queued snapshot

    def _mark_dispatched(self, task_ids: list[str]) -> None:
        with self.db.write() as s:
            q.mark_dispatched(s, task_ids, utcnow())

    # ------------------------------------------------------------------ due rows

    def _start_due_crawls(self) -> list[bus.Outgoing]:
        out: list[bus.Outgoing] = []
        now = utcnow()
        with self.db.read() as s:
            due = [d for d in q.due_crawls(s, now) if d[1] == "queued"]
        for crawl_id, _, seen in due:
            with self.db.write() as s:
                crawl = q.claim_queued_crawl(s, crawl_id, seen, now, self.crawl_lease)
                if crawl is None:
                    continue
                with tracer.start_as_current_span(
                    "crawl.start", context=telemetry.context_from(crawl.trace_context)
                ) as span:
                    span.set_attribute("boxcar.crawl_id", crawl.id)
                    seeds = self._seed_snapshots(crawl)
                    created = q.insert_snapshots(
                        s,
                        crawl,
                        seeds,
                        depth=0,
                        parent_id=None,
                        now=now,
                        user=crawl.created_by,
                        max_urls=self._max_urls(crawl),
                    )
                    span.set_attribute("boxcar.snapshots", len(created))
                    out.append(
                        bus.Outgoing.make(
                            "events.crawl.started",
                            CrawlEvent(crawl_id=crawl.id, status="started", at=now),
                            f"crawl.{crawl.id}.started",
                        )
                    )
                    if not created and q.seal_crawl_if_done(s, crawl.id, now):
                        out.append(self._crawl_sealed(crawl.id, now))
            log.info("crawl %s started", crawl_id)
        return out

    def _seed_snapshots(self, crawl: Crawl) -> list[q.NewSnapshot]:
        items = []
        for seed in crawl.seeds or []:
            try:
                items.append(seed_snapshot({**seed, "url": canonicalize(seed["url"])}))
            except (InvalidURL, KeyError, TypeError, ValueError):
                log.warning("crawl %s: skipping invalid seed %r", crawl.id, seed)
        return items

    def _max_urls(self, crawl: Crawl) -> int:
        try:
            return int((crawl.config or {}).get("CRAWL_MAX_URLS", self.settings.crawl_max_urls))
        except ValueError:
            return self.settings.crawl_max_urls

    def _start_due_snapshots(self) -> list[bus.Outgoing]:
        out: list[bus.Outgoing] = []
        now = utcnow()
        with self.db.read() as s:
            due = q.due_queued_snapshots(s, now, limit=200)
            running = q.started_counts(s, (c for _, c, _ in due))
        for snapshot_id, crawl_id, seen in due:
            with self.db.write() as s:
                crawl = s.get(Crawl, crawl_id)
                if running.get(crawl_id, 0) >= self._concurrency(crawl):
                    continue
                try:
                    plan = self._plan(crawl)
                except ValueError as exc:
                    log.error("crawl %s has nothing to run: %s", crawl_id, exc)
                    continue
                snap = q.claim_queued_snapshot(s, snapshot_id, seen, now, self.snapshot_lease, plan.first_stage)
                if snap is None:
                    continue
                running[crawl_id] = running.get(crawl_id, 0) + 1
                with tracer.start_as_current_span(
                    "snapshot.start", context=telemetry.context_from(crawl.trace_context)
                ) as span:
                    span.set_attribute("boxcar.snapshot_id", snap.id)
                    span.set_attribute("url.full", snap.url)
                    out.append(self._snapshot_event(snap, "started", now))
                    out.extend(self._dispatch_stage(s, crawl, snap, plan, snap.stage, now))
        return out

    def _concurrency(self, crawl: Crawl) -> int:
        """``CRAWL_MAX_CONCURRENT_SNAPSHOTS`` of the crawl (its config overrides the setting).

        A soft limit: two replicas claiming at the same instant may start one snapshot more.
        """
        try:
            return max(
                1,
                int(
                    (crawl.config or {}).get(
                        "CRAWL_MAX_CONCURRENT_SNAPSHOTS", self.settings.crawl_max_concurrent_snapshots
                    )
                ),
            )
        except ValueError:
            return self.settings.crawl_max_concurrent_snapshots

    def _recover_expired_snapshots(self) -> list[bus.Outgoing]:
        """Take over started snapshots whose lease ran out and push them forward if they can move."""
        out: list[bus.Outgoing] = []
        now = utcnow()
        with self.db.read() as s:
            due = q.due_started_snapshots(s, now)
        for snapshot_id, seen in due:
            with self.db.write() as s:
                snap = q.claim_started_snapshot(s, snapshot_id, seen, now, self.snapshot_lease)
                if snap is None:
                    continue
                if not q.open_tasks(s, snap.id, snap.stage):
                    crawl = s.get(Crawl, snap.crawl_id)
                    log.info("snapshot %s: stage %s complete on lease expiry; advancing", snap.id, snap.stage)
                    with tracer.start_as_current_span(
                        "snapshot.recover", context=telemetry.context_from(crawl.trace_context)
                    ):
                        out.extend(self._advance(s, crawl, snap, now))
        return out

    def _check_due_crawls(self) -> list[bus.Outgoing]:
        """Backstop for crawl sealing: a started crawl re-checks itself every ``CRAWL_LEASE_SECONDS``."""
        out: list[bus.Outgoing] = []
        now = utcnow()
        with self.db.read() as s:
            due = [d for d in q.due_crawls(s, now) if d[1] == "started"]
        for crawl_id, _, seen in due:
            with self.db.write() as s:
                if q.claim_started_crawl(s, crawl_id, seen, now, self.crawl_lease) and q.seal_crawl_if_done(
                    s, crawl_id, now
                ):
                    out.append(self._crawl_sealed(crawl_id, now))
        return out

    def _republish_planned(self) -> list[bus.Outgoing]:
        """Publish tasks that were committed but never acked by the stream (a runner died)."""
        now = utcnow()
        out: list[bus.Outgoing] = []
        with self.db.read() as s:
            for task in q.stale_planned_tasks(s, now - STALE_PLANNED_AFTER):
                snap = s.get(Snapshot, task.snapshot_id)
                crawl = s.get(Crawl, task.crawl_id)
                log.info("re-publishing planned task %s", task.id)
                with tracer.start_as_current_span(
                    "task.republish", context=telemetry.context_from(crawl.trace_context)
                ):
                    out.append(self._task_message(s, crawl, snap, task))
        return out

    # ------------------------------------------------------------------ feeds

    async def _poll_due_feeds(self) -> None:
        """Poll every due feed subscription once (each claimed, so replicas never poll one twice)."""
        now = utcnow()

        def due():
            with self.db.read() as s:
                return q.due_schedules(s, now)

        def claim(schedule_id: str, status: str, seen: datetime):
            with self.db.write() as s:
                return q.claim_schedule(s, schedule_id, status, seen, now, self.feed_lease)

        for schedule_id, status, seen in await asyncio.to_thread(due):
            schedule = await asyncio.to_thread(claim, schedule_id, status, seen)
            if schedule is None or not schedule.feed_url:
                continue
            lease_until = schedule.retry_at
            with tracer.start_as_current_span("feed.poll") as span:
                span.set_attribute("url.full", schedule.feed_url)
                span.set_attribute("boxcar.schedule_id", schedule.id)
                try:
                    response = await feeds.fetch_feed(
                        self.http, schedule.feed_url, schedule.etag, schedule.last_modified
                    )
                    keyed = [] if response.not_modified else feeds.feed_entries(response.content)[1]
                except Exception as exc:  # network, HTTP status, not a feed: the schedule shows why
                    reason = f"{type(exc).__name__}: {exc}" if not isinstance(exc, ValueError) else str(exc)
                    log.warning("feed %s (%s) failed: %s", schedule.id, schedule.feed_url, reason)
                    await asyncio.to_thread(self._record_feed_failure, schedule, lease_until, reason)
                    continue
                created = await asyncio.to_thread(self._record_feed_poll, schedule, lease_until, response, keyed)
                if created:
                    log.info("feed %s: %d new item(s) → crawl %s", schedule.id, created[1], created[0])
                    self._wake.set()

    def _record_feed_poll(
        self, schedule, lease_until: datetime, response: feeds.FeedResponse, keyed: list
    ) -> tuple[str, int] | None:
        """Record a successful poll: new items become one crawl; returns ``(crawl_id, n)`` or None."""
        now = utcnow()
        template = schedule.template or {}
        config = {k: str(v) for k, v in (template.get("config") or {}).items()}
        with self.db.write() as s:
            fresh = q.unseen_feed_keys(s, schedule.id, {k: e.url for k, e in keyed})
            entries = list({k: e for k, e in keyed if k in fresh}.items())
            try:
                url_filter = UrlFilter.from_config(config, self.settings.url_allowlist, self.settings.url_denylist)
            except ValueError:
                url_filter = UrlFilter()
            tags = list(template.get("tags") or [])
            admission = admit(
                s,
                [
                    (
                        f"item {i + 1}",
                        Candidate(url=e.url, title=e.title, tags=tags + list(e.tags), bookmarked_at=e.bookmarked_at),
                    )
                    for i, (_, e) in enumerate(entries)
                ],
                url_filter=url_filter,
                only_new=config_flag(config, "ONLY_NEW", self.settings.only_new),
            )
            crawl = None
            if admission.seeds:
                crawl = Crawl.new(
                    user=schedule.created_by,
                    seeds=admission.seeds,
                    now=now,
                    max_depth=int(template.get("max_depth") or 0),
                    tags_str=",".join(tags),
                    plugins=list(template.get("plugins") or []),
                    config=config,
                    label=f"feed: {schedule.label or schedule.feed_url}"[:256],
                    schedule_id=schedule.id,
                    trace_context=telemetry.current_carrier(),
                )
                s.add(crawl)
                s.flush()
            q.record_feed_items(s, schedule.id, {k: e.url for k, e in entries}, crawl.id if crawl else None, now)
            extra = {"last_run_at": now} if crawl else {}
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
        return (crawl.id, len(admission.seeds)) if crawl else None

    def _record_feed_failure(self, schedule, lease_until: datetime, reason: str) -> None:
        now = utcnow()
        failures = schedule.failures + 1
        with self.db.write() as s:
            q.finish_schedule_poll(
                s, schedule, lease_until, now, now + backoff(failures), failures=failures, last_error=reason[:2000]
            )

    # ------------------------------------------------------------------ control

    async def _on_control(self, msg) -> None:
        """Apply a user's pause/resume/cancel/poll request (conditional updates, idempotent)."""
        kind = msg.subject.split(".")[1] if msg.subject.count(".") >= 2 else ""
        now = utcnow()
        try:
            if kind == "crawl":
                request = decode(msg.data, CrawlControl)
                action = {"pause": q.pause_crawl, "resume": q.resume_crawl, "cancel": q.cancel_crawl}[request.action]
                target = request.crawl_id
            elif kind == "schedule":
                request = decode(msg.data, ScheduleControl)
                action = {"poll": q.request_schedule_poll, "pause": q.pause_schedule, "resume": q.resume_schedule}[
                    request.action
                ]
                target = request.schedule_id
            else:
                log.error("dropping control message on unknown subject %s", msg.subject)
                return
        except msgspec.ValidationError as exc:
            log.error("dropping malformed control message on %s: %s", msg.subject, exc)
            return

        def apply() -> bool:
            with self.db.write() as s:
                return action(s, target, now)

        changed = await asyncio.to_thread(apply)
        log.info("%s %s %s: %s", kind, target, request.action, "done" if changed else "nothing to change")
        self._wake.set()

    # ------------------------------------------------------------------ completions

    async def _on_completed(self, msg) -> None:
        try:
            event = decode(msg.data, TaskCompleted)
        except msgspec.ValidationError as exc:
            log.error("dropping malformed task completion on %s: %s", msg.subject, exc)
            return
        with tracer.start_as_current_span(
            "task.completed", context=telemetry.context_from(bus.headers_of(msg))
        ) as span:
            span.set_attribute("boxcar.task_id", event.task_id)
            out = await asyncio.to_thread(self.record_completion, event)
            await self._publish(out)

    async def _on_dead_task(self, msg) -> None:
        """A task exhausted its deliveries: record it failed so the snapshot can still seal."""
        advisory = msgspec.json.decode(msg.data)
        seq = advisory.get("stream_seq")
        try:
            raw = await self.js.get_msg(bus.TASKS_STREAM, seq)
        except Exception as exc:  # already deleted by another replica
            log.info("dead task seq %s not found (%s)", seq, exc)
            return
        task = decode(raw.data, HookTask)
        deliveries = advisory.get("deliveries")
        log.warning("task %s gave up after %s deliveries", task.task_id, deliveries)
        event = TaskCompleted.of(
            task,
            status="failed",
            error=f"task failed {deliveries} deliveries (executor crashed or timed out)",
        )
        out = await asyncio.to_thread(self.record_completion, event)
        await self._publish(out)
        try:
            await self.js.delete_msg(bus.TASKS_STREAM, seq)
        except Exception as exc:
            log.info("dead task seq %s already deleted (%s)", seq, exc)

    def record_completion(self, event: TaskCompleted) -> list[bus.Outgoing]:
        """Record one task completion and move its snapshot on when its stage is done.

        Safe to run twice for the same event: the second run finds the task already recorded
        or the snapshot no longer at that stage, and changes nothing.
        """
        now = utcnow()
        with self.db.write() as s:
            snap = q.lock_snapshot_at_stage(s, event.snapshot_id, event.stage, now)
            if snap is None:
                log.debug("stale completion %s (snapshot moved on)", event.task_id)
                return []
            results = [msgspec.to_builtins(r) for r in event.results]
            if not q.complete_task(s, event.task_id, event.status, results, event.error, now):
                log.debug("duplicate completion %s", event.task_id)
            crawl = s.get(Crawl, snap.crawl_id)
            if event.discovered and snap.depth < crawl.max_depth:
                self._add_discovered(s, crawl, snap, event, now)
            if event.tags:
                q.attach_tags(s, {snap.id: event.tags})
            if q.open_tasks(s, snap.id, snap.stage):
                return []
            return self._advance(s, crawl, snap, now)

    def _add_discovered(self, s, crawl: Crawl, snap: Snapshot, event: TaskCompleted, now: datetime) -> None:
        """Queue the URLs a snapshot's hooks found, as children one level deeper (URL policy applied)."""
        config = crawl.config or {}
        try:
            url_filter = UrlFilter.from_config(config, self.settings.url_allowlist, self.settings.url_denylist)
        except ValueError as exc:
            log.error("crawl %s: %s; discovered URLs not filtered", crawl.id, exc)
            url_filter = UrlFilter()
        candidates = [
            (
                found.plugin or "hook",
                Candidate(url=found.url, title=found.title, tags=found.tags, bookmarked_at=found.bookmarked_at),
            )
            for found in event.discovered
        ]
        admission = admit(
            s, candidates, url_filter=url_filter, only_new=config_flag(config, "ONLY_NEW", self.settings.only_new)
        )
        items = [seed_snapshot(seed) for seed in admission.seeds if seed["url"] != snap.url]
        created = q.insert_snapshots(
            s,
            crawl,
            items,
            depth=snap.depth + 1,
            parent_id=snap.id,
            now=now,
            user=crawl.created_by,
            max_urls=self._max_urls(crawl),
        )
        if created:
            log.info("snapshot %s discovered %d new URLs", snap.id, len(created))
            self._wake.set()

    def _advance(self, s, crawl: Crawl, snap: Snapshot, now: datetime) -> list[bus.Outgoing]:
        """The current stage has no open task: dispatch the next stage, finalize, or seal."""
        if snap.stage == FINALIZE_STAGE:
            if not q.seal_snapshot(s, snap, now):
                return []
            out = [self._snapshot_event(snap, "sealed", now)]
            if q.seal_crawl_if_done(s, crawl.id, now):
                out.append(self._crawl_sealed(crawl.id, now))
            log.info("snapshot %s sealed", snap.id)
            return out
        plan = self._plan(crawl)
        next_stage = plan.next_stage(snap.stage)
        if not q.move_to_stage(s, snap, next_stage, now, self.snapshot_lease):
            return []
        snap.stage = next_stage
        return self._dispatch_stage(s, crawl, snap, plan, next_stage, now)

    # ------------------------------------------------------------------ messages

    def _dispatch_stage(
        self, s, crawl: Crawl, snap: Snapshot, plan: Plan, stage: int, now: datetime
    ) -> list[bus.Outgoing]:
        kind = "finalize" if stage == FINALIZE_STAGE else "hooks"
        tasks = q.insert_tasks(s, snap, stage, plan.families(stage), now, kind=kind)
        return [self._task_message(s, crawl, snap, t) for t in tasks]

    def _task_message(self, s, crawl: Crawl, snap: Snapshot, task: SnapshotTask) -> bus.Outgoing:
        msg = HookTask(
            task_id=task.id,
            kind=task.kind,
            crawl_id=crawl.id,
            snapshot_id=snap.id,
            url=snap.url,
            depth=snap.depth,
            stage=task.stage,
            family=task.family,
            plugins=list(task.plugins or []),
            config={k: str(v) for k, v in (crawl.config or {}).items()},
            snap_dir=snap.output_dir,
            crawl_dir=crawl.output_dir,
            attempt=task.attempt,
        )
        if task.kind == "finalize":
            msg.snapshot = SnapshotInfo(
                id=snap.id,
                crawl_id=crawl.id,
                url=snap.url,
                depth=snap.depth,
                parent_snapshot_id=snap.parent_snapshot_id,
                title=snap.title,
                tags=q.snapshot_tags(s, snap.id),
                bookmarked_at=snap.bookmarked_at,
                created_at=snap.created_at,
            )
            msg.results = msgspec.convert(q.task_results(s, snap.id), list[ResultSummary])
        return bus.Outgoing.make(bus.task_subject(task.family), msg, f"{task.id}.{task.attempt}")

    def _snapshot_event(self, snap: Snapshot, status: str, now: datetime) -> bus.Outgoing:
        event = SnapshotEvent(
            snapshot_id=snap.id, crawl_id=snap.crawl_id, status=status, stage=snap.stage, runner=self.runner_id, at=now
        )
        return bus.Outgoing.make(f"events.snapshot.{status}", event, f"snapshot.{snap.id}.{status}")

    def _crawl_sealed(self, crawl_id: str, now: datetime) -> bus.Outgoing:
        log.info("crawl %s sealed", crawl_id)
        return bus.Outgoing.make(
            "events.crawl.sealed", CrawlEvent(crawl_id=crawl_id, status="sealed", at=now), f"crawl.{crawl_id}.sealed"
        )

    def _plan(self, crawl: Crawl) -> Plan:
        plan = self._plans.get(crawl.id)
        if plan is None:
            plan = self._plans[crawl.id] = plan_for(crawl, self.settings, self.catalog, self.families)
        return plan
