"""Every message that crosses a service boundary, as versioned msgspec Structs (JSON on the wire).

Rules (DESIGN.md, "Messaging"): every new field has a default, so old and new replicas
interoperate; consumers ignore fields they don't know; ``v`` is bumped only for an incompatible
change. Trace context travels in NATS headers, not here.

Subjects and who publishes what:

===============================  ================  =========================================
subject                          publisher         message
===============================  ================  =========================================
``tasks.hooks.<family>``         crawl-runner      ``HookTask``
``events.task.started.<fam>``    hook-executor     ``TaskStarted``
``events.task.completed.<fam>``  hook-executor     ``TaskCompleted``
``events.process.completed``     hook-executor     ``ProcessRecord``
``events.archiveresult``         hook-executor     ``ArchiveResultRecord`` (and crawl-runner:
                                                   the ``fallback`` of a hook that never
                                                   reported, its task having failed or been
                                                   cancelled)
``events.binary.resolved``       binary-resolver   ``BinaryRecord``
``events.crawl.<status>``        crawl-runner      ``CrawlEvent``
``events.snapshot.<status>``     crawl-runner      ``SnapshotEvent``
``events.feed.new_items``        crawl-runner      ``FeedNewItems`` (a feed poll made a crawl)
``binaries.resolve[.<site>]``    hook-executor     ``BinaryRequest`` → ``BinaryReply`` (req/rep,
                                                   ``bus.binary_resolve_subject``)
``crawl.queued`` (core, wake-up) ingest            ``CrawlQueued``
``control.crawl.<id>``           ingest            ``CrawlControl``
``control.schedule.<id>``        ingest            ``ScheduleControl``
``events.tags.changed``          ingest            ``TagsChanged`` (a user edited tags: the
                                                   projector re-indexes those snapshots)
===============================  ================  =========================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, Literal

import msgspec

from boxcar.shared.urls import canonical_parts, url_key


class ResultStatus(StrEnum):
    """An ArchiveResult's status (ArchiveBox 0.9's ``ArchiveResult.StatusChoices``): the one list
    of them. A hook's own result ends ``succeeded``, ``failed``, ``skipped`` (it does not apply, or
    could not run: the reason says which) or ``noresults`` (it applies and found nothing)."""

    QUEUED = "queued"
    STARTED = "started"
    BACKOFF = "backoff"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    SKIPPED = "skipped"
    NORESULTS = "noresults"


#: the statuses a finished hook's result may have, in the order summaries list them
FINAL_RESULT_STATUSES = (ResultStatus.SUCCEEDED, ResultStatus.FAILED, ResultStatus.SKIPPED, ResultStatus.NORESULTS)


class OutputFile(msgspec.Struct, frozen=True):
    """One file a hook produced: size in bytes and a guessed mimetype."""

    size: int
    mimetype: str = ""


class ArchiveResultRecord(msgspec.Struct, kw_only=True):
    """The outcome of one hook on one snapshot (natural key: snapshot_id, plugin, hook_name).

    ``output_files`` maps paths relative to the plugin dir to their metadata, as ArchiveBox's
    ``ArchiveResult.output_files``; ``output_size`` is their total in bytes.

    A ``fallback`` record stands in for a hook that never reported (its task failed after its
    retries, was cancelled, or never reached an executor): the projector stores it only where the
    hook has no result, and any real result replaces it. So a sealed snapshot never has fewer
    results than its plan.
    """

    v: int = 1
    id: str
    snapshot_id: str
    crawl_id: str = ""
    plugin: str
    hook_name: str
    status: ResultStatus
    output_str: str = ""
    output_json: Any = None
    output_files: dict[str, OutputFile] = {}
    output_size: int = 0
    output_mimetypes: str = ""
    start_ts: datetime | None = None
    end_ts: datetime | None = None
    notes: str = ""
    process_id: str | None = None
    fallback: bool = False

    @classmethod
    def stand_in(
        cls, *, snapshot_id: str, crawl_id: str, plugin: str, hook_name: str, status: ResultStatus, reason: str
    ) -> ArchiveResultRecord:
        """The ``fallback`` result of a hook that did not report, saying why in ``output_str``."""
        from boxcar.shared.ids import new_id

        return cls(
            id=new_id(),
            snapshot_id=snapshot_id,
            crawl_id=crawl_id,
            plugin=plugin,
            hook_name=hook_name,
            status=status,
            output_str=reason[:500],
            notes=reason[:2000],
            fallback=True,
        )


class ProcessRecord(msgspec.Struct, kw_only=True):
    """One hook subprocess (natural key: id). stdout/stderr are bounded tails."""

    v: int = 1
    id: str
    snapshot_id: str = ""
    crawl_id: str = ""
    plugin: str = ""
    hook_name: str = ""
    cmd: list[str] = []
    pwd: str = ""
    pid: int | None = None
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    timeout: int = 0
    machine: str = ""
    status: Literal["running", "exited"] = "exited"


class BinaryRequest(msgspec.Struct, kw_only=True):
    """Ask the binary-resolver for one ``required_binaries`` record (already hydrated)."""

    v: int = 1
    name: str
    binproviders: str = "env"
    min_version: str | None = None
    max_version: str | None = None
    overrides: dict[str, Any] = {}
    min_release_age: int | None = None
    postinstall_scripts: bool | None = None
    plugin: str = ""
    machine: str = ""

    @classmethod
    def from_record(cls, record: dict[str, Any], *, plugin: str, machine: str) -> BinaryRequest:
        """A request for one hydrated ``required_binaries`` record of ``plugin``'s ``config.json``."""

        def text(value: Any) -> str | None:
            return None if value in (None, "") else str(value)

        providers = record.get("binproviders")
        return cls(
            name=str(record.get("name", "")),
            binproviders=",".join(map(str, providers)) if isinstance(providers, list) else str(providers or "env"),
            min_version=text(record.get("min_version")),
            max_version=text(record.get("max_version")),
            overrides=dict(record.get("overrides") or {}),
            min_release_age=record.get("min_release_age"),
            postinstall_scripts=record.get("postinstall_scripts"),
            plugin=plugin,
            machine=machine,
        )

    @property
    def cache_key(self) -> str:
        """Requests with the same key get the same answer on one machine."""
        return msgspec.json.encode(msgspec.structs.replace(self, plugin="", v=0)).decode()


class BinaryRecord(msgspec.Struct, kw_only=True):
    """A resolved executable on a machine (natural key: machine, name, abspath, version, sha256)."""

    v: int = 1
    name: str
    abspath: str
    version: str = ""
    sha256: str = ""
    binprovider: str = ""
    machine: str = ""
    bin_dirs: list[str] = []
    #: search paths a consumer needs besides PATH, e.g. ``{"NODE_PATH": [".../node_modules"]}``
    env_paths: dict[str, list[str]] = {}


class BinaryReply(msgspec.Struct, kw_only=True):
    """The resolver's answer: the binary, or why it cannot be had."""

    v: int = 1
    ok: bool
    binary: BinaryRecord | None = None
    error: str = ""
    installed: bool = False  # True when this request installed it (False: it was already there)


class Seed(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One URL entering Boxcar, from the API, an import, a feed or a hook's discovered links.

    Made only by ``Seed.parse`` at the entry point, which canonicalizes the URL (once: everything
    downstream trusts ``url``), cleans title and tags, and moves URL credentials out of the URL.

    Attributes:
        url: the canonical URL (``boxcar.shared.urls.canonicalize``), without userinfo.
        title: what the source called it; never just the URL itself (that never beats the
            captured page title).
        tags: cleaned tag names, de-duplicated, order kept.
        bookmarked_at: when the user saved it (aware UTC), if the source said.
        source: where it was found: an import record (``entry 3``), a feed item's GUID, the
            plugin that discovered it.
        credentials: the URL's ``user:password``, sealed with ``boxcar.shared.secrets`` (never
            plain text), or ``""``.
    """

    url: str
    title: str | None = None
    tags: tuple[str, ...] = ()
    bookmarked_at: datetime | None = None
    source: str = ""
    credentials: str = ""

    @classmethod
    def parse(
        cls,
        raw_url: str,
        *,
        title: str | None = None,
        tags: Iterable[str] | str = (),
        bookmarked_at: datetime | None = None,
        source: str = "",
        seal: Callable[[str], str] | None = None,
    ) -> Seed:
        """A seed from what a source said.

        Args:
            raw_url: the URL as given (whitespace around it ignored).
            seal: encrypts the URL's userinfo into ``credentials``; without it credentials
                are dropped (discovered links, dry runs).

        Raises:
            InvalidURL: not an archivable http(s) URL (``reason`` says why).
        """
        url, userinfo = canonical_parts(raw_url)
        if bookmarked_at is not None:
            bookmarked_at = bookmarked_at.astimezone(UTC) if bookmarked_at.tzinfo else bookmarked_at.replace(tzinfo=UTC)
        return cls(
            url=url,
            title=_seed_title(title, raw_url, url),
            tags=tuple(clean_tags(tags)),
            bookmarked_at=bookmarked_at,
            source=clean_text(source)[:200],
            credentials=seal(userinfo) if userinfo and seal is not None else "",
        )

    @property
    def key(self) -> str:
        """The dedup key (``urls.url_key``): one snapshot per key per crawl."""
        return url_key(self.url)

    def merge(self, other: Seed) -> Seed:
        """This seed and a later one for the same page: the first non-empty title, the union of
        tags, the earliest bookmark date, the first credentials."""
        dates = [d for d in (self.bookmarked_at, other.bookmarked_at) if d is not None]
        return msgspec.structs.replace(
            self,
            title=self.title or other.title,
            tags=tuple(dict.fromkeys(self.tags + other.tags)),
            bookmarked_at=min(dates) if dates else None,
            credentials=self.credentials or other.credentials,
        )


def clean_text(value: str | None) -> str:
    """Trimmed text without NUL or other C0 control characters (Postgres refuses NUL in text)."""
    if not value:
        return ""
    return "".join(ch for ch in str(value) if ch >= " " or ch in "\t\n").strip()


def clean_tags(tags: Iterable[str] | str) -> list[str]:
    """Trimmed, de-duplicated tag names (order kept, at most 100 characters each).

    A bare string is one tag: a tag is never split into letters.
    """
    if isinstance(tags, str):
        tags = [tags]
    return list(dict.fromkeys(c[:100] for t in tags if isinstance(t, str) and (c := clean_text(t))))


def _seed_title(title: str | None, raw_url: str, url: str) -> str | None:
    """A source's title, or None when it is empty or merely the URL (Pocket and others export
    ``<a href="U">U</a>``): such a title must never beat the page's captured title."""
    text = " ".join(clean_text(title).split())[:512]
    if not text:
        return None
    bare = {u.strip().rstrip("/").split("://", 1)[-1].lower() for u in (raw_url, url)}
    if text.rstrip("/").split("://", 1)[-1].lower() in bare:
        return None
    return text


class HookTask(msgspec.Struct, kw_only=True):
    """Work for one executor pool: run ``plugins``' snapshot hooks on one snapshot.

    ``snap_dir`` and ``crawl_dir`` are relative to ``DATA_DIR``; ``config`` is the crawl's
    ``CrawlConfig.values`` (per-crawl settings as environment strings, validated at ingest);
    ``credentials`` the URL's sealed userinfo (``boxcar.shared.secrets``), "" when none.
    """

    v: int = 2
    task_id: str
    crawl_id: str
    snapshot_id: str
    url: str
    depth: int = 0
    stage: int
    family: str
    plugins: list[str] = []
    config: dict[str, str] = {}
    snap_dir: str
    crawl_dir: str = ""
    attempt: int = 1
    credentials: str = ""


class TaskStarted(msgspec.Struct, kw_only=True):
    """An executor began a task (``events.task.started.<family>``): it was picked up."""

    v: int = 1
    task_id: str
    crawl_id: str
    snapshot_id: str
    family: str
    worker: str = ""


class TaskCompleted(msgspec.Struct, kw_only=True):
    """A pool finished a task (``failed`` = the task itself failed, not merely a hook).

    Discovered URLs ride along in ``discovered`` while they are few; a larger list is put in the
    ``DISCOVERED`` object store under ``discovered_object`` (no message size cliff), with
    ``discovered_count`` saying how many. ``http_status`` / ``final_url`` are what the task's
    hooks saw of the page's response (None / "" when they could not tell); ``network_error``
    says why no response came at all.
    """

    v: int = 2
    task_id: str
    crawl_id: str
    snapshot_id: str
    stage: int
    family: str
    status: Literal["succeeded", "failed", "cancelled"] = "succeeded"
    error: str = ""
    discovered: list[Seed] = []
    discovered_object: str = ""
    discovered_count: int = 0
    tags: list[str] = []
    http_status: int | None = None
    final_url: str = ""
    network_error: str = ""
    retry_after: float | None = None
    #: why the egress policy refused to fetch the page ("" when it did not): no hook ran
    refused: str = ""

    @classmethod
    def of(cls, task: HookTask, **fields: Any) -> TaskCompleted:
        """The completion of ``task`` (ids, stage and family copied from it)."""
        return cls(
            task_id=task.task_id,
            crawl_id=task.crawl_id,
            snapshot_id=task.snapshot_id,
            stage=task.stage,
            family=task.family,
            **fields,
        )


class CrawlEvent(msgspec.Struct, kw_only=True):
    """A Crawl changed status (``events.crawl.<status>``)."""

    v: int = 1
    crawl_id: str
    status: str
    at: datetime | None = None


class SnapshotEvent(msgspec.Struct, kw_only=True):
    """A Snapshot changed status or stage (``events.snapshot.<status>``)."""

    v: int = 1
    snapshot_id: str
    crawl_id: str
    status: str
    stage: int = 0
    runner: str = ""
    at: datetime | None = None


class FeedNewItems(msgspec.Struct, kw_only=True):
    """A feed poll found new items and made a crawl of them (``events.feed.new_items``),
    published after the poll's commit (a notice for webhooks: lost only if NATS is away then)."""

    v: int = 1
    schedule_id: str
    crawl_id: str
    new_items: int
    at: datetime | None = None


class CrawlQueued(msgspec.Struct, kw_only=True):
    """Wake-up for crawl-runners: a crawl is due now (core NATS, may be lost: runners also poll)."""

    v: int = 1
    crawl_id: str


class CrawlControl(msgspec.Struct, kw_only=True):
    """A user asked to pause, resume or cancel a crawl (``control.crawl.<id>``)."""

    v: int = 1
    crawl_id: str
    action: Literal["pause", "resume", "cancel"]


class ScheduleControl(msgspec.Struct, kw_only=True):
    """A user asked to poll now, pause or resume a schedule (``control.schedule.<id>``)."""

    v: int = 1
    schedule_id: str
    action: Literal["poll", "pause", "resume"]


class TagsChanged(msgspec.Struct, kw_only=True):
    """A user changed these snapshots' tags (``events.tags.changed``): their ``index.jsonl`` and
    search documents are projected again."""

    v: int = 1
    snapshot_ids: list[str]


def encode(msg: msgspec.Struct) -> bytes:
    """Encode a message as JSON bytes."""
    return _encoder.encode(msg)


def decode[T](data: bytes, type_: type[T]) -> T:
    """Decode JSON bytes into ``type_``.

    Raises:
        msgspec.ValidationError / msgspec.DecodeError: the payload does not match ``type_``.
    """
    return msgspec.json.decode(data, type=type_)


_encoder = msgspec.json.Encoder()
