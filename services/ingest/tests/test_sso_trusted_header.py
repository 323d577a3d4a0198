"""Trusted-header single sign-on: a ``Remote-User`` (or ``X-Forwarded-User``) header logs the web UI
in only when the request's TCP peer is in ``TRUSTED_PROXIES``.

The app runs under Boxcar's own uvicorn server (``server.server``) on 127.0.0.1, so the peer is
real: ``TRUSTED_PROXIES=127.0.0.1/32`` trusts this test, ``10.0.0.0/8`` does not (and an
``X-Forwarded-For`` naming a 10.x address does not make it so). On SQLite and Postgres.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sqlalchemy import select, update

from boxcar.cli.stack import free_port
from boxcar.ingest import server as server_module
from boxcar.ingest.app import create_app
from boxcar.ingest.web import accounts
from boxcar.shared.db import Database
from boxcar.shared.db.models import User
from boxcar.shared.settings import Settings
from tests.helpers import wait_until

PASSWORD = "correct horse battery"


@contextlib.contextmanager
def serve(db: Database, data_dir: Path, **settings) -> Iterator[httpx.Client]:
    """Ingest with these settings on a free 127.0.0.1 port; yields a client of it (no redirects
    followed)."""
    app = create_app(Settings(data_dir=data_dir, nats_url="nats://127.0.0.1:9", **settings), db)
    port = free_port()
    http = server_module.server(app, "127.0.0.1", port, handle_signals=False)
    thread = threading.Thread(target=http.run, daemon=True)
    thread.start()
    try:
        wait_until(lambda: http.started or not thread.is_alive(), 20, "the server to start", interval=0.02)
        assert http.started, "the server did not start"
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", follow_redirects=False, timeout=10) as client:
            yield client
    finally:
        http.should_exit = True
        thread.join(20)


@pytest.fixture
def users(db: Database) -> Database:
    """alice (active) and bob (disabled), both with passwords."""
    accounts.create_user(db, "alice", PASSWORD)
    accounts.create_user(db, "bob", PASSWORD)
    with db.write() as s:
        s.execute(update(User).where(User.username == "bob").values(is_active=False))
    return db


def logged_in_as(response: httpx.Response) -> str | None:
    """The user name the page shows in its header, or None when it redirected to the login."""
    if response.status_code == 303:
        assert response.headers["location"].startswith("/login"), response.headers
        return None
    assert response.status_code == 200, response.text[:300]
    for name in ("alice", "bob", "carol"):
        if f"<span>{name}</span>" in response.text:
            return name
    return ""


def test_only_a_trusted_peer_s_header_logs_in(users: Database, tmp_path: Path):
    with serve(users, tmp_path / "data", trusted_proxies="127.0.0.1/32") as client:
        assert logged_in_as(client.get("/", headers={"Remote-User": "alice"})) == "alice"
        assert logged_in_as(client.get("/add", headers={"remote-user": "alice"})) == "alice"  # any page guard
        assert logged_in_as(client.get("/")) is None  # no header: anonymous
        assert logged_in_as(client.get("/", headers={"Remote-User": "bob"})) is None  # disabled
        assert logged_in_as(client.get("/", headers={"Remote-User": "carol"})) is None  # unknown, no creation
        assert logged_in_as(client.get("/", headers={"Remote-User": "al ice"})) is None  # not a user name
        assert logged_in_as(client.get("/", headers={"X-Forwarded-User": "alice"})) is None  # not the header set
    with users.read() as s:
        assert s.scalar(select(User.id).where(User.username == "carol")) is None

    # the same requests from a peer outside TRUSTED_PROXIES: the header is ignored entirely
    with serve(users, tmp_path / "data", trusted_proxies="10.0.0.0/8") as client:
        assert logged_in_as(client.get("/", headers={"Remote-User": "alice"})) is None
        # uvicorn would take the client address from X-Forwarded-For (from loopback); the rule
        # judges the TCP peer, which is still 127.0.0.1
        spoofed = {"Remote-User": "alice", "X-Forwarded-For": "10.1.2.3"}
        assert logged_in_as(client.get("/", headers=spoofed)) is None
        # a session cookie still works as ever
        csrf = client.get("/login").cookies.get("csrftoken")
        token = client.get("/login").text.split('name="_csrf_token" value="')[1].split('"')[0]
        login = client.post(
            "/login",
            data={"username": "alice", "password": PASSWORD, "_csrf_token": token, "next": "/"},
            cookies={"csrftoken": csrf} if csrf else None,
        )
        assert login.status_code == 303, login.text[:300]
        assert logged_in_as(client.get("/", headers={"Remote-User": "bob"})) == "alice"

    # the feature off (the default): the header means nothing even from loopback
    with serve(users, tmp_path / "data") as client:
        assert logged_in_as(client.get("/", headers={"Remote-User": "alice"})) is None


def test_a_trusted_header_creates_the_user_only_when_enabled(users: Database, tmp_path: Path):
    with serve(
        users,
        tmp_path / "data",
        trusted_proxies="::1, 127.0.0.0/8",
        trusted_user_header="X-Forwarded-User",
        trusted_header_create_users=True,
    ) as client:
        assert logged_in_as(client.get("/", headers={"Remote-User": "carol"})) is None  # not the header set
        assert logged_in_as(client.get("/", headers={"X-Forwarded-User": "carol"})) == "carol"
        assert logged_in_as(client.get("/", headers={"X-Forwarded-User": "carol"})) == "carol"  # the same user
        assert logged_in_as(client.get("/", headers={"X-Forwarded-User": "bob"})) is None  # still disabled
    with users.read() as s:
        carol = s.scalars(select(User).where(User.username == "carol")).all()
    assert len(carol) == 1 and carol[0].is_active
    assert carol[0].password_hash.startswith(accounts.UNUSABLE_PASSWORD_PREFIX)
    # no password logs carol in: her hash is one Argon2 always refuses
    assert accounts.authenticate(users, "carol", carol[0].password_hash) is None
    assert accounts.authenticate(users, "carol", "") is None


@pytest.mark.parametrize(
    ("proxies", "peer", "header", "expected"),
    [
        ([], "127.0.0.1", "alice", None),  # off by default
        (["127.0.0.1/32"], "127.0.0.1", "alice", "alice"),
        (["127.0.0.1/32"], "127.0.0.2", "alice", None),
        (["10.0.0.0/8"], "10.200.3.4", "alice", "alice"),
        (["10.0.0.0/8"], "::ffff:10.200.3.4", "alice", "alice"),  # IPv4-mapped peer on a dual-stack socket
        (["10.0.0.0/8"], "fd00::1", "alice", None),
        (["fd00::/8"], "fd00::1", "alice", "alice"),
        (["10.0.0.5"], "10.0.0.5", "alice", "alice"),  # a bare address is a /32
        (["10.0.0.0/8"], "testclient", "alice", None),  # no address at all
        (["10.0.0.0/8"], None, "alice", None),
        (["10.0.0.0/8"], "10.0.0.1", "", None),
        (["10.0.0.0/8"], "10.0.0.1", "../etc", None),
        (["10.0.0.0/8"], "10.0.0.1", "x" * 65, None),
        (["10.0.0.0/8"], "10.0.0.1", " alice ", "alice"),
    ],
)
def test_the_rule(proxies, peer, header, expected):
    settings = Settings(trusted_proxies=proxies)
    assert accounts.trusted_header_user(settings, peer, httpx.Headers({"Remote-User": header})) == expected


def test_trusted_proxies_must_be_addresses():
    with pytest.raises(ValueError, match="TRUSTED_PROXIES"):
        Settings(trusted_proxies="10.0.0.0/8,proxy.lan")
