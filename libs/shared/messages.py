"""Every message that crosses a service boundary, as versioned msgspec Structs (JSON on the wire).

Rules (DESIGN.md, "Messaging"): every new field has a default, so old and new replicas
interoperate; consumers ignore fields they don't know; ``v`` is bumped only for an incompatible
change. Trace context travels in NATS headers, not here.

Subjects and who publishes what:

===============================  ================  =========================================
subject                          publisher         message
===============================  ================  =========================================
``tasks.hooks.<family>``         crawl-runner      ``HookTask``
``events.task.completed.<fam>``  hook-executor     ``TaskCompleted``
``events.process.completed``     hook-executor     ``ProcessRecord``
``events.archiveresult``         hook-executor     ``ArchiveResultRecord``
``events.binary.resolved``       binary-resolver   ``BinaryRecord``
``events.crawl.<status>``        crawl-runner      ``CrawlEvent``
``events.snapshot.<status>``     crawl-runner      ``SnapshotEvent``
``binaries.resolve`` (req/rep)   hook-executor     ``BinaryRequest`` → ``BinaryReply``
``crawl.queued`` (core, wake-up) ingest            ``CrawlQueued``
``control.crawl.<id>``           ingest            ``CrawlControl``
``control.schedule.<id>``        ingest            ``ScheduleControl``
===============================  ================  =========================================
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

ResultStatus = Literal["queued", "started", "backoff", "succeeded", "failed", "skipped", "noresults"]


class OutputFile(msgspec.Struct, frozen=True):
    """One file a hook produced: size in bytes and a guessed mimetype."""

    size: int
    mimetype: str = ""


class ArchiveResultRecord(msgspec.Struct, kw_only=True):
    """The outcome of one hook on one snapshot (natural key: snapshot_id, plugin, hook_name).

    ``output_files`` maps paths relative to the plugin dir to their metadata, as ArchiveBox's
    ``ArchiveResult.output_files``; ``output_size`` is their total in bytes.
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


class DiscoveredURL(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A URL a hook found (``{"type": "Snapshot", ...}`` on its stdout)."""

    url: str
    title: str | None = None
    tags: list[str] = []
    bookmarked_at: datetime | None = None
    plugin: str = ""


class ResultSummary(msgspec.Struct, kw_only=True):
    """What the runner keeps of a result to write ``index.jsonl`` at seal time."""

    id: str
    plugin: str
    hook_name: str
    status: str
    output_str: str = ""
    output_json: Any = None
    output_files: dict[str, OutputFile] = {}
    output_size: int = 0
    start_ts: datetime | None = None
    end_ts: datetime | None = None
    notes: str = ""


class SnapshotInfo(msgspec.Struct, kw_only=True):
    """The Snapshot record written as the first line of ``index.jsonl``."""

    id: str
    crawl_id: str
    url: str
    depth: int = 0
    parent_snapshot_id: str | None = None
    title: str | None = None
    tags: list[str] = []
    bookmarked_at: datetime | None = None
    created_at: datetime | None = None


class HookTask(msgspec.Struct, kw_only=True):
    """Work for one executor pool: run ``plugins``' snapshot hooks on one snapshot.

    ``kind="finalize"`` asks the pool to write the snapshot's ``index.jsonl`` from ``snapshot``
    and ``results`` instead of running hooks (the last step before the runner seals it).
    ``snap_dir`` and ``crawl_dir`` are relative to ``DATA_DIR``; ``config`` holds the crawl's
    string overrides (``TIMEOUT``, ``WGET_ARGS_EXTRA``, …) applied on top of the environment.
    """

    v: int = 1
    task_id: str
    kind: Literal["hooks", "finalize"] = "hooks"
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
    snapshot: SnapshotInfo | None = None
    results: list[ResultSummary] = []


class TaskCompleted(msgspec.Struct, kw_only=True):
    """A pool finished a task (``failed`` = the task itself failed, not merely a hook)."""

    v: int = 1
    task_id: str
    crawl_id: str
    snapshot_id: str
    stage: int
    family: str
    kind: str = "hooks"
    status: Literal["succeeded", "failed"] = "succeeded"
    error: str = ""
    results: list[ResultSummary] = []
    discovered: list[DiscoveredURL] = []
    tags: list[str] = []

    @classmethod
    def of(cls, task: HookTask, **fields: Any) -> TaskCompleted:
        """The completion of ``task`` (ids, stage, family and kind copied from it)."""
        return cls(
            task_id=task.task_id,
            crawl_id=task.crawl_id,
            snapshot_id=task.snapshot_id,
            stage=task.stage,
            family=task.family,
            kind=task.kind,
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
