"""The ingest API against a real database (SQLite and Postgres): validation, status, OpenAPI."""

from __future__ import annotations

import pytest
from litestar.testing import TestClient
from sqlalchemy import select

from boxcar.ingest.api.auth import create_token
from boxcar.ingest.app import create_app
from boxcar.shared.db.models import Crawl, CrawlSeed
from boxcar.shared.settings import Settings


@pytest.fixture
def client(db, tmp_path, monkeypatch):
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:1")  # no NATS: the API must still work
    token = create_token(db, "tests")
    with TestClient(app=create_app(Settings(data_dir=tmp_path), db)) as test_client:
        test_client.headers["Authorization"] = f"Bearer {token}"
        yield test_client


def test_create_and_read_a_crawl(client, db):
    response = client.post(
        "/api/v1/crawls",
        json={
            "urls": [
                "HTTPS://Example.com/a",
                {"url": "https://example.com/b", "title": "B", "tags": ["x"]},
                "https://example.com/a",
            ],
            "tags": ["news", " news ", "tech"],
            "max_depth": 1,
            "plugins": ["wget"],
        },
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["status"] == "queued" and body["urls"] == 2  # duplicates merged on the canonical form
    with db.read() as s:
        crawl = s.get(Crawl, body["id"])
        seeds = list(s.scalars(select(CrawlSeed).where(CrawlSeed.crawl_id == crawl.id).order_by(CrawlSeed.position)))
        assert [seed.url for seed in seeds] == ["https://example.com/a", "https://example.com/b"]
        assert seeds[1].title == "B" and crawl.tags_str == "news,tech" and crawl.plugins == ["wget"]
        assert crawl.output_dir.startswith("archive/users/system/crawls/")
    status = client.get(f"/api/v1/crawls/{body['id']}").json()
    assert status["status"] == "queued" and status["snapshots"]["total"] == 0 and status["max_depth"] == 1


@pytest.mark.parametrize(
    "payload, status, words",
    [
        ({"urls": ["https://ok.example/", "ftp://example.com/x"]}, 422, ["urls[1]", "unsupported scheme 'ftp'"]),
        ({"urls": ["not a url"]}, 422, ["urls[0]", "not an absolute URL"]),
        ({"urls": ["https://example.com/"], "plugins": ["nope"]}, 422, ["plugins", "unknown plugin(s) nope"]),
        ({"urls": ["https://example.com/"], "max_depth": 9}, 400, ["max_depth"]),
        ({"urls": []}, 400, ["urls"]),
        ({"urls": "https://example.com/"}, 400, ["urls"]),
        ({"url": ["https://example.com/"]}, 400, ["url"]),
    ],
)
def test_bad_input_names_the_field(client, payload, status, words):
    response = client.post("/api/v1/crawls", json=payload)
    assert response.status_code == status, response.text
    for word in words:
        assert word in response.text


def test_unknown_crawl_is_404_and_openapi_is_served(client):
    assert client.get("/api/v1/crawls/" + "0" * 32).status_code == 404
    assert client.get("/api/v1/crawls/0123").status_code == 400  # not an id at all
    schema = client.get("/schema/openapi.json").json()
    assert {"/api/v1/crawls", "/api/v1/crawls/{crawl_id}", "/api/v1/snapshots"} <= set(schema["paths"])
    assert client.get("/healthz").json() == {"ok": True, "db": True, "nats": False}


def test_writes_and_reads_need_a_valid_token(db, tmp_path, monkeypatch):
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:1")
    token = create_token(db)
    body = {"urls": ["https://example.com/"]}
    with TestClient(app=create_app(Settings(data_dir=tmp_path), db)) as c:
        for headers in (
            {},
            {"Authorization": "Bearer bx_wrong"},
            {"X-Boxcar-Api-Key": token + "x"},
            {"Authorization": token},
        ):
            response = c.post("/api/v1/crawls", json=body, headers=headers)
            assert response.status_code == 401, headers
            assert response.json()["detail"] == "missing or invalid API token"  # same answer, nothing leaked
        assert c.get("/api/v1/snapshots").status_code == 401
        assert c.post("/api/v1/crawls", json=body, headers={"X-Boxcar-Api-Key": token}).status_code == 201
        assert c.get("/api/v1/snapshots", headers={"Authorization": f"Bearer {token}"}).status_code == 200
    with TestClient(app=create_app(Settings(data_dir=tmp_path, public_reads=True), db)) as c:
        assert c.get("/api/v1/snapshots").status_code == 200
        assert c.post("/api/v1/crawls", json=body).status_code == 401


def test_body_over_the_limit_is_413_with_the_limit_named(db, tmp_path, monkeypatch):
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:1")
    token = create_token(db)
    with TestClient(app=create_app(Settings(data_dir=tmp_path, max_request_body=1024), db)) as c:
        response = c.post(
            "/api/v1/imports", content=b"https://example.com/\n" * 200, headers={"Authorization": f"Bearer {token}"}
        )
    assert response.status_code == 413
    assert "limit" in response.json()["detail"] and "MAX_REQUEST_BODY" in response.json()["detail"]


@pytest.mark.parametrize(
    "config, key",
    [
        ({"WGET_ARGS_EXTRA": ["--post-file=/etc/passwd"]}, "WGET_ARGS_EXTRA"),
        ({"WGET_ARGS_EXTRA": '["--post-file=/etc/passwd"]'}, "WGET_ARGS_EXTRA"),
        ({"NODE_OPTIONS": "--import=data:text/javascript,process.exit(1)"}, "NODE_OPTIONS"),
        ({"PYTHONWARNINGS": "error", "BROWSER": "sh -c id"}, "PYTHONWARNINGS"),
        ({"BROWSER": "sh -c id"}, "BROWSER"),
        ({"WGET_BINARY": "/bin/sh"}, "WGET_BINARY"),
        ({"LD_PRELOAD": "/tmp/x.so"}, "LD_PRELOAD"),
        ({"PATH": "/tmp"}, "PATH"),
        ({"HTTPS_PROXY": "http://evil.example:8080"}, "HTTPS_PROXY"),
        ({"CHROME_ARGS_EXTRA": ["--remote-debugging-address=0.0.0.0"]}, "CHROME_ARGS_EXTRA"),
        ({"WGET_TIMEOUT": "abc"}, "WGET_TIMEOUT"),
        ({"USER_AGENT": "{TWOCAPTCHA_API_KEY}"}, "USER_AGENT"),
        ({"COOKIES_FILE": "/etc/passwd"}, "COOKIES_FILE"),
    ],
)
def test_config_that_could_choose_binaries_arguments_or_paths_is_refused(client, config, key):
    for path, body in (
        ("/api/v1/crawls", {"urls": ["https://example.com/"], "config": config}),
        ("/api/v1/feeds", {"url": "https://example.com/feed.xml", "config": config}),
    ):
        response = client.post(path, json=body)
        assert response.status_code in (400, 422), response.text
        assert key in response.text


def test_allowed_config_is_typed_and_stored(client, db):
    body = {"urls": ["https://example.com/"], "config": {"WGET_TIMEOUT": 30, "SAVE_WARC": False, "USER_AGENT": "Bot/1"}}
    response = client.post("/api/v1/crawls", json=body)
    assert response.status_code == 201, response.text
    with db.read() as s:
        config = s.get(Crawl, response.json()["id"]).config
    assert config["WGET_TIMEOUT"] == "30" and config["WGET_WARC_ENABLED"] == "false" and config["USER_AGENT"] == "Bot/1"


def test_a_read_only_token_reads_but_never_writes(db, tmp_path, monkeypatch):
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:1")
    token = create_token(db, "viewer", scope="read")
    with TestClient(app=create_app(Settings(data_dir=tmp_path), db)) as c:
        c.headers["Authorization"] = f"Bearer {token}"
        assert c.get("/api/v1/snapshots").status_code == 200
        assert c.post("/api/v1/crawls", json={"urls": ["https://example.com/"]}).status_code == 403
        assert c.post("/api/v1/imports", content=b"https://example.com/").status_code == 403
