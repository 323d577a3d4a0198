"""Per-user limits an admin sets (issue 28): snapshots per UTC day, bytes of archive, crawls
open at once. Checked when a crawl is created (``CrawlService.insert_crawl``: a crawl over a
limit is refused whole with a 429 that says which limit, nothing stored); the status page shows
every user's usage against them. Discovered links of a depth crawl are not counted ahead: a
crawl that was admitted runs to its end."""

from __future__ import annotations

import msgspec
from sqlalchemy import func, select, update

from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, Snapshot, Status, User


class QuotaExceeded(Exception):
    """A crawl over one of its owner's limits; ``str()`` says which."""


class LimitError(ValueError):
    """A limit that can't be set (negative)."""


class Usage(msgspec.Struct, frozen=True):
    """One user's use of the archive against their limits (None: no limit); ``/api/v1/status``
    lists them."""

    username: str
    role: str
    active: bool
    snapshots: int
    snapshots_today: int
    disk_bytes: int
    open_crawls: int
    max_snapshots_per_day: int | None
    max_disk_bytes: int | None
    max_concurrent_crawls: int | None


def set_limits(
    db: Database,
    username: str,
    snapshots_per_day: int | None = None,
    disk_bytes: int | None = None,
    concurrent_crawls: int | None = None,
) -> bool:
    """Set a user's limits (None lifts one); False when there is no such user.

    Raises:
        LimitError: a negative limit.
    """
    values = {
        "max_snapshots_per_day": snapshots_per_day,
        "max_disk_bytes": disk_bytes,
        "max_concurrent_crawls": concurrent_crawls,
    }
    if any(v is not None and v < 0 for v in values.values()):
        raise LimitError("limits are 0 or more")
    with db.write() as s:
        return bool(s.execute(update(User).where(User.username == username).values(**values)).rowcount)


def usage(db: Database, username: str | None = None) -> list[Usage]:
    """Every user's (or one user's) usage and limits, by user name."""
    today = utcnow().replace(hour=0, minute=0, second=0, microsecond=0)
    with db.read() as s:
        where = [User.username == username] if username else []
        users = list(s.scalars(select(User).where(*where).order_by(User.username)))
        names = [u.username for u in users]
        per_owner = dict.fromkeys(names, (0, 0, 0))
        for owner, count, today_count, size in s.execute(
            select(
                Crawl.created_by,
                func.count(Snapshot.id),
                func.count(Snapshot.id).filter(Snapshot.created_at >= today),
                func.coalesce(func.sum(Snapshot.output_size), 0),
            )
            .join(Crawl, Crawl.id == Snapshot.crawl_id)
            .where(Crawl.created_by.in_(names))
            .group_by(Crawl.created_by)
        ):
            per_owner[owner] = (count, today_count, int(size))
        open_crawls = dict(
            s.execute(
                select(Crawl.created_by, func.count())
                .where(Crawl.created_by.in_(names), Crawl.status != Status.SEALED)
                .group_by(Crawl.created_by)
            ).all()
        )
    return [
        Usage(
            u.username,
            u.role,
            u.is_active,
            *per_owner[u.username],
            open_crawls.get(u.username, 0),
            u.max_snapshots_per_day,
            u.max_disk_bytes,
            u.max_concurrent_crawls,
        )
        for u in users
    ]


def quota_refusal(db: Database, username: str, new_urls: int) -> str:
    """Why ``username`` may not start a crawl of ``new_urls`` URLs now ("" when they may): over
    their snapshots per day, their disk, or their concurrent crawls (an admin's limits). A user
    without limits costs one indexed read: usage is counted only when there is a limit."""
    with db.read() as s:
        limits = s.execute(
            select(User.max_snapshots_per_day, User.max_disk_bytes, User.max_concurrent_crawls).where(
                User.username == username
            )
        ).first()
    if limits is None or all(limit is None for limit in limits):
        return ""
    found = usage(db, username)
    if not found:
        return ""
    u = found[0]
    if u.max_concurrent_crawls is not None and u.open_crawls >= u.max_concurrent_crawls:
        return f"{username} has {u.open_crawls} crawls running, the limit is {u.max_concurrent_crawls}"
    if u.max_snapshots_per_day is not None and u.snapshots_today + new_urls > u.max_snapshots_per_day:
        left = max(0, u.max_snapshots_per_day - u.snapshots_today)
        return f"{username} may archive {left} more URLs today (limit {u.max_snapshots_per_day} a day), not {new_urls}"
    if u.max_disk_bytes is not None and u.disk_bytes >= u.max_disk_bytes:
        return f"{username}'s archive holds {u.disk_bytes} bytes, the limit is {u.max_disk_bytes}"
    return ""


def check_quota(db: Database, username: str, new_urls: int) -> None:
    """Raises ``QuotaExceeded`` (saying why) when ``quota_refusal`` refuses."""
    refusal = quota_refusal(db, username, new_urls)
    if refusal:
        raise QuotaExceeded(refusal)
