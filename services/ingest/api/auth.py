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
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException
from litestar.handlers.base import BaseRouteHandler
from sqlalchemy import select

from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import ApiToken
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


def create_token(db: Database, name: str = "", scope: str = "write") -> str:
    """Create a token and return it (the only time it exists in clear).

    Raises:
        ValueError: ``scope`` is not one of ``SCOPES``.
    """
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with db.write() as s:
        s.add(ApiToken(id=new_id(), name=name[:128], token_sha256=token_sha256(token), prefix=token[:10], scope=scope))
    return token


def token_scope(db: Database, token: str) -> str | None:
    """The scope of a known, unrevoked, unexpired token (``write``/``read``); None otherwise."""
    if not token or len(token) > 256:
        return None
    digest = token_sha256(token)
    with db.read() as s:
        row = s.scalar(select(ApiToken).where(ApiToken.token_sha256 == digest))
    valid = bool(
        row
        and hmac.compare_digest(row.token_sha256, digest)
        and not row.revoked
        and (row.expires_at is None or row.expires_at > utcnow())
    )
    return row.scope if valid else None


def list_tokens(db: Database) -> list[ApiToken]:
    """Every API token (its hash and prefix, never the token), newest first."""
    with db.read() as s:
        return list(s.scalars(select(ApiToken).order_by(ApiToken.created_at.desc())))


def revoke_token(db: Database, token_id: str) -> bool:
    """Revoke a token at once (its next request gets a 401); False when there is no such token."""
    with db.write() as s:
        row = s.get(ApiToken, token_id)
        if row is None:
            return False
        row.revoked = True
    return True


def token_is_valid(db: Database, token: str) -> bool:
    """True for a known, unrevoked, unexpired token of any scope."""
    return token_scope(db, token) is not None


def token_from_headers(headers) -> str:
    """The token a request carries: ``Authorization: Bearer``, else ``X-Boxcar-Api-Key``, else
    ``X-ArchiveBox-API-Key``; "" when none."""
    auth = headers.get("authorization", "")
    if auth[:7].lower() == "bearer ":
        return str(auth[7:].strip())
    return str(headers.get(API_KEY_HEADER.lower(), "") or headers.get(ARCHIVEBOX_KEY_HEADER.lower(), "")).strip()


def ensure_local_token(db: Database, path: Path, name: str = "boxcar CLI (local)") -> str:
    """The token the CLI uses for a stack on this data dir: read from ``path`` (mode 0600) if it is
    still valid, else created and written there."""
    try:
        token = path.read_text().strip()
        if token_is_valid(db, token):
            return token
    except OSError:
        pass
    token = create_token(db, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(token + "\n")
    return token


async def _scope(connection: ASGIConnection) -> str:
    token = token_from_headers(connection.headers)
    scope = await anyio.to_thread.run_sync(token_scope, connection.app.state.db, token)
    if scope is None:
        raise NotAuthorizedException(UNAUTHORIZED, headers={"WWW-Authenticate": "Bearer"})
    return scope


async def require_token(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Guard for writes: a valid ``write`` token, else 401 (no valid token) or 403 (a read-only one)."""
    if await _scope(connection) != "write":
        raise PermissionDeniedException("this API token is read-only")


async def require_read_access(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Guard for reads: a valid ``read`` or ``write`` token (a ``feed`` token is a 403), unless
    ``app.state.public_reads``."""
    if not connection.app.state.public_reads and await _scope(connection) == "feed":
        raise PermissionDeniedException("a feed token reads only the RSS/Atom exports")
