"""The crawl-runner: advances Crawls and Snapshots through their lifecycle.

It is the only service that changes Crawl/Snapshot status (DESIGN.md rule 2). Work arrives three
ways, and every path is a conditional update in ``queries`` followed by publishing:

1. **Due rows** (a pass runs on every wake-up: ``crawl.queued`` from ingest, a seal freeing a
   slot, a control request; otherwise when the earliest lease or retry time comes): queued crawls
   start and their seeds become snapshots a batch at a time; each crawl with a free slot claims its
   due snapshots (every crawl gets its turn, so a small crawl behind a huge one starts at once);
   expired leases are taken over; planned-but-unpublished tasks are published; tasks no executor
   picked up in time fail ("no executor for family X"); stopped crawls are sealed.
2. **Task events** (durable consumer ``runner`` on ``events.task.>``): a start is noted; a
   completion is recorded, its discovered URLs become child snapshots (up to ``max_depth`` and
   ``CRAWL_MAX_URLS``), and when a stage has no open task left the snapshot moves to its next
   stage, is queued again (a 429/5xx or network error, up to ``MAX_URL_ATTEMPTS``) or is sealed.
   A failed task's unreported hooks get ``fallback`` results, so no hook of a plan goes missing.
3. **Control** (``control.>``): pause, resume, cancel; feed poll/pause/resume. A cancel marks the
   crawl, puts it in the ``CANCELLED`` bucket (executors kill its hooks), seals its snapshots
   (unfinished hooks ``skipped``: ``cancelled``) and then the crawl.

Messages are published after the transaction commits and acked only after that, so a crash at
any point leaves either a due row or an unacked message for any replica to pick up. A crawl whose
steps keep failing is set aside with back-off and, after ``STEP_FAILURE_LIMIT`` tries, given up
with its error shown on it: no crawl, failing or huge, holds up the others.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import datetime, timedelta

import msgspec
from nats.js import JetStreamContext

from boxcar.crawl_runner import queries as q
from boxcar.crawl_runner.feeds import FeedPoller
from boxcar.crawl_runner.planner import Plan, plan_for
from boxcar.shared import bus, telemetry
from boxcar.shared.admission import admit, archived_keys
from boxcar.shared.clock import utcnow
from boxcar.shared.crawlconfig import CrawlConfig
from boxcar.shared.db import Database, attach_tags
from boxcar.shared.db.models import Crawl, Snapshot, SnapshotTask, TaskStatus
from boxcar.shared.families import FamilyTable, load_families
from boxcar.shared.ids import new_id
from boxcar.shared.messages import (
    ArchiveResultRecord,
    CrawlControl,
    CrawlEvent,
    HookTask,
    ResultStatus,
    ScheduleControl,
    Seed,
    SnapshotEvent,
    TaskCompleted,
    TaskStarted,
    decode,
)
from boxcar.shared.plugins import PluginCatalog, get_catalog
from boxcar.shared.settings import Settings

log = logging.getLogger("boxcar.crawl_runner")
tracer = telemetry.tracer("boxcar.crawl_runner")

STALE_PLANNED_AFTER = timedelta(seconds=20)
SEED_BATCH = 1000
SEED_BATCHES_PER_PASS = 5
STEP_FAILURE_LIMIT = 5
RETRYABLE_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})
CANCELLED = "cancelled"


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
        self.pickup_timeout = timedelta(seconds=settings.task_pickup_timeout)
        self._plans: dict[str, Plan] = {}
        self._trouble: dict[str, tuple[int, float]] = {}  # crawl id -> (failures, not before)
        self._announce: set[str] = set()  # stopped crawls to put in the CANCELLED bucket
        self._wake = asyncio.Event()
        self._stop = asyncio.Event()
        self.js: JetStreamContext | None = None
        self.feeds = FeedPoller(self)

    # ------------------------------------------------------------------ service loop

    async def run(self) -> None:
        """Connect, make sure streams, consumers and buckets exist, and work until ``stop()``."""
        nc = await bus.connect(self.settings.nats_url, f"crawl-runner {self.runner_id}")
        self.js = js = nc.jetstream()
        await bus.ensure_streams(js)
        md = self.settings.runner_max_deliver
        await bus.ensure_consumer(
            js, bus.EVENTS_STREAM, bus.RUNNER_CONSUMER, bus.SUBJECT_TASK_EVENTS, ack_wait=15, max_deliver=md
        )
        await bus.ensure_consumer(
            js, bus.TASK_DEAD_STREAM, bus.RUNNER_DEAD_CONSUMER, bus.MAX_DELIVERIES_ADVISORY, ack_wait=15, max_deliver=md
        )
        await bus.ensure_consumer(
            js, bus.CONTROL_STREAM, bus.RUNNER_CONTROL_CONSUMER, bus.SUBJECT_ALL_CONTROL, ack_wait=15, max_deliver=md
        )
        self.cancelled = await bus.cancelled_bucket(js)
        self.discovered = await bus.discovered_store(js)
        await nc.subscribe(bus.SUBJECT_CRAWL_QUEUED, cb=self._on_wakeup)
        await nc.subscribe(bus.SUBJECT_FEED_DUE, cb=self.feeds.on_wakeup)
        task_events = await bus.pull(js, bus.EVENTS_STREAM, bus.RUNNER_CONSUMER)
        dead = await bus.pull(js, bus.TASK_DEAD_STREAM, bus.RUNNER_DEAD_CONSUMER)
        control = await bus.pull(js, bus.CONTROL_STREAM, bus.RUNNER_CONTROL_CONSUMER)
        log.info("crawl-runner %s ready", self.runner_id)

        def consume(sub, handler, name, on_dead=None):
            return bus.consume(js, sub, handler, consumer=name, stop=self._stop, max_deliver=md, on_dead=on_dead)

        try:
            await asyncio.gather(
                self._due_loop(),
                self.feeds.run(self._stop),
                consume(task_events, self._on_task_event, bus.RUNNER_CONSUMER, self._on_task_event_dead),
                consume(dead, self._on_dead_task, bus.RUNNER_DEAD_CONSUMER),
                consume(control, self._on_control, bus.RUNNER_CONTROL_CONSUMER),
            )
        finally:
            await nc.close()

    def stop(self) -> None:
        """Ask the loops to finish their current step and return."""
        self._stop.set()
        self._wake.set()

    async def _on_wakeup(self, msg) -> None:
        self._wake.set()

    async def _due_loop(self) -> None:
        """A pass over due rows on every wake-up, else when the earliest lease or retry is due
        (never a fixed fast poll: an idle stack costs no CPU)."""
        while not self._stop.is_set():
            self._wake.clear()
            try:
                await self.tick()
            except Exception:
                log.exception("runner pass failed; retrying")
            delay = await asyncio.to_thread(self._seconds_until_due)
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass

    def _seconds_until_due(self) -> float:
        now = utcnow()
        with self.db.read() as s:
            earliest = q.earliest_due(s, now)
            oldest_unpicked = q.oldest_unpicked_dispatch(s)
        candidates = [self.settings.runner_idle_interval]
        if earliest is not None:
            candidates.append((earliest - now).total_seconds())
        if oldest_unpicked is not None:
            candidates.append((oldest_unpicked + self.pickup_timeout - now).total_seconds())
        delay = min(candidates)
        # Still due right after a pass: waiting for a slot or backing off; look again in a second.
        return delay if delay > 0.05 else 1.0

    async def tick(self) -> None:
        """One pass over every kind of due row (feeds have their own loop: a slow feed must not
        hold up snapshots)."""
        for step in (
            self._start_due_crawls,
            self._seed_crawls,
            self._finish_stopped_crawls,
            self._start_due_snapshots,
            self._recover_expired_snapshots,
            self._check_due_crawls,
            self._republish_planned,
        ):
            out = await asyncio.to_thread(step)
            await self._publish(out)
        while self._announce:  # stopped crawls (given up, timed out): executors kill their hooks
            await self.cancelled.put(self._announce.pop(), b"stopped")
        await self._fail_unpicked_tasks()

    async def _publish(self, out: list[bus.Outgoing]) -> None:
        if not out:
            return
        await bus.publish_many(self.js, out)
        task_ids = [o.msg.task_id for o in out if isinstance(o.msg, HookTask)]
        if task_ids:
            await asyncio.to_thread(self._mark_dispatched, task_ids)
        if any(isinstance(o.msg, SnapshotEvent) and o.msg.status in ("sealed", "queued") for o in out):
            self._wake.set()  # a seal frees a concurrency slot for the next queued snapshot

    def _mark_dispatched(self, task_ids: list[str]) -> None:
        with self.db.write() as s:
            q.mark_dispatched(s, task_ids, utcnow())

    # ------------------------------------------------------------------ step isolation

    def _per_crawl(self, crawl_id: str, work: Callable[[], list[bus.Outgoing]]) -> list[bus.Outgoing]:
        """Run one crawl's share of a step; a crawl whose steps keep failing is skipped with
        back-off and, after ``STEP_FAILURE_LIMIT`` failures, given up with the error."""
        failures, not_before = self._trouble.get(crawl_id, (0, 0.0))
        if time.monotonic() < not_before:
            return []
        try:
            out = work()
        except Exception as exc:
            failures += 1
            error = f"{type(exc).__name__}: {exc}"[:2000]
            log.error("crawl %s: step failed (%d of %d): %s", crawl_id, failures, STEP_FAILURE_LIMIT, error[:500])
            if failures >= STEP_FAILURE_LIMIT:
                self._trouble.pop(crawl_id, None)
                return self._give_up(crawl_id, error)
            self._trouble[crawl_id] = (failures, time.monotonic() + min(300.0, 2.0**failures))
            return []
        self._trouble.pop(crawl_id, None)
        return out

    def _give_up(self, crawl_id: str, error: str) -> list[bus.Outgoing]:
        with self.db.write() as s:
            if not q.fail_crawl(s, crawl_id, error, utcnow()):
                return []
        log.error("crawl %s given up: %s", crawl_id, error[:500])
        self._wake.set()
        return [self._crawl_event(crawl_id, "failed", utcnow())]

    # ------------------------------------------------------------------ due rows

    def _start_due_crawls(self) -> list[bus.Outgoing]:
        out: list[bus.Outgoing] = []
        with self.db.read() as s:
            due = q.due_crawls(s, utcnow(), q.QUEUED)
        for crawl_id, seen in due:
            out += self._per_crawl(crawl_id, lambda c=crawl_id, seen=seen: self._start_crawl(c, seen))
        return out

    def _start_crawl(self, crawl_id: str, seen: datetime) -> list[bus.Outgoing]:
        now = utcnow()
        with self.db.write() as s:
            crawl = q.claim_queued_crawl(s, crawl_id, seen, now, self.crawl_lease)
            if crawl is None:
                return []
            with tracer.start_as_current_span(
                "crawl.start", context=telemetry.context_from(crawl.trace_context)
            ) as span:
                span.set_attribute("boxcar.crawl_id", crawl.id)
                out = [self._crawl_event(crawl.id, "started", now)]
                if crawl.seed_count == 0 and q.seal_crawl_if_done(s, crawl.id, now):
                    out.append(self._crawl_event(crawl.id, "sealed", now))
        log.info("crawl %s started (%d seeds)", crawl_id, crawl.seed_count)
        self._wake.set()
        return out

    def _seed_crawls(self) -> list[bus.Outgoing]:
        """Turn the next seeds of started crawls into snapshots, a bounded batch at a time."""
        with self.db.read() as s:
            pending = q.unseeded_crawls(s)
        for crawl_id, seeded in pending[:SEED_BATCHES_PER_PASS]:
            self._per_crawl(crawl_id, lambda c=crawl_id, n=seeded: self._seed_batch(c, n))
        if len(pending) > 0:
            self._wake.set()  # more to seed, or the new snapshots to claim
        return []

    def _seed_batch(self, crawl_id: str, seeded: int) -> list[bus.Outgoing]:
        now = utcnow()
        with self.db.write() as s:
            crawl = s.get(Crawl, crawl_id)
            seeds = q.seeds_from(s, crawl_id, seeded, SEED_BATCH)
            if not q.record_seeded(s, crawl_id, seeded, seeded + len(seeds), now):
                s.rollback()
                return []
            # the URLs a user gave are never cut: CRAWL_MAX_URLS bounds what links add to them;
            # with ONLY_NEW a URL another crawl is archiving or archived is merged into it here
            q.insert_snapshots(s, crawl, seeds, depth=0, parent_id=None, now=now, only_new=self._config(crawl).only_new)
        return []

    def _start_due_snapshots(self) -> list[bus.Outgoing]:
        out: list[bus.Outgoing] = []
        with self.db.read() as s:
            crawl_ids = q.crawls_with_due_snapshots(s, utcnow())
        for crawl_id in crawl_ids:
            out += self._per_crawl(crawl_id, lambda c=crawl_id: self._start_snapshots(c))
        return out

    def _start_snapshots(self, crawl_id: str) -> list[bus.Outgoing]:
        now = utcnow()
        out: list[bus.Outgoing] = []
        with self.db.write() as s:
            crawl = s.get(Crawl, crawl_id)
            free = self._config(crawl).max_concurrent_snapshots - q.started_count(s, crawl_id)
            if free <= 0:
                return []
            plan = self._plan(crawl)
            with tracer.start_as_current_span("snapshot.start", context=telemetry.context_from(crawl.trace_context)):
                for snap in q.claim_queued_snapshots(s, crawl_id, free, now, self.snapshot_lease, plan.first_stage):
                    out.append(self._snapshot_event(snap, "started", now))
                    out += self._dispatch_stage(s, crawl, snap, plan, snap.stage, now)
        return out

    def _recover_expired_snapshots(self) -> list[bus.Outgoing]:
        """Take over started snapshots whose lease ran out and push them on if their stage is done."""
        out: list[bus.Outgoing] = []
        now = utcnow()
        with self.db.read() as s:
            due = q.due_started_snapshots(s, now)
        for snapshot_id, seen in due:
            with self.db.write() as s:
                snap = q.claim_started_snapshot(s, snapshot_id, seen, now, self.snapshot_lease)
                if snap is None or q.open_tasks(s, snap.id, snap.stage):
                    continue
                crawl = s.get(Crawl, snap.crawl_id)
                log.info("snapshot %s: stage %s complete on lease expiry; advancing", snap.id, snap.stage)
                with tracer.start_as_current_span(
                    "snapshot.recover", context=telemetry.context_from(crawl.trace_context)
                ):
                    out += self._advance(s, crawl, snap, now)
        return out

    def _check_due_crawls(self) -> list[bus.Outgoing]:
        """Backstop for crawl sealing: a started crawl re-checks itself every ``CRAWL_LEASE_SECONDS``."""
        out: list[bus.Outgoing] = []
        now = utcnow()
        with self.db.read() as s:
            due = q.due_crawls(s, now, q.STARTED)
        for crawl_id, seen in due:
            with self.db.write() as s:
                if not q.claim_started_crawl(s, crawl_id, seen, now, self.crawl_lease):
                    continue
                crawl = s.get(Crawl, crawl_id)
                limit = self._config(crawl).crawl_timeout
                if limit and not self._stopped(crawl) and (now - crawl.created_at).total_seconds() > limit:
                    q.fail_crawl(s, crawl_id, f"CRAWL_TIMEOUT: stopped after {limit}s", now)
                    log.warning("crawl %s reached CRAWL_TIMEOUT (%ds); stopping it", crawl_id, limit)
                    self._wake.set()
                elif q.seal_crawl_if_done(s, crawl_id, now):
                    out.append(self._crawl_event(crawl_id, "sealed", now))
        return out

    def _republish_planned(self) -> list[bus.Outgoing]:
        """Publish tasks that were committed but never acked by the stream (a runner died)."""
        out: list[bus.Outgoing] = []
        with self.db.read() as s:
            for task in q.stale_planned_tasks(s, utcnow() - STALE_PLANNED_AFTER):
                snap = s.get(Snapshot, task.snapshot_id)
                crawl = s.get(Crawl, task.crawl_id)
                log.info("re-publishing planned task %s", task.id)
                with tracer.start_as_current_span(
                    "task.republish", context=telemetry.context_from(crawl.trace_context)
                ):
                    out.append(self._task_message(crawl, snap, task))
        return out

    async def _fail_unpicked_tasks(self) -> None:
        """A task no executor started within ``TASK_PICKUP_TIMEOUT`` fails when its family has no
        live consumer ("no executor for family X"); behind a busy pool it just waits."""
        with self.db.read() as s:
            tasks = q.unpicked_tasks(s, utcnow() - self.pickup_timeout)
        idle: dict[str, bool] = {}
        for task in tasks:
            if task.family not in idle:
                idle[task.family] = not await bus.family_has_executor(self.js, task.family)
            if not idle[task.family]:
                continue
            event = TaskCompleted(
                task_id=task.id,
                crawl_id=task.crawl_id,
                snapshot_id=task.snapshot_id,
                stage=task.stage,
                family=task.family,
                status="failed",
                error=f"no executor for family {task.family} picked the task up within "
                f"{self.pickup_timeout.total_seconds():.0f}s (start `hook-executor --family {task.family}`)",
            )
            log.warning("task %s: %s", task.id, event.error)
            await self._publish(await asyncio.to_thread(self.record_completion, event, []))

    # ------------------------------------------------------------------ stopping crawls

    def _finish_stopped_crawls(self) -> list[bus.Outgoing]:
        out: list[bus.Outgoing] = []
        with self.db.read() as s:
            crawl_ids = q.stopped_crawls_with_open_snapshots(s)
        for crawl_id in crawl_ids:
            self._announce.add(crawl_id)
            out += self.stop_crawl(crawl_id)
        return out

    def stop_crawl(self, crawl_id: str) -> list[bus.Outgoing]:
        """Seal every open snapshot of a cancelled or failed crawl (unfinished hooks get
        ``skipped``/``failed`` stand-ins saying why), then the crawl. Safe to repeat."""
        now = utcnow()
        out: list[bus.Outgoing] = []
        with self.db.write() as s:
            crawl = s.get(Crawl, crawl_id, populate_existing=True)
            if crawl is None:
                return []
            q.seal_unstarted_snapshots(s, crawl_id, now)
            for snap in q.started_snapshots(s, crawl_id):
                out += self._stop_snapshot(s, crawl, snap, now)
            if q.seal_crawl_if_done(s, crawl_id, now):
                out.append(self._crawl_event(crawl_id, "sealed", now))
        return out

    def _stop_snapshot(self, s, crawl: Crawl, snap: Snapshot, now: datetime) -> list[bus.Outgoing]:
        cancelled = crawl.cancelled_at is not None
        reason = CANCELLED if cancelled else f"crawl failed: {crawl.error}"[:500]
        q.cancel_open_tasks(s, snap.id, reason, now)
        try:
            hooks = self._plan(crawl).hooks_from(snap.stage)
        except ValueError:
            hooks = []
        out = [
            self._stand_in(
                snap, hook.plugin, hook.name, ResultStatus.SKIPPED if cancelled else ResultStatus.FAILED, reason
            )
            for hook in hooks
        ]
        if q.seal_snapshot(s, snap, now, self._expected_results(crawl)):
            out.append(self._snapshot_event(snap, "sealed", now))
        return out

    # ------------------------------------------------------------------ control

    async def _on_control(self, msg) -> None:
        """Apply a user's pause/resume/cancel/poll request (conditional updates, idempotent)."""
        kind = msg.subject.split(".")[1] if msg.subject.count(".") >= 2 else ""
        now = utcnow()
        if kind == "schedule":
            request = decode(msg.data, ScheduleControl)
            action = {"poll": q.request_schedule_poll, "pause": q.pause_schedule, "resume": q.resume_schedule}
            await asyncio.to_thread(self._apply, action[request.action], request.schedule_id, now)
            log.info("schedule %s %s", request.schedule_id, request.action)
            self.feeds.wake()
            return
        if kind != "crawl":
            raise bus.Poison(f"control message on unknown subject {msg.subject}")
        request = decode(msg.data, CrawlControl)
        if request.action == "cancel":
            await self.cancel(request.crawl_id)
        else:
            action = {"pause": q.pause_crawl, "resume": q.resume_crawl}[request.action]
            changed = await asyncio.to_thread(self._apply, action, request.crawl_id, now)
            log.info("crawl %s %s: %s", request.crawl_id, request.action, "done" if changed else "nothing to change")
        self._wake.set()

    def _apply(self, action, target: str, now: datetime) -> bool:
        with self.db.write() as s:
            return action(s, target, now)

    async def cancel(self, crawl_id: str) -> None:
        """Cancel a crawl: mark it, tell executors (``CANCELLED`` bucket) to kill its hooks and never
        start one, seal its snapshots and then it. Idempotent (a redelivered request repeats the
        bucket entry and finds nothing left to seal)."""
        marked = await asyncio.to_thread(self._apply, q.cancel_crawl, crawl_id, utcnow())
        with self.db.read() as s:
            crawl = s.get(Crawl, crawl_id)
            stopped = crawl is not None and (crawl.cancelled_at is not None or crawl.error)
        if not stopped:
            log.info("crawl %s cancel: nothing to cancel", crawl_id)
            return
        await self.cancelled.put(crawl_id, utcnow().isoformat().encode())
        await self._publish(await asyncio.to_thread(self.stop_crawl, crawl_id))
        if marked:
            log.info("crawl %s cancelled", crawl_id)

    # ------------------------------------------------------------------ task events

    async def _on_task_event(self, msg) -> None:
        if ".started." in msg.subject:
            started = decode(msg.data, TaskStarted)
            await asyncio.to_thread(self._apply, q.mark_task_started, started.task_id, utcnow())
            return
        event = decode(msg.data, TaskCompleted)
        with tracer.start_as_current_span(
            "task.completed", context=telemetry.context_from(bus.headers_of(msg))
        ) as span:
            span.set_attribute("boxcar.task_id", event.task_id)
            discovered = list(event.discovered)
            if event.discovered_object:
                discovered += await self._read_discovered(event.discovered_object)
            out = await asyncio.to_thread(self.record_completion, event, discovered)
            await self._publish(out)
        if event.discovered_object:
            try:
                await self.discovered.delete(event.discovered_object)
            except Exception as exc:  # already gone (a redelivery), or NATS blinked: the TTL cleans up
                log.debug("discovered object %s: %s", event.discovered_object, exc)

    async def _read_discovered(self, name: str) -> list[Seed]:
        try:
            result = await self.discovered.get(name)
        except Exception as exc:
            if "not found" in str(exc).lower():
                log.info("discovered list %s already processed", name)
                return []
            raise
        return [decode(line, Seed) for line in result.data.splitlines() if line.strip()]

    async def _on_task_event_dead(self, msg, exc: BaseException) -> None:
        """A task completion that kept failing: give its crawl up (with the error) so it ends."""
        try:
            event = decode(msg.data, TaskCompleted)
        except (msgspec.ValidationError, msgspec.DecodeError):
            return
        out = await asyncio.to_thread(self._give_up, event.crawl_id, f"recording a task failed: {exc}")
        await self._publish(out)
        await self.cancelled.put(event.crawl_id, b"failed")
        await self._publish(await asyncio.to_thread(self.stop_crawl, event.crawl_id))

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
            task, status="failed", error=f"task failed {deliveries} deliveries (executor crashed or timed out)"
        )
        await self._publish(await asyncio.to_thread(self.record_completion, event, []))
        try:
            await self.js.delete_msg(bus.TASKS_STREAM, seq)
        except Exception as exc:
            log.info("dead task seq %s already deleted (%s)", seq, exc)

    def record_completion(self, event: TaskCompleted, discovered: list[Seed]) -> list[bus.Outgoing]:
        """Record one task completion and move its snapshot on when its stage is done.

        Safe to run twice for the same event: the second run finds the task already recorded
        or the snapshot no longer at that stage, and changes nothing.
        """
        now = utcnow()
        with self.db.write() as s:
            snap = q.lock_snapshot_at_stage(s, event.snapshot_id, event.stage, now)
            task = s.get(SnapshotTask, event.task_id) if snap else None
            if snap is None or task is None or task.attempt != snap.attempts:
                log.debug("stale completion %s (snapshot moved on)", event.task_id)
                return []
            out: list[bus.Outgoing] = []
            if (
                q.complete_task(s, event.task_id, TaskStatus(event.status), event.error, now)
                and event.status == "failed"
            ):
                out += [
                    self._stand_in(snap, hook.plugin, hook.name, ResultStatus.FAILED, event.error or "task failed")
                    for hook in self.catalog.snapshot_hooks(task.plugins or [])
                ]
            crawl = s.get(Crawl, snap.crawl_id)
            if event.refused or event.family == "browser" or snap.http_status is None:
                q.record_response(s, snap, event.http_status, event.final_url, event.network_error, event.refused)
            if discovered and snap.depth < crawl.max_depth and not self._stopped(crawl):
                self._add_discovered(s, crawl, snap, discovered, now)
            if event.tags:
                attach_tags(s, {snap.id: event.tags})
            if q.open_tasks(s, snap.id, snap.stage):
                return out
            snap = s.get(Snapshot, snap.id, populate_existing=True)
            return out + self._advance(s, crawl, snap, now, retry_after=event.retry_after)

    def _add_discovered(self, s, crawl: Crawl, snap: Snapshot, discovered: list[Seed], now: datetime) -> None:
        """Queue the URLs a snapshot's hooks found, as children one level deeper (URL policy applied)."""
        config = self._config(crawl)
        admission = admit((d for d in discovered if d.url != snap.url), config.url_filter())
        if config.only_new:
            admission = admission.without(archived_keys(s, admission.seeds))
        created, over = q.insert_snapshots(
            s,
            crawl,
            admission.seeds,
            depth=snap.depth + 1,
            parent_id=snap.id,
            now=now,
            max_urls=config.max_urls,
            only_new=config.only_new,
        )
        if created:
            log.info("snapshot %s discovered %d new URLs", snap.id, len(created))
            self._wake.set()
        if over:
            log.warning("snapshot %s: %d discovered URL(s) over CRAWL_MAX_URLS=%d", snap.id, over, config.max_urls)

    def _advance(
        self, s, crawl: Crawl, snap: Snapshot, now: datetime, retry_after: float | None = None
    ) -> list[bus.Outgoing]:
        """The current stage has no open task: stop, capture again later, go on, or seal."""
        if self._stopped(crawl):
            return self._stop_snapshot(s, crawl, snap, now)
        plan = self._plan(crawl)
        config = self._config(crawl)
        retryable = snap.http_status in RETRYABLE_STATUS or (snap.http_status is None and snap.network_error)
        if snap.stage == plan.first_stage and retryable and snap.attempts < config.max_url_attempts:
            delay = max(self.settings.url_retry_backoff * 2 ** (snap.attempts - 1), min(retry_after or 0, 3600))
            why = f"HTTP {snap.http_status}" if snap.http_status else snap.network_error
            if q.requeue_snapshot(s, snap, now + timedelta(seconds=delay), now):
                log.info(
                    "snapshot %s: %s; capturing again in %.0fs (attempt %d of %d)",
                    snap.id,
                    why[:200],
                    delay,
                    snap.attempts + 1,
                    config.max_url_attempts,
                )
                return [self._snapshot_event(snap, "queued", now)]
            return []
        next_stage = plan.next_stage(snap.stage)
        if next_stage is None:
            if not q.seal_snapshot(s, snap, now, len(plan.hooks_from(plan.first_stage))):
                return []
            out = [self._snapshot_event(snap, "sealed", now)]
            if q.seal_crawl_if_done(s, crawl.id, now):
                out.append(self._crawl_event(crawl.id, "sealed", now))
            log.info("snapshot %s sealed", snap.id)
            return out
        if not q.move_to_stage(s, snap, next_stage, now, self.snapshot_lease):
            return []
        snap.stage = next_stage
        return self._dispatch_stage(s, crawl, snap, plan, next_stage, now)

    # ------------------------------------------------------------------ messages

    def _dispatch_stage(
        self, s, crawl: Crawl, snap: Snapshot, plan: Plan, stage: int, now: datetime
    ) -> list[bus.Outgoing]:
        tasks = q.insert_tasks(s, snap, stage, plan.families(stage), now)
        return [self._task_message(crawl, snap, t) for t in tasks]

    def _task_message(self, crawl: Crawl, snap: Snapshot, task: SnapshotTask) -> bus.Outgoing:
        msg = HookTask(
            task_id=task.id,
            crawl_id=crawl.id,
            snapshot_id=snap.id,
            url=snap.url,
            depth=snap.depth,
            stage=task.stage,
            family=task.family,
            plugins=list(task.plugins or []),
            config=dict(crawl.config or {}),
            snap_dir=snap.output_dir,
            crawl_dir=crawl.output_dir,
            attempt=task.attempt,
            credentials=snap.credentials or "",
        )
        return bus.Outgoing.make(bus.task_subject(task.family), msg, task.id)

    def _stand_in(self, snap: Snapshot, plugin: str, hook_name: str, status: str, reason: str) -> bus.Outgoing:
        record = ArchiveResultRecord.stand_in(
            snapshot_id=snap.id,
            crawl_id=snap.crawl_id,
            plugin=plugin,
            hook_name=hook_name,
            status=status,
            reason=reason,
        )
        return bus.Outgoing.make(
            bus.SUBJECT_ARCHIVERESULT, record, f"fallback.{snap.id}.{snap.attempts}.{plugin}.{hook_name}"
        )

    def _snapshot_event(self, snap: Snapshot, status: str, now: datetime) -> bus.Outgoing:
        event = SnapshotEvent(
            snapshot_id=snap.id, crawl_id=snap.crawl_id, status=status, stage=snap.stage, runner=self.runner_id, at=now
        )
        return bus.Outgoing.make(
            bus.snapshot_event_subject(status), event, f"snapshot.{snap.id}.{snap.attempts}.{snap.stage}.{status}"
        )

    def _crawl_event(self, crawl_id: str, status: str, now: datetime) -> bus.Outgoing:
        if status == "sealed":
            log.info("crawl %s sealed", crawl_id)
        return bus.Outgoing.make(
            bus.crawl_event_subject(status),
            CrawlEvent(crawl_id=crawl_id, status=status, at=now),
            f"crawl.{crawl_id}.{status}",
        )

    # ------------------------------------------------------------------ crawl settings

    @staticmethod
    def _stopped(crawl: Crawl) -> bool:
        return crawl.cancelled_at is not None or bool(crawl.error)

    @staticmethod
    def _config(crawl: Crawl) -> CrawlConfig:
        return CrawlConfig(dict(crawl.config or {}))

    def _expected_results(self, crawl: Crawl) -> int:
        """How many results a snapshot of this crawl ends with: one per hook of its plan."""
        try:
            plan = self._plan(crawl)
        except ValueError:
            return 0
        return len(plan.hooks_from(plan.first_stage))

    def _plan(self, crawl: Crawl) -> Plan:
        plan = self._plans.get(crawl.id)
        if plan is None:
            plan = self._plans[crawl.id] = plan_for(crawl, self.settings, self.catalog, self.families)
        return plan
