"""Accounts of the web UI: users with Argon2id password hashes, and login sessions.

``boxcar user create NAME`` makes a user (password prompted); ``/login`` checks the password
(argon2-cffi, rehashing when its parameters were raised) and starts a session: the browser gets
a random 256-bit token in an HttpOnly, SameSite=Lax cookie (Secure when the request came over
TLS), the database keeps only its sha256 (a copied database holds no usable session). A new
token is made at every login (no session fixation); ``/logout`` deletes the row. Sessions last
``SESSION_MAX_AGE`` seconds from their last use. API tokens (``auth``) are a separate thing for
scripts: the JSON API never accepts a session cookie, so a page can't use one to drive it.

Guessing passwords is throttled the way django-axes and Authelia's regulation do it, in the
database so every ingest replica counts the same failures: ``MAX_ACCOUNT_FAILURES`` wrong logins
for one account name, or ``MAX_CLIENT_FAILURES`` from one client address, within
``FAILURE_WINDOW`` lock that name or address out for ``LOCKOUT`` (doubling for each lock-out in a
row, at most ``MAX_LOCKOUT``); a locked-out login is refused without checking the password (a
429 with ``Retry-After``), a success clears the account's count. Unknown names are counted like
real ones and every refusal reads the same, so the answers never tell which accounts exist.
Each failure and lock-out is logged with the name and address.

Single sign-on (README "Single sign-on") adds two more ways in, both ending in the same users:
behind an authenticating reverse proxy (Authelia, Authentik, oauth2-proxy) a request from a peer
in ``TRUSTED_PROXIES`` is that of the user its ``TRUSTED_USER_HEADER`` names
(``trusted_header_user``: the one place that rule lives; ``viewer_of`` applies it to every
request), and OpenID Connect logins (``web/sso.py``) start an ordinary session. Users they create
(``provision_user``) have an unusable password hash, so only single sign-on logs them in.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError
from litestar.connection import ASGIConnection
from litestar.exceptions import NotAuthorizedException
from litestar.handlers.base import BaseRouteHandler
from litestar.response import Response
from sqlalchemy import delete, func, select, update
from sqlalchemy.exc import IntegrityError

from boxcar.ingest.access import ANONYMOUS, MAX_OPEN_SHARES, SHARES_COOKIE, Viewer, live_share_ids
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database, insert_for
from boxcar.shared.db.models import (
    LIST_VIEWS,
    ROLES,
    ApiToken,
    Crawl,
    CrawlSchedule,
    LoginThrottle,
    Share,
    Snapshot,
    User,
    UserSession,
    Webhook,
)
from boxcar.shared.ids import new_id

if TYPE_CHECKING:
    from sqlalchemy import Row
    from sqlalchemy.orm import Session

    from boxcar.shared.settings import Settings

log = logging.getLogger("boxcar.ingest.web.accounts")

SESSION_COOKIE = "boxcar_session"
MAX_ACCOUNT_FAILURES = 5
MAX_CLIENT_FAILURES = 20
FAILURE_WINDOW = timedelta(minutes=15)
LOCKOUT = timedelta(minutes=1)
MAX_LOCKOUT = timedelta(hours=1)
#: where the server keeps the TCP peer ``(host, port)`` before proxy headers rewrite the client
#: (``server.RecordPeer``)
PEER_SCOPE_KEY = "boxcar_peer"
USERNAME = re.compile(r"^[A-Za-z0-9_.@-]{1,64}$")
_hasher = PasswordHasher()  # Argon2id with argon2-cffi's current (RFC 9106 low-memory) parameters


@functools.cache
def _dummy_hash() -> str:
    """An Argon2 hash of a random password, checked against when a user name is unknown, so a
    login takes as long either way. Made on the first such login, not at import: one hash costs
    about 130 ms of CPU and 64 MiB for a moment, and every process that imports the API (the
    one-process stack a ``boxcar add`` starts, each test worker) paid it at start. So the first
    login with an unknown name in a process takes one hash longer than later ones: it tells that
    one name was unknown, once per process start."""
    return _hasher.hash(secrets.token_hex(16))


#: the first character of the password hash of users single sign-on created: no Argon2 hash starts
#: with it, so ``authenticate`` (argon2's verify: ``InvalidHashError``) never accepts a password
UNUSABLE_PASSWORD_PREFIX = "!"


def unusable_password() -> str:
    """A password hash no password matches (``UNUSABLE_PASSWORD_PREFIX`` and random text): for users
    only single sign-on logs in."""
    return UNUSABLE_PASSWORD_PREFIX + secrets.token_hex(16)


class AccountError(ValueError):
    """A user name or password that can't be used; ``str()`` says why."""


def _sha256(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def create_user(db: Database, username: str, password: str, role: str = "member", operator_name: str = "system") -> str:
    """Create a user (``role`` ``admin`` or ``member``); returns its id.

    Raises:
        AccountError: a bad or taken user name (taken in another letter case too: ``root`` and
            ``Root`` would look alike in every list, share and log), the operator's name
            (``reserved_name``), an unknown role, or a password shorter than 8 characters.
    """
    if role not in ROLES:
        raise AccountError(f"role must be one of {', '.join(ROLES)}")
    if not USERNAME.match(username):
        raise AccountError("user names are 1–64 letters, digits or . _ @ -")
    if reserved_name(username, operator_name):
        raise AccountError(f"{username!r} is the operator's name (ARCHIVE_USER): choose another")
    if len(password) < 8:
        raise AccountError("passwords need at least 8 characters")
    with db.write() as s:
        if s.scalar(select(User.id).where(User.username == username)):
            raise AccountError(f"user {username!r} exists already")
        if other := _same_name_other_case(s, username):
            raise AccountError(f"user {other!r} exists already: names must differ by more than letter case")
        user_id = new_id()
        s.add(User(id=user_id, username=username, password_hash=_hasher.hash(password), created_at=utcnow(), role=role))
    return user_id


def reserved_name(username: str, operator_name: str) -> bool:
    """Whether ``username`` is the operator's (``ARCHIVE_USER``, any case): the CLI's and the local
    token's rows are owned by that name, so no person may have it (they would own the operator's
    whole archive)."""
    return username.lower() == operator_name.lower()


def provision_user(db: Database, username: str, operator_name: str = "system") -> str:
    """The id of the user named ``username``, created if there is none: an active user whose
    password hash is unusable (``UNUSABLE_PASSWORD_PREFIX``), so only single sign-on logs them in
    (until ``boxcar user password`` gives them one). A user found is returned as it is,
    disabled or not: callers check ``is_active``. Two first visits at once make one user.

    Raises:
        AccountError: ``username`` is not a valid user name (``USERNAME``), or the operator's; or
            a user has that name in another letter case (``_same_name_other_case``).
    """
    if not USERNAME.match(username):
        raise AccountError("user names are 1–64 letters, digits or . _ @ -")
    if reserved_name(username, operator_name):
        raise AccountError(f"{username!r} is the operator's name (ARCHIVE_USER)")
    with db.read() as s:
        found = s.scalar(select(User.id).where(User.username == username))
        other = None if found else _same_name_other_case(s, username)
    if found:
        return found
    if other:  # refused without a write (a proxy sending this name does on every request)
        raise AccountError(f"user {other!r} exists: names must differ by more than letter case")
    user_id = _insert_passwordless_user(db, username)
    if user_id is None:  # made at the same moment by another request or replica (or a look-alike)
        with db.read() as s:
            found = s.scalar(select(User.id).where(User.username == username))
        if not found:
            raise AccountError(
                f"user {username!r} was not created: its name, or one differing in case only, was taken meanwhile"
            )
        return found
    log.info("created user %r on their first single sign-on", username)
    return user_id


def _insert_passwordless_user(
    db: Database, username: str, issuer: str | None = None, subject: str | None = None
) -> str | None:
    """Insert an active user ``username`` whose password hash is ``unusable_password()``, bound to
    the provider account ``(issuer, subject)`` when given; its id, or None when the name (or the
    account) was taken, meanwhile or before (the unique indexes: ``IntegrityError`` caught), or a
    user has the name in another letter case (``_same_name_other_case``)."""
    user_id = new_id()
    try:
        with db.write() as s:
            if _same_name_other_case(s, username):
                return None
            s.add(
                User(
                    id=user_id,
                    username=username,
                    password_hash=unusable_password(),
                    created_at=utcnow(),
                    oidc_issuer=issuer,
                    oidc_subject=subject,
                )
            )
    except IntegrityError:
        return None
    return user_id


def _same_name_other_case(s: Session, username: str) -> str | None:
    """The name of a user whose name is ``username`` in other letter case (``Root`` for ``root``),
    or None. Such a pair is refused when a user is created: they would look alike in every list,
    share and log line. Checked in the creating transaction, not by a unique index on the lower-cased
    name: on Postgres two creations of look-alikes at the very same moment can both pass (names
    are created by an admin, or by a first sign-in, one at a time in practice)."""
    return s.scalar(
        select(User.username).where(func.lower(User.username) == username.lower(), User.username != username).limit(1)
    )


def named_user_id(db: Database, username: str, create: bool, operator_name: str = "system") -> str | None:
    """The id of the *active* user ``username`` (the trusted-header login: the proxy vouches for the
    name), created first when ``create`` and missing (``provision_user``); None for an invalid
    name, the operator's name (``reserved_name``), an unknown one (``create`` off) or a disabled user."""
    if not USERNAME.match(username) or reserved_name(username, operator_name):
        return None
    if create:
        try:
            provision_user(db, username, operator_name)
        except AccountError as exc:
            log.warning("trusted-header login as %r refused: %s", username, exc)
            return None
    with db.read() as s:
        row = s.execute(select(User.id, User.is_active).where(User.username == username)).first()
    if row is None or not row.is_active:
        return None
    return row.id


#: what the login page says when a single sign-on finds no user it may log in: one sentence for
#: every reason (the log has the reason), so the page tells nobody which names exist here
SSO_NO_USER = "This single sign-on account may not sign in to any Boxcar user here. Ask an operator."


def sso_user_id(
    db: Database,
    username: str,
    create: bool,
    operator_name: str = "system",
    *,
    issuer: str,
    subject: str,
    link_existing: bool = False,
) -> str | None:
    """The id of the *active* user a single sign-on of the provider account ``(issuer, subject)``
    logs in:

    1. the user bound to that account (by an earlier sign-in), whatever the provider calls it now;
    2. else, when ``link_existing`` (``OIDC_LINK_EXISTING_USERS``), the active user named
       ``username`` if it is bound to no provider account: bound now;
    3. else, when ``create`` (``OIDC_CREATE_USERS``) and no user has that name, in any letter
       case (``_same_name_other_case``), a new user bound to it (``UNUSABLE_PASSWORD_PREFIX``: only
       single sign-on logs them in).

    Users are bound because OpenID Connect Core §5.7 says ``preferred_username`` and the like are
    neither unique nor stable, and only ``iss`` with ``sub`` identify a person (§2). Matched by
    name, whoever could choose a name at the provider signed in as the Boxcar user of that name,
    an admin included; so an existing user is never bound by name unless the operator says so.

    Args:
        username: the name the provider gives (``OIDC_USERNAME_CLAIM``); "" when it gave none
            usable (a bound user still signs in).
        issuer: the configured issuer (``OIDC_ISSUER`` without a trailing slash), which the ID
            token's ``iss`` was verified against.
        subject: the ID token's ``sub``.

    Returns:
        The user's id; None when no user may be logged in: a disabled one, an invalid name or the
        operator's (``reserved_name``), no such user, a user of that name this account may not
        have (another's, or an existing one without ``link_existing``), or one whose name differs
        only in letter case (linking needs the exact name). Each is logged; the
        login page says ``SSO_NO_USER`` for all of them.
    """
    found = _sso_bound_user(db, issuer, subject)
    if found is None and USERNAME.match(username) and not reserved_name(username, operator_name):
        if link_existing and _bind_sso_subject(db, username, issuer, subject):
            log.info("single sign-on: existing user %r bound to %s's account %r", username, issuer, subject)
        elif create and _create_sso_user(db, username, issuer, subject):
            log.info("single sign-on: user %r created for %s's account %r", username, issuer, subject)
        # bound or created here, or by a sign-in of the same account at the same moment
        found = _sso_bound_user(db, issuer, subject)
    if found is None:
        other = None
        if USERNAME.match(username):
            with db.read() as s:
                other = _same_name_other_case(s, username)
        if other:
            why = f"user {other!r} has that name in other letter case (names must differ by more than that)"
        else:
            why = (
                f"no such user{'' if create else ' (OIDC_CREATE_USERS off)'}, or the name is the operator's, "
                f"another account's user, or an existing user (OIDC_LINK_EXISTING_USERS={link_existing})"
            )
        log.warning(
            "single sign-on: %s's account %r (user name %r) may have no user here: %s", issuer, subject, username, why
        )
        return None
    if not found.is_active:
        log.warning("single sign-on: %s's account %r is disabled user %r", issuer, subject, found.username)
        return None
    return found.id


def _sso_bound_user(db: Database, issuer: str, subject: str) -> Row[tuple[str, str, bool]] | None:
    """The user row (``id``, ``username``, ``is_active``) bound to ``(issuer, subject)``, or None."""
    with db.read() as s:
        return s.execute(
            select(User.id, User.username, User.is_active).where(
                User.oidc_issuer == issuer, User.oidc_subject == subject
            )
        ).first()


def _bind_sso_subject(db: Database, username: str, issuer: str, subject: str) -> bool:
    """Bind the existing user ``username`` to the provider account ``(issuer, subject)``
    (``OIDC_LINK_EXISTING_USERS``); True when bound here.

    Guard: only an active user bound to no provider account. Two first sign-ins at once under one
    name: one binds, the other's update finds the user bound; the unique index on the pair keeps
    one account to one user.
    """
    try:
        with db.write() as s:
            done = s.execute(
                update(User)
                .where(User.username == username, User.oidc_subject.is_(None), User.is_active.is_(True))
                .values(oidc_issuer=issuer, oidc_subject=subject)
            )
    except IntegrityError:  # that account was bound to another user meanwhile
        return False
    return bool(done.rowcount)


def _create_sso_user(db: Database, username: str, issuer: str, subject: str) -> bool:
    """Create the user ``username`` bound to ``(issuer, subject)``, with an unusable password;
    True when created here, False when the name (in any letter case) or the account was taken."""
    return _insert_passwordless_user(db, username, issuer, subject) is not None


def unbind_sso(db: Database, username: str) -> bool:
    """Forget the provider account ``username`` is bound to (``boxcar user unlink``). A later
    single sign-on binds them only as ``sso_user_id`` says (``OIDC_LINK_EXISTING_USERS``). False
    when there is no such user."""
    with db.write() as s:
        done = s.execute(update(User).where(User.username == username).values(oidc_issuer=None, oidc_subject=None))
    return bool(done.rowcount)


def set_password(db: Database, username: str, password: str) -> bool:
    """Change a user's password and end their sessions; False when there is no such user.

    Raises:
        AccountError: a password shorter than 8 characters.
    """
    if len(password) < 8:
        raise AccountError("passwords need at least 8 characters")
    with db.write() as s:
        user = s.scalar(select(User).where(User.username == username))
        if user is None:
            return False
        user.password_hash = _hasher.hash(password)
        s.execute(delete(UserSession).where(UserSession.user_id == user.id))
    return True


def list_users(db: Database) -> list[User]:
    with db.read() as s:
        return list(s.scalars(select(User).order_by(User.username)))


def authenticate(db: Database, username: str, password: str) -> str | None:
    """The user's id when the password is right (and the account active); None otherwise."""
    with db.read() as s:
        user = s.scalar(select(User).where(User.username == username[:64]))
    try:
        _hasher.verify(user.password_hash if user else _dummy_hash(), password)
    except (VerificationError, InvalidHashError):
        return None
    if user is None or not user.is_active:
        return None
    if _hasher.check_needs_rehash(user.password_hash):
        with db.write() as s:
            s.execute(update(User).where(User.id == user.id).values(password_hash=_hasher.hash(password)))
    return user.id


def _throttle_keys(username: str, client: str) -> list[tuple[str, int]]:
    return [(f"account:{username[:64].lower()}", MAX_ACCOUNT_FAILURES), (f"client:{client[:120]}", MAX_CLIENT_FAILURES)]


def login_locked(db: Database, username: str, client: str) -> float:
    """Seconds until ``username`` may try again from ``client`` (0.0: it may try now)."""
    now = utcnow()
    keys = [key for key, _ in _throttle_keys(username, client)]
    with db.read() as s:
        until = [t for t in s.scalars(select(LoginThrottle.locked_until).where(LoginThrottle.key.in_(keys))) if t]
    return max([(t - now).total_seconds() for t in until] + [0.0])


def record_login_failure(db: Database, username: str, client: str) -> float:
    """Count a wrong login against the account name and the client address; returns the seconds
    of a lock-out it started (0.0 when none)."""
    now = utcnow()
    locked = 0.0
    with db.write() as s:
        for key, limit in _throttle_keys(username, client):
            insert = insert_for(s)
            s.execute(
                insert(LoginThrottle)
                .values(key=key, failures=0, window_started_at=now, lockouts=0)
                .on_conflict_do_nothing(index_elements=["key"])
            )
            row = s.scalar(select(LoginThrottle).where(LoginThrottle.key == key).with_for_update())
            if now - row.window_started_at > FAILURE_WINDOW:
                row.failures, row.window_started_at = 0, now
                if row.locked_until is None or row.locked_until < now - FAILURE_WINDOW:
                    row.lockouts = 0  # a quiet window forgives earlier lock-outs
            row.failures += 1
            if row.failures >= limit:
                duration = min(MAX_LOCKOUT, LOCKOUT * 2**row.lockouts)
                row.locked_until, row.failures, row.window_started_at = now + duration, 0, now
                row.lockouts += 1
                locked = max(locked, duration.total_seconds())
                log.warning("login %s locked out for %ds after %d failed logins", key, duration.total_seconds(), limit)
    log.warning("failed login for %r from %s", username[:64], client)
    return locked


def clear_login_failures(db: Database, username: str) -> None:
    """A successful login: the account's failures are forgotten (the client's are not)."""
    key = _throttle_keys(username, "")[0][0]
    with db.write() as s:
        s.execute(delete(LoginThrottle).where(LoginThrottle.key == key))


def retry_after(seconds: float) -> str:
    """Whole seconds for a ``Retry-After`` header (at least 1)."""
    return str(max(1, int(seconds + 0.999)))


def start_session(db: Database, user_id: str, max_age: int) -> str:
    """A new session for the user; returns the token for the cookie (never stored)."""
    token = secrets.token_urlsafe(32)
    now = utcnow()
    with db.write() as s:
        s.add(
            UserSession(
                token_sha256=_sha256(token),
                user_id=user_id,
                created_at=now,
                last_seen_at=now,
                expires_at=now + timedelta(seconds=max_age),
            )
        )
        s.execute(update(User).where(User.id == user_id).values(last_login_at=now))
        s.execute(delete(UserSession).where(UserSession.expires_at < now))  # tidy up expired ones
    return token


def set_session_cookie(response: Response, token: str, max_age: int, secure: bool) -> None:
    """Give the browser its session: the cookie every login (password or single sign-on) sets,
    HttpOnly, SameSite=Lax, ``Secure`` when the request came over TLS."""
    response.set_cookie(SESSION_COOKIE, token, max_age=max_age, httponly=True, samesite="lax", secure=secure, path="/")


def session_viewer(db: Database, token: str, max_age: int) -> Viewer:
    """The user of a live session token (its expiry pushed forward at most once a minute), else
    ``ANONYMOUS``."""
    if not token or len(token) > 100:
        return ANONYMOUS
    now = utcnow()
    digest = _sha256(token)
    with db.read() as s:
        row = s.execute(
            select(UserSession.last_seen_at, User.id, User.username, User.list_view, User.role)
            .join(User, User.id == UserSession.user_id)
            .where(UserSession.token_sha256 == digest, UserSession.expires_at > now, User.is_active.is_(True))
        ).first()
    if row is None:
        return ANONYMOUS
    last_seen, user_id, username, list_view, role = row
    if now - last_seen > timedelta(seconds=60):
        with db.write() as s:
            s.execute(
                update(UserSession)
                .where(UserSession.token_sha256 == digest)
                .values(last_seen_at=now, expires_at=now + timedelta(seconds=max_age))
            )
    return Viewer(user_id=user_id, username=username, list_view=list_view, role=role)


def set_list_view(db: Database, user_id: str, view: str) -> None:
    """Remember a person's snapshot-list layout (``LIST_VIEWS``).

    Raises:
        ValueError: ``view`` is not one of ``LIST_VIEWS``.
    """
    if view not in LIST_VIEWS:
        raise ValueError(f"view must be one of {', '.join(LIST_VIEWS)}")
    with db.write() as s:
        s.execute(update(User).where(User.id == user_id).values(list_view=view))


def end_session(db: Database, token: str) -> None:
    """Log a session out (idempotent)."""
    if token:
        with db.write() as s:
            s.execute(delete(UserSession).where(UserSession.token_sha256 == _sha256(token)))


def opened_share_tokens(cookie: str) -> list[str]:
    """The public-link tokens kept in the ``SHARES_COOKIE`` value (newest last)."""
    return [t for t in cookie.split(".") if t][-MAX_OPEN_SHARES:]


@functools.cache
def _networks(proxies: tuple[str, ...]) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(p, strict=False) for p in proxies)


def trusted_header_user(settings: Settings, client_host: str | None, headers: Mapping[str, str]) -> str | None:
    """The user name an authenticating reverse proxy vouches for, or None.

    The rule, in this one place: the header ``TRUSTED_USER_HEADER`` counts only when the request's
    TCP peer (``client_host``, never a forwarded-for header) is inside ``TRUSTED_PROXIES``; from
    any other peer, or with the setting empty, it is ignored entirely. An IPv4-mapped IPv6 peer
    (``::ffff:10.0.0.5``) is compared as its IPv4 address. A name that is not a valid user name
    (``USERNAME``) is None too. Whether the user exists and is active is ``named_user_id``'s to say.

    Args:
        settings: ``trusted_proxies`` (validated CIDRs) and ``trusted_user_header``.
        client_host: the peer address as the server saw it (``request.client.host``), or None.
        headers: the request's headers (case-insensitive, as Litestar's are).
    """
    if not settings.trusted_proxies or not client_host:
        return None
    try:
        peer = ipaddress.ip_address(client_host)
    except ValueError:  # a unix socket's peer, or the test client's "testclient"
        return None
    if isinstance(peer, ipaddress.IPv6Address) and peer.ipv4_mapped is not None:
        peer = peer.ipv4_mapped
    if not any(peer in net for net in _networks(tuple(settings.trusted_proxies)) if net.version == peer.version):
        return None
    name = (
        headers.get(settings.trusted_user_header) or headers.get(settings.trusted_user_header.lower()) or ""
    ).strip()
    return name if USERNAME.match(name) else None


def header_viewer(db: Database, username: str, create: bool, operator_name: str = "system") -> Viewer:
    """The ``Viewer`` of a user the trusted proxy named (``trusted_header_user``): created first
    when ``create`` (``TRUSTED_HEADER_CREATE_USERS``), else ``ANONYMOUS`` when unknown, disabled
    or the operator's name."""
    user_id = named_user_id(db, username, create, operator_name)
    if user_id is None:
        return ANONYMOUS
    with db.read() as s:
        row = s.execute(select(User.username, User.list_view, User.role).where(User.id == user_id)).first()
    if row is None:
        return ANONYMOUS
    return Viewer(user_id=user_id, username=row.username, list_view=row.list_view, role=row.role)


async def viewer_of(connection: ASGIConnection) -> Viewer:
    """The request's viewer, looked up once per request: the user a trusted proxy's header names
    when the request came from one (``trusted_header_user``, judged on the TCP peer the server
    recorded, ``PEER_SCOPE_KEY``, else the client address; then that header alone decides, a
    session cookie is not consulted), else the session cookie's user, else ``ANONYMOUS``; with
    the public links the browser opened (``SHARES_COOKIE``) in ``share_ids``. API paths never read
    cookies or the proxy's header: their viewer comes from the API token (``api.auth``), and is
    anonymous without one."""
    import anyio.to_thread

    cached = connection.scope.get("boxcar_viewer")
    if cached is None:
        if connection.url.path.startswith("/api/"):
            return ANONYMOUS
        state = connection.app.state
        settings = state.settings
        peer = connection.scope.get(PEER_SCOPE_KEY) or connection.scope.get("client")  # type: ignore[call-overload]
        client = str(peer[0]) if peer else None
        proxied = trusted_header_user(settings, client, connection.headers)
        if proxied is None and settings.trusted_proxies and connection.headers.get(settings.trusted_user_header):
            log.debug("ignored %s from untrusted or invalid source %s", settings.trusted_user_header, client)
        if proxied is not None:
            cached = await anyio.to_thread.run_sync(
                header_viewer, state.db, proxied, settings.trusted_header_create_users, settings.archive_user
            )
        else:
            cached = await anyio.to_thread.run_sync(
                session_viewer, state.db, connection.cookies.get(SESSION_COOKIE, ""), settings.session_max_age
            )
        tokens = opened_share_tokens(connection.cookies.get(SHARES_COOKIE, ""))
        if tokens:
            shares = await anyio.to_thread.run_sync(live_share_ids, state.db, tokens)
            cached = replace(cached, share_ids=shares)
        connection.scope["boxcar_viewer"] = cached
    return cached


class LoginRequired(NotAuthorizedException):
    """No session: a page GET is redirected to ``/login``, anything else gets a 401."""


async def require_login(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Guard of pages and forms that change the archive (add, delete, settings)."""
    if not (await viewer_of(connection)).logged_in:
        raise LoginRequired("log in first")


async def require_viewer(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Guard of pages that only show the archive: a session, a public link opened, or
    ``PUBLIC_READS=true`` (what each may read is ``access.readable_snapshots``' to say)."""
    if not connection.app.state.public_reads and not (await viewer_of(connection)).share_ids:
        await require_login(connection, _)


async def require_admin(connection: ASGIConnection, _: BaseRouteHandler) -> None:
    """Guard of the admin's pages (users, status): a member gets a 404, as for a page that is not."""
    viewer = await viewer_of(connection)
    if not viewer.logged_in:
        raise LoginRequired("log in first")
    if not viewer.is_admin:
        from litestar.exceptions import NotFoundException

        raise NotFoundException("Not Found")


# ----------------------------------------------------------------------------- admin: users (issue 28)


def set_active(db: Database, username: str, active: bool) -> bool:
    """Enable or disable a user; a disabled user's sessions end and their API tokens stop working
    (their archive stays). False when there is no such user."""
    with db.write() as s:
        user = s.scalar(select(User).where(User.username == username))
        if user is None:
            return False
        user.is_active = active
        if not active:
            s.execute(delete(UserSession).where(UserSession.user_id == user.id))
    return True


def set_role(db: Database, username: str, role: str) -> bool:
    """Make a user an ``admin`` or a ``member``; False when there is no such user.

    Raises:
        AccountError: an unknown role.
    """
    if role not in ROLES:
        raise AccountError(f"role must be one of {', '.join(ROLES)}")
    with db.write() as s:
        return bool(s.execute(update(User).where(User.username == username).values(role=role)).rowcount)


def removed_owner(username: str) -> str:
    """The owner name a removed user's kept crawls get: ``~`` and their name, which ``USERNAME``
    never matches, so the rows stay with the admins and no later user of that name inherits them."""
    return ("~" + username)[:64]


#: what becomes of a removed user's snapshots (``remove_user``): asked, never assumed
REMOVAL_CHOICES = ("keep", "reassign", "delete")


@dataclass(frozen=True)
class Removal:
    """What removing a user did: snapshots kept (still under their name, admins see them),
    reassigned (to ``to``) or deleted; feeds/schedules, tokens and shares ended."""

    username: str
    snapshots: int
    choice: str
    to: str = ""


def remove_user(db: Database, username: str, snapshots: str, to: str = "", delete_snapshot=None) -> Removal | None:
    """Remove a user. Their sessions, API tokens and shares end at once; their snapshots are, as
    ``snapshots`` says: ``keep`` (kept for the admins under ``removed_owner(username)``, a name
    no user can have; files stay where they are), ``reassign`` (crawls, snapshots and schedules become ``to``'s;
    files stay where they are, ``ONLY_NEW``'s keys follow the new owner) or ``delete`` (each removed
    with ``delete_snapshot(snapshot_id)``, ``SnapshotLibrary.delete``: rows, search entry, files).

    Returns:
        What was done; None when there is no such user.

    Raises:
        AccountError: an unknown choice, ``reassign`` without an existing other user ``to``, or
            ``delete`` without ``delete_snapshot``.
    """
    from boxcar.shared.db.models import dedup_key

    if snapshots not in REMOVAL_CHOICES:
        raise AccountError(f"say what happens to the user's snapshots: {', '.join(REMOVAL_CHOICES)}")
    with db.write() as s:
        user = s.scalar(select(User).where(User.username == username))
        if user is None:
            return None
        if snapshots == "reassign" and (to == username or not s.scalar(select(User.id).where(User.username == to))):
            raise AccountError(f"reassign to another existing user (not {to!r})")
        if snapshots == "delete" and delete_snapshot is None:
            raise AccountError("deleting snapshots needs the archive")
        owned = select(Crawl.id).where(Crawl.created_by == username)
        ids = list(s.scalars(select(Snapshot.id).where(Snapshot.crawl_id.in_(owned))))
        s.execute(update(ApiToken).where(ApiToken.owner == username).values(revoked=True))
        s.execute(update(Share).where(Share.owner == username, Share.revoked_at.is_(None)).values(revoked_at=utcnow()))
        if snapshots == "reassign":
            keyed = s.execute(
                select(Snapshot.id, Snapshot.url_hash).where(
                    Snapshot.crawl_id.in_(owned), Snapshot.dedup_key.is_not(None)
                )
            ).all()
            taken = set(
                s.scalars(
                    select(Snapshot.dedup_key).where(
                        Snapshot.crawl_id.in_(select(Crawl.id).where(Crawl.created_by == to)),
                        Snapshot.dedup_key.is_not(None),
                    )
                )
            )
            for sid, hashed in keyed:
                key = dedup_key(to, hashed)
                s.execute(update(Snapshot).where(Snapshot.id == sid).values(dedup_key=None if key in taken else key))
                taken.add(key)
            s.execute(update(Crawl).where(Crawl.created_by == username).values(created_by=to))
            s.execute(update(CrawlSchedule).where(CrawlSchedule.created_by == username).values(created_by=to))
        else:
            s.execute(delete(CrawlSchedule).where(CrawlSchedule.created_by == username))
        if snapshots == "keep":  # no one who takes the name later may get them: a name no user can have
            s.execute(update(Crawl).where(Crawl.created_by == username).values(created_by=removed_owner(username)))
        s.execute(delete(Webhook).where(Webhook.owner == username))
        s.delete(user)
    if snapshots == "delete":
        for sid in ids:
            delete_snapshot(sid)
    log.warning("removed user %s (%d snapshots %s%s)", username, len(ids), snapshots, f" to {to}" if to else "")
    return Removal(username, len(ids), snapshots, to)
