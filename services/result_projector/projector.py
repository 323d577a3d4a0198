"""The result-projector: turns hook and binary events into ArchiveResult, Process and Binary rows.

It is the only writer of those rows (DESIGN.md rule 3) and writes them as idempotent upserts on
their natural keys, so a redelivered event never duplicates a row:

- ArchiveResult on ``(snapshot_id, plugin, hook_name)``; an older run's event arriving after a
  newer one (``start_ts`` earlier than the stored one) does not overwrite it;
- Process on ``id``;
- Binary on ``(machine, name, abspath, version, sha256)``.

It also keeps ``Snapshot.output_size`` (sum of its results) and ``Snapshot.title`` (from the
``title`` plugin, when the snapshot has none yet). A batch is committed in one transaction and
only then acked.
"""

from __future__ import annotations

import asyncio
import logging

import msgspec
from sqlalchemy import func, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError
from sqlalchemy.orm import Session

from boxcar.shared import bus, telemetry
from boxcar.shared.db import Database, insert_for
from boxcar.shared.db.models import ArchiveResult, Binary, Process, Snapshot, utcnow
from boxcar.shared.ids import new_id
from boxcar.shared.messages import ArchiveResultRecord, BinaryRecord, ProcessRecord, decode
from boxcar.shared.settings import Settings
from boxcar.shared.titles import page_title

log = logging.getLogger("boxcar.result_projector")
tracer = telemetry.tracer("boxcar.result_projector")

BATCH = 100


def upsert_archiveresult(s: Session, r: ArchiveResultRecord) -> str:
    """Insert or update one ArchiveResult; returns its snapshot id."""
    insert = insert_for(s)
    values = {
        "id": r.id,
        "snapshot_id": r.snapshot_id,
        "plugin": r.plugin,
        "hook_name": r.hook_name,
        "status": r.status,
        "output_str": r.output_str,
        "output_json": r.output_json,
        "output_files": msgspec.to_builtins(r.output_files),
        "output_size": r.output_size,
        "output_mimetypes": r.output_mimetypes,
        "start_ts": r.start_ts,
        "end_ts": r.end_ts,
        "notes": r.notes,
        "process_id": r.process_id,
        "created_at": utcnow(),
        "modified_at": utcnow(),
    }
    stmt = insert(ArchiveResult).values(values)
    updatable = {
        k: stmt.excluded[k] for k in values if k not in ("id", "snapshot_id", "plugin", "hook_name", "created_at")
    }
    s.execute(
        stmt.on_conflict_do_update(
            index_elements=["snapshot_id", "plugin", "hook_name"],
            set_=updatable,
            where=or_(
                ArchiveResult.start_ts.is_(None),
                stmt.excluded.start_ts.is_(None),
                stmt.excluded.start_ts >= ArchiveResult.start_ts,
            ),
        )
    )
    if r.plugin in ("title", "seo") and r.status == "succeeded":
        refresh_title(s, r.snapshot_id)
    return r.snapshot_id


def refresh_title(s: Session, snapshot_id: str) -> None:
    """Snapshot.title from the browser: ``og:title``, else the cleaned ``<title>`` (``titles.page_title``).

    A title the snapshot already has from its source (a bookmark's, a feed item's) is kept; one this
    projector derived earlier from fewer results is refined.
    """
    results = dict(
        s.execute(
            select(ArchiveResult.plugin, ArchiveResult).where(
                ArchiveResult.snapshot_id == snapshot_id,
                ArchiveResult.plugin.in_(("title", "seo")),
                ArchiveResult.status == "succeeded",
            )
        ).all()
    )
    title = results.get("title")
    if title is None or not title.output_str.strip():
        return
    seo = results.get("seo")
    best = page_title(title.output_str, seo.output_json if seo and isinstance(seo.output_json, dict) else None)
    raw = " ".join(title.output_str.split())
    s.execute(
        update(Snapshot)
        .where(
            Snapshot.id == snapshot_id, or_(Snapshot.title.is_(None), Snapshot.title == "", Snapshot.title == raw[:512])
        )
        .values(title=best[:512])
    )


def upsert_process(s: Session, p: ProcessRecord) -> None:
    """Insert or update one Process row by id."""
    insert = insert_for(s)
    values = {
        "id": p.id,
        "machine": p.machine,
        "snapshot_id": p.snapshot_id or None,
        "plugin": p.plugin,
        "hook_name": p.hook_name,
        "cmd": p.cmd,
        "pwd": p.pwd,
        "pid": p.pid,
        "exit_code": p.exit_code,
        "stdout": p.stdout,
        "stderr": p.stderr,
        "started_at": p.started_at,
        "ended_at": p.ended_at,
        "timeout": p.timeout,
        "status": p.status,
        "created_at": utcnow(),
    }
    stmt = insert(Process).values(values)
    s.execute(
        stmt.on_conflict_do_update(
            index_elements=["id"], set_={k: stmt.excluded[k] for k in values if k not in ("id", "created_at")}
        )
    )


def upsert_binary(s: Session, b: BinaryRecord) -> None:
    """Insert one Binary row unless that exact binary is already recorded."""
    insert = insert_for(s)
    s.execute(
        insert(Binary)
        .values(
            id=new_id(),
            machine=b.machine,
            name=b.name,
            abspath=b.abspath,
            version=b.version,
            sha256=b.sha256,
            binprovider=b.binprovider,
            created_at=utcnow(),
            modified_at=utcnow(),
        )
        .on_conflict_do_nothing(index_elements=["machine", "name", "abspath", "version", "sha256"])
    )


def refresh_output_size(s: Session, snapshot_ids: set[str]) -> None:
    """Snapshot.output_size = the sum of its ArchiveResults' output_size (bytes)."""
    if not snapshot_ids:
        return
    total = (
        select(func.coalesce(func.sum(ArchiveResult.output_size), 0))
        .where(ArchiveResult.snapshot_id == Snapshot.id)
        .scalar_subquery()
    )
    s.execute(update(Snapshot).where(Snapshot.id.in_(snapshot_ids)).values(output_size=total))


def project(s: Session, subject: str, data: bytes, touched: set[str]) -> None:
    """Apply one event to the database (unknown subjects are ignored)."""
    if subject == bus.SUBJECT_ARCHIVERESULT:
        touched.add(upsert_archiveresult(s, decode(data, ArchiveResultRecord)))
    elif subject.startswith("events.process."):
        upsert_process(s, decode(data, ProcessRecord))
    elif subject.startswith("events.binary."):
        upsert_binary(s, decode(data, BinaryRecord))


class ResultProjector:
    """One projector replica (durable consumer ``projector`` on ``events.>``)."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        nc = await bus.connect(self.settings.nats_url, "result-projector")
        js = nc.jetstream()
        await bus.ensure_streams(js)
        await bus.ensure_consumer(js, bus.EVENTS_STREAM, bus.PROJECTOR_CONSUMER, "events.>", max_ack_pending=5000)
        sub = await bus.pull(js, bus.EVENTS_STREAM, bus.PROJECTOR_CONSUMER)
        log.info("result-projector ready")
        try:
            while not self._stop.is_set():
                try:
                    msgs = await sub.fetch(BATCH, timeout=1)
                except TimeoutError:
                    continue
                except Exception as exc:
                    log.warning("fetch failed: %s", exc)
                    await asyncio.sleep(1)
                    continue
                if msgs:
                    await self.handle_batch(msgs)
        finally:
            await nc.close()

    async def handle_batch(self, msgs: list) -> None:
        """Project a batch in one transaction, then ack it; on failure, retry message by message."""
        with tracer.start_as_current_span(
            "project batch", context=telemetry.context_from(bus.headers_of(msgs[0]))
        ) as span:
            span.set_attribute("messaging.batch.message_count", len(msgs))
            try:
                await asyncio.to_thread(self._apply, [(m.subject, m.data) for m in msgs])
            except Exception as exc:
                log.warning("batch of %d failed (%s); projecting one by one", len(msgs), exc)
                for m in msgs:
                    await self._handle_one(m)
                return
        for m in msgs:
            await m.ack()

    async def _handle_one(self, m) -> None:
        try:
            await asyncio.to_thread(self._apply, [(m.subject, m.data)])
        except (msgspec.ValidationError, msgspec.DecodeError, IntegrityError) as exc:
            log.error("dropping event %s that can never be projected: %s", m.subject, exc)
            await m.term()
        except OperationalError as exc:
            log.warning("database unavailable (%s); event %s will be redelivered", exc, m.subject)
            await m.nak(delay=5)
        else:
            await m.ack()

    def _apply(self, items: list[tuple[str, bytes]]) -> None:
        touched: set[str] = set()
        with self.db.write() as s:
            for subject, data in items:
                project(s, subject, data, touched)
            refresh_output_size(s, touched)
