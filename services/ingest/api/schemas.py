"""Request and response bodies of the ingest API (separate from the DB models)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec

from boxcar.shared.crawlconfig import MAX_DEPTH
from boxcar.shared.importers import Rejected

DEPTH_DESCRIPTION = f"How many link hops to follow (0–{MAX_DEPTH})"
MaxDepth = Annotated[int, msgspec.Meta(ge=0, le=MAX_DEPTH, description=DEPTH_DESCRIPTION)]


class SeedIn(msgspec.Struct, forbid_unknown_fields=True):
    """A URL with what its source says about it."""

    url: str
    title: str | None = None
    tags: list[str] = []
    bookmarked_at: datetime | None = None


class CrawlCreate(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /api/v1/crawls``: what to archive and how."""

    urls: Annotated[list[str | SeedIn], msgspec.Meta(min_length=1, max_length=100_000)]
    tags: list[str] = []
    max_depth: MaxDepth = 0
    plugins: list[str] = []
    #: per-crawl settings (``boxcar.shared.crawlconfig``): enable flags, timeouts, user agent, SSL
    #: checks, crawl limits, URL lists; anything else is a 422 naming the key
    config: dict[str, Any] = {}
    label: str = ""
    only_new: bool | None = None  # skip URLs archived before (default: the ONLY_NEW setting)


class CrawlCreated(msgspec.Struct):
    id: str
    status: str
    urls: int
    duplicates: int = 0
    skipped_existing: int = 0


class ImportCounts(msgspec.Struct):
    entries: int  # records seen in the file
    accepted: int  # URLs queued
    duplicates: int  # entries merged into another with the same URL
    rejected: int  # entries not queued (bad URL, filtered)
    skipped_existing: int  # already archived (ONLY_NEW)


class ImportCreated(msgspec.Struct):
    crawl_id: str
    format: str
    counts: ImportCounts
    rejected: list[Rejected]  # the first 50


class CrawlStatus(msgspec.Struct):
    """A crawl with its snapshots counted by status and its results counted by status."""

    id: str
    status: str
    created_at: datetime
    modified_at: datetime
    max_depth: int
    tags: list[str]
    plugins: list[str]
    label: str
    output_dir: str
    snapshots: dict[str, int]
    results: dict[str, int]
    #: snapshots whose page answered 4xx/5xx, and those that got no answer at all
    http_errors: int = 0
    network_errors: int = 0
    seeds: int = 0
    cancelled: bool = False
    error: str = ""  # why the crawl was given up, when it was
    #: sealed snapshots whose index.jsonl is not written yet (0 once everything is projected)
    results_pending: int = 0
    #: URLs merged into a snapshot of another crawl that is archiving or archived them (ONLY_NEW)
    merged: int = 0
    #: snapshots the egress policy refused to fetch, and why, once per kind of refusal (e.g. "a
    #: private or special-purpose address; set URL_ALLOW_PRIVATE=true to archive your LAN")
    refused: int = 0
    refusal: str = ""


class ResultOut(msgspec.Struct):
    plugin: str
    hook_name: str
    status: str
    output_str: str
    output_size: int
    output_files: dict[str, Any]
    start_ts: datetime | None
    end_ts: datetime | None
    notes: str


class SnapshotOut(msgspec.Struct):
    id: str
    crawl_id: str
    url: str
    title: str | None
    status: str
    depth: int
    parent_snapshot_id: str | None
    bookmarked_at: datetime
    downloaded_at: datetime | None
    output_dir: str
    output_size: int
    tags: list[str]
    results: list[ResultOut]
    http_status: int | None = None
    final_url: str | None = None
    network_error: str = ""
    #: why the egress policy refused to fetch the page ("" when it did not)
    refusal: str = ""


class SnapshotPage(msgspec.Struct):
    total: int
    items: list[SnapshotOut]


class FeedCreate(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /api/v1/feeds``: subscribe to an RSS/Atom/JSON feed."""

    url: str
    schedule: str = "hourly"  # hourly, daily, weekly, monthly, yearly, or a cron expression
    tags: list[str] = []
    max_depth: MaxDepth = 0
    plugins: list[str] = []
    label: str = ""
    config: dict[str, Any] = {}  # per-crawl settings of the crawls its polls make (as CrawlCreate.config)


class ScheduleCreate(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /api/v1/schedules``: archive these URLs again on a schedule (each run new snapshots)."""

    urls: Annotated[list[str], msgspec.Meta(min_length=1, max_length=1000)]
    every: str = "daily"  # minute, hourly, daily, weekly, monthly, yearly, or a cron expression
    tags: list[str] = []
    max_depth: MaxDepth = 0
    plugins: list[str] = []
    label: str = ""
    config: dict[str, Any] = {}


class ScheduleOut(msgspec.Struct):
    id: str
    urls: list[str]
    every: str
    label: str
    tags: list[str]
    max_depth: int
    status: str  # queued (active) or paused; started while a run is being made
    next_run_at: datetime | None
    last_run_at: datetime | None
    last_error: str
    runs: int  # crawls made so far


class FeedUpdate(msgspec.Struct, forbid_unknown_fields=True):
    """``PATCH /api/v1/feeds/{id}``: change what a subscription archives and how often."""

    schedule: str | None = None
    tags: list[str] | None = None
    max_depth: MaxDepth | None = None
    plugins: list[str] | None = None
    label: str | None = None
    config: dict[str, Any] | None = None


class FeedOut(msgspec.Struct):
    """A feed subscription and how its polling goes."""

    id: str
    url: str
    schedule: str
    label: str
    tags: list[str]
    max_depth: int
    plugins: list[str]
    status: str  # queued (active), started (being polled), paused
    next_poll_at: datetime | None
    last_polled_at: datetime | None
    last_run_at: datetime | None
    last_error: str
    failures: int
    items_seen: int
    crawls: int
    created_at: datetime
    items_rejected: int = 0  # items of the last poll that gave no archivable URL
    last_rejection: str = ""  # why the last of them was rejected


class ControlAccepted(msgspec.Struct):
    """A pause/resume/cancel/poll request was queued for the crawl-runner."""

    id: str
    action: str
    status: str = "requested"


class SearchHitOut(msgspec.Struct):
    """One search match: the snapshot and the text around the matched words (``snippet``, plain;
    ``snippet_html``: escaped, matched words in ``<mark>``)."""

    id: str
    url: str
    title: str
    domain: str
    status: str
    created_at: datetime
    tags: list[str]
    snippet: str
    snippet_html: str


class SearchPage(msgspec.Struct):
    query: str
    items: list[SearchHitOut]


class WebhookCreate(msgspec.Struct, forbid_unknown_fields=True):
    """``POST /api/v1/webhooks``: send these events to ``url`` (signed, retried)."""

    url: str
    #: any of snapshot.sealed, crawl.sealed, crawl.failed, feed.new_items
    events: Annotated[list[str], msgspec.Meta(min_length=1, max_length=10)]
    #: ``user`` (the caller's archive) or, for an admin, ``instance`` (every archive)
    scope: str = "user"


class WebhookOut(msgspec.Struct):
    """A webhook (its secret is never shown again)."""

    id: str
    url: str
    events: list[str]
    scope: str
    owner: str
    is_active: bool
    created_at: datetime


class WebhookCreated(msgspec.Struct):
    """The new webhook and its signing secret, shown this once: ``X-Boxcar-Signature-256`` is
    ``sha256=`` and the hex HMAC-SHA256 of the raw body with it."""

    webhook: WebhookOut
    secret: str


class WebhookDeliveryOut(msgspec.Struct):
    """One event sent (or being sent) to a webhook: ``pending``, ``delivered`` or ``failed``."""

    id: str
    event: str
    status: str
    attempts: int
    response_status: int | None
    last_error: str
    created_at: datetime
    next_attempt_at: datetime | None
    delivered_at: datetime | None
