"""Feed subscriptions: CrawlSchedule rows with a ``feed_url`` (ingest creates and edits them; the
crawl-runner polls them and changes their status)."""

from __future__ import annotations

from sqlalchemy import func, select

from boxcar.ingest.access import Viewer, operator, own_schedules
from boxcar.ingest.api.schemas import FeedCreate, FeedOut, FeedUpdate, ScheduleCreate, ScheduleOut
from boxcar.ingest.services import CrawlService, InputError
from boxcar.shared.clock import utcnow
from boxcar.shared.db.models import QUEUED, Crawl, CrawlSchedule, FeedItem
from boxcar.shared.ids import new_id
from boxcar.shared.messages import Seed, clean_tags, clean_text
from boxcar.shared.schedules import cron_expression
from boxcar.shared.urls import InvalidURL


def validate_schedule(schedule: str) -> str:
    """The schedule as given, once croniter accepts it (directly or as an alias).

    Raises:
        InputError: names the field and lists the aliases.
    """
    try:
        cron_expression(schedule)
    except ValueError as exc:
        raise InputError("schedule", str(exc)) from None
    return schedule.strip()


def own_schedule(s, schedule_id: str, viewer: Viewer, *, feed: bool) -> CrawlSchedule | None:
    """The feed subscription (``feed``) or URL schedule ``schedule_id`` when it is ``viewer``'s."""
    kind = CrawlSchedule.feed_url.is_not(None) if feed else CrawlSchedule.feed_url.is_(None)
    return s.scalar(select(CrawlSchedule).where(CrawlSchedule.id == schedule_id, kind, own_schedules(viewer)))


class FeedService:
    """Create, read, edit and delete feed subscriptions."""

    def __init__(self, crawls: CrawlService) -> None:
        self.crawls = crawls
        self.db = crawls.db

    def create(self, body: FeedCreate, *, owner: str) -> FeedOut:
        """Store a subscription of ``owner`` (a user name), due for its first poll now.

        Raises:
            InputError: bad URL, schedule, plugins or config.
        """
        try:
            url = Seed.parse(body.url).url
        except InvalidURL as exc:
            raise InputError("url", f"{exc.reason}: {body.url[:300]}") from None
        self.crawls.crawl_config(body.config)  # refused keys and bad values are the user's to fix now
        template = {
            "tags": clean_tags(body.tags),
            "max_depth": body.max_depth,
            "plugins": self.crawls.validate_plugins(body.plugins) if body.plugins else [],
            "config": dict(body.config),
        }
        now = utcnow()
        schedule = CrawlSchedule(
            id=new_id(),
            created_at=now,
            modified_at=now,
            created_by=owner,
            schedule=validate_schedule(body.schedule),
            label=clean_text(body.label)[:256],
            is_enabled=True,
            status=QUEUED,
            retry_at=now,
            template=template,
            feed_url=url,
        )
        with self.db.write() as s:
            s.add(schedule)
        out = self.get(schedule.id, viewer=operator(owner))
        assert out is not None
        return out

    def get(self, schedule_id: str, *, viewer: Viewer) -> FeedOut | None:
        """One subscription of ``viewer``'s; None when there is none."""
        with self.db.read() as s:
            schedule = own_schedule(s, schedule_id, viewer, feed=True)
            return self._out(s, schedule) if schedule else None

    def list(self, *, viewer: Viewer) -> list[FeedOut]:
        """``viewer``'s subscriptions (an admin's: everyone's), oldest first."""
        with self.db.read() as s:
            rows = s.scalars(
                select(CrawlSchedule)
                .where(CrawlSchedule.feed_url.is_not(None), own_schedules(viewer))
                .order_by(CrawlSchedule.created_at)
            )
            return [self._out(s, r) for r in rows]

    def update(self, schedule_id: str, body: FeedUpdate, *, viewer: Viewer) -> FeedOut | None:
        """Change the subscription's settings (not its status: pause/resume go through the runner);
        None when ``viewer`` has no such subscription.

        Raises:
            InputError: bad schedule, plugins or config.
        """
        with self.db.write() as s:
            schedule = own_schedule(s, schedule_id, viewer, feed=True)
            if schedule is None:
                return None
            template = dict(schedule.template or {})
            if body.schedule is not None:
                schedule.schedule = validate_schedule(body.schedule)
            if body.tags is not None:
                template["tags"] = clean_tags(body.tags)
            if body.max_depth is not None:
                template["max_depth"] = body.max_depth
            if body.plugins is not None:
                template["plugins"] = self.crawls.validate_plugins(body.plugins) if body.plugins else []
            if body.config is not None:
                self.crawls.crawl_config(body.config)
                template["config"] = dict(body.config)
            if body.label is not None:
                schedule.label = clean_text(body.label)[:256]
            schedule.template = template
        return self.get(schedule_id, viewer=viewer)

    def delete(self, schedule_id: str, *, viewer: Viewer) -> bool:
        """Remove one of ``viewer``'s subscriptions (its crawls and snapshots stay)."""
        with self.db.write() as s:
            schedule = own_schedule(s, schedule_id, viewer, feed=True)
            if schedule is None:
                return False
            s.delete(schedule)
        return True

    @staticmethod
    def _out(s, schedule: CrawlSchedule) -> FeedOut:
        template = schedule.template or {}
        items = s.scalar(select(func.count()).select_from(FeedItem).where(FeedItem.schedule_id == schedule.id))
        crawls = s.scalar(select(func.count()).select_from(Crawl).where(Crawl.schedule_id == schedule.id))
        return FeedOut(
            id=schedule.id,
            url=schedule.feed_url,
            schedule=schedule.schedule,
            label=schedule.label,
            tags=list(template.get("tags") or []),
            max_depth=int(template.get("max_depth") or 0),
            plugins=list(template.get("plugins") or []),
            status=schedule.status,
            next_poll_at=schedule.retry_at if schedule.status == QUEUED else None,
            last_polled_at=schedule.last_polled_at,
            last_run_at=schedule.last_run_at,
            last_error=schedule.last_error,
            failures=schedule.failures,
            items_seen=items or 0,
            crawls=crawls or 0,
            created_at=schedule.created_at,
            items_rejected=schedule.items_rejected,
            last_rejection=schedule.last_rejection,
        )


class UrlScheduleService:
    """Scheduled re-archiving of URLs (ArchiveBox's ``archivebox schedule``): CrawlSchedule rows
    without a ``feed_url`` whose template holds the URLs. Each run is a new crawl of them with
    ``ONLY_NEW`` off, so every run makes new snapshots (the snapshot page then shows what changed).
    The crawl-runner runs them as it polls feeds; pause, resume and "run now" are the same control
    requests."""

    def __init__(self, crawls: CrawlService) -> None:
        self.crawls = crawls
        self.db = crawls.db

    def create(self, body: ScheduleCreate, *, owner: str) -> ScheduleOut:
        """Store a schedule of ``owner`` (a user name), due for its first run now.

        Raises:
            InputError: a bad URL (named by its index), schedule, plugins or config.
        """
        from boxcar.shared import secrets

        seeds = []
        for i, url in enumerate(body.urls):
            try:
                seed = Seed.parse(url, source=f"urls[{i}]", seal=secrets.seal)
            except InvalidURL as exc:
                raise InputError(f"urls[{i}]", f"{exc.reason}: {url[:300]}") from None
            seeds.append({"url": seed.url, "credentials": seed.credentials})
        self.crawls.crawl_config(body.config)
        try:
            every = validate_schedule(body.every)
        except InputError as exc:
            raise InputError("every", str(exc).split(": ", 1)[1]) from None
        template = {
            "urls": seeds,
            "tags": clean_tags(body.tags),
            "max_depth": body.max_depth,
            "plugins": self.crawls.validate_plugins(body.plugins) if body.plugins else [],
            "config": dict(body.config),
        }
        now = utcnow()
        schedule = CrawlSchedule(
            id=new_id(),
            created_at=now,
            modified_at=now,
            created_by=owner,
            schedule=every,
            label=clean_text(body.label)[:256],
            is_enabled=True,
            status=QUEUED,
            retry_at=now,
            template=template,
            feed_url=None,
        )
        with self.db.write() as s:
            s.add(schedule)
        out = self.get(schedule.id, viewer=operator(owner))
        assert out is not None
        return out

    def get(self, schedule_id: str, *, viewer: Viewer) -> ScheduleOut | None:
        """One schedule of ``viewer``'s; None when there is none."""
        with self.db.read() as s:
            schedule = own_schedule(s, schedule_id, viewer, feed=False)
            return self._out(s, schedule) if schedule else None

    def list(self, *, viewer: Viewer) -> list[ScheduleOut]:
        """``viewer``'s URL schedules (an admin's: everyone's), oldest first."""
        with self.db.read() as s:
            rows = s.scalars(
                select(CrawlSchedule)
                .where(CrawlSchedule.feed_url.is_(None), own_schedules(viewer))
                .order_by(CrawlSchedule.created_at)
            )
            return [self._out(s, r) for r in rows]

    def delete(self, schedule_id: str, *, viewer: Viewer) -> bool:
        """Remove one of ``viewer``'s schedules (its crawls and snapshots stay)."""
        with self.db.write() as s:
            schedule = own_schedule(s, schedule_id, viewer, feed=False)
            if schedule is None:
                return False
            s.delete(schedule)
        return True

    @staticmethod
    def _out(s, schedule: CrawlSchedule) -> ScheduleOut:
        template = schedule.template or {}
        crawls = s.scalar(select(func.count()).select_from(Crawl).where(Crawl.schedule_id == schedule.id))
        return ScheduleOut(
            id=schedule.id,
            urls=[u["url"] for u in template.get("urls") or []],
            every=schedule.schedule,
            label=schedule.label,
            tags=list(template.get("tags") or []),
            max_depth=int(template.get("max_depth") or 0),
            status=schedule.status,
            next_run_at=schedule.retry_at if schedule.status == QUEUED else None,
            last_run_at=schedule.last_run_at,
            last_error=schedule.last_error,
            runs=crawls or 0,
        )
