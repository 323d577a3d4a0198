"""Ingest's domain logic: validating and creating crawls, reading their progress."""

from __future__ import annotations

from sqlalchemy import func, select

from boxcar.ingest.schemas import CrawlCreate, CrawlStatus, ResultOut, SeedIn, SnapshotOut, SnapshotPage
from boxcar.shared import storage, telemetry
from boxcar.shared.db import Database
from boxcar.shared.db.models import (
    QUEUED,
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
from boxcar.shared.ids import new_id
from boxcar.shared.plugins import PluginCatalog
from boxcar.shared.settings import Settings
from boxcar.shared.urls import InvalidURL, canonicalize


class InputError(ValueError):
    """Bad input; ``field`` names where (``urls[3]``, ``plugins``), ``str()`` says what is wrong."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


def clean_tags(tags: list[str]) -> list[str]:
    """Trimmed, de-duplicated tag names (order kept). A tag is never split into letters."""
    if isinstance(tags, str):  # defensive: a bare string is one tag, not a list of characters
        tags = [tags]
    return list(dict.fromkeys(t.strip()[:100] for t in tags if t and t.strip()))


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

    def create_crawl(self, body: CrawlCreate) -> Crawl:
        """Validate and store a new queued crawl (due now).

        Raises:
            InputError: an invalid URL (named with its index) or plugin.
        """
        seeds, seen = [], set()
        for i, item in enumerate(body.urls):
            seed = item if isinstance(item, SeedIn) else SeedIn(url=item)
            try:
                url = canonicalize(seed.url)
            except InvalidURL as exc:
                raise InputError(f"urls[{i}]", f"{exc.reason}: {seed.url[:300]}") from None
            if url in seen:
                continue
            seen.add(url)
            entry = {"url": url, "tags": clean_tags(seed.tags)}
            if seed.title:
                entry["title"] = seed.title.strip()[:512]
            if seed.bookmarked_at:
                entry["bookmarked_at"] = seed.bookmarked_at.isoformat()
            seeds.append(entry)
        plugins = self.validate_plugins(body.plugins) if body.plugins else []
        now = utcnow()
        crawl_id = new_id()
        with telemetry.tracer("boxcar.ingest").start_as_current_span("crawl") as span:
            span.set_attribute("boxcar.crawl_id", crawl_id)
            crawl = Crawl(
                id=crawl_id,
                created_at=now,
                modified_at=now,
                created_by=self.settings.archive_user,
                status=QUEUED,
                retry_at=now,
                seeds=seeds,
                max_depth=body.max_depth,
                tags_str=",".join(clean_tags(body.tags)),
                plugins=plugins,
                config={k: str(v) for k, v in body.config.items()},
                label=body.label[:256],
                output_dir=storage.crawl_dir(self.settings.archive_user, now, seeds[0]["url"], crawl_id),
                trace_context=telemetry.current_carrier(),
            )
            with self.db.write() as s:
                s.add(crawl)
        return crawl

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
