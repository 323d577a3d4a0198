"""Saving from anywhere, server side: ArchiveBox's API calls, the extensions' CORS, ``/add``
prefilled by the bookmarklet and the share target, the web app manifest and service worker.

The browser halves (the extension clicked in Chromium, the bookmarklet and share target opened,
the installability check) are in ``tests/test_extension.py``.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from litestar.testing import TestClient
from sqlalchemy import select

from boxcar.ingest.api.auth import create_token
from boxcar.ingest.app import create_app
from boxcar.ingest.web import accounts
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, CrawlSeed
from boxcar.shared.settings import Settings

PASSWORD = "correct horse battery"
CSRF = re.compile(r'name="_csrf_token" value="([^"]+)"')


@pytest.fixture
def app_client(db: Database, tmp_path: Path):
    accounts.create_user(db, "alice", PASSWORD, role="admin")
    app = create_app(Settings(data_dir=tmp_path / "data", nats_url="nats://127.0.0.1:9"), db)
    with TestClient(app, base_url="http://boxcar.lan:8000") as c:
        yield c


def log_in(c: TestClient) -> None:
    token = CSRF.search(c.get("/login").text).group(1)
    response = c.post(
        "/login", data={"username": "alice", "password": PASSWORD, "_csrf_token": token}, follow_redirects=False
    )
    assert response.status_code == 303, response.text


def seeds_of(db: Database, crawl_id: str) -> list[CrawlSeed]:
    with db.read() as s:
        return list(s.scalars(select(CrawlSeed).where(CrawlSeed.crawl_id == crawl_id).order_by(CrawlSeed.position)))


# --------------------------------------------------------------------------- ArchiveBox's API


def test_archivebox_extension_requests_replayed(app_client, db):
    """The exact requests ArchiveBox's browser extension makes (ArchiveBox/archivebox-browser-extension
    at c3218e0, ``src/lib/archivebox.ts``): ``testServerUrl`` GET ``/api/`` (line 140),
    ``testApiKey`` POST ``/api/v1/auth/check_api_token`` with ``{token}`` (lines 164-170) and
    ``addToArchiveBox`` POST ``/api/v1/cli/add`` with the ``x-archivebox-api-key`` header and
    ``{urls, tag, formattedTags, depth, update, update_all}`` (lines 16-21, 70-82)."""
    token = create_token(db, "archivebox extension")
    assert app_client.get("/api/").status_code == 200
    check = app_client.post("/api/v1/auth/check_api_token", json={"token": token})
    assert check.status_code == 200 and check.json()["success"] is True and check.json()["user_id"]
    wrong = app_client.post("/api/v1/auth/check_api_token", json={"token": "bx_not-a-token"})
    assert wrong.status_code == 200 and wrong.json() == {"success": False, "user_id": None, "scope": None}

    body = {
        "urls": ["https://example.com/article?id=1"],
        "tag": "reading,later",
        "formattedTags": "reading,later",
        "depth": 0,
        "update": False,
        "update_all": False,
    }
    response = app_client.post(
        "/api/v1/cli/add",
        headers={"Content-Type": "application/json", "x-archivebox-api-key": token},
        content=json.dumps(body),
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["success"] is True and answer["errors"] == []
    crawl_id = answer["result"]["crawl_id"]
    assert answer["result"]["queued_urls"] == ["https://example.com/article?id=1"]
    with db.read() as s:
        crawl = s.get(Crawl, crawl_id)
        assert crawl is not None and crawl.tags_str == "reading,later" and crawl.max_depth == 0
    assert [x.url for x in seeds_of(db, crawl_id)] == ["https://example.com/article?id=1"]


def test_archivebox_add_shapes(app_client, db):
    """``urls`` as a newline string with text around URLs (``parser=auto``), ``tags`` as a list,
    the token in the body's ``api_key`` or as a Bearer token; one bad line drops nothing else."""
    token = create_token(db)
    text = "https://a.example/one\nnot a url at all\nsee https://b.example/two.\n"
    response = app_client.post("/api/v1/cli/add", json={"urls": text, "tags": ["x", "y"], "depth": 1, "api_key": token})
    assert response.status_code == 200, response.text
    result = response.json()["result"]
    assert result["queued_urls"] == ["https://a.example/one", "https://b.example/two"]
    with db.read() as s:
        crawl = s.get(Crawl, result["crawl_id"])
        assert crawl.tags_str == "x,y" and crawl.max_depth == 1
    bearer = app_client.post(
        "/api/v1/cli/add", json={"urls": ["https://c.example/"]}, headers={"Authorization": f"Bearer {token}"}
    )
    assert bearer.status_code == 200 and bearer.json()["result"]["num_snapshots"] == 1


def test_archivebox_add_refusals(app_client, db):
    """Every refusal says what is wrong: no token / a bad one 401, a token in the URL 401 saying
    why, a read-only token 403, no URL 422 naming ``urls``, what Boxcar cannot do 422 naming the
    field, a depth over the limit 400 naming ``depth``; and nothing is queued by any of them."""
    token, read_only = create_token(db), create_token(db, scope="read")
    url = {"urls": ["https://example.com/"]}
    assert app_client.post("/api/v1/cli/add", json=url).status_code == 401
    assert app_client.post("/api/v1/cli/add", json={**url, "api_key": "bx_wrong"}).status_code == 401
    in_query = app_client.post(f"/api/v1/cli/add?api_key={token}", json=url)
    assert in_query.status_code == 401 and "not in the URL" in in_query.json()["detail"]
    assert app_client.post("/api/v1/cli/add", json={**url, "api_key": read_only}).status_code == 403
    nothing = app_client.post("/api/v1/cli/add", json={"urls": "no links here", "api_key": token})
    assert nothing.status_code == 422 and nothing.json()["extra"]["field"] == "urls"
    index_only = app_client.post("/api/v1/cli/add", json={**url, "index_only": True, "api_key": token})
    assert index_only.status_code == 422 and index_only.json()["extra"]["field"] == "index_only"
    deep = app_client.post("/api/v1/cli/add", json={**url, "depth": 99, "api_key": token})
    assert deep.status_code == 400 and "depth" in deep.json()["detail"]
    plugin = app_client.post("/api/v1/cli/add", json={**url, "plugins": "no-such-plugin", "api_key": token})
    assert plugin.status_code == 422 and "no-such-plugin" in plugin.json()["detail"]
    with db.read() as s:
        assert s.scalar(select(Crawl.id)) is None


def test_archivebox_remove_exact(app_client, db):
    token = create_token(db)
    assert (
        app_client.post(
            "/api/v1/cli/remove", json={"filter_patterns": ["x"], "filter_type": "regex", "api_key": token}
        ).status_code
        == 422
    )
    done = app_client.post("/api/v1/cli/remove", json={"filter_patterns": ["https://none.example/"], "api_key": token})
    assert done.status_code == 200 and done.json()["result"] == {"removed": 0, "ids": []}
    assert app_client.post("/api/v1/cli/remove", json={"filter_patterns": ["https://none.example/"]}).status_code == 401


def test_snapshots_by_url(app_client, db):
    """``GET /api/v1/snapshots?url=`` (the extension's "archived before?") canonicalises like add."""
    token = create_token(db, scope="read")
    page = app_client.get(
        "/api/v1/snapshots", params={"url": "not a url"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert page.status_code == 200 and page.json() == {"total": 0, "items": []}


# --------------------------------------------------------------------------- extensions' CORS


def test_extension_origins_may_read_the_api_and_web_pages_may_not(app_client, db):
    token = create_token(db, scope="read")
    for origin in ("chrome-extension://abcdefghijklmnopabcdefghijklmnop", "moz-extension://0f3c-41d2-9a"):
        preflight = app_client.options(
            "/api/v1/crawls",
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert preflight.status_code == 204 and preflight.headers["access-control-allow-origin"] == origin
        assert "access-control-allow-credentials" not in preflight.headers  # tokens, never cookies
        read = app_client.get("/api/v1/snapshots", headers={"Origin": origin, "Authorization": f"Bearer {token}"})
        assert read.headers["access-control-allow-origin"] == origin
    for origin in ("https://evil.example", "null", "chrome-extension://x.evil.example:443/"):
        read = app_client.get("/api/v1/snapshots", headers={"Origin": origin, "Authorization": f"Bearer {token}"})
        assert "access-control-allow-origin" not in read.headers


# --------------------------------------------------------------------------- bookmarklet, share target


def test_add_is_prefilled_by_the_bookmarklet_and_the_share_target(app_client):
    assert app_client.get("/add", params={"url": "https://example.com/"}, follow_redirects=False).status_code == 303
    log_in(app_client)
    page = app_client.get("/add", params={"url": "https://example.com/a?b=1", "title": "An <b>article</b>"}).text
    assert ">https://example.com/a?b=1</textarea>" in page
    assert 'name="title" value="An &lt;b&gt;article&lt;/b&gt;"' in page
    # Android apps share "Title https://…" as text, with no url
    shared = app_client.get("/add", params={"title": "News", "text": "Look at this https://news.example/x!"}).text
    assert ">https://news.example/x</textarea>" in shared
    nothing = app_client.get("/add", params={"text": "no link in here"}).text
    assert "nothing to archive in what was shared" in nothing
    local = app_client.get("/add", params={"url": "chrome://settings", "title": "Settings"}).text
    assert "is not an http(s) URL" in local


def test_shared_title_becomes_the_seeds_title(app_client, db):
    log_in(app_client)
    form = app_client.get("/add", params={"url": "https://example.com/t", "title": "Shared title"}).text
    token = CSRF.search(form).group(1)
    response = app_client.post(
        "/add",
        data={"urls": "https://example.com/t", "title": "Shared title", "depth": "0", "_csrf_token": token},
        follow_redirects=False,
    )
    assert response.status_code == 303, response.text
    crawl_id = response.headers["location"].rsplit("/", 1)[1]
    assert [(x.url, x.title) for x in seeds_of(db, crawl_id)] == [("https://example.com/t", "Shared title")]


def test_settings_has_a_bookmarklet_for_this_origin(app_client):
    log_in(app_client)
    page = app_client.get("/settings").text
    href = re.search(r'id="bookmarklet" href="([^"]+)"', page).group(1)
    code = html.unescape(href)
    assert code.startswith("javascript:")
    assert '"http://boxcar.lan:8000/add?url="+encodeURIComponent(location.href)' in code


# --------------------------------------------------------------------------- installable app


def test_manifest_service_worker_and_favicon(app_client):
    manifest = app_client.get("/manifest.webmanifest")
    assert manifest.status_code == 200 and manifest.headers["content-type"].startswith("application/manifest+json")
    body = manifest.json()
    assert body["share_target"] == {
        "action": "/add",
        "method": "GET",
        "enctype": "application/x-www-form-urlencoded",
        "params": {"title": "title", "text": "text", "url": "url"},
    }
    assert body["display"] == "standalone" and body["start_url"] == "/"
    for icon in body["icons"]:
        assert app_client.get(icon["src"]).status_code == 200, icon
    worker = app_client.get("/sw.js")
    assert worker.status_code == 200 and "javascript" in worker.headers["content-type"]
    assert "/archive/" in worker.text  # archived content is named only to be left alone
    assert app_client.get("/favicon.ico").headers["content-type"] == "image/png"
    assert 'rel="manifest"' in app_client.get("/login").text
