"""Ingest's domain logic: validating and creating crawls, reading their progress.

Everything entering here is parsed once, where it enters: URLs become ``Seed``s
(``Seed.parse``: canonicalized, credentials sealed), a request's ``config`` a ``CrawlConfig``
(allow-listed keys, typed values), import files ``importers.parse`` results. Nothing downstream
parses them again.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec
from sqlalchemy import Select, bindparam, func, select

from boxcar.ingest.access import Viewer, own_crawls, readable_snapshots
from boxcar.ingest.api.schemas import (
    CrawlCreate,
    CrawlStatus,
    ResultOut,
    SeedIn,
    SnapshotOut,
    SnapshotPage,
)
from boxcar.ingest.quotas import check_quota
from boxcar.shared import importers, secrets, storage, telemetry
from boxcar.shared.admission import Admission, PolicyError, admit, archived_keys
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.clock import utcnow
from boxcar.shared.crawlconfig import ConfigError, CrawlConfig
from boxcar.shared.db import Database, insert_seeds
from boxcar.shared.db.models import ArchiveResult, Crawl, Snapshot, SnapshotTag, Status, Tag, url_hash
from boxcar.shared.egress import refusal_kind
from boxcar.shared.families import FamilyTable
from boxcar.shared.importers import Rejected
from boxcar.shared.messages import FINAL_RESULT_STATUSES, Seed, clean_tags, clean_text
from boxcar.shared.plugins import PluginCatalog
from boxcar.shared.settings import Settings
from boxcar.shared.urls import InvalidURL, strip_userinfo


class InputError(ValueError):
    """Bad input; ``field`` names where (``urls[3]``, ``config.WGET_TIMEOUT``), ``str()`` says what."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass
class ImportOutcome:
    crawl: Crawl
    format: str
    admission: Admission
    rejected: list[Rejected]
    entries_seen: int


@dataclass
class ImportPreview:
    """What an import would queue (``CrawlService.preview``): counts, the rejected records with
    their reasons, and the first URLs."""

    format: str
    entries: int
    accepted: int
    duplicates: int
    skipped_existing: int
    rejected: list[Rejected]
    first: list[str]


@dataclass
class PluginChoice:
    """One plugin on ``/add``: ``default`` when the server's ``PLUGINS`` has it, ``off`` why it
    will not run here ("" when it will)."""

    name: str
    default: bool
    off: str = ""


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
            or (format_name == "jsonfeed" and suffix == "json")
        ):
            return suffix
    return "txt"


class CrawlService:
    """Creates crawls and reads their progress."""

    def __init__(self, db: Database, settings: Settings, catalog: PluginCatalog, families: FamilyTable) -> None:
        self.db = db
        self.settings = settings
        self.store = ArchiveStore.from_settings(settings)  # the sources/ files
        self.catalog = catalog
        self.families = families

    # ------------------------------------------------------------------ validation

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

    def plugin_choices(self) -> dict[str, list[PluginChoice]]:
        """``/add``'s chooser: the selectable plugins by executor family (families in the table's
        order), each marked default or not and, when it will not run here, why (``<PLUGIN>_ENABLED
        =false``, or disabled by default in Boxcar)."""
        names = self.selectable_plugins()
        off = self.catalog.disabled(names, self.crawl_config({}).plugin_environ({}))  # as the planner sees it
        defaults = set(self.settings.plugins)
        groups: dict[str, list[PluginChoice]] = {}
        for name in names:
            family = self.families.family_of(name)
            groups.setdefault(family.name if family else "other", []).append(
                PluginChoice(name, default=name in defaults and name not in off, off=off.get(name, ""))
            )
        return groups

    def selectable_plugins(self) -> list[str]:
        """Plugins a crawl may name: those with snapshot hooks that some executor family runs."""
        return sorted(
            name
            for name, plugin in self.catalog.plugins.items()
            if plugin.snapshot_hooks() and self.families.family_of(name) is not None
        )

    def crawl_config(self, overrides: dict) -> CrawlConfig:
        """The crawl's settings (environment, then ``overrides``), validated.

        Raises:
            InputError: ``config.<KEY>`` names a refused key or an ill-typed value.
        """
        try:
            return CrawlConfig.build(self.settings, self.catalog, overrides)
        except ConfigError as exc:
            raise InputError(f"config.{exc.key}", str(exc).split(": ", 1)[1]) from None

    def admit(self, seeds: Iterable[Seed], config: CrawlConfig, *, strict: bool, owner: str) -> Admission:
        """The URL policy (filters, duplicates) and, with ``ONLY_NEW``, what ``owner`` archived before.

        Raises:
            InputError: ``strict`` and a URL is filtered out (named by its ``Seed.source``).
        """
        try:
            admission = admit(seeds, config.url_filter(), strict=strict)
        except PolicyError as exc:
            raise InputError(exc.where, str(exc).split(": ", 1)[1]) from None
        if config.only_new and admission.seeds:
            with self.db.read() as s:
                admission = admission.without(archived_keys(s, admission.seeds, owner))
        return admission

    # ------------------------------------------------------------------ creating crawls

    def create_crawl(self, body: CrawlCreate, *, owner: str) -> tuple[Crawl, Admission]:
        """Validate and store a new queued crawl (due now) of ``owner`` (a user name).

        Raises:
            InputError: an invalid or filtered URL (named with its index), plugin or config key.
            QuotaExceeded: over one of ``owner``'s limits (``quotas``).
        """
        overrides = dict(body.config)
        if body.only_new is not None:
            overrides["ONLY_NEW"] = body.only_new
        config = self.crawl_config(overrides)
        seeds = [self._seed(f"urls[{i}]", item) for i, item in enumerate(body.urls)]
        admission = self.admit(seeds, config, strict=True, owner=owner)
        plugins = self.validate_plugins(body.plugins) if body.plugins else list(self.settings.plugins)
        crawl = self.insert_crawl(
            admission.seeds,
            owner=owner,
            tags=body.tags,
            max_depth=body.max_depth,
            plugins=plugins,
            config=config,
            label=clean_text(body.label),
        )
        return crawl, admission

    @staticmethod
    def _seed(where: str, item: str | SeedIn) -> Seed:
        try:
            if isinstance(item, SeedIn):
                return Seed.parse(
                    item.url,
                    title=item.title,
                    tags=item.tags,
                    bookmarked_at=item.bookmarked_at,
                    source=where,
                    seal=secrets.seal,
                )
            return Seed.parse(item, source=where, seal=secrets.seal)
        except InvalidURL as exc:
            url = item.url if isinstance(item, SeedIn) else item
            raise InputError(where, f"{exc.reason}: {strip_userinfo(str(url))[:300]}") from None

    def insert_crawl(
        self,
        seeds: list[Seed],
        *,
        owner: str,
        tags: list[str],
        max_depth: int,
        plugins: list[str],
        config: CrawlConfig,
        label: str = "",
        sources: list[tuple[bytes, str]] = (),
        first_url: str = "",
    ) -> Crawl:
        """Store a queued crawl of ``owner`` and its seeds, due now, in the current trace;
        ``sources`` = ``(bytes, extension)`` of imported files, kept under ``sources/`` with URL
        passwords redacted.

        Raises:
            QuotaExceeded: over one of ``owner``'s limits (nothing is stored).
        """
        check_quota(self.db, owner, len(seeds))
        now = utcnow()
        with telemetry.tracer("boxcar.ingest").start_as_current_span("crawl") as span:
            crawl = Crawl.new(
                user=owner,
                first_url=seeds[0].url if seeds else first_url,
                seed_count=len(seeds),
                now=now,
                max_depth=max_depth,
                tags_str=",".join(clean_tags(tags)),
                plugins=plugins,
                config=config.values,
                label=label[:256],
                trace_context=telemetry.current_carrier(),
            )
            span.set_attribute("boxcar.crawl_id", crawl.id)
            span.set_attribute("boxcar.seeds", len(seeds))
            paths = []
            for i, (data, ext) in enumerate(sources):
                path = storage.source_path(now, crawl.id if len(sources) == 1 else f"{crawl.id}-{i + 1}", ext)
                self.store.put_bytes(path, importers.redact_credentials(data))  # whole or not at all
                paths.append(path)
            crawl.source_files = paths
            crawl.source_file = paths[0] if paths else None
            with self.db.write() as s:
                s.add(crawl)
                s.flush()
                insert_seeds(s, crawl.id, seeds)
        return crawl

    def create_import(
        self,
        files: list[tuple[bytes, str]],
        *,
        format: str | None,
        tags: list[str],
        max_depth: int,
        plugins: list[str],
        only_new: bool | None,
        owner: str,
        folder_tags: bool = False,
        config: dict | None = None,
    ) -> ImportOutcome:
        """Parse uploaded exports and queue one crawl of all their entries; each file is kept in
        ``sources/``.

        Args:
            files: ``[(content, file name)]`` (the name only labels rejections: the format is
                detected from the content).

        Raises:
            InputError: a binary file, an unknown format, no URL found in any file (the message
                names the format tried), a bad plugin selection or config.
        """
        overrides = dict(config or {})
        if only_new is not None:
            overrides["ONLY_NEW"] = only_new
        crawl_config = self.crawl_config(overrides)
        seeds, rejected, formats, sources, seen = self._parse_files(files, format, folder_tags)
        admission = self.admit(seeds, crawl_config, strict=False, owner=owner)
        rejected += admission.rejected
        chosen = self.validate_plugins(plugins) if plugins else list(self.settings.plugins)
        kinds = list(dict.fromkeys(formats))
        crawl = self.insert_crawl(
            admission.seeds,
            owner=owner,
            tags=tags,
            max_depth=max_depth,
            plugins=chosen,
            config=crawl_config,
            label=f"import ({', '.join(kinds)})"[:256],
            sources=sources,
            first_url=seeds[0].url,
        )
        return ImportOutcome(
            crawl=crawl,
            format=kinds[0] if len(kinds) == 1 else "mixed",
            admission=admission,
            rejected=rejected,
            entries_seen=seen,
        )

    def preview(self, files: list[tuple[bytes, str]], *, owner: str) -> ImportPreview:
        """What importing ``files`` would queue, without queueing anything (``/add``'s preview):
        the same parsing, merging, URL lists and ``ONLY_NEW`` as ``create_import``.

        Raises:
            InputError: as ``create_import`` (a binary file, no URL found).
        """
        seeds, rejected, formats, _sources, seen = self._parse_files(files, None, False)
        admission = self.admit(seeds, self.crawl_config({}), strict=False, owner=owner)
        rejected += admission.rejected
        kinds = list(dict.fromkeys(formats))
        return ImportPreview(
            format=kinds[0] if len(kinds) == 1 else "mixed",
            entries=seen,
            accepted=len(admission.seeds),
            duplicates=admission.duplicates,
            skipped_existing=admission.skipped_existing,
            rejected=rejected,
            first=[s.url for s in admission.seeds[:5]],
        )

    def _parse_files(
        self, files: list[tuple[bytes, str]], format: str | None, folder_tags: bool
    ) -> tuple[list[Seed], list[Rejected], list[str], list[tuple[bytes, str]], int]:
        """Each file parsed (format detected unless given): ``(seeds, rejected, formats,
        sources, records seen)``; one bad record never drops the others.

        Raises:
            InputError: a binary file, an unknown ``format``, or no URL in any file.
        """
        seeds: list[Seed] = []
        rejected: list[Rejected] = []
        formats: list[str] = []
        sources: list[tuple[bytes, str]] = []
        seen = 0
        for index, (data, name) in enumerate(files):
            label = f"file {name or index + 1}: " if len(files) > 1 else ""
            if importers.looks_binary(data):
                raise InputError("file", f"{label}a binary file, not a bookmark export, feed or list of URLs")
            try:
                parsed = importers.parse(data, format, folder_tags=folder_tags)
            except importers.UnknownFormat:
                raise InputError(
                    "format", f"unknown format {format!r}; one of {', '.join(importers.FORMATS)}"
                ) from None
            formats.append(parsed.format)
            pairs, bad = parsed.seeds(seal=secrets.seal)
            seeds += [seed for _, seed in pairs]
            rejected += [
                Rejected(where=label + r.where, value=strip_userinfo(r.value), reason=r.reason)
                for r in [*parsed.rejected, *bad]
            ]
            seen += len(parsed.entries) + len(parsed.rejected)
            sources.append((data, _extension(parsed.format)))
        if not seeds:
            raise InputError(
                "file",
                f"no URLs found (format tried: {', '.join(dict.fromkeys(formats))})"
                + (f"; {len(rejected)} record(s) rejected, e.g. {rejected[0].reason}" if rejected else ""),
            )
        return seeds, rejected, formats, sources, seen

    # ------------------------------------------------------------------ reading

    def crawl_status(self, crawl_id: str, *, viewer: Viewer) -> CrawlStatus | None:
        """The crawl and its counts, or None when there is no such crawl of ``viewer``'s
        (``access.own_crawls``)."""
        snapshot_counts, result_counts_by_status, refusals_of = _status_statements()
        with self.db.read() as s:
            crawl = s.scalar(select(Crawl).where(Crawl.id == crawl_id, own_crawls(viewer)))
            if crawl is None:
                return None
            row = s.execute(snapshot_counts, {"crawl_id": crawl_id}).one()
            results = dict(s.execute(result_counts_by_status, {"crawl_id": crawl_id}).all())
            refusals = s.scalars(refusals_of, {"crawl_id": crawl_id}).all() if row.refused else []
            refusal = "; or ".join(dict.fromkeys(refusal_kind(r) for r in refusals))
        counts = {k: row._mapping[k] for k in ("queued", "started", "paused", "sealed", "total")}  # count(): never NULL
        result_counts = {str(k): results.get(k, 0) for k in FINAL_RESULT_STATUSES}
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
            http_errors=row.http_errors,
            network_errors=row.network_errors,
            seeds=crawl.seed_count,
            cancelled=crawl.cancelled_at is not None,
            error=crawl.error,
            results_pending=row.pending,
            merged=crawl.merged,
            refused=row.refused,
            refusal=refusal,
        )

    def list_snapshots(
        self, crawl_id: str | None, limit: int, offset: int, url: str | None = None, *, viewer: Viewer
    ) -> SnapshotPage:
        """Snapshots ``viewer`` may read (oldest first) with their ArchiveResults and tags; ``url``
        keeps the snapshots of that URL canonicalised as ``Seed.parse`` does on add (none for a
        URL that could never be added)."""
        readable = readable_snapshots(viewer, self.settings.public_reads, self.settings.archive_user)
        with self.db.read() as s:
            query = select(Snapshot).where(readable)
            count = select(func.count()).select_from(Snapshot).where(readable)
            if crawl_id:
                query = query.where(Snapshot.crawl_id == crawl_id)
                count = count.where(Snapshot.crawl_id == crawl_id)
            if url is not None:
                try:
                    key = url_hash(Seed.parse(url).url)
                except InvalidURL:
                    return SnapshotPage(total=0, items=[])
                query = query.where(Snapshot.url_hash == key)
                count = count.where(Snapshot.url_hash == key)
            total = s.scalar(count)
            snaps = list(s.scalars(query.order_by(Snapshot.created_at, Snapshot.id).limit(limit).offset(offset)))
            ids = [x.id for x in snaps]
            results: dict[str, list[ResultOut]] = {i: [] for i in ids}
            for r in s.scalars(
                select(ArchiveResult)
                .where(ArchiveResult.snapshot_id.in_(ids))
                .order_by(ArchiveResult.start_ts, ArchiveResult.hook_name)
            ):
                results[r.snapshot_id].append(msgspec.convert(r, ResultOut, from_attributes=True))
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
                http_status=x.http_status,
                final_url=x.final_url,
                network_error=x.network_error,
                refusal=x.refusal,
                tags=tags[x.id],
                results=results[x.id],
            )
            for x in snaps
        ]
        return SnapshotPage(total=total or 0, items=items)


@functools.cache
def _status_statements() -> tuple[Select, Select, Select]:
    """``crawl_status``'s statements, built once (``boxcar add --wait`` asks every second for the
    whole crawl): a crawl's snapshot counts in one pass (by status, total, HTTP and network errors,
    sealed but not yet indexed, refused), its results counted by status, and up to 50 refusals.
    Each takes the bound parameter ``crawl_id``."""
    in_crawl = Snapshot.crawl_id == bindparam("crawl_id")
    counted = [func.count().filter(Snapshot.status == status).label(str(status)) for status in Status]
    snapshot_counts = select(
        *counted,
        func.count().label("total"),
        func.count().filter(Snapshot.http_status >= 400).label("http_errors"),
        func.count().filter(Snapshot.http_status.is_(None), Snapshot.network_error != "").label("network_errors"),
        func.count()
        .filter(Snapshot.status == Status.SEALED, Snapshot.attempts > 0, Snapshot.indexed_at.is_(None))
        .label("pending"),
        func.count().filter(Snapshot.refusal != "").label("refused"),
    ).where(in_crawl)
    result_counts = (
        select(ArchiveResult.status, func.count())
        .join(Snapshot, Snapshot.id == ArchiveResult.snapshot_id)
        .where(in_crawl)
        .group_by(ArchiveResult.status)
    )
    refusals = select(Snapshot.refusal).where(in_crawl, Snapshot.refusal != "").limit(50)
    return snapshot_counts, result_counts, refusals
