"""Database access: engines for Postgres (psycopg 3) and SQLite, sessions, upserts, migrations.

``Database.write()`` opens a read-write transaction; on SQLite it is ``BEGIN IMMEDIATE`` so two
writers queue on the database lock instead of failing a lock upgrade half-way ("database is
locked"). ``Database.read()`` opens a plain transaction. Both commit on success and roll back on
error.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from boxcar.shared.db.models import Base  # noqa: F401  (re-exported for Alembic and tests)

if TYPE_CHECKING:
    from boxcar.shared.messages import Seed
    from boxcar.shared.settings import Settings

log = logging.getLogger(__name__)

MIGRATION_LOCK_ID = 0x626F78636172  # "boxcar": pg_advisory_lock key for schema upgrades
#: the database URL ``python -m boxcar.shared.migrations`` upgrades (``Database.upgrade_in_child``)
MIGRATE_URL_ENV = "BOXCAR_MIGRATE_URL"
#: the Alembic revisions (``boxcar.shared.migrations``), read here without importing Alembic
VERSIONS_DIR = Path(__file__).resolve().parent.parent / "migrations" / "versions"


def head_revision() -> str:
    """The newest schema revision, from the migration files' names: ``NNNN_slug.py`` holds
    revision ``"NNNN"``, revising ``NNNN - 1`` (a test holds Alembic's own head to this)."""
    return max(path.name[:4] for path in VERSIONS_DIR.glob("[0-9][0-9][0-9][0-9]_*.py"))


class Database:
    """Engines and session factories for one database URL.

    Args:
        url: a SQLAlchemy URL (``sqlite:///path`` or ``postgresql+psycopg://...``).
        pool_size, max_overflow: Postgres connections kept open, and opened beyond those at a
            peak, by this process (``DB_POOL_SIZE``, ``DB_MAX_OVERFLOW``; unused for SQLite).
    """

    def __init__(self, url: str, pool_size: int = 5, max_overflow: int = 10) -> None:
        self.url = url
        self.is_sqlite = make_url(url).get_backend_name() == "sqlite"
        if self.is_sqlite:
            path = make_url(url).database
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.engine = _sqlite_engine(url, immediate=True)
            self.read_engine = _sqlite_engine(url, immediate=False)
        else:
            self.engine = create_engine(url, pool_pre_ping=True, pool_size=pool_size, max_overflow=max_overflow)
            self.read_engine = self.engine
        self._write = sessionmaker(self.engine, expire_on_commit=False)
        self._read = sessionmaker(self.read_engine, expire_on_commit=False)

    @classmethod
    def for_settings(cls, settings: Settings) -> Database:
        """The database of ``settings`` (``DATABASE_URL``, else SQLite under ``DATA_DIR``) with
        its pool sizes (``DB_POOL_SIZE``, ``DB_MAX_OVERFLOW``)."""
        return cls(settings.sqlalchemy_url, pool_size=settings.db_pool_size, max_overflow=settings.db_max_overflow)

    @contextlib.contextmanager
    def write(self) -> Iterator[Session]:
        """A read-write transaction; commits on exit, rolls back on error."""
        with self._write() as session, session.begin():
            yield session

    @contextlib.contextmanager
    def read(self) -> Iterator[Session]:
        """A read transaction (never blocks writers on SQLite/WAL)."""
        with self._read() as session, session.begin():
            yield session

    def upgrade(self) -> None:
        """Bring the schema to the newest Alembic revision, once even if services race to it."""
        from boxcar.shared.migrations import upgrade_connection

        if self.is_sqlite:
            lock_path = Path(make_url(self.url).database or "boxcar").with_suffix(".migrate.lock")
            with open(lock_path, "w") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                with self.engine.connect() as conn:
                    upgrade_connection(conn)
        else:
            with self.engine.connect() as conn:
                conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": MIGRATION_LOCK_ID})
                conn.commit()
                try:
                    upgrade_connection(conn)
                finally:
                    conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": MIGRATION_LOCK_ID})
                    conn.commit()

    def upgrade_in_child(self, timeout: float = 600.0) -> None:
        """``upgrade``, run by a short-lived ``python -m boxcar.shared.migrations``: a long-lived
        service then never imports Alembic and the migration scripts (~8 MiB it would keep for
        its whole life). The URL goes to the child in its environment, not its argv (``ps``
        shows argv to every user; the URL may hold a password).

        Skipped when the database is at ``head_revision()`` already (the usual start: the child's
        interpreter and Alembic's imports are half a second of every ``boxcar add``).

        Raises:
            RuntimeError: the upgrade failed (the message has the child's last output lines).
        """
        if self.at_head():
            return
        done = subprocess.run(
            [sys.executable, "-m", "boxcar.shared.migrations"],
            env={**os.environ, MIGRATE_URL_ENV: self.url},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            tail = (done.stderr or done.stdout).strip()[-2000:]
            raise RuntimeError(f"schema upgrade failed (exit {done.returncode}): {tail}")

    def at_head(self) -> bool:
        """True when the schema's recorded revision is ``head_revision()``; False when it is older,
        newer, missing (a new database) or cannot be read."""
        try:
            with self.read_engine.connect() as conn:
                versions = conn.execute(text("SELECT version_num FROM alembic_version")).scalars().all()
        except SQLAlchemyError:
            return False
        return versions == [head_revision()]

    def dispose(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()


def _sqlite_engine(url: str, *, immediate: bool) -> Engine:
    engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30})

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_conn: Any, _record: object) -> None:
        dbapi_conn.isolation_level = None  # we issue BEGIN ourselves
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.execute("PRAGMA busy_timeout=30000")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


#: rows per INSERT or IN (...) list: Postgres caps one statement at 65,535 parameters
BATCH = 500


#: ``Session.info`` key of the callbacks ``after_commit`` holds until the transaction ends
_AFTER_COMMIT = "boxcar.after_commit"


def after_commit(session: Session, callback: Callable[[], None]) -> None:
    """Call ``callback`` once the session's current transaction has committed; never if it rolls
    back (e.g. count a claim in a metric only when the claim is durable)."""
    session.info.setdefault(_AFTER_COMMIT, []).append(callback)


@event.listens_for(Session, "after_commit")
def _run_after_commit(session: Session) -> None:
    for callback in session.info.pop(_AFTER_COMMIT, []):
        try:
            callback()
        except Exception:  # a callback's failure is not the transaction's
            log.exception("after-commit callback failed")


@event.listens_for(Session, "after_rollback")
def _drop_after_commit(session: Session) -> None:
    session.info.pop(_AFTER_COMMIT, None)


def insert_seeds(session: Session, crawl_id: str, seeds: list[Seed], batch: int = BATCH) -> None:
    """Store a crawl's ``Seed``s as ``CrawlSeed`` rows, ``batch`` rows per INSERT (Postgres caps a
    statement at 65,535 parameters)."""
    from boxcar.shared.db.models import CrawlSeed

    insert = insert_for(session)
    for start in range(0, len(seeds), batch):
        session.execute(insert(CrawlSeed).values(CrawlSeed.rows(crawl_id, seeds[start : start + batch], start)))


def attach_tags(session: Session, tags_by_snapshot: dict[str, list[str]]) -> None:
    """Create the missing Tag rows and link them to the snapshots, idempotently: the one way tags
    are attached (the crawl-runner's new snapshots, merged seeds and hooks' tags; a user's edit in
    ingest). Names are cut to the column's 100 characters."""
    from sqlalchemy import select

    from boxcar.shared.db.models import SnapshotTag, Tag

    names = sorted({n[:100] for names in tags_by_snapshot.values() for n in names if n})
    if not names:
        return
    insert = insert_for(session)
    ids: dict[str, int] = {}
    for i in range(0, len(names), BATCH):
        chunk = names[i : i + BATCH]
        session.execute(
            insert(Tag).values([{"name": n} for n in chunk]).on_conflict_do_nothing(index_elements=["name"])
        )
        ids.update(session.execute(select(Tag.name, Tag.id).where(Tag.name.in_(chunk))).all())
    links = [
        {"snapshot_id": sid, "tag_id": ids[n[:100]]}
        for sid, tag_names in tags_by_snapshot.items()
        for n in tag_names
        if n
    ]
    for i in range(0, len(links), BATCH):
        session.execute(insert(SnapshotTag).values(links[i : i + BATCH]).on_conflict_do_nothing())


def insert_for(session: Session) -> Callable[[Any], Any]:
    """The dialect's ``insert`` (with ``on_conflict_do_nothing/do_update``) for this session:
    ``sqlalchemy.dialects.postgresql.insert`` or ``….sqlite.insert`` (one signature, two types)."""
    from sqlalchemy.dialects import postgresql, sqlite

    if session.get_bind().dialect.name == "postgresql":
        return postgresql.insert
    return sqlite.insert
