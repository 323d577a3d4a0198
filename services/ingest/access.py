"""Who may read and change what: the one home of ingest's access rules (issue 28).

Every Crawl, Snapshot, feed subscription, URL schedule and API token belongs to a user name
(``Crawl.created_by``, ``CrawlSchedule.created_by``, ``ApiToken.owner``; a snapshot belongs to its
crawl's owner, and is stored under ``archive/users/<owner>/`` as ArchiveBox 0.9 lays it out).
A caller is a ``Viewer``: a logged-in user, an API token's owner, or nobody.

- an ``admin`` reads and changes everything; ``ARCHIVE_USER`` (``system`` by default, the
  operator's CLI and its local token) acts as an admin;
- a ``member`` reads their own snapshots and what others shared with every user of the instance
  (``Share`` rows: one snapshot, a tag of theirs, or their whole archive), and changes only their own;
- anybody reads what a public link they opened shares (``Viewer.share_ids``), and with
  ``PUBLIC_READS=true`` the archives of admins ("the admin made these public").

``readable_snapshots`` is the filter every list, search, feed, export, page, file and API answer
applies; what a caller may not read answers 404, exactly as if it did not exist.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy import ColumnElement, and_, false, or_, select, true, update
from sqlalchemy.orm import aliased

from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import (
    SHARE_AUDIENCES,
    SHARE_KINDS,
    Crawl,
    CrawlSchedule,
    Share,
    Snapshot,
    SnapshotTag,
    Tag,
    User,
)
from boxcar.shared.ids import new_id

#: the cookie holding the public-link tokens a browser opened (each the bearer of one share)
SHARES_COOKIE = "boxcar_shares"
#: public links one browser keeps at most (the oldest are dropped)
MAX_OPEN_SHARES = 20


@dataclass(frozen=True)
class Viewer:
    """Who is calling: a user (``username`` and ``role``), an API token's owner, or nobody.

    ``share_ids`` are the public-link shares this caller opened (any caller may hold some).
    """

    user_id: str = ""
    username: str = ""
    #: ``admin`` or ``member``; "" for nobody
    role: str = ""
    #: the snapshot list's layout this person chose (``User.list_view``)
    list_view: str = "list"
    share_ids: tuple[str, ...] = ()

    @property
    def logged_in(self) -> bool:
        return bool(self.username)

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


ANONYMOUS = Viewer()


def operator(username: str) -> Viewer:
    """The operator (``ARCHIVE_USER``: the CLI, the local token) as a caller: an admin."""
    return Viewer(username=username, role="admin")


class AccessError(ValueError):
    """A share that can't be made; ``str()`` says why."""


def _live_shares(*where: ColumnElement[bool]):
    """Shares not revoked whose owner is not a disabled user (a disabled user's shares pause)."""
    disabled = select(User.username).where(User.is_active.is_(False))
    return select(Share).where(Share.revoked_at.is_(None), Share.owner.not_in(disabled), *where).subquery()


def _shared_by(shares) -> list[ColumnElement[bool]]:
    """Conditions on ``Snapshot``: a snapshot, tag or archive share among ``shares`` covers it."""
    owner_crawl = aliased(Crawl)
    tagged = aliased(Snapshot)
    return [
        Snapshot.id.in_(select(shares.c.target).where(shares.c.kind == "snapshot")),
        Snapshot.crawl_id.in_(
            select(Crawl.id).where(Crawl.created_by.in_(select(shares.c.owner).where(shares.c.kind == "archive")))
        ),
        Snapshot.id.in_(
            select(SnapshotTag.snapshot_id)
            .join(Tag, Tag.id == SnapshotTag.tag_id)
            .join(shares, and_(shares.c.kind == "tag", shares.c.target == Tag.name))
            .join(tagged, tagged.id == SnapshotTag.snapshot_id)
            .join(owner_crawl, owner_crawl.id == tagged.crawl_id)
            .where(owner_crawl.created_by == shares.c.owner)
        ),
    ]


def _owned_by(*names: str) -> ColumnElement[bool]:
    return Snapshot.crawl_id.in_(select(Crawl.id).where(Crawl.created_by.in_(names)))


def readable_snapshots(
    viewer: Viewer, public_reads: bool = False, operator_name: str = "system"
) -> ColumnElement[bool]:
    """The condition on ``Snapshot`` rows ``viewer`` may read (see the module's rules).

    Args:
        public_reads: ``PUBLIC_READS``: admins' archives (and ``operator_name``'s) are public.
        operator_name: ``ARCHIVE_USER``.
    """
    if viewer.is_admin:
        return true()
    clauses: list[ColumnElement[bool]] = []
    if viewer.logged_in:
        clauses.append(_owned_by(viewer.username))
        clauses += _shared_by(_live_shares(Share.audience == "users"))
    if viewer.share_ids:
        clauses += _shared_by(_live_shares(Share.id.in_(viewer.share_ids)))
    if public_reads:
        admins = select(User.username).where(User.role == "admin", User.is_active.is_(True))
        clauses.append(
            Snapshot.crawl_id.in_(
                select(Crawl.id).where(or_(Crawl.created_by.in_(admins), Crawl.created_by == operator_name))
            )
        )
    return or_(*clauses) if clauses else false()


def writable_snapshots(viewer: Viewer) -> ColumnElement[bool]:
    """The condition on ``Snapshot`` rows ``viewer`` may change (tag, delete, archive again): an
    admin's all, a member's their own, nobody's none."""
    if viewer.is_admin:
        return true()
    return _owned_by(viewer.username) if viewer.logged_in else false()


def own_crawls(viewer: Viewer) -> ColumnElement[bool]:
    """The condition on ``Crawl`` rows ``viewer`` may see and control: a crawl is its owner's
    (and the admins'); shares cover snapshots, never crawls."""
    if viewer.is_admin:
        return true()
    return Crawl.created_by == viewer.username if viewer.logged_in else false()


def own_schedules(viewer: Viewer) -> ColumnElement[bool]:
    """The condition on ``CrawlSchedule`` rows (feeds, URL schedules) ``viewer`` may see and change."""
    if viewer.is_admin:
        return true()
    return CrawlSchedule.created_by == viewer.username if viewer.logged_in else false()


def owner_of(viewer: Viewer, operator_name: str) -> str:
    """The user name new crawls, feeds and schedules of ``viewer`` belong to.

    Raises:
        AccessError: nobody is calling (nothing can be owned by nobody).
    """
    if not viewer.logged_in:
        raise AccessError("log in first")
    return viewer.username or operator_name


# ----------------------------------------------------------------------------- shares


@dataclass(frozen=True)
class ShareInfo:
    """A share as its owner sees it; ``token`` only right after a public link was made."""

    id: str
    kind: str
    target: str
    audience: str
    created_at: str
    token: str = ""


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_share(db: Database, viewer: Viewer, kind: str, target: str, audience: str) -> ShareInfo:
    """Share ``viewer``'s snapshot (``target`` its id), tag (its name) or archive (``target`` "")
    with every user (``audience="users"``) or by a public link (``"public"``: the returned
    ``token`` is the link's secret, 256 random bits, shown once).

    Raises:
        AccessError: an unknown kind or audience, or a snapshot that is not the viewer's (which
            reads exactly like one that does not exist).
    """
    if kind not in SHARE_KINDS or audience not in SHARE_AUDIENCES:
        raise AccessError(f"share a {'/'.join(SHARE_KINDS)} with {' or '.join(SHARE_AUDIENCES)}")
    if not viewer.logged_in:
        raise AccessError("log in first")
    target = "" if kind == "archive" else target.strip()[:128]
    with db.write() as s:
        if kind == "snapshot":
            found = s.scalar(select(Snapshot.id).where(Snapshot.id == target, _owned_by(viewer.username)))
            if not found:
                raise AccessError(f"no snapshot {target}")
        elif kind == "tag":  # only a tag on one of the viewer's snapshots (never: does anyone have it?)
            mine = select(Snapshot.id).where(_owned_by(viewer.username))
            tagged = select(SnapshotTag.tag_id).where(SnapshotTag.snapshot_id.in_(mine))
            if not s.scalar(select(Tag.id).where(Tag.name == target, Tag.id.in_(tagged))):
                raise AccessError(f"none of your snapshots is tagged {target!r}")
        token = secrets.token_urlsafe(32) if audience == "public" else ""
        row = Share(
            id=new_id(),
            owner=viewer.username,
            kind=kind,
            target=target,
            audience=audience,
            token_sha256=_sha256(token) if token else None,
            created_at=utcnow(),
        )
        s.add(row)
    return ShareInfo(row.id, kind, target, audience, row.created_at.isoformat(), token)


def list_shares(db: Database, viewer: Viewer) -> list[ShareInfo]:
    """``viewer``'s live shares, newest first (an admin's: everyone's)."""
    where = [Share.revoked_at.is_(None)]
    if not viewer.is_admin:
        where.append(Share.owner == viewer.username)
    with db.read() as s:
        rows = s.scalars(select(Share).where(*where).order_by(Share.created_at.desc()))
        return [ShareInfo(r.id, r.kind, r.target, r.audience, r.created_at.isoformat()) for r in rows]


def revoke_share(db: Database, viewer: Viewer, share_id: str) -> bool:
    """Revoke one of ``viewer``'s shares (an admin: anyone's) at once; False when there is none."""
    guard = [Share.id == share_id, Share.revoked_at.is_(None)]
    if not viewer.is_admin:
        guard.append(Share.owner == viewer.username)
    with db.write() as s:
        return bool(s.execute(update(Share).where(*guard).values(revoked_at=utcnow())).rowcount)


def open_public_share(db: Database, token: str) -> Share | None:
    """The live public share whose link holds ``token``, else None."""
    if not token or len(token) > 100:
        return None
    with db.read() as s:
        row = s.scalar(
            select(Share).where(
                Share.token_sha256 == _sha256(token), Share.audience == "public", Share.revoked_at.is_(None)
            )
        )
        if row is not None:
            s.expunge(row)
        return row


def live_share_ids(db: Database, tokens: list[str]) -> tuple[str, ...]:
    """The ids of the live public shares among the link tokens a browser holds."""
    digests = [_sha256(t) for t in tokens[:MAX_OPEN_SHARES] if t and len(t) <= 100]
    if not digests:
        return ()
    with db.read() as s:
        return tuple(
            s.scalars(
                select(Share.id).where(
                    Share.token_sha256.in_(digests), Share.audience == "public", Share.revoked_at.is_(None)
                )
            )
        )
