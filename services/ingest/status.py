"""``GET /api/v1/status``: what the whole stack is doing, in one look (``boxcar status``).

Counts of crawls and snapshots by status, the archive's size, the disk's use, which services are
alive (ingest itself; the crawl-runner and result-projector by their durable consumers), and per executor
family the tasks waiting, in hand, and whether any executor is there to take them (a family with
pending work and no executor is what leaves snapshots ``started`` forever otherwise).
"""

from __future__ import annotations

import logging
import shutil
from datetime import UTC, datetime

import msgspec
from nats.js.errors import NotFoundError
from sqlalchemy import func, select

from boxcar.ingest.quotas import Usage, usage
from boxcar.shared import bus
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, Snapshot
from boxcar.shared.families import FamilyTable
from boxcar.shared.settings import Settings

log = logging.getLogger(__name__)


class FamilyStatus(msgspec.Struct):
    """One executor family: ``pending`` tasks not yet taken, ``in_progress`` taken and unacked,
    ``executors_waiting`` pull requests of idle executors; ``alive`` whether any executor is
    there (waiting or working); ``oldest_pending_seconds`` how long the oldest task not yet taken
    has waited (0 when none waits)."""

    pending: int
    in_progress: int
    executors_waiting: int
    alive: bool
    oldest_pending_seconds: float = 0.0


class StackStatus(msgspec.Struct):
    crawls: dict[str, int]
    snapshots: dict[str, int]
    archive_bytes: int
    disk_free_bytes: int
    data_dir: str
    nats: bool
    families: dict[str, FamilyStatus]
    #: families with tasks waiting and no executor alive: start ``hook-executor --family NAME``
    stalled_families: list[str]
    #: bytes used on the file system that holds DATA_DIR
    disk_used_bytes: int = 0
    #: ingest, nats, crawl-runner, result-projector: whether each answers (a consumer waiting or working)
    services: dict[str, bool] = {}
    #: every user's snapshots (total, today), bytes and open crawls against their limits (None: none)
    users: list[Usage] = []


def counts(db: Database) -> tuple[dict[str, int], dict[str, int], int]:
    """Crawls and snapshots by status, and the bytes the archive holds."""
    with db.read() as s:
        crawls = dict(s.execute(select(Crawl.status, func.count()).group_by(Crawl.status)).all())
        snapshots = dict(s.execute(select(Snapshot.status, func.count()).group_by(Snapshot.status)).all())
        size = s.scalar(select(func.coalesce(func.sum(Snapshot.output_size), 0)))
    every = ("queued", "started", "paused", "sealed")
    return {k: crawls.get(k, 0) for k in every}, {k: snapshots.get(k, 0) for k in every}, int(size or 0)


async def family_status(js, families: FamilyTable) -> dict[str, FamilyStatus]:
    """Per family, from the TASKS stream and its durable consumer (a stream not created yet, as
    before the crawl-runner's first start, is nothing queued)."""
    try:
        info = await js.stream_info(bus.TASKS_STREAM, subjects_filter=bus.SUBJECT_ALL_TASKS)
        queued = dict(info.state.subjects or {})
    except NotFoundError:
        queued = {}
    out = {}
    for name in families.families:
        delivered = 0  # the stream sequence the family's consumer has delivered up to
        try:
            consumer = await js.consumer_info(bus.TASKS_STREAM, bus.family_consumer(name))
            pending, in_progress, waiting = (
                consumer.num_pending or 0,
                consumer.num_ack_pending or 0,
                consumer.num_waiting or 0,
            )
            delivered = consumer.delivered.stream_seq if consumer.delivered else 0
        except NotFoundError:  # no consumer yet: no executor of this family ever started
            pending, in_progress, waiting = queued.get(bus.task_subject(name), 0), 0, 0
        age = await oldest_pending_age(js, name, delivered) if pending else 0.0
        out[name] = FamilyStatus(
            pending, in_progress, waiting, alive=waiting > 0 or in_progress > 0, oldest_pending_seconds=age
        )
    return out


async def oldest_pending_age(js, family: str, delivered: int) -> float:
    """Seconds since the oldest task of ``family`` its consumer has not delivered yet was queued:
    the first ``tasks.hooks.<family>`` message after stream sequence ``delivered`` (JetStream's
    get-next-by-subject); 0 when there is none or the server cannot say."""
    try:
        first = await js.get_msg(bus.TASKS_STREAM, seq=delivered + 1, subject=bus.task_subject(family), next=True)
    except Exception as exc:  # taken meanwhile, or an older server
        log.debug("oldest pending task of %s: %s", family, exc)
        return 0.0
    if first.time is None:
        return 0.0
    return max(0.0, (datetime.now(UTC) - first.time).total_seconds())


async def services_alive(js) -> dict[str, bool]:
    """The crawl-runner and the result-projector are alive when their durable consumer has a pull
    request waiting or messages in hand."""
    out = {}
    for name, stream, consumer in (
        ("crawl-runner", bus.EVENTS_STREAM, bus.RUNNER_CONSUMER),
        ("result-projector", bus.EVENTS_STREAM, bus.PROJECTOR_CONSUMER),
        ("webhook-sender", bus.EVENTS_STREAM, bus.WEBHOOK_CRAWL_CONSUMER),
    ):
        try:
            info = await js.consumer_info(stream, consumer)
            out[name] = bool((info.num_waiting or 0) or (info.num_ack_pending or 0))
        except NotFoundError:  # never started
            out[name] = False
    return out


async def stack_status(db: Database, settings: Settings, families: FamilyTable, nats) -> StackStatus:
    import anyio.to_thread

    crawls, snapshots, size = await anyio.to_thread.run_sync(counts, db)
    users = await anyio.to_thread.run_sync(usage, db)
    fams: dict[str, FamilyStatus] = {}
    connected = bool(nats is not None and nats.is_connected)
    services = {
        "ingest": True,
        "nats": connected,
        "crawl-runner": False,
        "result-projector": False,
        "webhook-sender": False,
    }
    if connected:
        fams = await family_status(nats.jetstream(), families)
        services.update(await services_alive(nats.jetstream()))
    disk = shutil.disk_usage(settings.data_dir) if settings.data_dir.exists() else None
    return StackStatus(
        disk_used_bytes=disk.used if disk else 0,
        services=services,
        crawls=crawls,
        snapshots=snapshots,
        archive_bytes=size,
        disk_free_bytes=shutil.disk_usage(settings.data_dir).free if settings.data_dir.exists() else 0,
        data_dir=str(settings.data_dir),
        nats=connected,
        families=fams,
        stalled_families=[name for name, f in fams.items() if f.pending and not f.alive],
        users=users,
    )
