"""The crawl-runner's decisions: what a due row, a task completion or a cancel turns into.

Each public method is one step the runner takes, synchronous and safe to run twice: it opens a
transaction, changes rows only through the named conditional updates of ``queries`` (their
guards in view there), and *returns* the messages that follow from it as ``bus.Outgoing`` — the
runner (``runner.CrawlRunner``) publishes them after the commit, then acks what it consumed. So
a crash at any point leaves either a due row or an unacked message, and the tests drive these
functions over a real database with no NATS at all.

A crawl whose steps keep failing is set aside with back-off and, after ``STEP_FAILURE_LIMIT``
tries, given up with its error shown on it (``_per_crawl``): no crawl, failing or huge, holds up
the others.

(About 500 lines on purpose: every decision of the runner in one file, read top to bottom as
the lifecycle it drives, beside ``queries``, which holds every transition's guard.)
"""

from __future__ import annotations

import functools
import logging
import os
import socket
import time
from collections.abc import Callable
from datetime import datetime, timedelta

from sqlalchemy.orm import Session

from boxcar.crawl_runner import queries as q
from boxcar.crawl_runner.planner import Plan, plan_for
from boxcar.shared import bus, metrics, telemetry
from boxcar.shared.admission import admit, archived_keys
from boxcar.shared.clock import utcnow
from boxcar.shared.crawlconfig import CrawlConfig
from boxcar.shared.db import Database, after_commit, attach_tags
from boxcar.shared.db.models import Base, Crawl, Snapshot, SnapshotTask, TaskStatus
from boxcar.shared.families import FamilyTable, load_families
from boxcar.shared.ids import new_id
from boxcar.shared.messages import (
    ArchiveResultRecord,
    CrawlEvent,
    HookTask,
    ResultStatus,
    Seed,
    SnapshotEvent,
    TaskCompleted,
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

Outgoing = list[bus.Outgoing]


def _row[M: Base](s: Session, model: type[M], key: str) -> M:
    """A row a claim or a foreign key says exists (a crawl of a snapshot, a task's snapshot).

    Raises:
        LookupError: it was deleted meanwhile (the step fails; ``_per_crawl`` retries it).
    """
    row = s.get(model, key)
    if row is None:
        raise LookupError(f"no {model.__name__} {key}")
    return row


class Decisions:
    """The decisions of one runner replica (see the module docstring).

    Args:
        settings: leases, retry back-off, the runner's idle interval.
        db: the database (the truth).
        catalog, families: the plugin catalogue and family table plans are made from.
        wake: called when a decision leaves more due work (the runner's next pass comes sooner).
        runner_id: this replica's name, carried in snapshot events.
    """

    def __init__(
        self,
        settings: Settings,
        db: Database,
        catalog: PluginCatalog | None = None,
        families: FamilyTable | None = None,
        *,
        wake: Callable[[], None] = lambda: None,
        runner_id: str = "",
    ) -> None:
        self.settings = settings
        self.db = db
        self.catalog = catalog or get_catalog()
        self.families = families or load_families()
        self.wake = wake
        self.runner_id = runner_id or f"{socket.gethostname()}:{os.getpid()}:{new_id()[-6:]}"
        self.snapshot_lease = timedelta(seconds=settings.snapshot_lease_seconds)
        self.crawl_lease = timedelta(seconds=settings.crawl_lease_seconds)
        self.pickup_timeout = timedelta(seconds=settings.task_pickup_timeout)
        self._plans: dict[str, Plan] = {}
        self._trouble: dict[str, tuple[int, float]] = {}  # crawl id -> (failures, not before)
        #: stopped crawls (given up, timed out) to put in the CANCELLED bucket: executors kill their hooks
        self.announce: set[str] = set()

    def seconds_until_due(self) -> float:
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

    def mark_dispatched(self, task_ids: list[str]) -> None:
        with self.db.write() as s:
            q.mark_dispatched(s, task_ids, utcnow())

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
                return self.give_up(crawl_id, error)
            self._trouble[crawl_id] = (failures, time.monotonic() + min(300.0, 2.0**failures))
            return []
        self._trouble.pop(crawl_id, None)
        return out

    def give_up(self, crawl_id: str, error: str) -> list[bus.Outgoing]:
        with self.db.write() as s:
            if not q.fail_crawl(s, crawl_id, error, utcnow()):
                return []
        log.error("crawl %s given up: %s", crawl_id, error[:500])
        self.wake()
        return [self.crawl_event(crawl_id, "failed", utcnow())]

    def start_due_crawls(self) -> list[bus.Outgoing]:
        out: list[bus.Outgoing] = []
        with self.db.read() as s:
            due = q.due_crawls(s, utcnow(), q.QUEUED)
        for crawl_id, seen in due:
            out += self._per_crawl(crawl_id, functools.partial(self.start_crawl, crawl_id, seen))
        return out

    def start_crawl(self, crawl_id: str, seen: datetime) -> list[bus.Outgoing]:
        now = utcnow()
        with self.db.write() as s:
            crawl = q.claim_queued_crawl(s, crawl_id, seen, now, self.crawl_lease)
            if crawl is None:
                return []
            with tracer.start_as_current_span(
                "crawl.start", context=telemetry.context_from(crawl.trace_context)
            ) as span:
                span.set_attribute("boxcar.crawl_id", crawl.id)
                out = [self.crawl_event(crawl.id, "started", now)]
                if crawl.seed_count == 0 and q.seal_crawl_if_done(s, crawl.id, now):
                    out.append(self.crawl_event(crawl.id, "sealed", now))
        log.info("crawl %s started (%d seeds)", crawl_id, crawl.seed_count)
        self.wake()
        return out

    def seed_crawls(self) -> list[bus.Outgoing]:
        """Turn the next seeds of started crawls into snapshots, a bounded batch at a time."""
        with self.db.read() as s:
            pending = q.unseeded_crawls(s)
        for crawl_id, seeded in pending[:SEED_BATCHES_PER_PASS]:
            self._per_crawl(crawl_id, functools.partial(self.seed_batch, crawl_id, seeded))
        if len(pending) > 0:
            self.wake()  # more to seed, or the new snapshots to claim
        return []

    def seed_batch(self, crawl_id: str, seeded: int) -> list[bus.Outgoing]:
        now = utcnow()
        with self.db.write() as s:
            crawl = _row(s, Crawl, crawl_id)
            seeds = q.seeds_from(s, crawl_id, seeded, SEED_BATCH)
            if not q.record_seeded(s, crawl_id, seeded, seeded + len(seeds), now):
                s.rollback()
                return []
            # the URLs a user gave are never cut: CRAWL_MAX_URLS bounds what links add to them;
            # with ONLY_NEW a URL another crawl is archiving or archived is merged into it here
            q.insert_snapshots(s, crawl, seeds, depth=0, parent_id=None, now=now, only_new=self._config(crawl).only_new)
        return []

    def start_due_snapshots(self) -> list[bus.Outgoing]:
        out: list[bus.Outgoing] = []
        with self.db.read() as s:
            crawl_ids = q.crawls_with_due_snapshots(s, utcnow())
        for crawl_id in crawl_ids:
            out += self._per_crawl(crawl_id, functools.partial(self.start_snapshots, crawl_id))
        return out

    def start_snapshots(self, crawl_id: str) -> list[bus.Outgoing]:
        now = utcnow()
        out: list[bus.Outgoing] = []
        with self.db.write() as s:
            crawl = _row(s, Crawl, crawl_id)
            config = self._config(crawl)
            free = config.max_concurrent_snapshots - q.started_count(s, crawl_id)
            if free <= 0:
                return []
            plan = self._plan(crawl)
            with tracer.start_as_current_span("snapshot.start", context=telemetry.context_from(crawl.trace_context)):
                claimed = q.claim_queued_snapshots(
                    s, crawl_id, free, now, self.snapshot_lease, plan.first_stage, config.domain_limits
                )
                for snap in claimed:
                    out.append(self._snapshot_event(snap, "started", now))
                    out += self._dispatch_stage(s, crawl, snap, plan, snap.stage, now)
        return out

    def recover_expired_snapshots(self) -> list[bus.Outgoing]:
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
                crawl = _row(s, Crawl, snap.crawl_id)
                log.info("snapshot %s: stage %s complete on lease expiry; advancing", snap.id, snap.stage)
                with tracer.start_as_current_span(
                    "snapshot.recover", context=telemetry.context_from(crawl.trace_context)
                ):
                    out += self._advance(s, crawl, snap, now)
        return out

    def check_due_crawls(self) -> list[bus.Outgoing]:
        """Backstop for crawl sealing: a started crawl re-checks itself every ``CRAWL_LEASE_SECONDS``."""
        out: list[bus.Outgoing] = []
        now = utcnow()
        with self.db.read() as s:
            due = q.due_crawls(s, now, q.STARTED)
        for crawl_id, seen in due:
            with self.db.write() as s:
                if not q.claim_started_crawl(s, crawl_id, seen, now, self.crawl_lease):
                    continue
                crawl = _row(s, Crawl, crawl_id)
                limit = self._config(crawl).crawl_timeout
                if limit and not self._stopped(crawl) and (now - crawl.created_at).total_seconds() > limit:
                    q.fail_crawl(s, crawl_id, f"CRAWL_TIMEOUT: stopped after {limit}s", now)
                    log.warning("crawl %s reached CRAWL_TIMEOUT (%ds); stopping it", crawl_id, limit)
                    self.wake()
                elif q.seal_crawl_if_done(s, crawl_id, now):
                    out.append(self.crawl_event(crawl_id, "sealed", now))
        return out

    def republish_planned(self) -> list[bus.Outgoing]:
        """Publish tasks that were committed but never acked by the stream (a runner died)."""
        out: list[bus.Outgoing] = []
        with self.db.read() as s:
            for task in q.stale_planned_tasks(s, utcnow() - STALE_PLANNED_AFTER):
                snap = _row(s, Snapshot, task.snapshot_id)
                crawl = _row(s, Crawl, task.crawl_id)
                log.info("re-publishing planned task %s", task.id)
                with tracer.start_as_current_span(
                    "task.republish", context=telemetry.context_from(crawl.trace_context)
                ):
                    out.append(self._task_message(crawl, snap, task))
        return out

    def finish_stopped_crawls(self) -> list[bus.Outgoing]:
        out: list[bus.Outgoing] = []
        with self.db.read() as s:
            crawl_ids = q.stopped_crawls_with_open_snapshots(s)
        for crawl_id in crawl_ids:
            self.announce.add(crawl_id)
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
                out.append(self.crawl_event(crawl_id, "sealed", now))
        return out

    def _stop_snapshot(self, s: Session, crawl: Crawl, snap: Snapshot, now: datetime) -> list[bus.Outgoing]:
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

    def apply(self, action: Callable[[Session, str, datetime], bool], target: str, now: datetime) -> bool:
        with self.db.write() as s:
            return action(s, target, now)

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
            crawl = _row(s, Crawl, snap.crawl_id)
            if event.refused or event.family == "browser" or snap.http_status is None:
                q.record_response(s, snap, event.http_status, event.final_url, event.network_error, event.refused)
            if discovered and snap.depth < crawl.max_depth and not self._stopped(crawl):
                self._add_discovered(s, crawl, snap, discovered, now)
            if event.tags:
                attach_tags(s, {snap.id: event.tags})
            if q.open_tasks(s, snap.id, snap.stage):
                return out
            # snap is what lock_snapshot_at_stage read under the lock, with record_response's values
            return out + self._advance(s, crawl, snap, now, retry_after=event.retry_after)

    def _add_discovered(self, s: Session, crawl: Crawl, snap: Snapshot, discovered: list[Seed], now: datetime) -> None:
        """Queue the URLs a snapshot's hooks found, as children one level deeper (URL policy applied)."""
        config = self._config(crawl)
        admission = admit((d for d in discovered if d.url != snap.url), config.url_filter())
        if config.only_new:
            admission = admission.without(archived_keys(s, admission.seeds, crawl.created_by))
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
            self.wake()
        if over:
            log.warning("snapshot %s: %d discovered URL(s) over CRAWL_MAX_URLS=%d", snap.id, over, config.max_urls)

    def _advance(
        self, s: Session, crawl: Crawl, snap: Snapshot, now: datetime, retry_after: float | None = None
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
                reason = "http_status" if snap.http_status else "network_error"
                after_commit(s, metrics.CAPTURE_RETRIES.labels(reason).inc)
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
                out.append(self.crawl_event(crawl.id, "sealed", now))
            log.info("snapshot %s sealed", snap.id)
            return out
        if not q.move_to_stage(s, snap, next_stage, now, self.snapshot_lease):
            return []
        # move_to_stage set snap.stage (and its lease) to what it wrote
        return self._dispatch_stage(s, crawl, snap, plan, next_stage, now)

    def _dispatch_stage(
        self, s: Session, crawl: Crawl, snap: Snapshot, plan: Plan, stage: int, now: datetime
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

    def _stand_in(self, snap: Snapshot, plugin: str, hook_name: str, status: ResultStatus, reason: str) -> bus.Outgoing:
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

    def crawl_event(self, crawl_id: str, status: str, now: datetime) -> bus.Outgoing:
        if status == "sealed":
            log.info("crawl %s sealed", crawl_id)
        return bus.Outgoing.make(
            bus.crawl_event_subject(status),
            CrawlEvent(crawl_id=crawl_id, status=status, at=now),
            f"crawl.{crawl_id}.{status}",
        )

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
