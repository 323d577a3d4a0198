"""The crawl-runner service: the loops that feed ``decisions`` and publish what they decide.

It is the only service that changes Crawl/Snapshot status (DESIGN.md rule 2). ``CrawlRunner``
starts its loops under one supervisor (``run``), each named:

- **due rows**: a pass on every wake-up (``crawl.queued`` from ingest, a seal freeing a slot, a
  control request), otherwise when the earliest lease or retry time comes — never a fixed fast
  poll: queued crawls start and their seeds become snapshots a batch at a time, each crawl with a
  free slot claims its due snapshots, expired leases are taken over, planned-but-unpublished
  tasks published, tasks no executor picked up failed, stopped crawls sealed;
- **task events** (durable consumer ``runner`` on ``events.task.>``): a completion is recorded
  and its snapshot moved on (``Decisions.record_completion``);
- **dead tasks** (max-deliveries advisories of ``TASKS``): a task that exhausted its deliveries
  is recorded failed, so its snapshot still seals;
- **control** (``control.>``): pause, resume, cancel; feed poll, pause, resume;
- **feed polls** (``feeds.FeedPoller``): due subscriptions fetched, new items become crawls.

Every decision (``decisions.Decisions``) commits first and returns its messages; the loop
publishes them and only then acks what it consumed, so a crash at any point leaves either a due
row or an unacked message for any replica to pick up.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable

import msgspec
import nats.errors
from nats.js import JetStreamContext

from boxcar.crawl_runner import queries as q
from boxcar.crawl_runner.decisions import Decisions
from boxcar.crawl_runner.feeds import FeedPoller
from boxcar.shared import bus, metrics, telemetry
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl
from boxcar.shared.families import FamilyTable
from boxcar.shared.messages import (
    CrawlControl,
    HookTask,
    ScheduleControl,
    Seed,
    SnapshotEvent,
    TaskCompleted,
    TaskStarted,
    decode,
)
from boxcar.shared.plugins import PluginCatalog
from boxcar.shared.settings import Settings

log = logging.getLogger("boxcar.crawl_runner")
tracer = telemetry.tracer("boxcar.crawl_runner")


async def supervise(loops: dict[str, Awaitable[None]]) -> None:
    """Run named loops until they all return; one that fails stops the others (and the error
    goes up, naming the loop: the service exits and its supervisor starts it again)."""
    async with asyncio.TaskGroup() as group:
        for name, loop in loops.items():
            group.create_task(_named(name, loop), name=name)


async def _named(name: str, loop: Awaitable[None]) -> None:
    try:
        await loop
    except Exception:
        log.exception("crawl-runner loop %r failed", name)
        raise


class CrawlRunner:
    """One crawl-runner replica. Any number may run against the same database and NATS."""

    def __init__(
        self,
        settings: Settings,
        db: Database,
        catalog: PluginCatalog | None = None,
        families: FamilyTable | None = None,
    ) -> None:
        self._wake = asyncio.Event()
        self.decisions = Decisions(settings, db, catalog, families, wake=self._wake.set)
        self.settings, self.db = settings, db
        self.catalog, self.families = self.decisions.catalog, self.decisions.families
        self.runner_id = self.decisions.runner_id
        self._stop = asyncio.Event()
        self.js: JetStreamContext | None = None
        self.feeds = FeedPoller(self)

    # ------------------------------------------------------------------ service loop

    async def run(self) -> None:
        """Connect, make sure streams, consumers and buckets exist, and work until ``stop()``."""
        nc, js = await bus.open_jetstream(self.settings, f"crawl-runner {self.runner_id}")
        self.js = js
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
        self.cancelled = await bus.cancelled_bucket(js, self.settings.nats_replicas)
        self.discovered = await bus.discovered_store(js, self.settings.nats_replicas)
        await nc.subscribe(bus.SUBJECT_CRAWL_QUEUED, cb=self._on_wakeup)
        await nc.subscribe(bus.SUBJECT_FEED_DUE, cb=self.feeds.on_wakeup)
        task_events = await bus.pull(js, bus.EVENTS_STREAM, bus.RUNNER_CONSUMER)
        dead = await bus.pull(js, bus.TASK_DEAD_STREAM, bus.RUNNER_DEAD_CONSUMER)
        control = await bus.pull(js, bus.CONTROL_STREAM, bus.RUNNER_CONTROL_CONSUMER)
        log.info("crawl-runner %s ready", self.runner_id)

        def consume(sub, handler, name, on_dead=None):
            return bus.consume(js, sub, handler, consumer=name, stop=self._stop, max_deliver=md, on_dead=on_dead)

        try:
            await supervise(
                {
                    "due rows": self._due_loop(),
                    "task events": consume(
                        task_events, self._on_task_event, bus.RUNNER_CONSUMER, self._on_task_event_dead
                    ),
                    "dead tasks": consume(dead, self._on_dead_task, bus.RUNNER_DEAD_CONSUMER),
                    "control": consume(control, self._on_control, bus.RUNNER_CONTROL_CONSUMER),
                    "feed polls": self.feeds.run(self._stop),
                }
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
            except (TimeoutError, nats.errors.Error) as exc:  # NATS away, or a cluster electing leaders
                log.warning(
                    "runner pass: NATS did not take its messages (%s: %s); planned tasks are published again when due",
                    type(exc).__name__,
                    exc,
                )
            except Exception:
                log.exception("runner pass failed; retrying")
            delay = await asyncio.to_thread(self.decisions.seconds_until_due)
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except TimeoutError:
                pass

    async def tick(self) -> None:
        """One pass over every kind of due row (feeds have their own loop: a slow feed must not
        hold up snapshots)."""
        with metrics.RUNNER_PASS_SECONDS.time():
            await self._tick()

    async def _tick(self) -> None:
        for step in (
            self.decisions.start_due_crawls,
            self.decisions.seed_crawls,
            self.decisions.finish_stopped_crawls,
            self.decisions.start_due_snapshots,
            self.decisions.recover_expired_snapshots,
            self.decisions.check_due_crawls,
            self.decisions.republish_planned,
        ):
            out = await asyncio.to_thread(step)
            await self._publish(out)
        while self.decisions.announce:  # stopped crawls (given up, timed out): executors kill their hooks
            await self.cancelled.put(self.decisions.announce.pop(), b"stopped")
        await self._fail_unpicked_tasks()

    async def _publish(self, out: list[bus.Outgoing]) -> None:
        if not out:
            return
        await bus.publish_many(self.js, out)
        tasks = [o.msg for o in out if isinstance(o.msg, HookTask)]
        for task in tasks:
            metrics.TASKS_DISPATCHED.labels(task.family).inc()
        task_ids = [task.task_id for task in tasks]
        if task_ids:
            await asyncio.to_thread(self.decisions.mark_dispatched, task_ids)
        if any(isinstance(o.msg, SnapshotEvent) and o.msg.status in ("sealed", "queued") for o in out):
            self._wake.set()  # a seal frees a concurrency slot for the next queued snapshot

    # ------------------------------------------------------------------ step isolation

    # ------------------------------------------------------------------ due rows

    async def _fail_unpicked_tasks(self) -> None:
        """A task no executor started within ``TASK_PICKUP_TIMEOUT`` fails when its family has no
        live consumer ("no executor for family X"); behind a busy pool it just waits."""
        with self.db.read() as s:
            tasks = q.unpicked_tasks(s, utcnow() - self.decisions.pickup_timeout)
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
                f"{self.decisions.pickup_timeout.total_seconds():.0f}s (start `hook-executor --family {task.family}`)",
            )
            log.warning("task %s: %s", task.id, event.error)
            await self._publish(await asyncio.to_thread(self.decisions.record_completion, event, []))

    # ------------------------------------------------------------------ stopping crawls

    # ------------------------------------------------------------------ control

    async def _on_control(self, msg) -> None:
        """Apply a user's pause/resume/cancel/poll request (conditional updates, idempotent)."""
        kind = msg.subject.split(".")[1] if msg.subject.count(".") >= 2 else ""
        now = utcnow()
        if kind == "schedule":
            request = decode(msg.data, ScheduleControl)
            action = {"poll": q.request_schedule_poll, "pause": q.pause_schedule, "resume": q.resume_schedule}
            await asyncio.to_thread(self.decisions.apply, action[request.action], request.schedule_id, now)
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
            changed = await asyncio.to_thread(self.decisions.apply, action, request.crawl_id, now)
            log.info("crawl %s %s: %s", request.crawl_id, request.action, "done" if changed else "nothing to change")
        self._wake.set()

    async def cancel(self, crawl_id: str) -> None:
        """Cancel a crawl: mark it, tell executors (``CANCELLED`` bucket) to kill its hooks and never
        start one, seal its snapshots and then it. Idempotent (a redelivered request repeats the
        bucket entry and finds nothing left to seal)."""
        marked = await asyncio.to_thread(self.decisions.apply, q.cancel_crawl, crawl_id, utcnow())
        with self.db.read() as s:
            crawl = s.get(Crawl, crawl_id)
            stopped = crawl is not None and (crawl.cancelled_at is not None or crawl.error)
        if not stopped:
            log.info("crawl %s cancel: nothing to cancel", crawl_id)
            return
        await self.cancelled.put(crawl_id, utcnow().isoformat().encode())
        await self._publish(await asyncio.to_thread(self.decisions.stop_crawl, crawl_id))
        if marked:
            log.info("crawl %s cancelled", crawl_id)

    # ------------------------------------------------------------------ task events

    async def _on_task_event(self, msg) -> None:
        if ".started." in msg.subject:
            started = decode(msg.data, TaskStarted)
            await asyncio.to_thread(self.decisions.apply, q.mark_task_started, started.task_id, utcnow())
            return
        event = decode(msg.data, TaskCompleted)
        with tracer.start_as_current_span(
            "task.completed", context=telemetry.context_from(bus.headers_of(msg))
        ) as span:
            span.set_attribute("boxcar.task_id", event.task_id)
            discovered = list(event.discovered)
            if event.discovered_object:
                discovered += await self._read_discovered(event.discovered_object)
            out = await asyncio.to_thread(self.decisions.record_completion, event, discovered)
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
        out = await asyncio.to_thread(self.decisions.give_up, event.crawl_id, f"recording a task failed: {exc}")
        await self._publish(out)
        await self.cancelled.put(event.crawl_id, b"failed")
        await self._publish(await asyncio.to_thread(self.decisions.stop_crawl, event.crawl_id))

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
        await self._publish(await asyncio.to_thread(self.decisions.record_completion, event, []))
        metrics.DEAD_TASKS.labels(task.family).inc()
        try:
            await self.js.delete_msg(bus.TASKS_STREAM, seq)
        except Exception as exc:
            log.info("dead task seq %s already deleted (%s)", seq, exc)

    # ------------------------------------------------------------------ messages

    # ------------------------------------------------------------------ crawl settings
