"""Exports of the index: JSON Lines, JSON, CSV, Netscape bookmarks (re-imported: same URLs, titles
and tags), RSS and Atom (parsed by feedparser), feed keys that read feeds and nothing else, and the
UI's export links behind the login. WACZ is exported from a real crawl in ``tests/test_warc.py``."""

from __future__ import annotations

import csv
import io
import json
import re
from datetime import timedelta
from pathlib import Path

import feedparser
import pytest
from litestar.testing import TestClient

from boxcar.ingest.api.auth import create_token, revoke_token
from boxcar.ingest.app import create_app
from boxcar.ingest.web import accounts
from boxcar.shared import importers
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database, attach_tags
from boxcar.shared.db.models import ApiToken, Crawl, Snapshot, Status, url_hash
from boxcar.shared.settings import Settings
from boxcar.shared.storage import snapshot_dir

PASSWORD = "correct horse battery"
PAGES = [
    ("https://example.com/a?x=1&y=2", 'An "article" <with> markup', ["reading", "news"]),
    ("https://example.org/b", "Second page", ["reading"]),
    ("https://example.net/c", "", []),
]


@pytest.fixture
def archive(db: Database, tmp_path: Path) -> dict:
    accounts.create_user(db, "alice", PASSWORD, role="admin")
    now = utcnow()
    crawl = Crawl.new(user="system", first_url=PAGES[0][0], seed_count=3, now=now)
    ids = []
    with db.write() as s:
        s.add(crawl)
        s.flush()
        for n, (url, title, _tags) in enumerate(PAGES):
            sid = f"{n + 1:032x}"
            s.add(
                Snapshot(
                    id=sid,
                    crawl_id=crawl.id,
                    url=url,
                    url_hash=url_hash(url),
                    status=Status.SEALED,
                    title=title or None,
                    domain=url.split("/")[2],
                    bookmarked_at=now - timedelta(days=n + 1),
                    created_at=now + timedelta(seconds=n),
                    output_dir=snapshot_dir("system", now, url, sid),
                )
            )
            ids.append(sid)
        s.flush()
        attach_tags(s, {sid: tags for sid, (_, _, tags) in zip(ids, PAGES, strict=True)})
    return {"db": db, "data_dir": tmp_path / "data", "crawl": crawl.id, "ids": ids}


def client(archive) -> TestClient:
    app = create_app(Settings(data_dir=archive["data_dir"], nats_url="nats://127.0.0.1:9"), archive["db"])
    return TestClient(app, base_url="http://boxcar.lan")


def test_netscape_export_reimports_with_the_same_urls_titles_and_tags(archive):
    token = create_token(archive["db"], scope="read")
    with client(archive) as c:
        response = c.get("/api/v1/exports/html", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200 and "attachment" in response.headers["content-disposition"]
    parsed = importers.parse(response.content, None)
    assert parsed.format == "netscape"
    pairs, bad = parsed.seeds()
    assert not bad
    got = {seed.url: (seed.title, sorted(seed.tags)) for _, seed in pairs}
    assert got == {url: (title or None, sorted(tags)) for url, title, tags in PAGES}  # a URL as title is none


def test_jsonl_json_and_csv_carry_archivebox_s_list_fields(archive):
    token = create_token(archive["db"], scope="read")
    headers = {"Authorization": f"Bearer {token}"}
    with client(archive) as c:
        lines = c.get("/api/v1/exports/jsonl", params={"tag": "reading"}, headers=headers).text.splitlines()
        whole = c.get("/api/v1/exports/json", params={"crawl_id": archive["crawl"]}, headers=headers).json()
        table = list(csv.DictReader(io.StringIO(c.get("/api/v1/exports/csv", headers=headers).text)))
        one = c.get("/api/v1/exports/jsonl", params={"snapshot_id": archive["ids"][1]}, headers=headers).text
        none = c.get("/api/v1/exports/jsonl", params={"tag": "no-such-tag"}, headers=headers)
        unknown = c.get("/api/v1/exports/pdf", headers=headers)
        misspelt = c.get("/api/v1/exports/jsonl", params={"crawl": archive["crawl"]}, headers=headers)
        html_type = c.get("/api/v1/exports/html", headers=headers).headers["content-type"]
    records = [json.loads(line) for line in lines]
    assert [r["url"] for r in records] == [PAGES[1][0], PAGES[0][0]]  # newest first
    for r in records:
        assert {"url", "timestamp", "title", "tags", "tags_str", "bookmarked_at", "created_at", "id"} <= set(r)
        assert r["timestamp"].isdigit() and r["tags_str"] == ",".join(r["tags"])
    assert len(whole) == 3 and {r["id"] for r in whole} == set(archive["ids"])
    assert len(table) == 3 and table[0]["url"] and {row["tags"] for row in table} >= {"news,reading", ""}
    assert json.loads(one)["id"] == archive["ids"][1]
    assert none.status_code == 422 and "no snapshot matches" in none.json()["detail"]
    assert unknown.status_code == 404
    assert misspelt.status_code == 400 and "crawl_id" in misspelt.json()["detail"]
    assert html_type == "text/html; charset=utf-8"


def test_rss_and_atom_parse_and_a_feed_key_reads_feeds_only(archive):
    db = archive["db"]
    key = create_token(db, "feed reader", scope="feed")
    with client(archive) as c:
        rss = c.get("/api/v1/exports/rss", params={"tag": "reading", "key": key})
        atom = c.get("/api/v1/exports/atom", params={"key": key})
        assert rss.status_code == 200 and rss.headers["content-type"].startswith("application/rss+xml")
        feed = feedparser.parse(rss.content)
        assert not feed.bozo, feed.bozo_exception
        assert [e.title for e in feed.entries] == [PAGES[1][1], PAGES[0][1]]
        assert feed.entries[0].link == f"http://boxcar.lan/snapshots/{archive['ids'][1]}"
        assert key not in rss.text  # the key never lands in the feed it opens
        assert len(feedparser.parse(atom.content).entries) == 3
        # the key is no API token, and the JSON exports do not take a key
        assert c.get("/api/v1/snapshots", headers={"Authorization": f"Bearer {key}"}).status_code == 403
        assert c.get("/api/v1/exports/jsonl", params={"key": key}).status_code == 401
        assert c.get("/api/v1/exports/rss", params={"key": "bx_wrong"}).status_code == 401
        with db.read() as s:
            row = next(t for t in s.query(ApiToken).all() if t.scope == "feed")
        revoke_token(db, row.id)
        assert c.get("/api/v1/exports/rss", params={"key": key}).status_code == 401


def test_ui_export_links_need_a_login_and_feed_links_are_made_on_settings(archive):
    with client(archive) as c:
        assert c.get("/export/jsonl", follow_redirects=False).status_code == 303  # to the login
        form = c.get("/login").text
        token = re.search(r'name="_csrf_token" value="([^"]+)"', form).group(1)
        c.post("/login", data={"username": "alice", "password": PASSWORD, "_csrf_token": token})
        assert len(c.get("/export/jsonl").text.splitlines()) == 3
        settings = c.get("/settings").text
        token = re.search(r'name="_csrf_token" value="([^"]+)"', settings).group(1)
        made = c.post("/settings/tokens", data={"name": "reader", "scope": "feed", "_csrf_token": token})
        assert made.status_code == 201
        url = re.search(r'id="feed-url">([^<]+)<', made.text).group(1)
        path = url.replace("http://boxcar.lan", "").replace("&amp;", "&")
        assert feedparser.parse(c.get(path).content).entries
