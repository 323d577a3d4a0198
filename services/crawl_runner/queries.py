"""Every claim and transition the crawl-runner makes, in one place, with its guards in view.

(Long on purpose, as procrastinate keeps every statement of its job manager in one file: a
reviewer sees every ``WHERE`` guard of the lifecycle together, and no transition lives elsewhere.)

Each function runs inside a transaction the caller opened (``Database.write()``) and changes a
row only through a conditional UPDATE whose ``WHERE`` names the state it expects (``status``,
``stage``, ``seeded`` and/or the ``retry_at`` lease it read), checking the row count
(``_one``). A future ``retry_at`` is a lease owned by one runner and is never stolen; an expired
one may be claimed by any replica (``reference/archivebox-0.9.md`` §1.4, ``claim_for_worker``).
The statements the runner runs for every task completion and seal (``_SNAPSHOT_*``, ``_TASK_*``,
``_CRAWL_*``) are built once at import, on the tables, each beside the functions that run it and
with its guard written there; the snapshot or crawl object a function holds is then set to what
its UPDATE wrote (``_one_held``, ``_keep``), as the ORM's own UPDATE would have synchronised it.
Task objects are not kept in step (nothing reads a task's status after changing it).

The legal transitions (ArchiveBox's lifecycle; ``sealed`` is final):

==========  =======================  =======================  ==================================
row         from                     to                       function (guard)
==========  =======================  =======================  ==================================
Crawl       queued                   started                  ``claim_queued_crawl`` (retry_at)
Crawl       started                  started, next seeds      ``record_seeded`` (seeded)
Crawl       started                  started, new lease       ``claim_started_crawl`` (retry_at)
Crawl       started                  sealed                   ``seal_crawl_if_done`` (no open
                                                              snapshot, every seed inserted)
Crawl       queued, started          paused                   ``pause_crawl``
Crawl       paused                   started or queued        ``resume_crawl``
Crawl       queued, started, paused  started + cancelled_at   ``cancel_crawl`` (not cancelled)
Crawl       queued, started, paused  started + error          ``fail_crawl`` (not given up yet)
Snapshot    queued                   started (stage 1)        ``claim_queued_snapshots``
                                                              (retry_at ≤ now, in a batch)
Snapshot    started                  started, new lease       ``claim_started_snapshot`` (retry_at)
Snapshot    started at N             started at M             ``move_to_stage`` (stage)
Snapshot    started at N             queued, later            ``requeue_snapshot`` (stage)
Snapshot    started at N             sealed                   ``seal_snapshot`` (stage)
Snapshot    queued, paused           sealed                   ``seal_unstarted_snapshots``
                                                              (crawl stopped)
Schedule    queued                   started                  ``claim_schedule`` (retry_at)
Schedule    started                  queued, next poll        ``finish_schedule_poll`` (lease)
Schedule    queued, started          paused                   ``pause_schedule``
Schedule    paused                   queued                   ``resume_schedule``
Task        planned                  dispatched               ``mark_dispatched``
Task        planned, dispatched      succeeded, failed,       ``complete_task``
                                     cancelled
==========  =======================  =======================  ==================================

Lock order inside one transaction is always snapshot row, then crawl row, so two replicas
finishing sibling snapshots can't deadlock; on Postgres the first UPDATE on a row takes its lock
and later statements in the transaction see what the previous holder committed. Claims of due
snapshots are one ``UPDATE … WHERE id IN (SELECT … LIMIT n [FOR UPDATE SKIP LOCKED])
RETURNING`` (procrastinate's ``procrastinate_fetch_job``): replicas never wait on each other's
candidates on Postgres, and SQLite serializes writers anyway.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import CursorResult, Table, Update, bindparam, exists, func, or_, select, text, true, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from boxcar.shared import metrics
from boxcar.shared.db import BATCH, after_commit, attach_tags, insert_for
from boxcar.shared.db.models import (
    OPEN_STATUSES,
    ArchiveResult,
    Crawl,
    CrawlSchedule,
    CrawlSeed,
    FeedItem,
    Snapshot,
    SnapshotTask,
    Status,
    TaskStatus,
    dedup_key,
    url_hash,
)
from boxcar.shared.ids import new_id
from boxcar.shared.messages import ResultStatus, Seed
from boxcar.shared.storage import snapshot_dir
from boxcar.shared.urls import url_domain

QUEUED, STARTED, PAUSED, SEALED = Status.QUEUED, Status.STARTED, Status.PAUSED, Status.SEALED
TASK_OPEN = (TaskStatus.PLANNED, TaskStatus.DISPATCHED)
#: pg_advisory_xact_lock key serialising per-host claims (``host_allowance``): "bxhost"
HOST_CLAIM_LOCK = 0x627868_6F7374


def _one(s: Session, stmt: Update, params: dict[str, Any] | None = None) -> bool:
    """Run a conditional UPDATE; True when it changed exactly one row (the guard held)."""
    return _rowcount(s, stmt, params) == 1


def _one_held(s: Session, row: Any, stmt: Update, guard: dict[str, Any], **values: Any) -> bool:
    """Run a conditional UPDATE built once (``_SNAPSHOT_MOVE``, ``_SNAPSHOT_SEAL``,
    ``_CRAWL_SEAL``: guard parameters ``g_*``, new values ``v_<column>``) on the row we hold; when
    its guard held, ``row`` shows ``values`` as committed (``_keep``), so nothing of it is flushed
    again. The session flushes pending changes before it, as before an ORM UPDATE (SQLAlchemy
    autoflushes before Core statements too). (Built once, these skip SQLAlchemy's per-call
    statement building and cache key: the runner runs them for every task completion.)"""
    changed = _one(s, stmt, guard | {f"v_{column}": value for column, value in values.items()})
    if changed:
        _keep(row, values)
    return changed


def _keep(row: Any, values: dict[str, Any]) -> None:
    """The object of a row we hold shows ``values`` as committed: what a guarded UPDATE of the row
    just wrote (on the table, so the ORM did not synchronise it)."""
    for column, value in values.items():
        set_committed_value(row, column, value)


def _claimed(s: Session, row: str, won: int, lost: int = 0) -> None:
    """Count claims of ``row`` (``boxcar_claims_total``) when the transaction commits."""
    if won:
        after_commit(s, lambda: metrics.CLAIMS.labels(row, "won").inc(won))
    if lost:
        after_commit(s, lambda: metrics.CLAIMS.labels(row, "lost").inc(lost))


def _sealed(s: Session, row: str, n: int = 1) -> None:
    """Count seals of ``row`` (``boxcar_seals_total``) when the transaction commits."""
    if n:
        after_commit(s, lambda: metrics.SEALS.labels(row).inc(n))


def _rowcount(s: Session, stmt: Update, params: dict[str, Any] | None = None) -> int:
    """Rows a DML statement changed (its ``CursorResult.rowcount``)."""
    result = cast(CursorResult[Any], s.execute(stmt, params))
    return result.rowcount


def _chunks[T](items: Sequence[T], size: int = BATCH) -> Iterable[Sequence[T]]:
    for i in range(0, len(items), size):
        yield items[i : i + size]


# --------------------------------------------------------------------------- crawls


def due_crawls(s: Session, now: datetime, status: Status, limit: int = 50) -> list[tuple[str, datetime]]:
    """Crawls in ``status`` whose ``retry_at`` has passed, oldest first: ``[(id, retry_at)]``."""
    rows = s.execute(
        select(Crawl.id, Crawl.retry_at)
        .where(Crawl.status == status, Crawl.retry_at <= now)
        .order_by(Crawl.retry_at)
        .limit(limit)
    )
    return [(crawl_id, retry_at) for crawl_id, retry_at in rows if retry_at is not None]


def claim_queued_crawl(
    s: Session, crawl_id: str, seen_retry_at: datetime, now: datetime, lease: timedelta
) -> Crawl | None:
    """``queued → started`` with a lease; None when another runner got there first."""
    claimed = _one(
        s,
        update(Crawl)
        .where(Crawl.id == crawl_id, Crawl.status == QUEUED, Crawl.retry_at == seen_retry_at)
        .values(status=STARTED, retry_at=now + lease, modified_at=now),
    )
    _claimed(s, "crawl", int(claimed), int(not claimed))
    return s.get(Crawl, crawl_id, populate_existing=True) if claimed else None


def claim_started_crawl(s: Session, crawl_id: str, seen_retry_at: datetime, now: datetime, lease: timedelta) -> bool:
    """Extend the lease of a due started crawl (its periodic seal check); False if not ours."""
    claimed = _one(
        s,
        update(Crawl)
        .where(Crawl.id == crawl_id, Crawl.status == STARTED, Crawl.retry_at == seen_retry_at)
        .values(retry_at=now + lease, modified_at=now),
    )
    _claimed(s, "crawl", int(claimed), int(not claimed))
    return claimed


def unseeded_crawls(s: Session, limit: int = 20) -> list[tuple[str, int]]:
    """Started crawls with seeds not yet inserted as snapshots: ``[(id, seeded)]``."""
    rows = s.execute(
        select(Crawl.id, Crawl.seeded)
        .where(
            Crawl.status == STARTED, Crawl.seeded < Crawl.seed_count, Crawl.cancelled_at.is_(None), Crawl.error == ""
        )
        .order_by(Crawl.created_at)
        .limit(limit)
    )
    return [(crawl_id, seeded) for crawl_id, seeded in rows]


def seeds_from(s: Session, crawl_id: str, position: int, limit: int) -> list[Seed]:
    """The crawl's seeds from ``position`` on, at most ``limit``."""
    rows = s.scalars(
        select(CrawlSeed)
        .where(CrawlSeed.crawl_id == crawl_id, CrawlSeed.position >= position)
        .order_by(CrawlSeed.position)
        .limit(limit)
    )
    return [row.seed() for row in rows]


def record_seeded(s: Session, crawl_id: str, seen_seeded: int, seeded: int, now: datetime) -> bool:
    """Advance the crawl's seed cursor from ``seen_seeded``; False if another runner did."""
    return _one(
        s,
        update(Crawl)
        .where(Crawl.id == crawl_id, Crawl.status == STARTED, Crawl.seeded == seen_seeded)
        .values(seeded=seeded, modified_at=now),
    )


# seal_crawl_if_done runs at every snapshot's seal: its statements are built once (module docstring)
_crawl = cast(Table, Crawl.__table__)
_CRAWL_LOCK_STARTED = (
    update(_crawl)
    .where(_crawl.c.id == bindparam("g_id"), _crawl.c.status == STARTED)
    .values(modified_at=bindparam("v_modified_at"))
)
_CRAWL_OPEN_SNAPSHOTS = (
    select(func.count())
    .select_from(Snapshot)
    .where(Snapshot.crawl_id == bindparam("g_id"), Snapshot.status.in_(OPEN_STATUSES))
)
_CRAWL_SEAL = (
    update(_crawl)
    .where(_crawl.c.id == bindparam("g_id"), _crawl.c.status == STARTED)
    .values(status=bindparam("v_status"), retry_at=bindparam("v_retry_at"), modified_at=bindparam("v_modified_at"))
)


def seal_crawl_if_done(s: Session, crawl_id: str, now: datetime) -> bool:
    """Seal a started crawl with every seed inserted and no open snapshot left; True when sealed.

    Takes the crawl row's lock first, so of two replicas sealing the last two snapshots at once
    the second sees the first's commit and one of them seals the crawl.
    """
    if not _one(s, _CRAWL_LOCK_STARTED, {"g_id": crawl_id, "v_modified_at": now}):
        return False
    crawl = s.get(Crawl, crawl_id, populate_existing=True)
    if crawl is None:  # the UPDATE above found it: only a concurrent delete gets here
        return False
    if crawl.seeded < crawl.seed_count and crawl.cancelled_at is None and not crawl.error:
        return False
    if s.scalar(_CRAWL_OPEN_SNAPSHOTS, {"g_id": crawl_id}):
        return False
    sealed = _one_held(s, crawl, _CRAWL_SEAL, {"g_id": crawl_id}, status=SEALED, retry_at=None, modified_at=now)
    _sealed(s, "crawl", int(sealed))
    return sealed


def pause_crawl(s: Session, crawl_id: str, now: datetime) -> bool:
    """``queued|started → paused``: no new snapshot starts; those in flight finish their stages."""
    return _one(
        s,
        update(Crawl)
        .where(Crawl.id == crawl_id, Crawl.status.in_((QUEUED, STARTED)), Crawl.cancelled_at.is_(None))
        .values(status=PAUSED, retry_at=None, modified_at=now),
    )


def resume_crawl(s: Session, crawl_id: str, now: datetime) -> bool:
    """``paused → started`` (or ``queued`` when it never seeded), due now."""
    crawl = s.get(Crawl, crawl_id)
    return crawl is not None and _one(
        s,
        update(Crawl)
        .where(Crawl.id == crawl_id, Crawl.status == PAUSED)
        .values(status=STARTED if crawl.seeded else QUEUED, retry_at=now, modified_at=now),
    )


def cancel_crawl(s: Session, crawl_id: str, now: datetime) -> bool:
    """Mark a crawl cancelled (``started``, due now): nothing of it is dispatched any more; the
    runner then seals its snapshots (``stop_crawl`` in the runner) and, once none is open, it."""
    return _one(
        s,
        update(Crawl)
        .where(Crawl.id == crawl_id, Crawl.status.in_(OPEN_STATUSES), Crawl.cancelled_at.is_(None))
        .values(status=STARTED, cancelled_at=now, retry_at=now, modified_at=now),
    )


def fail_crawl(s: Session, crawl_id: str, error: str, now: datetime) -> bool:
    """Give a crawl up with ``error`` (a step kept failing); it is then stopped like a cancel."""
    return _one(
        s,
        update(Crawl)
        .where(Crawl.id == crawl_id, Crawl.status.in_(OPEN_STATUSES), Crawl.error == "")
        .values(status=STARTED, error=error[:2000] or "failed", retry_at=now, modified_at=now),
    )


def stopped_crawls_with_open_snapshots(s: Session, limit: int = 20) -> list[str]:
    """Cancelled or failed crawls that still have open snapshots (the stop is not finished)."""
    return list(
        s.scalars(
            select(Crawl.id)
            .where(
                Crawl.status == STARTED,
                or_(Crawl.cancelled_at.is_not(None), Crawl.error != ""),
                select(Snapshot.id).where(Snapshot.crawl_id == Crawl.id, Snapshot.status.in_(OPEN_STATUSES)).exists(),
            )
            .limit(limit)
        )
    )


# --------------------------------------------------------------------------- snapshots


def insert_snapshots(
    s: Session,
    crawl: Crawl,
    seeds: Sequence[Seed],
    *,
    depth: int,
    parent_id: str | None,
    now: datetime,
    max_urls: int = 0,
    only_new: bool = False,
) -> tuple[list[str], int]:
    """Create queued snapshots, skipping URLs the crawl already has (``UNIQUE(crawl_id, url)``),
    in statements of ``BATCH`` rows.

    With ``only_new`` each gets its ``dedup_key`` (the crawl's user and the URL), which is unique:
    a URL some other snapshot is archiving or has archived is not inserted but *merged* — the
    seed's tags go to that snapshot and ``Crawl.merged`` counts it. The decision is the insert
    itself, so concurrent crawls of one URL, on any number of runners, make one snapshot. Keys of
    sealed snapshots that archived nothing are released first (``release_dedup_keys``), so a URL
    that failed is captured again.

    Args:
        max_urls: cap on the crawl's total snapshot count (``CRAWL_MAX_URLS``), 0 = none.

    Returns:
        ``(ids created, seeds left out by max_urls)``.
    """
    if not seeds:
        return [], 0
    over = 0
    if max_urls > 0:
        existing = s.scalar(select(func.count()).select_from(Snapshot).where(Snapshot.crawl_id == crawl.id))
        room = max(0, max_urls - (existing or 0))
        over = max(0, len(seeds) - room)
        seeds = seeds[:room]
    crawl_tags = [t.strip() for t in crawl.tags_str.split(",") if t.strip()]
    rows: list[dict[str, Any]] = []
    tags_by_id: dict[str, list[str]] = {}
    tags_by_key: dict[str, tuple[str, list[str]]] = {}
    for seed in seeds:  # ids in submission order: snapshots are claimed in that order
        sid = new_id()
        bookmarked = seed.bookmarked_at or now
        hashed = url_hash(seed.url)
        key = dedup_key(crawl.created_by, hashed) if only_new else None
        rows.append(
            {
                "id": sid,
                "crawl_id": crawl.id,
                "url": seed.url,
                "url_hash": hashed,
                "dedup_key": key,
                "depth": depth,
                "parent_snapshot_id": parent_id,
                "title": seed.title,
                "bookmarked_at": bookmarked,
                "created_at": now,
                "modified_at": now,
                "status": QUEUED,
                "retry_at": now,
                "stage": 0,
                "output_size": 0,
                "config": {},
                "attempts": 0,
                "credentials": seed.credentials,
                "refusal": "",
                "domain": url_domain(seed.url),  # known now: per-host politeness needs it at the claim
                "output_dir": snapshot_dir(crawl.created_by, bookmarked, seed.url, sid),
            }
        )
        tags_by_id[sid] = list(dict.fromkeys(crawl_tags + list(seed.tags)))
        if key:
            tags_by_key[key] = (sid, tags_by_id[sid])
    if tags_by_key:
        release_dedup_keys(s, list(tags_by_key))
        # every transaction takes the unique keys in one order: two crawls inserting the same
        # URLs in different orders wait for each other instead of deadlocking (Postgres)
        rows.sort(key=lambda row: row["dedup_key"])
    insert = insert_for(s)
    created: list[str] = []
    for chunk in _chunks(rows):
        # no conflict target: a row that clashes on (crawl_id, url_hash) or on dedup_key is skipped
        s.execute(insert(Snapshot).values(list(chunk)).on_conflict_do_nothing())
        ids = [row["id"] for row in chunk]
        made = list(s.scalars(select(Snapshot.id).where(Snapshot.id.in_(ids))))
        attach_tags(s, {sid: tags_by_id[sid] for sid in made})
        created.extend(made)
        if tags_by_key and len(made) < len(chunk):
            keys = {row["dedup_key"]: tags_by_key[row["dedup_key"]] for row in chunk if row["dedup_key"]}
            _merge_into_holders(s, crawl.id, keys, set(made))
    return created, over


def release_dedup_keys(s: Session, keys: Sequence[str]) -> int:
    """Free the ``dedup_key`` of sealed snapshots that archived nothing (failed, cancelled,
    refused), so an ``ONLY_NEW`` crawl captures their URL again; returns how many. Guard: only
    ``sealed`` rows whose results are all in (as many as ``expected_results``: the projector writes
    them after the seal) and none succeeded lose their key (an open one never does). A snapshot
    sealed a moment ago has none of its results yet: its key was released then, and a concurrent
    crawl of the same URL made a second snapshot of it."""
    succeeded = exists().where(ArchiveResult.snapshot_id == Snapshot.id, ArchiveResult.status == ResultStatus.SUCCEEDED)
    projected = (
        select(func.count()).where(ArchiveResult.snapshot_id == Snapshot.id).scalar_subquery()
        >= Snapshot.expected_results
    )
    released = 0
    for chunk in _chunks(list(keys)):
        released += _rowcount(
            s,
            update(Snapshot)
            .where(Snapshot.dedup_key.in_(chunk), Snapshot.status == SEALED, projected, ~succeeded)
            .values(dedup_key=None)
            .execution_options(synchronize_session=False),
        )
    return released


def _merge_into_holders(s: Session, crawl_id: str, wanted: dict[str, tuple[str, list[str]]], made: set[str]) -> None:
    """Seeds whose ``dedup_key`` another crawl's snapshot holds: their tags go to that snapshot
    and the crawl counts them merged."""
    missing = [key for key, (sid, _tags) in wanted.items() if sid not in made]
    holders = s.execute(
        select(Snapshot.dedup_key, Snapshot.id).where(Snapshot.dedup_key.in_(missing), Snapshot.crawl_id != crawl_id)
    ).all()
    if not holders:
        return
    attach_tags(s, {holder: wanted[key][1] for key, holder in holders if key is not None})
    s.execute(update(Crawl).where(Crawl.id == crawl_id).values(merged=Crawl.merged + len(holders)))


def crawls_with_due_snapshots(s: Session, now: datetime, limit: int = 100) -> list[str]:
    """Started, running crawls that have a due queued snapshot, least recently served first
    (a small crawl behind a huge one starts at once: every crawl gets its turn each pass)."""
    due = (
        select(Snapshot.id)
        .where(Snapshot.crawl_id == Crawl.id, Snapshot.status == QUEUED, Snapshot.retry_at <= now)
        .exists()
    )
    return list(
        s.scalars(
            select(Crawl.id)
            .where(Crawl.status == STARTED, Crawl.cancelled_at.is_(None), Crawl.error == "", due)
            .order_by(Crawl.modified_at)
            .limit(limit)
        )
    )


def started_count(s: Session, crawl_id: str) -> int:
    """Snapshots of the crawl in flight (for ``CRAWL_MAX_CONCURRENT_SNAPSHOTS``)."""
    count = s.scalar(
        select(func.count()).select_from(Snapshot).where(Snapshot.crawl_id == crawl_id, Snapshot.status == STARTED)
    )
    return count or 0


def host_allowance(s: Session, now: datetime, limits: tuple[int, int]) -> dict[str, int]:
    """Per-host politeness (``DOMAIN_MAX_CONCURRENT``, ``DOMAIN_REQUESTS_PER_MINUTE``; 0 = no
    limit): how many more captures each host that is busy may start now, every crawl's and every
    runner's together (the database is the one place they all see): its concurrency limit minus
    its snapshots ``started``, and its per-minute limit minus the captures started in the last 60
    seconds, whichever is less. Hosts not listed may start any number. On Postgres a transaction
    lock serialises the runners' claims, so two replicas never both take a host's last slot."""
    most, per_minute = limits
    if not most and not per_minute:
        return {}
    if s.get_bind().dialect.name == "postgresql":
        s.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": HOST_CLAIM_LOCK})
    left: dict[str, int] = {}
    if most:
        for domain, busy in s.execute(
            select(Snapshot.domain, func.count()).where(Snapshot.status == STARTED).group_by(Snapshot.domain)
        ):
            left[domain] = most - busy
    if per_minute:
        for domain, recent in s.execute(
            select(Snapshot.domain, func.count())
            .where(Snapshot.started_at > now - timedelta(minutes=1))
            .group_by(Snapshot.domain)
        ):
            left[domain] = min(left.get(domain, per_minute), per_minute - recent)
    return left


def claim_queued_snapshots(
    s: Session,
    crawl_id: str,
    n: int,
    now: datetime,
    lease: timedelta,
    first_stage: int,
    host_limits: tuple[int, int] = (0, 0),
) -> list[Snapshot]:
    """``queued → started`` at ``first_stage`` for up to ``n`` due snapshots of a crawl,
    shallowest and oldest first, each with a lease and one more attempt; with ``host_limits``
    (``host_allowance``) a host that has used its allowance keeps its snapshots queued while other
    hosts' go ahead."""
    if n <= 0:
        return []
    allowance = host_allowance(s, now, host_limits)
    full = [domain for domain, left in allowance.items() if left <= 0]
    candidates = (
        select(Snapshot.id, Snapshot.domain)
        .where(Snapshot.crawl_id == crawl_id, Snapshot.status == QUEUED, Snapshot.retry_at <= now)
        .where(Snapshot.domain.not_in(full) if full else true())
        .order_by(Snapshot.depth, Snapshot.created_at)
        .limit(n if not allowance else n * 8)
    )
    if s.get_bind().dialect.name == "postgresql":
        candidates = candidates.with_for_update(skip_locked=True)
    chosen: list[str] = []
    for snapshot_id, domain in s.execute(candidates):
        if domain in allowance:
            if allowance[domain] <= 0:
                continue
            allowance[domain] -= 1
        elif any(host_limits):  # a host not busy yet: a fresh allowance
            most, per_minute = host_limits
            allowance[domain] = min(x for x in (most or n, per_minute or n)) - 1
        chosen.append(snapshot_id)
        if len(chosen) >= n:
            break
    if not chosen:
        return []
    stmt = (
        update(Snapshot)
        .where(Snapshot.id.in_(chosen), Snapshot.status == QUEUED)
        .values(
            status=STARTED,
            stage=first_stage,
            retry_at=now + lease,
            modified_at=now,
            started_at=now,
            attempts=Snapshot.attempts + 1,
        )
        .returning(Snapshot.id)
    )
    ids = list(s.scalars(stmt))
    _claimed(s, "snapshot", len(ids), len(chosen) - len(ids))
    if not ids:
        return []
    s.execute(update(Crawl).where(Crawl.id == crawl_id).values(modified_at=now))  # its turn was taken
    return list(s.scalars(select(Snapshot).where(Snapshot.id.in_(ids)).execution_options(populate_existing=True)))


# The snapshot UPDATEs the runner makes on every task completion (module docstring).
_snapshot = cast(Table, Snapshot.__table__)
_task = cast(Table, SnapshotTask.__table__)
_HELD_AT_STAGE = (
    _snapshot.c.id == bindparam("g_id"),
    _snapshot.c.status == STARTED,
    _snapshot.c.stage == bindparam("g_stage"),
)
_SNAPSHOT_LOCK = update(_snapshot).where(*_HELD_AT_STAGE).values(modified_at=bindparam("v_modified_at"))
_SNAPSHOT_MOVE = (
    update(_snapshot)
    .where(*_HELD_AT_STAGE)
    .values(stage=bindparam("v_stage"), retry_at=bindparam("v_retry_at"), modified_at=bindparam("v_modified_at"))
)
_SNAPSHOT_SEAL = (
    update(_snapshot)
    .where(*_HELD_AT_STAGE)
    .values(
        status=bindparam("v_status"),
        retry_at=bindparam("v_retry_at"),
        downloaded_at=bindparam("v_downloaded_at"),
        modified_at=bindparam("v_modified_at"),
        expected_results=bindparam("v_expected_results"),
    )
)


def lock_snapshot_at_stage(s: Session, snapshot_id: str, stage: int, now: datetime) -> Snapshot | None:
    """Lock a started snapshot that is still at ``stage``; None if it moved on (a stale event)."""
    locked = _one(s, _SNAPSHOT_LOCK, {"g_id": snapshot_id, "g_stage": stage, "v_modified_at": now})
    return s.get(Snapshot, snapshot_id, populate_existing=True) if locked else None


def due_started_snapshots(s: Session, now: datetime, limit: int = 100) -> list[tuple[str, datetime]]:
    """Started snapshots whose lease expired (their owner died or a stage is overdue)."""
    rows = s.execute(
        select(Snapshot.id, Snapshot.retry_at)
        .where(Snapshot.status == STARTED, Snapshot.retry_at <= now)
        .order_by(Snapshot.retry_at)
        .limit(limit)
    )
    return [(snapshot_id, retry_at) for snapshot_id, retry_at in rows if retry_at is not None]


def claim_started_snapshot(
    s: Session, snapshot_id: str, seen_retry_at: datetime, now: datetime, lease: timedelta
) -> Snapshot | None:
    """Take over an expired lease on a started snapshot; None when another replica did."""
    claimed = _one(
        s,
        update(Snapshot)
        .where(Snapshot.id == snapshot_id, Snapshot.status == STARTED, Snapshot.retry_at == seen_retry_at)
        .values(retry_at=now + lease, modified_at=now),
    )
    _claimed(s, "snapshot", int(claimed), int(not claimed))
    return s.get(Snapshot, snapshot_id, populate_existing=True) if claimed else None


def record_response(
    s: Session,
    snapshot: Snapshot,
    http_status: int | None,
    final_url: str | None,
    network_error: str,
    refusal: str = "",
) -> None:
    """Keep what the capture saw of the page's response on the snapshot we hold (locked), or why
    the egress policy refused to fetch it; ``snapshot`` shows it too (``_keep``)."""
    values: dict[str, Any] = {"refusal": refusal[:1000]} if refusal else {}
    if http_status is not None:
        values.update(http_status=http_status, network_error="")
    elif network_error and snapshot.http_status is None:
        values["network_error"] = network_error[:1000]
    if final_url:
        values["final_url"] = final_url if final_url != snapshot.url else None
    if values and _one(
        s, update(_snapshot).where(_snapshot.c.id == snapshot.id, _snapshot.c.status == STARTED).values(**values)
    ):
        _keep(snapshot, values)


def move_to_stage(s: Session, snapshot: Snapshot, stage: int, now: datetime, lease: timedelta) -> bool:
    """``stage N → stage M`` on a started snapshot we hold; False if it is no longer at N."""
    guard = {"g_id": snapshot.id, "g_stage": snapshot.stage}
    return _one_held(s, snapshot, _SNAPSHOT_MOVE, guard, stage=stage, retry_at=now + lease, modified_at=now)


def requeue_snapshot(s: Session, snapshot: Snapshot, retry_at: datetime, now: datetime) -> bool:
    """``started → queued`` to capture again at ``retry_at`` (a 429/5xx or network error)."""
    return _one(
        s,
        update(Snapshot)
        .where(Snapshot.id == snapshot.id, Snapshot.status == STARTED, Snapshot.stage == snapshot.stage)
        .values(
            status=QUEUED,
            stage=0,
            retry_at=retry_at,
            modified_at=now,
            http_status=None,
            final_url=None,
            network_error="",
        ),
    )


def seal_snapshot(s: Session, snapshot: Snapshot, now: datetime, expected_results: int) -> bool:
    """``started → sealed`` at the stage we hold, noting how many results its plan has (the
    projector's index is complete once it has them all); False if someone else moved or sealed it."""
    sealed = _one_held(
        s,
        snapshot,
        _SNAPSHOT_SEAL,
        {"g_id": snapshot.id, "g_stage": snapshot.stage},
        status=SEALED,
        retry_at=None,
        downloaded_at=now,
        modified_at=now,
        expected_results=expected_results,
    )
    _sealed(s, "snapshot", int(sealed))
    return sealed


def seal_unstarted_snapshots(s: Session, crawl_id: str, now: datetime) -> int:
    """Seal, unarchived, every queued or paused snapshot of a stopped crawl; returns how many."""
    sealed = _rowcount(
        s,
        update(Snapshot)
        .where(Snapshot.crawl_id == crawl_id, Snapshot.status.in_((QUEUED, PAUSED)))
        .values(status=SEALED, retry_at=None, modified_at=now),
    )
    _sealed(s, "snapshot", sealed)
    return sealed


def started_snapshots(s: Session, crawl_id: str) -> list[Snapshot]:
    """The crawl's snapshots in flight."""
    return list(s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id, Snapshot.status == STARTED)))


# --------------------------------------------------------------------------- tasks


def task_id(snapshot_id: str, attempt: int, stage: int, family: str) -> str:
    """The natural id of a task: one per (snapshot, capture attempt, stage, family)."""
    return f"{snapshot_id}.{attempt}.{stage}.{family}"


# The task statements of every completion (module docstring).
_TASK_COMPLETE = (
    update(_task)
    .where(_task.c.id == bindparam("g_id"), _task.c.status.in_(TASK_OPEN))
    .values(status=bindparam("v_status"), error=bindparam("v_error"), completed_at=bindparam("v_completed_at"))
    .returning(_task.c.family)
)
_TASK_START = (
    update(_task)
    .where(_task.c.id == bindparam("g_id"), _task.c.status.in_(TASK_OPEN), _task.c.started_at.is_(None))
    .values(started_at=bindparam("v_started_at"))
)
_TASK_DISPATCH = (
    update(_task)
    .where(_task.c.id.in_(bindparam("g_ids", expanding=True)), _task.c.status == TaskStatus.PLANNED)
    .values(status=TaskStatus.DISPATCHED, dispatched_at=bindparam("v_dispatched_at"))
)
_TASKS_OPEN = select(SnapshotTask).where(
    SnapshotTask.snapshot_id == bindparam("g_snapshot_id"), SnapshotTask.status.in_(TASK_OPEN)
)
_TASKS_OPEN_AT_STAGE = _TASKS_OPEN.where(SnapshotTask.stage == bindparam("g_stage"))
_TASKS_BY_ID = select(SnapshotTask).where(SnapshotTask.id.in_(bindparam("g_ids", expanding=True)))


def insert_tasks(
    s: Session, snapshot: Snapshot, stage: int, families: dict[str, list[str]], now: datetime
) -> list[SnapshotTask]:
    """Plan one task per family for ``stage`` (status ``planned``; idempotent on the task id)."""
    rows = [
        {
            "id": task_id(snapshot.id, snapshot.attempts, stage, family),
            "snapshot_id": snapshot.id,
            "crawl_id": snapshot.crawl_id,
            "stage": stage,
            "family": family,
            "plugins": plugins,
            "status": TaskStatus.PLANNED,
            "attempt": snapshot.attempts,
            "created_at": now,
            "error": "",
        }
        for family, plugins in families.items()
    ]
    insert = insert_for(s)
    # one statement executed per row (a multi-row VALUES insert is compiled anew every time)
    s.execute(insert(SnapshotTask.__table__).on_conflict_do_nothing(index_elements=["id"]), rows)
    return list(s.scalars(_TASKS_BY_ID, {"g_ids": [r["id"] for r in rows]}))


def complete_task(s: Session, task_id_: str, status: TaskStatus, error: str, now: datetime) -> bool:
    """Record a task's outcome once; False when it was already recorded (a redelivery).

    A task object this session holds keeps its old status (nothing reads it after this)."""
    family = s.scalar(
        _TASK_COMPLETE, {"g_id": task_id_, "v_status": status, "v_error": error[:2000], "v_completed_at": now}
    )
    if family is None:
        return False
    after_commit(s, lambda: metrics.TASKS.labels(family, str(status)).inc())
    return True


def mark_task_started(s: Session, task_id_: str, now: datetime) -> bool:
    """Note that an executor picked the task up (the pickup deadline no longer applies). A task
    object this session holds keeps its old ``started_at``."""
    return _one(s, _TASK_START, {"g_id": task_id_, "v_started_at": now})


def open_tasks(s: Session, snapshot_id: str, stage: int | None = None) -> list[SnapshotTask]:
    """Tasks of a snapshot (of one stage, if given) that have not completed yet."""
    if stage is None:
        return list(s.scalars(_TASKS_OPEN, {"g_snapshot_id": snapshot_id}))
    return list(s.scalars(_TASKS_OPEN_AT_STAGE, {"g_snapshot_id": snapshot_id, "g_stage": stage}))


def cancel_open_tasks(s: Session, snapshot_id: str, reason: str, now: datetime) -> list[SnapshotTask]:
    """``planned|dispatched → cancelled`` for every open task of a snapshot; returns them."""
    tasks = open_tasks(s, snapshot_id)
    for chunk in _chunks([t.id for t in tasks]):
        s.execute(
            update(SnapshotTask)
            .where(SnapshotTask.id.in_(list(chunk)), SnapshotTask.status.in_(TASK_OPEN))
            .values(status=TaskStatus.CANCELLED, error=reason, completed_at=now)
        )
    for task in tasks:  # read under the snapshot's lock: each was open, and is now cancelled
        after_commit(s, metrics.TASKS.labels(task.family, str(TaskStatus.CANCELLED)).inc)
    return tasks


def mark_dispatched(s: Session, task_ids: Iterable[str], now: datetime) -> None:
    """``planned → dispatched`` once the stream acked the task messages."""
    for chunk in _chunks(list(task_ids)):
        s.execute(_TASK_DISPATCH, {"g_ids": list(chunk), "v_dispatched_at": now})


def stale_planned_tasks(s: Session, older_than: datetime, limit: int = 200) -> list[SnapshotTask]:
    """Planned tasks whose publish never got acked (the runner died in between)."""
    return list(
        s.scalars(
            select(SnapshotTask)
            .join(Snapshot, Snapshot.id == SnapshotTask.snapshot_id)
            .where(
                SnapshotTask.status == TaskStatus.PLANNED,
                SnapshotTask.created_at <= older_than,
                Snapshot.status == STARTED,
                Snapshot.stage == SnapshotTask.stage,
            )
            .limit(limit)
        )
    )


def unpicked_tasks(s: Session, dispatched_before: datetime, limit: int = 200) -> list[SnapshotTask]:
    """Dispatched tasks no executor has started since ``dispatched_before``."""
    return list(
        s.scalars(
            select(SnapshotTask)
            .where(
                SnapshotTask.status == TaskStatus.DISPATCHED,
                SnapshotTask.started_at.is_(None),
                SnapshotTask.dispatched_at <= dispatched_before,
            )
            .order_by(SnapshotTask.dispatched_at)
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
    return [(sid, status, retry_at) for sid, status, retry_at in rows if retry_at is not None]


def claim_schedule(
    s: Session, schedule_id: str, status: str, seen_retry_at: datetime, now: datetime, lease: timedelta
) -> CrawlSchedule | None:
    """``queued → started`` (or take over an expired poll) with a lease; None when not ours."""
    claimed = _one(
        s,
        update(CrawlSchedule)
        .where(CrawlSchedule.id == schedule_id, CrawlSchedule.status == status, CrawlSchedule.retry_at == seen_retry_at)
        .values(status=STARTED, retry_at=now + lease, modified_at=now),
    )
    _claimed(s, "schedule", int(claimed), int(not claimed))
    return s.get(CrawlSchedule, schedule_id, populate_existing=True) if claimed else None


def finish_schedule_poll(
    s: Session, schedule: CrawlSchedule, lease_until: datetime, now: datetime, next_at: datetime, **values: Any
) -> bool:
    """``started → queued`` with the next poll time; False when the schedule was paused, deleted or
    taken over meanwhile (the caller's transaction must then roll back)."""
    return _one(
        s,
        update(CrawlSchedule)
        .where(CrawlSchedule.id == schedule.id, CrawlSchedule.status == STARTED, CrawlSchedule.retry_at == lease_until)
        .values(status=QUEUED, retry_at=next_at, last_polled_at=now, modified_at=now, **values),
    )


def unseen_feed_keys(s: Session, schedule_id: str, keys: Sequence[str]) -> set[str]:
    """The item keys this schedule has not recorded yet."""
    seen: set[str] = set()
    for chunk in _chunks(list(keys)):
        seen.update(
            s.scalars(
                select(FeedItem.item_key).where(FeedItem.schedule_id == schedule_id, FeedItem.item_key.in_(chunk))
            )
        )
    return set(keys) - seen


def record_feed_items(s: Session, schedule_id: str, items: dict[str, tuple[str, str | None]], now: datetime) -> None:
    """Remember feed items (``{item_key: (url, crawl id or None)}``) so later polls skip them
    while their crawl archives them; an item polled again moves to its new crawl (idempotent)."""
    insert = insert_for(s)
    rows = [
        {"schedule_id": schedule_id, "item_key": k, "url": url, "crawl_id": crawl_id, "first_seen_at": now}
        for k, (url, crawl_id) in items.items()
    ]
    for chunk in _chunks(rows):
        stmt = insert(FeedItem).values(list(chunk))
        s.execute(
            stmt.on_conflict_do_update(
                index_elements=["schedule_id", "item_key"], set_={"crawl_id": stmt.excluded.crawl_id}
            )
        )


def feed_keys_to_retry(s: Session, schedule_id: str, keys: Sequence[str]) -> set[str]:
    """Item keys a poll recorded whose crawl ended without archiving the item's URL (cancelled,
    never captured): ``ONLY_NEW`` counts an item seen once archived, not once read."""
    found: set[str] = set()
    archived = (
        select(Snapshot.id)
        .join(ArchiveResult, ArchiveResult.snapshot_id == Snapshot.id)
        .where(
            Snapshot.crawl_id == FeedItem.crawl_id,
            Snapshot.url == FeedItem.url,
            ArchiveResult.status == ResultStatus.SUCCEEDED,
        )
        .exists()
    )
    for chunk in _chunks(list(keys)):
        found.update(
            s.scalars(
                select(FeedItem.item_key)
                .join(Crawl, Crawl.id == FeedItem.crawl_id)
                .where(
                    FeedItem.schedule_id == schedule_id, FeedItem.item_key.in_(chunk), Crawl.status == SEALED, ~archived
                )
            )
        )
    return found


def request_schedule_poll(s: Session, schedule_id: str, now: datetime) -> bool:
    """Poll an idle schedule now (not one being polled, not a paused one)."""
    return _one(
        s,
        update(CrawlSchedule)
        .where(CrawlSchedule.id == schedule_id, CrawlSchedule.status == QUEUED)
        .values(retry_at=now, modified_at=now),
    )


def pause_schedule(s: Session, schedule_id: str, now: datetime) -> bool:
    """``queued|started → paused``; a poll in flight then fails to finish and rolls back."""
    return _one(
        s,
        update(CrawlSchedule)
        .where(CrawlSchedule.id == schedule_id, CrawlSchedule.status.in_((QUEUED, STARTED)))
        .values(status=PAUSED, retry_at=None, modified_at=now),
    )


def resume_schedule(s: Session, schedule_id: str, now: datetime) -> bool:
    """``paused → queued``, due now."""
    return _one(
        s,
        update(CrawlSchedule)
        .where(CrawlSchedule.id == schedule_id, CrawlSchedule.status == PAUSED)
        .values(status=QUEUED, retry_at=now, modified_at=now),
    )


def earliest_schedule_due(s: Session) -> datetime | None:
    """The nearest ``retry_at`` of an enabled, unpaused schedule (the feed loop's next look)."""
    return s.scalar(
        select(func.min(CrawlSchedule.retry_at)).where(
            CrawlSchedule.status.in_((QUEUED, STARTED)), CrawlSchedule.is_enabled.is_(True)
        )
    )


def earliest_due(s: Session, now: datetime) -> datetime | None:
    """When the next row comes due by time alone: a queued or leased crawl, a snapshot lease, or
    a snapshot waiting to be captured again. (Queued snapshots that wait for a free slot are not
    timed: a seal wakes the runner.)"""
    times = [
        s.scalar(select(func.min(Crawl.retry_at)).where(Crawl.status.in_((QUEUED, STARTED)))),
        s.scalar(select(func.min(Snapshot.retry_at)).where(Snapshot.status == STARTED)),
        s.scalar(select(func.min(Snapshot.retry_at)).where(Snapshot.status == QUEUED, Snapshot.retry_at > now)),
    ]
    due = [t for t in times if t is not None]
    return min(due) if due else None


def oldest_unpicked_dispatch(s: Session) -> datetime | None:
    """``dispatched_at`` of the oldest task no executor has started (for the pickup deadline)."""
    return s.scalar(
        select(func.min(SnapshotTask.dispatched_at)).where(
            SnapshotTask.status == TaskStatus.DISPATCHED, SnapshotTask.started_at.is_(None)
        )
    )
