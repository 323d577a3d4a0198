"""Ingest's domain logic: validating and creating crawls, reading their progress."""

from __future__ import annotations

import re
from dataclasses import dataclass

from sqlalchemy import func, select

from boxcar.ingest.schemas import (
    CrawlCreate,
    CrawlStatus,
    ResultOut,
    SeedIn,
    SnapshotOut,
    SnapshotPage,
)
from boxcar.shared import importers, storage, telemetry
from boxcar.shared.admission import Admission, Candidate, PolicyError, Rejection, admit, clean_tags, clean_text
from boxcar.shared.db import Database
from boxcar.shared.db.models import (
    SEALED,
    ArchiveResult,
    Crawl,
    Snapshot,
    SnapshotTag,
    SnapshotTask,
    Tag,
    utcnow,
)
from boxcar.shared.families import FamilyTable
from boxcar.shared.plugins import PluginCatalog
from boxcar.shared.settings import Settings
from boxcar.shared.urls import UrlFilter


class InputError(ValueError):
    """Bad input; ``field`` names where (``urls[3]``, ``plugins``), ``str()`` says what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass
class ImportOutcome:
    crawl: Crawl
    format: str
    admission: Admission
    rejected: list[Rejection]
    entries_seen: int


CONFIG_KEY = re.compile(r"^[A-Z][A-Z0-9_]{0,127}$")


def clean_config(config: dict) -> dict[str, str]:
    """Crawl config overrides as strings (they become hook environment variables).

    Raises:
        InputError: a key is not an UPPER_CASE setting name, or a value holds a NUL character.
    """
    out = {}
    for key, value in config.items():
        if not CONFIG_KEY.match(key):
            raise InputError("config", f"{key[:60]!r} is not a setting name (UPPER_CASE like WGET_TIMEOUT)")
        text = str(value).lower() if isinstance(value, bool) else str(value)
        if "\x00" in text:
            raise InputError("config", f"{key}: value contains a NUL character")
        out[key] = text
    return out


def _candidate(item: str | SeedIn) -> Candidate:
    if isinstance(item, SeedIn):
        return Candidate(url=item.url, title=item.title, tags=item.tags, bookmarked_at=item.bookmarked_at)
    return Candidate(url=item)


def _extension(format_name: str) -> str:
    """File extension for a kept source, from the format it was parsed as."""
    if format_name in ("netscape", "pocket_html", "html"):
        return "html"
    if format_name in ("rss", "atom", "pinboard_xml"):
        return "xml"
    if format_name == "markdown":
        return "md"
    for suffix in ("jsonl", "json", "csv"):
        if (
            format_name == suffix
            or format_name.endswith("_" + suffix)
            or format_name == "jsonfeed"
            and suffix == "json"
        ):
            return suffix
    return "txt"


class CrawlService:
    """Creates crawls and reads their progress."""

    def __init__(self, db: Database, settings: Settings, catalog: PluginCatalog, families: FamilyTable) -> None:
        self.db = db
        self.settings = settings
        self.catalog = catalog
        self.families = families

    def validate_plugins(self, plugins: list[str]) -> list[str]:
        """Check a plugin selection.

        Raises:
            InputError: a name is not an installed plugin, or no family runs it.
        """
        names = [p.strip() for p in plugins if p.strip()]
        unknown = [p for p in names if p not in self.catalog]
        if unknown:
            raise InputError("plugins", f"unknown plugin(s) {', '.join(unknown)}")
        unrunnable = self.families.unknown(
            p for p in self.catalog.with_requirements(names) if self.catalog[p].snapshot_hooks()
        )
        if unrunnable:
            raise InputError("plugins", f"no executor family runs {', '.join(unrunnable)}")
        return names

    def url_filter(self, config: dict[str, str]) -> UrlFilter:
        """The crawl's allow/deny lists (its config overrides the settings).

        Raises:
            InputError: a list holds an invalid regex.
        """
        try:
            return UrlFilter.from_config(config, self.settings.url_allowlist, self.settings.url_denylist)
        except ValueError as exc:
            raise InputError("config", str(exc)) from None

    def admit(self, items, *, strict: bool, only_new: bool, url_filter: UrlFilter) -> Admission:
        """``boxcar.shared.admission.admit`` in a read transaction; policy errors become InputError."""
        with self.db.read() as s:
            try:
                return admit(s, items, url_filter=url_filter, only_new=only_new, strict=strict)
            except PolicyError as exc:
                raise InputError(exc.where, str(exc).split(": ", 1)[1]) from None

    def create_crawl(self, body: CrawlCreate) -> tuple[Crawl, Admission]:
        """Validate and store a new queued crawl (due now).

        Raises:
            InputError: an invalid or filtered URL (named with its index), plugin or config.
        """
        config = clean_config(body.config)
        only_new = self.settings.only_new if body.only_new is None else body.only_new
        admission = self.admit(
            ((f"urls[{i}]", _candidate(item)) for i, item in enumerate(body.urls)),
            strict=True,
            only_new=only_new,
            url_filter=self.url_filter(config),
        )
        plugins = self.validate_plugins(body.plugins) if body.plugins else []
        crawl = self.insert_crawl(
            admission.seeds,
            tags=body.tags,
            max_depth=body.max_depth,
            plugins=plugins,
            config={**config, "ONLY_NEW": str(only_new)},
            label=clean_text(body.label),
        )
        return crawl, admission

    def insert_crawl(
        self,
        seeds: list[dict],
        *,
        tags: list[str],
        max_depth: int,
        plugins: list[str],
        config: dict[str, str],
        label: str = "",
        source: tuple[bytes, str] | None = None,
        first_url: str = "",
    ) -> Crawl:
        """Store a queued crawl, due now, in the current trace; ``source`` = (bytes, extension) of an
        imported file to keep verbatim under ``sources/``."""
        now = utcnow()
        with telemetry.tracer("boxcar.ingest").start_as_current_span("crawl") as span:
            crawl = Crawl.new(
                user=self.settings.archive_user,
                seeds=seeds,
                first_url=first_url,
                now=now,
                max_depth=max_depth,
                tags_str=",".join(clean_tags(tags)),
                plugins=plugins,
                config=config,
                label=label[:256],
                trace_context=telemetry.current_carrier(),
            )
            span.set_attribute("boxcar.crawl_id", crawl.id)
            if source is not None:
                crawl.source_file = storage.source_path(now, crawl.id, source[1])
                storage.write_atomic(self.settings.data_dir / crawl.source_file, source[0])
            with self.db.write() as s:
                s.add(crawl)
        return crawl

    def create_import(
        self,
        data: bytes,
        *,
        format: str | None,
        tags: list[str],
        max_depth: int,
        plugins: list[str],
        only_new: bool | None,
        folder_tags: bool = False,
    ) -> ImportOutcome:
        """Parse an uploaded export and queue a crawl of its entries; the file is kept in ``sources/``.

        Raises:
            InputError: unknown format, no URL found (the message names the format tried), bad
                plugin selection.
        """
        if importers.looks_binary(data):
            raise InputError("file", "a binary file, not a bookmark export, feed or list of URLs")
        try:
            parsed = importers.parse(data, format, folder_tags=folder_tags)
        except importers.UnknownFormat:
            raise InputError("format", f"unknown format {format!r}; one of {', '.join(importers.FORMATS)}") from None
        admission = self.admit(
            (
                (f"entry {i + 1}", Candidate(url=e.url, title=e.title, tags=e.tags, bookmarked_at=e.bookmarked_at))
                for i, e in enumerate(parsed.entries)
            ),
            strict=False,
            only_new=self.settings.only_new if only_new is None else only_new,
            url_filter=self.url_filter({}),
        )
        rejected = [Rejection(r.where, r.value, r.reason) for r in parsed.rejected] + admission.rejected
        if not parsed.entries:
            raise InputError(
                "file",
                f"no URLs found (format tried: {parsed.format})"
                + (f"; {len(rejected)} record(s) rejected, e.g. {rejected[0].reason}" if rejected else ""),
            )
        plugins = self.validate_plugins(plugins) if plugins else []
        crawl = self.insert_crawl(
            admission.seeds,
            tags=tags,
            max_depth=max_depth,
            plugins=plugins,
            config={"ONLY_NEW": str(self.settings.only_new if only_new is None else only_new)},
            label=f"import ({parsed.format})",
            source=(data, _extension(parsed.format)),
            first_url=parsed.entries[0].url,
        )
        return ImportOutcome(
            crawl=crawl,
            format=parsed.format,
            admission=admission,
            rejected=rejected,
            entries_seen=len(parsed.entries) + len(parsed.rejected),
        )

    def crawl_status(self, crawl_id: str) -> CrawlStatus | None:
        """The crawl and its counts, or None when there is no such crawl."""
        with self.db.read() as s:
            crawl = s.get(Crawl, crawl_id)
            if crawl is None:
                return None
            snapshots = dict(
                s.execute(
                    select(Snapshot.status, func.count()).where(Snapshot.crawl_id == crawl_id).group_by(Snapshot.status)
                ).all()
            )
            results = dict(
                s.execute(
                    select(ArchiveResult.status, func.count())
                    .join(Snapshot, Snapshot.id == ArchiveResult.snapshot_id)
                    .where(Snapshot.crawl_id == crawl_id)
                    .group_by(ArchiveResult.status)
                ).all()
            )
            pending = self._results_pending(s, crawl_id) if crawl.status == SEALED else None
        counts = {k: snapshots.get(k, 0) for k in ("queued", "started", "paused", "sealed")}
        counts["total"] = sum(snapshots.values())
        result_counts = {k: results.get(k, 0) for k in ("succeeded", "failed", "skipped", "noresults")}
        result_counts.update({k: v for k, v in results.items() if k not in result_counts})
        return CrawlStatus(
            id=crawl.id,
            status=crawl.status,
            created_at=crawl.created_at,
            modified_at=crawl.modified_at,
            max_depth=crawl.max_depth,
            tags=[t for t in crawl.tags_str.split(",") if t],
            plugins=crawl.plugins or [],
            label=crawl.label,
            output_dir=crawl.output_dir,
            snapshots=counts,
            results=result_counts,
            results_pending=pending,
        )

    @staticmethod
    def _results_pending(s, crawl_id: str) -> int:
        """How many hook results executors reported that the projector has not written yet."""
        reported = {
            (t.snapshot_id, r["plugin"], r["hook_name"])
            for t in s.scalars(select(SnapshotTask).where(SnapshotTask.crawl_id == crawl_id))
            for r in (t.results or [])
        }
        projected = set(
            s.execute(
                select(ArchiveResult.snapshot_id, ArchiveResult.plugin, ArchiveResult.hook_name)
                .join(Snapshot, Snapshot.id == ArchiveResult.snapshot_id)
                .where(Snapshot.crawl_id == crawl_id)
            ).all()
        )
        return len(reported - projected)

    def list_snapshots(self, crawl_id: str | None, limit: int, offset: int) -> SnapshotPage:
        """Snapshots (oldest first) with their ArchiveResults and tags."""
        with self.db.read() as s:
            query = select(Snapshot)
            count = select(func.count()).select_from(Snapshot)
            if crawl_id:
                query = query.where(Snapshot.crawl_id == crawl_id)
                count = count.where(Snapshot.crawl_id == crawl_id)
            total = s.scalar(count)
            snaps = list(s.scalars(query.order_by(Snapshot.created_at, Snapshot.id).limit(limit).offset(offset)))
            ids = [x.id for x in snaps]
            results: dict[str, list[ResultOut]] = {i: [] for i in ids}
            for r in s.scalars(
                select(ArchiveResult)
                .where(ArchiveResult.snapshot_id.in_(ids))
                .order_by(ArchiveResult.start_ts, ArchiveResult.hook_name)
            ):
                results[r.snapshot_id].append(
                    ResultOut(
                        plugin=r.plugin,
                        hook_name=r.hook_name,
                        status=r.status,
                        output_str=r.output_str,
                        output_size=r.output_size,
                        output_files=r.output_files or {},
                        start_ts=r.start_ts,
                        end_ts=r.end_ts,
                        notes=r.notes,
                    )
                )
            tags: dict[str, list[str]] = {i: [] for i in ids}
            for sid, name in s.execute(
                select(SnapshotTag.snapshot_id, Tag.name)
                .join(Tag, Tag.id == SnapshotTag.tag_id)
                .where(SnapshotTag.snapshot_id.in_(ids))
                .order_by(Tag.name)
            ):
                tags[sid].append(name)
        items = [
            SnapshotOut(
                id=x.id,
                crawl_id=x.crawl_id,
                url=x.url,
                title=x.title,
                status=x.status,
                depth=x.depth,
                parent_snapshot_id=x.parent_snapshot_id,
                bookmarked_at=x.bookmarked_at,
                downloaded_at=x.downloaded_at,
                output_dir=x.output_dir,
                output_size=x.output_size,
                tags=tags[x.id],
                results=results[x.id],
            )
            for x in snaps
        ]
        return SnapshotPage(total=total or 0, items=items)
