"""SQLAlchemy 2 models: Crawl, Snapshot, ArchiveResult, Process, Binary, Tag, CrawlSchedule, ...

The shapes follow ArchiveBox 0.9 (``reference/archivebox-0.9.md`` §1.2): ids are UUIDv7 as 32
hex characters, ``status`` + ``retry_at`` carry every lifecycle (``retry_at`` in the past = due,
in the future = leased or scheduled, NULL = idle/finished). Who writes what (DESIGN.md):

- ingest: new Crawl / CrawlSchedule / Tag / ApiToken / User / UserSession rows, tag links a user
  edits, and deleting a snapshot (rows and files; not a status transition)
- crawl-runner: every Crawl / Snapshot / CrawlSchedule *transition*, new Snapshot rows,
  SnapshotTask rows (task dispatch records)
- result-projector: ArchiveResult, Process and Binary rows, Snapshot.title / output_size / domain,
  the search index (``boxcar.shared.search``)

All timestamps are timezone-aware UTC in Python (``UTCDateTime`` stores naive UTC on SQLite).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
from sqlalchemy.types import TypeDecorator

from boxcar.shared.clock import utcnow
from boxcar.shared.messages import Seed
from boxcar.shared.urls import url_key


class Status(StrEnum):
    """Crawl / Snapshot / CrawlSchedule status (ArchiveBox ``StatusChoices``); the legal moves are
    tabled in ``boxcar.crawl_runner.queries``."""

    QUEUED = "queued"
    STARTED = "started"
    PAUSED = "paused"
    SEALED = "sealed"


class TaskStatus(StrEnum):
    """SnapshotTask status: ``planned → dispatched → succeeded | failed | cancelled``."""

    PLANNED = "planned"
    DISPATCHED = "dispatched"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


QUEUED, STARTED, PAUSED, SEALED = Status.QUEUED, Status.STARTED, Status.PAUSED, Status.SEALED
OPEN_STATUSES = (QUEUED, STARTED, PAUSED)
TASK_PLANNED, TASK_DISPATCHED = TaskStatus.PLANNED, TaskStatus.DISPATCHED
TASK_OPEN = (TASK_PLANNED, TASK_DISPATCHED)


def url_hash(url: str) -> str:
    """sha256 hex of a URL's dedup key (``urls.url_key``): the indexed key for URL lookups (URLs
    may be 32 KB long), equal for URLs that differ only in how they percent-escape."""
    return hashlib.sha256(url_key(url).encode("utf-8")).hexdigest()


def dedup_key(user: str, url_hash_: str) -> str:
    """The key of "this user archived this URL" (``Snapshot.dedup_key``): sha256 of the user name
    and the URL's ``url_hash``."""
    return hashlib.sha256(f"{user}\n{url_hash_}".encode()).hexdigest()


class UTCDateTime(TypeDecorator[datetime]):
    """A DateTime that always round-trips as aware UTC (SQLite has no time zones)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTCDateTime column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {datetime: UTCDateTime, dict[str, Any]: JSON, list[Any]: JSON}


class Crawl(Base):
    """One request to archive: seeds, depth, tags, plugin selection and config overrides."""

    __tablename__ = "crawl"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    created_by: Mapped[str] = mapped_column(String(64), default="system")
    status: Mapped[str] = mapped_column(String(16), default=QUEUED, index=True)
    retry_at: Mapped[datetime | None] = mapped_column(index=True)
    max_depth: Mapped[int] = mapped_column(Integer, default=0)
    tags_str: Mapped[str] = mapped_column(String(1024), default="")
    plugins: Mapped[list[Any]] = mapped_column(default=list)
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    label: Mapped[str] = mapped_column(String(256), default="")
    notes: Mapped[str] = mapped_column(Text, default="")
    output_dir: Mapped[str] = mapped_column(String(512), default="")
    source_file: Mapped[str | None] = mapped_column(String(512))
    #: every imported file kept for this crawl, verbatim but for URL passwords (``sources/…``)
    source_files: Mapped[list[Any]] = mapped_column(default=list)
    schedule_id: Mapped[str | None] = mapped_column(ForeignKey("crawl_schedule.id", ondelete="SET NULL"))
    trace_context: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: seeds stored (``CrawlSeed`` rows) and how many of them are snapshots already
    seed_count: Mapped[int] = mapped_column(Integer, default=0)
    seeded: Mapped[int] = mapped_column(Integer, default=0)
    #: set when a user cancelled it: nothing of it runs any more; sealed once no snapshot is open
    cancelled_at: Mapped[datetime | None]
    #: why the crawl was given up (a step kept failing), shown with it
    error: Mapped[str] = mapped_column(Text, default="")
    #: URLs merged into a snapshot of another crawl, open or archived (``ONLY_NEW``)
    merged: Mapped[int] = mapped_column(Integer, default=0)

    @classmethod
    def new(cls, *, user: str, first_url: str, seed_count: int, now: datetime | None = None, **fields: Any) -> Crawl:
        """A queued crawl, due now, with a fresh id and its ``output_dir`` (``CRAWL_DIR``) laid out.
        Its seeds are stored beside it with ``boxcar.shared.db.insert_seeds``.

        Args:
            first_url: names the crawl dir.
            seed_count: how many seeds it has.
            fields: other columns (max_depth, tags_str, plugins, config, label, schedule_id, …).
        """
        from boxcar.shared.ids import new_id
        from boxcar.shared.storage import crawl_dir

        now = now or utcnow()
        crawl_id = new_id()
        return cls(
            id=crawl_id,
            created_at=now,
            modified_at=now,
            created_by=user,
            status=QUEUED,
            retry_at=now,
            seed_count=seed_count,
            seeded=0,
            output_dir=crawl_dir(user, now, first_url, crawl_id),
            **fields,
        )


class CrawlSeed(Base):
    """One seed of a crawl, in submission order (ingest writes them with the crawl; the
    crawl-runner turns them into snapshots a batch at a time, following ``Crawl.seeded``)."""

    __tablename__ = "crawl_seed"

    crawl_id: Mapped[str] = mapped_column(ForeignKey("crawl.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(Integer, primary_key=True)
    url: Mapped[str] = mapped_column(Text)
    title: Mapped[str | None] = mapped_column(String(512))
    tags: Mapped[list[Any]] = mapped_column(default=list)
    bookmarked_at: Mapped[datetime | None]
    source: Mapped[str] = mapped_column(String(200), default="")
    credentials: Mapped[str] = mapped_column(Text, default="")

    def seed(self) -> Seed:
        return Seed(
            url=self.url,
            title=self.title,
            tags=tuple(self.tags or ()),
            bookmarked_at=self.bookmarked_at,
            source=self.source,
            credentials=self.credentials,
        )

    @staticmethod
    def rows(crawl_id: str, seeds: list[Seed], start: int = 0) -> list[dict[str, Any]]:
        """Insertable rows for ``seeds`` at positions ``start, start+1, …``."""
        return [
            {
                "crawl_id": crawl_id,
                "position": start + i,
                "url": seed.url,
                "title": seed.title,
                "tags": list(seed.tags),
                "bookmarked_at": seed.bookmarked_at,
                "source": seed.source,
                "credentials": seed.credentials,
            }
            for i, seed in enumerate(seeds)
        ]


class Snapshot(Base):
    """One URL captured within one crawl. ``stage`` is the runner's progress through the plan."""

    __tablename__ = "snapshot"
    __table_args__ = (
        UniqueConstraint("crawl_id", "url_hash"),
        Index("ix_snapshot_crawl_id_status", "crawl_id", "status"),
        Index("ix_snapshot_status_retry_at", "status", "retry_at"),
        Index("ix_snapshot_crawl_id_status_depth_created_at", "crawl_id", "status", "depth", "created_at"),
        Index("uq_snapshot_dedup_key", "dedup_key", unique=True),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    crawl_id: Mapped[str] = mapped_column(ForeignKey("crawl.id", ondelete="CASCADE"))
    url: Mapped[str] = mapped_column(Text)
    url_hash: Mapped[str] = mapped_column(String(64), index=True)
    depth: Mapped[int] = mapped_column(Integer, default=0)
    parent_snapshot_id: Mapped[str | None] = mapped_column(ForeignKey("snapshot.id", ondelete="SET NULL"))
    title: Mapped[str | None] = mapped_column(String(512))
    bookmarked_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    downloaded_at: Mapped[datetime | None]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    status: Mapped[str] = mapped_column(String(16), default=QUEUED)
    retry_at: Mapped[datetime | None]
    stage: Mapped[int] = mapped_column(Integer, default=0)
    output_dir: Mapped[str] = mapped_column(String(512))
    output_size: Mapped[int] = mapped_column(BigInteger, default=0)
    config: Mapped[dict[str, Any]] = mapped_column(default=dict)
    #: final HTTP status of the page (after redirects), as the capture saw it; None = unknown
    http_status: Mapped[int | None] = mapped_column(Integer)
    #: the URL the page ended at after redirects, when it differs from ``url``
    final_url: Mapped[str | None] = mapped_column(Text)
    #: why no response came at all (connection refused, DNS failure, …), "" when one came
    network_error: Mapped[str] = mapped_column(Text, default="")
    #: captures tried so far (a 429/5xx or network error is retried up to MAX_URL_ATTEMPTS)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    #: when its latest capture started (``queued → started``): per-host politeness counts these
    started_at: Mapped[datetime | None]
    #: the URL's userinfo sealed by ``boxcar.shared.secrets`` ("" when none); never plain text
    credentials: Mapped[str] = mapped_column(Text, default="")
    #: when the result-projector last wrote a complete ``index.jsonl`` (None: not yet, or stale)
    indexed_at: Mapped[datetime | None]
    #: results its plan ends with (one per hook), set when it is sealed: the index is complete
    #: once the projector has that many
    expected_results: Mapped[int] = mapped_column(Integer, default=0)
    #: ``dedup_key(user, url_hash)`` while this snapshot stands for "archived or being archived"
    #: (made by an ``ONLY_NEW`` crawl; released when it sealed with nothing archived): unique, so
    #: concurrent crawls of one URL make one snapshot (``crawl_runner.queries.insert_snapshots``)
    dedup_key: Mapped[str | None] = mapped_column(String(64))
    #: why the egress policy refused to fetch the page ("" when it did not), shown once per page
    refusal: Mapped[str] = mapped_column(Text, default="")
    #: the URL's host name: derived data the result-projector fills in (``refresh_snapshots``), so
    #: the crawl-runner's inserts need not know about it (the server default is "")
    domain: Mapped[str] = mapped_column(String(255), server_default="", nullable=False)


class SnapshotTask(Base):
    """A task dispatch record: one family's work on one stage of one snapshot (runner-owned),
    the outbox of ``HookTask`` messages."""

    __tablename__ = "snapshot_task"
    __table_args__ = (Index("ix_snapshot_task_snapshot_id_stage", "snapshot_id", "stage"),)

    id: Mapped[str] = mapped_column(String(80), primary_key=True)
    snapshot_id: Mapped[str] = mapped_column(ForeignKey("snapshot.id", ondelete="CASCADE"))
    crawl_id: Mapped[str] = mapped_column(String(32), index=True)
    stage: Mapped[int] = mapped_column(Integer)
    family: Mapped[str] = mapped_column(String(32))
    plugins: Mapped[list[Any]] = mapped_column(default=list)
    status: Mapped[str] = mapped_column(String(16), default=TASK_PLANNED)
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    dispatched_at: Mapped[datetime | None]
    #: when an executor said it began the task (``events.task.started``)
    started_at: Mapped[datetime | None]
    completed_at: Mapped[datetime | None]
    error: Mapped[str] = mapped_column(Text, default="")


class ArchiveResult(Base):
    """The outcome of one hook on one snapshot (one row per hook; retries update it in place)."""

    __tablename__ = "archiveresult"
    __table_args__ = (
        UniqueConstraint("snapshot_id", "plugin", "hook_name"),
        Index("ix_archiveresult_snapshot_id_status", "snapshot_id", "status"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    snapshot_id: Mapped[str] = mapped_column(ForeignKey("snapshot.id", ondelete="CASCADE"))
    plugin: Mapped[str] = mapped_column(String(64), index=True)
    hook_name: Mapped[str] = mapped_column(String(255))
    status: Mapped[str] = mapped_column(String(16))
    output_str: Mapped[str] = mapped_column(Text, default="")
    output_json: Mapped[Any | None] = mapped_column(JSON)
    output_files: Mapped[dict[str, Any]] = mapped_column(default=dict)
    output_size: Mapped[int] = mapped_column(BigInteger, default=0)
    output_mimetypes: Mapped[str] = mapped_column(String(512), default="")
    start_ts: Mapped[datetime | None]
    end_ts: Mapped[datetime | None]
    notes: Mapped[str] = mapped_column(Text, default="")
    # No FK: Process and ArchiveResult events may be projected in either order.
    process_id: Mapped[str | None] = mapped_column(String(32), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Process(Base):
    """One hook subprocess. stdout/stderr are bounded tails."""

    __tablename__ = "process"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    machine: Mapped[str] = mapped_column(String(255), default="")
    snapshot_id: Mapped[str | None] = mapped_column(String(32), index=True)
    plugin: Mapped[str] = mapped_column(String(64), default="")
    hook_name: Mapped[str] = mapped_column(String(255), default="")
    cmd: Mapped[list[Any]] = mapped_column(default=list)
    pwd: Mapped[str] = mapped_column(Text, default="")
    pid: Mapped[int | None] = mapped_column(Integer)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    stdout: Mapped[str] = mapped_column(Text, default="")
    stderr: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime | None]
    ended_at: Mapped[datetime | None]
    timeout: Mapped[int] = mapped_column(Integer, default=0)
    status: Mapped[str] = mapped_column(String(16), default="exited")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class Binary(Base):
    """A resolved executable on a machine."""

    __tablename__ = "binary"
    __table_args__ = (UniqueConstraint("machine", "name", "abspath", "version", "sha256"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    machine: Mapped[str] = mapped_column(String(255))
    name: Mapped[str] = mapped_column(String(128))
    abspath: Mapped[str] = mapped_column(String(1024))
    version: Mapped[str] = mapped_column(String(128), default="")
    sha256: Mapped[str] = mapped_column(String(64), default="")
    binprovider: Mapped[str] = mapped_column(String(32), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)


class Tag(Base):
    """A tag name (unique)."""

    __tablename__ = "tag"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(100), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SnapshotTag(Base):
    """Snapshot ↔ Tag."""

    __tablename__ = "snapshot_tag"

    snapshot_id: Mapped[str] = mapped_column(ForeignKey("snapshot.id", ondelete="CASCADE"), primary_key=True)
    tag_id: Mapped[int] = mapped_column(ForeignKey("tag.id", ondelete="CASCADE"), primary_key=True)


class CrawlSchedule(Base):
    """A cron expression (or alias) and a template crawl; feed subscriptions are schedules.

    ``retry_at`` is the next poll (or a runner's lease while it polls); ``status`` is ``queued``
    (active) or ``paused``. For a feed, ``feed_url`` is polled with conditional GET
    (``etag``/``last_modified``); ``failures`` counts consecutive failed polls (back-off) and
    ``last_error`` says why the last one failed.
    """

    __tablename__ = "crawl_schedule"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    modified_at: Mapped[datetime] = mapped_column(default=utcnow, onupdate=utcnow)
    created_by: Mapped[str] = mapped_column(String(64), default="system")
    schedule: Mapped[str] = mapped_column(String(64))
    label: Mapped[str] = mapped_column(String(256), default="")
    is_enabled: Mapped[bool] = mapped_column(Boolean, default=True)
    status: Mapped[str] = mapped_column(String(16), default=QUEUED, index=True)
    retry_at: Mapped[datetime | None] = mapped_column(index=True)
    template: Mapped[dict[str, Any]] = mapped_column(default=dict)
    last_run_at: Mapped[datetime | None]
    last_error: Mapped[str] = mapped_column(Text, default="")
    feed_url: Mapped[str | None] = mapped_column(Text)
    etag: Mapped[str] = mapped_column(String(512), default="")
    last_modified: Mapped[str] = mapped_column(String(128), default="")
    failures: Mapped[int] = mapped_column(Integer, default=0)
    last_polled_at: Mapped[datetime | None]
    #: feed items that gave no archivable URL, in all polls, and the last one's reason
    items_rejected: Mapped[int] = mapped_column(Integer, default=0)
    last_rejection: Mapped[str] = mapped_column(Text, default="")


class FeedItem(Base):
    """An item a feed subscription has already seen (by GUID, else link): never archived twice."""

    __tablename__ = "feed_item"
    __table_args__ = (UniqueConstraint("schedule_id", "item_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    schedule_id: Mapped[str] = mapped_column(ForeignKey("crawl_schedule.id", ondelete="CASCADE"))
    item_key: Mapped[str] = mapped_column(String(64))
    url: Mapped[str] = mapped_column(Text)
    crawl_id: Mapped[str | None] = mapped_column(String(32))
    first_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class ApiToken(Base):
    """An API token, stored as its sha256 (the token itself is shown once, at creation)."""

    __tablename__ = "api_token"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime | None]
    last_used_at: Mapped[datetime | None]
    revoked: Mapped[bool] = mapped_column(Boolean, default=False)
    #: ``write`` (every endpoint) or ``read`` (GET endpoints only)
    scope: Mapped[str] = mapped_column(String(16), default="write")
    #: the user name whose archive the token acts on (``User.username``; ``ARCHIVE_USER`` for the
    #: operator's own tokens, which act as an admin)
    owner: Mapped[str] = mapped_column(String(64), default="system", server_default="system", index=True)


# ----------------------------------------------------------------------------- web UI (issue 10)


# The list page's filters and order (newest first, keyset on (created_at, id)).
Index("ix_snapshot_created_at_id", Snapshot.created_at, Snapshot.id)
Index("ix_snapshot_status_created_at", Snapshot.status, Snapshot.created_at)
Index("ix_snapshot_domain_created_at", Snapshot.domain, Snapshot.created_at)
Index("ix_snapshot_domain_status_started_at", Snapshot.domain, Snapshot.status, Snapshot.started_at)
Index("ix_snapshot_crawl_id_created_at", Snapshot.crawl_id, Snapshot.created_at)
Index("ix_snapshot_tag_tag_id", SnapshotTag.tag_id)
Index("ix_crawl_created_at", Crawl.created_at)
Index("ix_crawl_created_by", Crawl.created_by)


class User(Base):
    """A person who logs in to the web UI (``boxcar user create``); the password is kept only as
    an Argon2id hash."""

    __tablename__ = "app_user"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    username: Mapped[str] = mapped_column(String(64), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_login_at: Mapped[datetime | None]
    #: the snapshot list's layout this person chose: "list" or "grid" (``LIST_VIEWS``)
    list_view: Mapped[str] = mapped_column(String(8), default="list", server_default="list")
    #: ``admin`` (every archive, users, operator settings, status) or ``member`` (their own archive)
    role: Mapped[str] = mapped_column(String(16), default="member", server_default="member")
    #: limits an admin set (None: no limit): snapshots made per UTC day, bytes of archive, crawls open
    max_snapshots_per_day: Mapped[int | None] = mapped_column(Integer)
    max_disk_bytes: Mapped[int | None] = mapped_column(BigInteger)
    max_concurrent_crawls: Mapped[int | None] = mapped_column(Integer)
    #: the provider account single sign-on binds this user to (the ID token's ``iss`` and ``sub``,
    #: OpenID Connect Core §2), on their first single sign-on; None: bound to none yet
    oidc_issuer: Mapped[str | None] = mapped_column(String(512))
    oidc_subject: Mapped[str | None] = mapped_column(String(255))

    __table_args__ = (Index("uq_app_user_oidc_issuer_subject", "oidc_issuer", "oidc_subject", unique=True),)


#: the roles of a user (``User.role``)
ROLES = ("admin", "member")


#: the snapshot list's layouts (``User.list_view``)
LIST_VIEWS = ("list", "grid")


class LoginThrottle(Base):
    """Failed logins of one account name or one client address (``ingest.accounts``): the count
    in the current window and, once over the limit, until when logins are refused."""

    __tablename__ = "login_throttle"

    key: Mapped[str] = mapped_column(String(200), primary_key=True)  # "account:<name>" / "client:<address>"
    failures: Mapped[int] = mapped_column(Integer, default=0)
    window_started_at: Mapped[datetime] = mapped_column(default=utcnow)
    #: how many times this key was locked out in a row (each lock-out twice as long)
    lockouts: Mapped[int] = mapped_column(Integer, default=0)
    locked_until: Mapped[datetime | None]


class UserSession(Base):
    """A logged-in browser: the cookie holds a random token, the row only its sha256, so the
    database never holds a usable session."""

    __tablename__ = "user_session"

    token_sha256: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("app_user.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(index=True)
    last_seen_at: Mapped[datetime] = mapped_column(default=utcnow)


class Share(Base):
    """Something a user shared on purpose (``ingest.access``): one snapshot (``target`` its id), a
    tag of theirs (``target`` the tag name: their snapshots with that tag) or their whole archive
    (``target`` ""), with every user of the instance (``audience`` ``users``) or with whoever has
    the link (``public``: ``token_sha256`` of an unguessable token, shown once). Revoking sets
    ``revoked_at``; a revoked share grants nothing."""

    __tablename__ = "share"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    target: Mapped[str] = mapped_column(String(128), default="")
    audience: Mapped[str] = mapped_column(String(16))
    token_sha256: Mapped[str | None] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    revoked_at: Mapped[datetime | None]


#: what a share can be of, and with whom (``Share.kind``/``Share.audience``)
SHARE_KINDS = ("snapshot", "tag", "archive")
SHARE_AUDIENCES = ("users", "public")


# ----------------------------------------------------------------------------- webhooks (issue 30)


class Webhook(Base):
    """A URL told about events of its owner's archive (``scope`` ``user``) or, made by an admin,
    of every archive (``instance``). Ingest creates and deletes these rows; the secret that signs
    each request is kept sealed (``secrets.seal``) and shown once, at creation."""

    __tablename__ = "webhook"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(64), index=True)
    url: Mapped[str] = mapped_column(String(2048))
    secret_sealed: Mapped[str] = mapped_column(Text)
    #: the event names it wants (``WEBHOOK_EVENTS``)
    events: Mapped[list[Any]] = mapped_column(default=list)
    scope: Mapped[str] = mapped_column(String(16), default="user")
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


#: the events a webhook may ask for, and its scopes (``Webhook.events``/``Webhook.scope``)
WEBHOOK_EVENTS = ("snapshot.sealed", "crawl.sealed", "crawl.failed", "feed.new_items")
WEBHOOK_SCOPES = ("user", "instance")


class WebhookDelivery(Base):
    """One event to send to one webhook (the webhook-sender owns these rows): ``pending`` (due at
    ``next_attempt_at``, which is also the lease of a sender sending it), then ``delivered`` or,
    after ``WEBHOOK_MAX_ATTEMPTS``, ``failed``. ``event_key`` makes a redelivered event insert
    nothing."""

    __tablename__ = "webhook_delivery"
    __table_args__ = (UniqueConstraint("webhook_id", "event_key"),)

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    webhook_id: Mapped[str] = mapped_column(ForeignKey("webhook.id", ondelete="CASCADE"))
    event: Mapped[str] = mapped_column(String(32))
    event_key: Mapped[str] = mapped_column(String(128))
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[datetime | None] = mapped_column(index=True)
    response_status: Mapped[int | None] = mapped_column(Integer)
    last_error: Mapped[str] = mapped_column(String(1000), default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None]


Index("ix_webhook_delivery_webhook_id_created_at", WebhookDelivery.webhook_id, WebhookDelivery.created_at)
