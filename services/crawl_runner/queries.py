"""Every claim and transition the crawl-runner makes, in one place, with its guards in view.

Each function runs inside a transaction the caller opened (``Database.write()``) and changes a
row only through a conditional UPDATE whose ``WHERE`` names the state it expects
(``status``, ``stage`` and/or the ``retry_at`` lease it read), checking the row count. A future
``retry_at`` is a lease owned by one runner and is never stolen; an expired one may be claimed by
any replica (``reference/archivebox-0.9.md`` §1.4, ``claim_for_worker``).

Lock order inside one transaction is always snapshot row, then crawl row, so two replicas
finishing sibling snapshots can't deadlock; on Postgres the first UPDATE on a row takes its lock
and later statements in the transaction see what the previous holder committed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from boxcar.shared.db import insert_for
from boxcar.shared.db.models import (
    FINALIZE_STAGE,
    OPEN_STATUSES,
    PAUSED,
    QUEUED,
    SEALED,
    STARTED,
    TASK_DISPATCHED,
    TASK_OPEN,
    TASK_PLANNED,
    Crawl,
    CrawlSchedule,
    FeedItem,
    Snapshot,
    SnapshotTag,
    SnapshotTask,
    Tag,
    url_hash,
)
from boxcar.shared.ids import new_id
from boxcar.shared.storage import snapshot_dir

# --------------------------------------------------------------------------- crawls


def due_crawls(s: Session, now: datetime, limit: int = 50) -> list[tuple[str, str, datetime]]:
    """Queued or started crawls whose ``retry_at`` has passed: ``[(id, status, retry_at)]``."""
    rows = s.execute(
        select(Crawl.id, Crawl.status, Crawl.retry_at)
        .where(Crawl.status.in_((QUEUED, STARTED)), Crawl.retry_at <= now)
        .order_by(Crawl.retry_at)
        .limit(limit)
    )
    return [tuple(r) for r in rows]


def claim_queued_crawl(
    s: Session, crawl_id: str, seen_retry_at: datetime, now: datetime, lease: timedelta
) -> Crawl | None:
    """``queued → started`` with a lease; None when another runner got there first."""
    claimed = s.execute(
        update(Crawl)
        .where(Crawl.id == crawl_id, Crawl.status == QUEUED, Crawl.retry_at == seen_retry_at)
        .values(status=STARTED, retry_at=now + lease, modified_at=now)
    ).rowcount
    return s.get(Crawl, crawl_id, populate_existing=True) if claimed == 1 else None


def claim_started_crawl(s: Session, crawl_id: str, seen_retry_at: datetime, now: datetime, lease: timedelta) -> bool:
    """Extend the lease of a due started crawl (its periodic seal check); False if not ours."""
    return (
        s.execute(
            update(Crawl)
            .where(Crawl.id == crawl_id, Crawl.status == STARTED, Crawl.retry_at == seen_retry_at)
            .values(retry_at=now + lease, modified_at=now)
        ).rowcount
        == 1
    )


def seal_crawl_if_done(s: Session, crawl_id: str, now: datetime) -> bool:
    """Seal a started crawl that has no open snapshot left. Returns True when it sealed it.

    Takes the crawl row's lock first, so of two replicas sealing the last two snapshots at once
    the second sees the first's commit and one of them seals the crawl.
    """
    locked = s.execute(
        update(Crawl).where(Crawl.id == crawl_id, Crawl.status == STARTED).values(modified_at=now)
    ).rowcount
    if locked != 1:
        return False
    open_snapshots = s.scalar(
        select(func.count())
        .select_from(Snapshot)
        .where(Snapshot.crawl_id == crawl_id, Snapshot.status.in_(OPEN_STATUSES))
    )
    if open_snapshots:
        return False
    return (
        s.execute(
            update(Crawl)
            .where(Crawl.id == crawl_id, Crawl.status == STARTED)
            .values(status=SEALED, retry_at=None, modified_at=now)
        ).rowcount
        == 1
    )


# --------------------------------------------------------------------------- snapshots


class NewSnapshot:
    """A snapshot to create: canonical URL plus what its source said about it."""

    __slots__ = ("url", "title", "tags", "bookmarked_at")

    def __init__(
        self, url: str, title: str | None = None, tags: Iterable[str] = (), bookmarked_at: datetime | None = None
    ) -> None:
        self.url = url
        self.title = title
        self.tags = [t for t in tags if t]
        self.bookmarked_at = bookmarked_at


def insert_snapshots(
    s: Session,
    crawl: Crawl,
    items: Sequence[NewSnapshot],
    *,
    depth: int,
    parent_id: str | None,
    now: datetime,
    user: str,
    max_urls: int = 0,
) -> list[str]:
    """Create queued snapshots, skipping URLs the crawl already has (``UNIQUE(crawl_id, url)``).

    Args:
        max_urls: cap on the crawl's total snapshot count (``CRAWL_MAX_URLS``), 0 = none.

    Returns:
        Ids of the snapshots actually created.
    """
    if not items:
        return []
    if max_urls > 0:
        existing = s.scalar(select(func.count()).select_from(Snapshot).where(Snapshot.crawl_id == crawl.id))
        items = items[: max(0, max_urls - existing)]
        if not items:
            return []
    crawl_tags = [t.strip() for t in crawl.tags_str.split(",") if t.strip()]
    rows, tags_by_id = [], {}
    for item in items:
        sid = new_id()
        bookmarked = item.bookmarked_at or now
        rows.append(
            {
                "id": sid,
                "crawl_id": crawl.id,
                "url": item.url,
                "url_hash": url_hash(item.url),
                "depth": depth,
                "parent_snapshot_id": parent_id,
                "title": item.title,
                "bookmarked_at": bookmarked,
                "created_at": now,
                "modified_at": now,
                "status": QUEUED,
                "retry_at": now,
                "stage": 0,
                "output_size": 0,
                "config": {},
                "output_dir": snapshot_dir(user, bookmarked, item.url, sid),
            }
        )
        tags_by_id[sid] = list(dict.fromkeys(crawl_tags + item.tags))
    insert = insert_for(s)
    s.execute(insert(Snapshot).values(rows).on_conflict_do_nothing(index_elements=["crawl_id", "url_hash"]))
    created = list(s.scalars(select(Snapshot.id).where(Snapshot.id.in_(list(tags_by_id)))))
    attach_tags(s, {sid: tags_by_id[sid] for sid in created})
    return created


def attach_tags(s: Session, tags_by_snapshot: dict[str, list[str]]) -> None:
    """Create missing Tag rows and link them to snapshots (idempotent)."""
    names = sorted({n[:100] for names in tags_by_snapshot.values() for n in names if n})
    if not names:
        return
    insert = insert_for(s)
    s.execute(insert(Tag).values([{"name": n} for n in names]).on_conflict_do_nothing(index_elements=["name"]))
    ids = dict(s.execute(select(Tag.name, Tag.id).where(Tag.name.in_(names))).all())
    links = [
        {"snapshot_id": sid, "tag_id": ids[n[:100]]}
        for sid, tag_names in tags_by_snapshot.items()
        for n in tag_names
        if n
    ]
    if links:
        s.execute(insert(SnapshotTag).values(links).on_conflict_do_nothing())


def due_queued_snapshots(s: Session, now: datetime, limit: int) -> list[tuple[str, str, datetime]]:
    """Queued snapshots of started crawls that are due, shallowest first: ``[(id, crawl_id, retry_at)]``."""
    rows = s.execute(
        select(Snapshot.id, Snapshot.crawl_id, Snapshot.retry_at)
        .join(Crawl, Crawl.id == Snapshot.crawl_id)
        .where(Snapshot.status == QUEUED, Snapshot.retry_at <= now, Crawl.status == STARTED)
        .order_by(Snapshot.depth, Snapshot.created_at)
        .limit(limit)
    )
    return [tuple(r) for r in rows]


def started_counts(s: Session, crawl_ids: Iterable[str]) -> dict[str, int]:
    """Number of started snapshots per crawl (for ``CRAWL_MAX_CONCURRENT_SNAPSHOTS``)."""
    ids = list(set(crawl_ids))
    if not ids:
        return {}
    rows = s.execute(
        select(Snapshot.crawl_id, func.count())
        .where(Snapshot.crawl_id.in_(ids), Snapshot.status == STARTED)
        .group_by(Snapshot.crawl_id)
    )
    return dict(rows.all())


def claim_queued_snapshot(
    s: Session, snapshot_id: str, seen_retry_at: datetime, now: datetime, lease: timedelta, first_stage: int
) -> Snapshot | None:
    """``queued → started`` at ``first_stage`` with a lease; None when not ours to take."""
    claimed = s.execute(
        update(Snapshot)
        .where(Snapshot.id == snapshot_id, Snapshot.status == QUEUED, Snapshot.retry_at == seen_retry_at)
        .values(status=STARTED, stage=first_stage, retry_at=now + lease, modified_at=now)
    ).rowcount
    return s.get(Snapshot, snapshot_id, populate_existing=True) if claimed == 1 else None


def lock_snapshot_at_stage(s: Session, snapshot_id: str, stage: int, now: datetime) -> Snapshot | None:
    """Lock a started snapshot that is still at ``stage``; None if it moved on (a stale event)."""
    locked = s.execute(
        update(Snapshot)
        .where(Snapshot.id == snapshot_id, Snapshot.status == STARTED, Snapshot.stage == stage)
        .values(modified_at=now)
    ).rowcount
    return s.get(Snapshot, snapshot_id, populate_existing=True) if locked == 1 else None


def due_started_snapshots(s: Session, now: datetime, limit: int = 100) -> list[tuple[str, datetime]]:
    """Started snapshots whose lease expired (their owner died or a stage is overdue)."""
    rows = s.execute(
        select(Snapshot.id, Snapshot.retry_at)
        .where(Snapshot.status == STARTED, Snapshot.retry_at <= now)
        .order_by(Snapshot.retry_at)
        .limit(limit)
    )
    return [tuple(r) for r in rows]


def claim_started_snapshot(
    s: Session, snapshot_id: str, seen_retry_at: datetime, now: datetime, lease: timedelta
) -> Snapshot | None:
    """Take over an expired lease on a started snapshot; None when another replica did."""
    claimed = s.execute(
        update(Snapshot)
        .where(Snapshot.id == snapshot_id, Snapshot.status == STARTED, Snapshot.retry_at == seen_retry_at)
        .values(retry_at=now + lease, modified_at=now)
    ).rowcount
    return s.get(Snapshot, snapshot_id, populate_existing=True) if claimed == 1 else None


def move_to_stage(s: Session, snapshot: Snapshot, stage: int, now: datetime, lease: timedelta) -> bool:
    """``stage N → stage M`` on a started snapshot we hold; False if it is no longer at N."""
    return (
        s.execute(
            update(Snapshot)
            .where(Snapshot.id == snapshot.id, Snapshot.status == STARTED, Snapshot.stage == snapshot.stage)
            .values(stage=stage, retry_at=now + lease, modified_at=now)
        ).rowcount
        == 1
    )


def seal_snapshot(s: Session, snapshot: Snapshot, now: datetime) -> bool:
    """``started → sealed`` after the finalize stage; False if someone else sealed it."""
    return (
        s.execute(
            update(Snapshot)
            .where(Snapshot.id == snapshot.id, Snapshot.status == STARTED, Snapshot.stage == FINALIZE_STAGE)
            .values(status=SEALED, retry_at=None, downloaded_at=now, modified_at=now)
        ).rowcount
        == 1
    )


def snapshot_tags(s: Session, snapshot_id: str) -> list[str]:
    """Tag names of a snapshot, sorted."""
    return sorted(
        s.scalars(
            select(Tag.name)
            .join(SnapshotTag, SnapshotTag.tag_id == Tag.id)
            .where(SnapshotTag.snapshot_id == snapshot_id)
        )
    )


# --------------------------------------------------------------------------- tasks


def task_id(snapshot_id: str, stage: int, family: str) -> str:
    """The natural id of a task: one per (snapshot, stage, family)."""
    return f"{snapshot_id}.{stage}.{family}"


def insert_tasks(
    s: Session, snapshot: Snapshot, stage: int, families: dict[str, list[str]], now: datetime, kind: str = "hooks"
) -> list[SnapshotTask]:
    """Plan one task per family for ``stage`` (status ``planned``; idempotent on the task id)."""
    rows = [
        {
            "id": task_id(snapshot.id, stage, family),
            "snapshot_id": snapshot.id,
            "crawl_id": snapshot.crawl_id,
            "stage": stage,
            "family": family,
            "kind": kind,
            "plugins": plugins,
            "status": TASK_PLANNED,
            "attempt": 1,
            "created_at": now,
            "results": [],
            "error": "",
        }
        for family, plugins in families.items()
    ]
    insert = insert_for(s)
    s.execute(insert(SnapshotTask).values(rows).on_conflict_do_nothing(index_elements=["id"]))
    return list(s.scalars(select(SnapshotTask).where(SnapshotTask.id.in_([r["id"] for r in rows]))))


def complete_task(s: Session, task_id_: str, status: str, results: list, error: str, now: datetime) -> bool:
    """Record a task's outcome once; False when it was already recorded (a redelivery)."""
    return (
        s.execute(
            update(SnapshotTask)
            .where(SnapshotTask.id == task_id_, SnapshotTask.status.in_(TASK_OPEN))
            .values(status=status, results=results, error=error, completed_at=now)
        ).rowcount
        == 1
    )


def open_tasks(s: Session, snapshot_id: str, stage: int) -> list[SnapshotTask]:
    """Tasks of a snapshot's stage that have not completed yet."""
    return list(
        s.scalars(
            select(SnapshotTask).where(
                SnapshotTask.snapshot_id == snapshot_id, SnapshotTask.stage == stage, SnapshotTask.status.in_(TASK_OPEN)
            )
        )
    )


def task_results(s: Session, snapshot_id: str) -> list[dict]:
    """Every result summary the snapshot's completed hook tasks reported, in stage order."""
    tasks = s.scalars(
        select(SnapshotTask)
        .where(SnapshotTask.snapshot_id == snapshot_id, SnapshotTask.kind == "hooks")
        .order_by(SnapshotTask.stage, SnapshotTask.family)
    )
    return [r for t in tasks for r in (t.results or [])]


def mark_dispatched(s: Session, task_ids: Iterable[str], now: datetime) -> None:
    """``planned → dispatched`` once the stream acked the task messages."""
    ids = list(task_ids)
    if ids:
        s.execute(
            update(SnapshotTask)
            .where(SnapshotTask.id.in_(ids), SnapshotTask.status == TASK_PLANNED)
            .values(status=TASK_DISPATCHED, dispatched_at=now)
        )


def stale_planned_tasks(s: Session, older_than: datetime, limit: int = 200) -> list[SnapshotTask]:
    """Planned tasks whose publish never got acked (the runner died in between)."""
    return list(
        s.scalars(
            select(SnapshotTask)
            .join(Snapshot, Snapshot.id == SnapshotTask.snapshot_id)
            .where(
                SnapshotTask.status == TASK_PLANNED,
                SnapshotTask.created_at <= older_than,
                Snapshot.status == STARTED,
                Snapshot.stage == SnapshotTask.stage,
            )
            .limit(limit)
        )
    )


# --------------------------------------------------------------------------- schedules (feeds)


def due_schedules(s: Session, now: datetime, limit: int = 20) -> list[tuple[str, str, datetime]]:
    """Enabled schedules due to poll (or whose poller's lease expired): ``[(id, status, retry_at)]``."""
    rows = s.execute(
        select(CrawlSchedule.id, CrawlSchedule.status, CrawlSchedule.retry_at)
        .where(
            CrawlSchedule.status.in_((QUEUED, STARTED)),
            CrawlSchedule.is_enabled.is_(True),
            CrawlSchedule.retry_at <= now,
        )
        .order_by(CrawlSchedule.retry_at)
        .limit(limit)
    )
    return [tuple(r) for r in rows]


def claim_schedule(
    s: Session, schedule_id: str, status: str, seen_retry_at: datetime, now: datetime, lease: timedelta
) -> CrawlSchedule | None:
    """``queued → started`` (or take over an expired poll) with a lease; None when not ours."""
    claimed = s.execute(
        update(CrawlSchedule)
        .where(CrawlSchedule.id == schedule_id, CrawlSchedule.status == status, CrawlSchedule.retry_at == seen_retry_at)
        .values(status=STARTED, retry_at=now + lease, modified_at=now)
    ).rowcount
    return s.get(CrawlSchedule, schedule_id, populate_existing=True) if claimed == 1 else None


def finish_schedule_poll(
    s: Session, schedule: CrawlSchedule, lease_until: datetime, now: datetime, next_at: datetime, **values
) -> bool:
    """``started → queued`` with the next poll time; False when the schedule was paused, deleted or
    taken over meanwhile (the caller's transaction must then roll back)."""
    return (
        s.execute(
            update(CrawlSchedule)
            .where(
                CrawlSchedule.id == schedule.id, CrawlSchedule.status == STARTED, CrawlSchedule.retry_at == lease_until
            )
            .values(status=QUEUED, retry_at=next_at, last_polled_at=now, modified_at=now, **values)
        ).rowcount
        == 1
    )


def unseen_feed_keys(s: Session, schedule_id: str, keys: dict[str, str]) -> set[str]:
    """The item keys (of ``{item_key: url}``) this schedule has not recorded yet."""
    if not keys:
        return set()
    seen = set(
        s.scalars(
            select(FeedItem.item_key).where(FeedItem.schedule_id == schedule_id, FeedItem.item_key.in_(list(keys)))
        )
    )
    return set(keys) - seen


def record_feed_items(s: Session, schedule_id: str, items: dict[str, str], crawl_id: str | None, now: datetime) -> None:
    """Remember feed items (``{item_key: url}``) so later polls skip them (idempotent)."""
    if items:
        insert = insert_for(s)
        s.execute(
            insert(FeedItem)
            .values(
                [
                    {"schedule_id": schedule_id, "item_key": k, "url": u, "crawl_id": crawl_id, "first_seen_at": now}
                    for k, u in items.items()
                ]
            )
            .on_conflict_do_nothing(index_elements=["schedule_id", "item_key"])
        )


def request_schedule_poll(s: Session, schedule_id: str, now: datetime) -> bool:
    """Poll an idle schedule now (not one being polled, not a paused one)."""
    return (
        s.execute(
            update(CrawlSchedule)
            .where(CrawlSchedule.id == schedule_id, CrawlSchedule.status == QUEUED)
            .values(retry_at=now, modified_at=now)
        ).rowcount
        == 1
    )


def pause_schedule(s: Session, schedule_id: str, now: datetime) -> bool:
    """``queued|started → paused``; a poll in flight then fails to finish and rolls back."""
    return (
        s.execute(
            update(CrawlSchedule)
            .where(CrawlSchedule.id == schedule_id, CrawlSchedule.status.in_((QUEUED, STARTED)))
            .values(status=PAUSED, retry_at=None, modified_at=now)
        ).rowcount
        == 1
    )


def resume_schedule(s: Session, schedule_id: str, now: datetime) -> bool:
    """``paused → queued``, due now."""
    return (
        s.execute(
            update(CrawlSchedule)
            .where(CrawlSchedule.id == schedule_id, CrawlSchedule.status == PAUSED)
            .values(status=QUEUED, retry_at=now, modified_at=now)
        ).rowcount
        == 1
    )


# --------------------------------------------------------------------------- crawl control


def pause_crawl(s: Session, crawl_id: str, now: datetime) -> bool:
    """``queued|started → paused``: no new snapshot starts; those in flight finish their stages."""
    return (
        s.execute(
            update(Crawl)
            .where(Crawl.id == crawl_id, Crawl.status.in_((QUEUED, STARTED)))
            .values(status=PAUSED, retry_at=None, modified_at=now)
        ).rowcount
        == 1
    )


def resume_crawl(s: Session, crawl_id: str, now: datetime) -> bool:
    """``paused → started`` (or ``queued`` when it never seeded), due now."""
    has_snapshots = s.scalar(select(func.count()).select_from(Snapshot).where(Snapshot.crawl_id == crawl_id))
    return (
        s.execute(
            update(Crawl)
            .where(Crawl.id == crawl_id, Crawl.status == PAUSED)
            .values(status=STARTED if has_snapshots else QUEUED, retry_at=now, modified_at=now)
        ).rowcount
        == 1
    )


def cancel_crawl(s: Session, crawl_id: str, now: datetime) -> bool:
    """Seal a crawl now: its queued snapshots are sealed unarchived; started ones finish."""
    cancelled = (
        s.execute(
            update(Crawl)
            .where(Crawl.id == crawl_id, Crawl.status.in_((QUEUED, STARTED, PAUSED)))
            .values(status=SEALED, retry_at=None, modified_at=now)
        ).rowcount
        == 1
    )
    if cancelled:
        s.execute(
            update(Snapshot)
            .where(Snapshot.crawl_id == crawl_id, Snapshot.status == QUEUED)
            .values(status=SEALED, retry_at=None, modified_at=now)
        )
    return cancelled
