"""The webhook API: the secret is shown once and kept sealed, the URL is checked against the
egress policy at creation, members make only their own webhooks (the access matrix in
``test_access.py`` covers who sees what)."""

from __future__ import annotations

from pathlib import Path

from litestar.testing import TestClient

from boxcar.ingest.api.auth import create_token
from boxcar.ingest.app import create_app
from boxcar.ingest.web import accounts
from boxcar.shared import secrets
from boxcar.shared.db import Database
from boxcar.shared.db.models import Webhook
from boxcar.shared.settings import Settings

RECEIVER = "http://127.0.0.1:9999/hook"  # loopback, and no port of the stack's


def client(db: Database, tmp_path: Path, **settings) -> TestClient:
    app = create_app(Settings(data_dir=tmp_path / "data", nats_url="nats://127.0.0.1:9", **settings), db)
    return TestClient(app, base_url="http://boxcar.lan")


def test_a_private_address_is_refused_unless_the_operator_allows_it(db: Database, tmp_path: Path):
    accounts.create_user(db, "alice", "correct horse battery")
    auth = {"Authorization": f"Bearer {create_token(db, 'script', owner='alice')}"}
    body = {"url": RECEIVER, "events": ["snapshot.sealed"]}
    with client(db, tmp_path) as c:
        refused = c.post("/api/v1/webhooks", json=body, headers=auth)
        assert refused.status_code == 422, refused.text
        assert "private" in refused.json()["detail"] and "URL_ALLOW_PRIVATE" in refused.json()["detail"]
        assert c.get("/api/v1/webhooks", headers=auth).json() == []
    with client(db, tmp_path, url_allow_private=True) as c:
        made = c.post("/api/v1/webhooks", json=body, headers=auth)
        assert made.status_code == 201, made.text
        secret, hook = made.json()["secret"], made.json()["webhook"]
        assert len(secret) >= 40 and hook["owner"] == "alice" and hook["scope"] == "user"
        listed = c.get("/api/v1/webhooks", headers=auth)
        assert [h["id"] for h in listed.json()] == [hook["id"]] and secret not in listed.text
        with db.read() as s:
            sealed = s.get(Webhook, hook["id"]).secret_sealed
        assert secret not in sealed and secrets.unseal(sealed) == secret
        # the stack's own services are never a webhook, even with private addresses allowed
        own = c.post("/api/v1/webhooks", json={**body, "url": "http://127.0.0.1:9/"}, headers=auth)
        assert own.status_code == 422 and "Boxcar's own services" in own.json()["detail"]
        assert c.get(f"/api/v1/webhooks/{hook['id']}/deliveries", headers=auth).json() == []
        assert c.delete(f"/api/v1/webhooks/{hook['id']}", headers=auth).status_code == 204
        assert c.get("/api/v1/webhooks", headers=auth).json() == []


def test_bad_webhooks_are_refused_saying_why(db: Database, tmp_path: Path):
    accounts.create_user(db, "alice", "correct horse battery")
    auth = {"Authorization": f"Bearer {create_token(db, 'script', owner='alice')}"}
    with client(db, tmp_path, url_allow_private=True) as c:
        for body, field in (
            ({"url": RECEIVER, "events": ["snapshot.exploded"]}, "events"),
            ({"url": RECEIVER, "events": ["crawl.sealed"], "scope": "instance"}, "scope"),
            ({"url": "ftp://example.com/", "events": ["crawl.sealed"]}, "url"),
        ):
            r = c.post("/api/v1/webhooks", json=body, headers=auth)
            assert r.status_code == 422 and r.json()["extra"]["field"] == field, r.text
        assert c.post("/api/v1/webhooks", json={"url": RECEIVER, "events": []}, headers=auth).status_code == 400


def test_the_settings_page_makes_lists_and_deletes_webhooks(db: Database, tmp_path: Path):
    """/settings: a webhook made with the form shows its secret once, is listed with its last
    deliveries (status, attempts, error), and is deleted with its button; a refused URL says why."""
    import re

    from boxcar.shared.db.models import WebhookDelivery

    accounts.create_user(db, "alice", "correct horse battery")
    with client(db, tmp_path, url_allow_private=True) as c:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get("/login").text).group(1)
        form = {"username": "alice", "password": "correct horse battery", "_csrf_token": token, "next": "/"}
        assert c.post("/login", data=form, follow_redirects=False).status_code == 303
        csrf = re.search(r'name="_csrf_token" value="([^"]+)"', c.get("/settings").text).group(1)
        made = c.post(
            "/settings/webhooks",
            data={"url": RECEIVER, "events": ["crawl.sealed", "crawl.failed"], "_csrf_token": csrf},
        )
        assert made.status_code == 201 and 'id="new-webhook-secret"' in made.text
        with db.read() as s:
            hook = s.query(Webhook).one()
        secret = re.search(r"store it now\): <code>([^<]+)</code>", made.text).group(1)
        assert secrets.unseal(hook.secret_sealed) == secret and hook.events == ["crawl.sealed", "crawl.failed"]
        with db.write() as s:
            s.add(
                WebhookDelivery(
                    id="e" * 32,
                    webhook_id=hook.id,
                    event="crawl.sealed",
                    event_key="k",
                    status="failed",
                    attempts=6,
                    last_error="ConnectError: connection refused",
                )
            )
        page = c.get("/settings").text
        assert RECEIVER in page and "ConnectError: connection refused" in page and "6 attempts" in page
        assert secret not in page  # shown once
        refused = c.post(
            "/settings/webhooks", data={"url": "http://127.0.0.1:9/", "events": ["crawl.sealed"], "_csrf_token": csrf}
        )
        assert refused.status_code == 422 and "Boxcar&#39;s own services" in refused.text
        gone = c.post(f"/settings/webhooks/{hook.id}/delete", data={"_csrf_token": csrf}, follow_redirects=False)
        assert gone.status_code == 303
        with db.read() as s:
            assert s.query(Webhook).count() == 0 and s.query(WebhookDelivery).count() == 0  # the log with it
