"""The result-projector: turns hook and binary events into rows, and sealed snapshots into indexes.

It is the only writer of ArchiveResult, Process and Binary rows (DESIGN.md rule 3) and writes
them as idempotent upserts on their natural keys, so a redelivered event never duplicates a row:

- ArchiveResult on ``(snapshot_id, plugin, hook_name)``; an older run's event arriving after a
  newer one (``start_ts`` earlier than the stored one) does not overwrite it; a ``fallback``
  record (a hook that never reported) is stored only where the hook has no result, and a real
  result always replaces it;
- Process on ``id``;
- Binary on ``(machine, name, abspath, version, sha256)``.

It also owns the full-text index (``fulltext``): a snapshot's search document is written when a
result that feeds it arrives (readable text, title), when the snapshot is sealed and when a user
changes its tags (``events.tags.changed``), in the same handling as the rows, before the ack.

It also keeps ``Snapshot.output_size`` (sum of its results), ``Snapshot.title`` (``titles``)
and each snapshot's ``index.jsonl`` (``index``): written when the snapshot is sealed, written
again when a result arrives later, and repaired by a sweep when a write failed (a full disk).
``Snapshot.indexed_at`` is NULL while the file is missing or stale. A batch of events is
committed in one transaction and only then acked.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import groupby
from typing import Any

import msgspec
from sqlalchemy import bindparam, func, or_, select, update
from sqlalchemy.orm import Session

from boxcar.result_projector import fulltext, index
from boxcar.shared import bus, metrics, telemetry
from boxcar.shared.archive_store import ArchiveStore, StoreUnavailable
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database, insert_for
from boxcar.shared.db.models import ArchiveResult, Binary, Process, Snapshot, Status
from boxcar.shared.ids import new_id
from boxcar.shared.messages import (
    ArchiveResultRecord,
    BinaryRecord,
    ProcessRecord,
    ResultStatus,
    SnapshotEvent,
    TagsChanged,
    decode,
)
from boxcar.shared.quirks import title_sources
from boxcar.shared.settings import Settings
from boxcar.shared.titles import page_title
from boxcar.shared.urls import url_domain

log = logging.getLogger("boxcar.result_projector")
tracer = telemetry.tracer("boxcar.result_projector")

BATCH = 100
#: seconds a fetch that found fewer than ``BATCH`` events waits for more (``bus.consume``'s
#: ``linger``): a snapshot's ~18 events then come in 2–3 transactions instead of 7 (130 corpus
#: pages, no browser), and a result shows that much later at most
LINGER = 0.05
REPAIR_INTERVAL = 30.0
TITLE_SOURCES = title_sources()  # best first (``quirks``)


#: ArchiveResult columns an upsert leaves alone (the natural key and the first insert's time)
_RESULT_KEPT = ("id", "snapshot_id", "plugin", "hook_name", "created_at")
_RESULT_KEY = ["snapshot_id", "plugin", "hook_name"]
_statements: dict[tuple[str, str, tuple[str, ...]], Any] = {}


def _statement(s: Session, name: str, columns: tuple[str, ...]) -> Any:
    """One of the projector's upserts (``result``, ``fallback``, ``process``) for this session's
    dialect, writing ``columns`` (an update sets those it sent, never one it did not), built once
    per process.

    Built on the tables (Core), without values: executed with a list of parameter dicts, a batch
    of results is one statement compiled once and executed many times, instead of one statement
    built, cache-keyed and compiled per event (about 40 % of the projector's time in a long import).
    """
    key = (s.get_bind().dialect.name, name, columns)
    stmt = _statements.get(key)
    if stmt is not None:
        return stmt
    insert = insert_for(s)
    if name == "result":
        table = ArchiveResult.__table__
        ins = insert(table)
        stmt = ins.on_conflict_do_update(
            index_elements=_RESULT_KEY,
            set_={c: ins.excluded[c] for c in columns if c not in _RESULT_KEPT},
            where=or_(
                table.c.start_ts.is_(None),  # a fallback, or a result of unknown age
                ins.excluded.start_ts.is_(None),
                ins.excluded.start_ts >= table.c.start_ts,
            ),
        )
    elif name == "fallback":
        stmt = insert(ArchiveResult.__table__).on_conflict_do_nothing(index_elements=_RESULT_KEY)
    elif name == "process":
        table = Process.__table__
        ins = insert(table)
        stmt = ins.on_conflict_do_update(
            index_elements=["id"],
            set_={c: ins.excluded[c] for c in columns if c not in ("id", "created_at")},
        )
    else:
        raise KeyError(name)
    _statements[key] = stmt
    return stmt


def _result_values(r: ArchiveResultRecord, now: datetime) -> dict[str, Any]:
    """An ArchiveResult row's columns from its record (a fallback has no start/end times)."""
    return {
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
        "start_ts": None if r.fallback else r.start_ts,
        "end_ts": None if r.fallback else r.end_ts,
        "notes": r.notes,
        "process_id": r.process_id,
        "created_at": now,
        "modified_at": now,
    }


def _process_values(p: ProcessRecord, now: datetime) -> dict[str, Any]:
    """A Process row's columns from its record."""
    return {
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
        "created_at": now,
    }


def upsert_archiveresults(s: Session, records: list[ArchiveResultRecord]) -> None:
    """Insert or update ArchiveResults in their order (a fallback only where none exists, a real
    result only over a fallback or an older run's result), then refresh the titles they feed.

    The same as upserting them one by one: each run of consecutive fallbacks or results is one
    executemany of one compiled statement, which both drivers apply row after row, in order
    (SQLAlchemy folds rows into one multi-row INSERT only for ``RETURNING``; neither dialect sets
    ``use_insertmanyvalues_wo_returning``), so a hook's events in one batch still apply in turn.
    """
    now = utcnow()
    for fallback, run in groupby(records, key=lambda r: r.fallback):
        rows = [_result_values(r, now) for r in run]
        s.execute(_statement(s, "fallback" if fallback else "result", tuple(rows[0])), rows)
    for snapshot_id in {
        r.snapshot_id for r in records if r.plugin in TITLE_SOURCES and r.status == ResultStatus.SUCCEEDED
    }:
        refresh_title(s, snapshot_id)


def refresh_title(s: Session, snapshot_id: str) -> None:
    """Snapshot.title from the capture: the browser's ``og:title``, else its cleaned ``<title>``
    (``titles.page_title``); for a document (a PDF) the title staticfile read from it, else its
    file name.

    A title the snapshot already has from its source (a bookmark's, a feed item's) is kept; one this
    projector derived earlier from fewer results is refined.
    """
    results = dict(
        s.execute(
            select(ArchiveResult.plugin, ArchiveResult).where(
                ArchiveResult.snapshot_id == snapshot_id,
                ArchiveResult.plugin.in_(TITLE_SOURCES),
                ArchiveResult.status == ResultStatus.SUCCEEDED,
            )
        ).all()
    )
    title, seo, document = results.get("title"), results.get("seo"), results.get("staticfile")
    if title is not None and title.output_str.strip():
        best = page_title(title.output_str, seo.output_json if seo and isinstance(seo.output_json, dict) else None)
        raw = " ".join(title.output_str.split())
    elif document is not None and isinstance(document.output_json, dict) and document.output_json.get("title"):
        best = raw = str(document.output_json["title"])
    else:
        return
    s.execute(
        update(Snapshot)
        .where(
            Snapshot.id == snapshot_id, or_(Snapshot.title.is_(None), Snapshot.title == "", Snapshot.title == raw[:512])
        )
        .values(title=best[:512], modified_at=Snapshot.modified_at)
    )


def upsert_processes(s: Session, records: list[ProcessRecord]) -> None:
    """Insert or update Process rows by id, in their order (one executemany: see
    ``upsert_archiveresults``)."""
    now = utcnow()
    rows = [_process_values(p, now) for p in records]
    s.execute(_statement(s, "process", tuple(rows[0])), rows)


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


_snapshots = Snapshot.__table__
_ids = bindparam("ids", expanding=True)
#: ``refresh_snapshots``'s statements, on the table (Core) and built once: built per batch, as ORM
#: updates, their construction, cache keys and ORM bulk-update set-up took 9 % of the one-process
#: stack's GIL time in a default-selection run (py-spy). ``modified_at`` stays the runner's
#: (lifecycle) time: what the projector derives does not move it. (These need no dialect, so they
#: are built at import, as the runner's per-completion statements are; the upserts above depend on
#: the dialect's INSERT and on the columns sent, so ``_statement`` builds each on first use.)
_REFRESH_SIZE = (
    update(_snapshots)
    .where(_snapshots.c.id.in_(_ids))
    .values(
        output_size=select(func.coalesce(func.sum(ArchiveResult.__table__.c.output_size), 0))
        .where(ArchiveResult.__table__.c.snapshot_id == _snapshots.c.id)
        .scalar_subquery(),
        modified_at=_snapshots.c.modified_at,
    )
)
_NO_DOMAIN = select(_snapshots.c.id, _snapshots.c.url).where(_snapshots.c.id.in_(_ids), _snapshots.c.domain == "")
_SET_DOMAIN = (
    update(_snapshots)
    .where(_snapshots.c.id == bindparam("sid"))
    .values(domain=bindparam("new_domain"), modified_at=_snapshots.c.modified_at)
)
_STALE_INDEX = (
    update(_snapshots)
    .where(_snapshots.c.id.in_(_ids), _snapshots.c.status == Status.SEALED)
    .values(indexed_at=None, modified_at=_snapshots.c.modified_at)
    .returning(_snapshots.c.id)
)


def refresh_snapshots(s: Session, snapshot_ids: set[str]) -> set[str]:
    """After new results: ``output_size`` = the sum of the results' sizes (bytes), ``domain`` (the
    URL's host name, for the list's filter) where it is not set yet, and a sealed snapshot's index
    marked stale (``indexed_at`` NULL) so it is written again. ``modified_at`` is left as it was.

    Returns:
        the ids of those sealed snapshots (the others have no index to rewrite yet).
    """
    if not snapshot_ids:
        return set()
    ids = {"ids": list(snapshot_ids)}
    s.execute(_REFRESH_SIZE, ids)
    missing = [{"sid": sid, "new_domain": url_domain(url)} for sid, url in s.execute(_NO_DOMAIN, ids)]
    if missing:
        s.execute(_SET_DOMAIN, missing)
    return set(s.scalars(_STALE_INDEX, ids))


class Batch:
    """What one batch of events changed: the results and processes to upsert (``write``), the
    snapshots they touch, snapshots to index, and snapshots whose search document is stale; and for
    the metrics, the events by kind and the end times of the hooks whose results it holds."""

    def __init__(self) -> None:
        self.results: list[ArchiveResultRecord] = []
        self.processes: list[ProcessRecord] = []
        self.touched: set[str] = set()
        self.sealed: set[str] = set()
        self.searchable: set[str] = set()
        self.kinds: Counter[str] = Counter()
        self.ended: list[datetime] = []

    def write(self, s: Session) -> None:
        """Upsert the batch's ArchiveResult and Process rows, each key's events in their order."""
        if self.results:
            upsert_archiveresults(s, self.results)
        if self.processes:
            upsert_processes(s, self.processes)

    def count(self) -> None:
        """Count the committed batch: ``boxcar_projector_events_total`` and, per hook result,
        ``boxcar_projector_lag_seconds`` (now minus the hook's end)."""
        for kind, n in self.kinds.items():
            metrics.PROJECTED.labels(kind).inc(n)
        now = utcnow()
        for ended in self.ended:
            ended = ended if ended.tzinfo else ended.replace(tzinfo=UTC)  # a naive time is UTC here
            metrics.PROJECTOR_LAG.observe(max(0.0, (now - ended).total_seconds()))


def project(s: Session, subject: str, data: bytes, batch: Batch) -> None:
    """Apply one event to ``batch`` (results and processes are upserted by ``Batch.write``, a
    Binary at once; unknown subjects are ignored).

    Raises:
        msgspec.ValidationError / DecodeError: the event can never be projected (poison).
    """
    if subject == bus.SUBJECT_ARCHIVERESULT:
        record = decode(data, ArchiveResultRecord)
        batch.results.append(record)
        batch.touched.add(record.snapshot_id)
        if record.plugin in fulltext.INDEXED_PLUGINS:
            batch.searchable.add(record.snapshot_id)
        batch.kinds["archiveresult"] += 1
        if record.end_ts is not None and not record.fallback:
            batch.ended.append(record.end_ts)
    elif subject.startswith(bus.PREFIX_PROCESS_EVENTS):
        batch.processes.append(decode(data, ProcessRecord))
        batch.kinds["process"] += 1
    elif subject.startswith(bus.PREFIX_BINARY_EVENTS):
        upsert_binary(s, decode(data, BinaryRecord))
        batch.kinds["binary"] += 1
    elif subject == bus.SUBJECT_SNAPSHOT_SEALED:
        snapshot_id = decode(data, SnapshotEvent).snapshot_id
        batch.sealed.add(snapshot_id)
        batch.searchable.add(snapshot_id)
        batch.kinds["snapshot_sealed"] += 1
    elif subject == bus.SUBJECT_TAGS_CHANGED:
        ids = decode(data, TagsChanged).snapshot_ids
        batch.touched.update(ids)  # index.jsonl lists the tags
        batch.searchable.update(ids)
        batch.kinds["tags_changed"] += 1
    else:
        batch.kinds["other"] += 1


class ResultProjector:
    """One projector replica (durable consumer ``projector`` on ``events.>``)."""

    def __init__(self, settings: Settings, db: Database) -> None:
        self.settings = settings
        self.db = db
        self.store = ArchiveStore.from_settings(settings)
        self._stop = asyncio.Event()

    def stop(self) -> None:
        self._stop.set()

    async def run(self) -> None:
        nc, js = await bus.open_jetstream(self.settings, "result-projector")
        max_deliver = self.settings.runner_max_deliver
        await bus.ensure_consumer(
            js,
            bus.EVENTS_STREAM,
            bus.PROJECTOR_CONSUMER,
            bus.SUBJECT_ALL_EVENTS,
            max_ack_pending=5000,
            ack_wait=30,
            max_deliver=max_deliver,
        )
        sub = await bus.pull(js, bus.EVENTS_STREAM, bus.PROJECTOR_CONSUMER)
        log.info("result-projector ready")
        try:
            await asyncio.gather(
                bus.consume(
                    js,
                    sub,
                    self.handle_one,
                    consumer=bus.PROJECTOR_CONSUMER,
                    stop=self._stop,
                    max_deliver=max_deliver,
                    batch=BATCH,
                    batch_handler=self.handle_batch,
                    linger=LINGER,
                ),
                self._repair_loop(),
            )
        finally:
            await nc.close()

    async def handle_batch(self, msgs: list) -> None:
        """Project a batch in one transaction (the caller acks it after), then index what it sealed."""
        with tracer.start_as_current_span(
            "project batch", context=telemetry.context_from(bus.headers_of(msgs[0]))
        ) as span:
            span.set_attribute("messaging.batch.message_count", len(msgs))
            await asyncio.to_thread(self.apply, [(m.subject, m.data) for m in msgs])

    async def handle_one(self, msg) -> None:
        await asyncio.to_thread(self.apply, [(msg.subject, msg.data)])

    def apply(self, items: list[tuple[str, bytes]]) -> None:
        """Project events, commit, update the search documents they change (an error here fails
        the batch, which is redelivered: projecting again is idempotent), then write the
        ``index.jsonl`` files they call for (a failed write is left for the repair sweep: the rows
        are what matters and they are committed)."""
        batch = Batch()
        with self.db.write() as s:
            for subject, data in items:
                project(s, subject, data, batch)
            batch.write(s)
            stale = refresh_snapshots(s, batch.touched)
        batch.count()  # committed
        try:
            fulltext.index_snapshots(self.db, self.store, batch.searchable)
        except StoreUnavailable as exc:
            # the rows are committed; the sealed snapshots' documents and index.jsonl files are
            # written by the repair sweep once the store answers (their indexed_at stays NULL)
            log.warning("search documents of %d snapshot(s) not written: %s; will retry", len(batch.searchable), exc)
            return
        # a result of a snapshot still being archived changes no index.jsonl: only sealed ones
        for snapshot_id in batch.sealed | stale:
            self.index(snapshot_id)

    def index(self, snapshot_id: str) -> bool:
        """Write a sealed snapshot's ``index.jsonl`` from its rows; False when it is not sealed or
        the write failed (logged; the repair sweep tries again)."""
        try:
            return index.write_index(self.db, self.store, snapshot_id)
        except (OSError, ValueError) as exc:  # ValueError: an output_dir that is no archive key
            log.error("index.jsonl of snapshot %s not written (%s); will retry", snapshot_id, exc)
            return False

    async def _repair_loop(self) -> None:
        while not self._stop.is_set():
            try:
                await asyncio.to_thread(self.repair)
            except Exception:
                log.exception("index repair failed; retrying")
            try:
                await asyncio.wait_for(self._stop.wait(), REPAIR_INTERVAL)
            except TimeoutError:
                pass

    def repair(self, limit: int = 200) -> int:
        """Index sealed snapshots whose index is missing or stale; returns how many were written."""
        with self.db.read() as s:
            ids = index.unindexed(s, utcnow() - timedelta(seconds=5), limit)
        if self.store.is_remote and ids:
            # their search documents may have missed the store too: written first, because
            # index() marks a snapshot done (a store that fails here leaves both for the next sweep)
            fulltext.index_snapshots(self.db, self.store, ids)
        return sum(self.index(i) for i in ids)
