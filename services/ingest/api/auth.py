"""API tokens: created by ``boxcar token create``, stored as sha256, checked by a Litestar guard.

Every write endpoint requires a token with the ``write`` scope, sent as ``Authorization: Bearer
<token>``, ``X-Boxcar-Api-Key: <token>`` or ArchiveBox's ``X-ArchiveBox-API-Key: <token>``; a
``read`` token (``boxcar token create --read-only``) serves reads only (403 on a write). Reads
require a token unless ``PUBLIC_READS=true``. A missing, unknown, revoked or expired token all get
the same 401, so a caller learns nothing about which.
Tokens are 256-bit random strings, so a plain sha256 is a safe way to store them (no password
hashing needed) and lets the guard look one up with a single indexed query.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from pathlib import Path

import anyio.to_thread
from litestar import Request
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, NotFoundException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler
from sqlalchemy import select

from boxcar.ingest.access import ANONYMOUS, Viewer, operator
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import ApiToken, User
from boxcar.shared.ids import new_id

TOKEN_PREFIX = "bx_"
API_KEY_HEADER = "X-Boxcar-Api-Key"
#: ArchiveBox's header (``archivebox/api/auth.py``), for its browser extension and scripts
ARCHIVEBOX_KEY_HEADER = "X-ArchiveBox-API-Key"
UNAUTHORIZED = "missing or invalid API token"


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


#: ``write`` everything, ``read`` the GET endpoints, ``feed`` only the RSS/Atom exports (it is sent in
#: a feed URL, since feed readers send no headers: the least a leaked URL can give away)
SCOPES = ("write", "read", "feed")


def create_token(db: Database, name: str = "", scope: str = "write", owner: str = "system") -> str:
    """Create a token acting for ``owner`` (a user name, or ``ARCHIVE_USER`` for the operator's)
    and return it (the only time it exists in clear).

    Raises:
        ValueError: ``scope`` is not one of ``SCOPES``.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with db.write() as s:
        s.add(
            ApiToken(
                id=new_id(),
                name=name[:128],
                token_sha256=token_sha256(token),
                prefix=token[:10],
                scope=scope,
                owner=owner,
            )
        )
    return token


def token_viewer(db: Database, token: str, operator_name: str = "system") -> tuple[str, Viewer] | None:
    """The scope (``write``/``read``/``feed``) of a known, unrevoked, unexpired token and who it
    acts for: its owner with their role (``operator_name``, ``ARCHIVE_USER``, acts as an admin
    when no user of that name exists); None for any other token, or one whose owner is disabled
    or gone."""
    if not token or len(token) > 256:
        return None
    digest = token_sha256(token)
    with db.read() as s:
        row = s.scalar(select(ApiToken).where(ApiToken.token_sha256 == digest))
        user = s.scalar(select(User).where(User.username == row.owner)) if row else None
    valid = bool(
        row
        and hmac.compare_digest(row.token_sha256, digest)
        and not row.revoked
        and (row.expires_at is None or row.expires_at > utcnow())
    )
    if not valid or row is None:
        return None
    if row.owner == operator_name:  # the operator's token, whatever users exist
        return row.scope, operator(row.owner)
    if user is not None:
        if not user.is_active:
            return None
        return row.scope, Viewer(user_id=user.id, username=user.username, role=user.role)
    return None


def token_scope(db: Database, token: str) -> str | None:
    """The scope of a valid token (``token_viewer``), None otherwise."""
    found = token_viewer(db, token)
    return found[0] if found else None


def list_tokens(db: Database, viewer: Viewer | None = None) -> list[ApiToken]:
    """The API tokens ``viewer`` owns (every token for an admin or ``None``: the CLI), with their
    hash and prefix, never the token; newest first."""
    query = select(ApiToken).order_by(ApiToken.created_at.desc())
    if viewer is not None and not viewer.is_admin:
        query = query.where(ApiToken.owner == viewer.username)
    with db.read() as s:
        return list(s.scalars(query))


def revoke_token(db: Database, token_id: str, viewer: Viewer | None = None) -> bool:
    """Revoke a token at once (its next request gets a 401); False when there is no such token
    (or it is not ``viewer``'s to revoke)."""
    with db.write() as s:
        row = s.get(ApiToken, token_id)
        if row is None or (viewer is not None and not viewer.is_admin and row.owner != viewer.username):
            return False
        row.revoked = True
    return True


def token_is_valid(db: Database, token: str, operator_name: str = "system") -> bool:
    """True for a valid token of any scope (``token_viewer``)."""
    return token_viewer(db, token, operator_name) is not None


def token_from_headers(headers) -> str:
    """The token a request carries: ``Authorization: Bearer``, else ``X-Boxcar-Api-Key``, else
    ``X-ArchiveBox-API-Key``; "" when none."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return str(auth[7:].strip())
    return str(headers.get(API_KEY_HEADER.lower(), "") or headers.get(ARCHIVEBOX_KEY_HEADER.lower(), "")).strip()


def ensure_local_token(db: Database, path: Path, name: str = "boxcar CLI (local)", owner: str = "system") -> str:
    """The token the CLI uses for a stack on this data dir, acting for ``owner`` (``ARCHIVE_USER``):
    read from ``path`` (mode 0600) if it is still valid, else created and written there."""
    try:
        token = path.read_text().strip()
        if token_is_valid(db, token, owner):
            return token
    except OSError:
        pass
    token = create_token(db, name, owner=owner)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(token + "\n")
    return token


async def _scope(connection: ASGIConnection) -> str:
    """The token's scope; its ``Viewer`` is kept for the request (``request_viewer``)."""
    token = token_from_headers(connection.headers)
    state = connection.app.state
    found = await anyio.to_thread.run_sync(token_viewer, state.db, token, state.settings.archive_user)
    if found is None:
        raise NotAuthorizedException(UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
    connection.scope["boxcar_viewer"] = found[1]  # type: ignore[typeddict-unknown-key]
    return found[0]


def request_viewer(request: Request) -> Viewer:
    """Who an API request acts for (the dependency ``viewer``): the token's owner once a guard
    checked it, else nobody (a ``PUBLIC_READS`` read without a token)."""
    return request.scope.get("boxcar_viewer") or ANONYMOUS  # type: ignore[return-value]


async def require_token(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Guard for writes: a valid ``write`` token, else 401 (no valid token) or 403 (a read-only one)."""
    if await _scope(connection) != "write":
        raise PermissionDeniedException("this API token is read-only")


async def require_read_access(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Guard for reads: a valid ``read`` or ``write`` token (a ``feed`` token is a 403); without
    any token, ``app.state.public_reads`` lets the request in as nobody (it reads what
    ``access.readable_snapshots`` gives nobody)."""
    if connection.app.state.public_reads and not token_from_headers(connection.headers):
        return
    if await _scope(connection) == "feed":
        raise PermissionDeniedException("a feed token reads only the RSS/Atom exports")


async def require_admin_token(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Guard of the operator's endpoints (stack status): a token of an admin, else 401/404."""
    await _scope(connection)
    if not request_viewer(connection).is_admin:  # type: ignore[arg-type]
        raise NotFoundException("Not Found")
