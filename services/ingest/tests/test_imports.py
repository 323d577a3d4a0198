"""POST /api/v1/imports on real export files: counts, rejections, the stored source, the policy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from litestar.testing import TestClient
from sqlalchemy import select

from boxcar.crawl_runner import queries as q
from boxcar.ingest.api.auth import create_token
from boxcar.ingest.app import create_app
from boxcar.shared import secrets
from boxcar.shared.clock import utcnow
from boxcar.shared.db.models import STARTED, ArchiveResult, Crawl, CrawlSeed
from boxcar.shared.ids import new_id
from boxcar.shared.messages import Seed
from boxcar.shared.settings import Settings

INPUTS = Path(os.environ.get("BOXCAR_SHARED_DIR", Path(__file__).resolve().parents[3].parent / "shared")) / "inputs"


@pytest.fixture
def client(db, tmp_path, monkeypatch):
    monkeypatch.setenv("NATS_URL", "nats://127.0.0.1:1")
    token = create_token(db)
    with TestClient(app=create_app(Settings(data_dir=tmp_path, url_denylist=r"\.css$"), db)) as c:
        c.headers["Authorization"] = f"Bearer {token}"
        yield c


def test_multipart_netscape_export(client, db, tmp_path):
    data = (INPUTS / "netscape/firefox_nested.htm").read_bytes() if INPUTS.exists() else None
    if data is None:
        pytest.skip(f"inputs not found at {INPUTS}")
    response = client.post(
        "/api/v1/imports", files={"file": ("bookmarks.html", data)}, data={"tags": "imported,firefox", "max_depth": "0"}
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["format"] == "netscape"
    assert body["counts"] == {"entries": 24, "accepted": 21, "duplicates": 0, "rejected": 3, "skipped_existing": 0}
    assert all("place" in r["reason"] for r in body["rejected"])
    with db.read() as s:
        crawl = s.get(Crawl, body["crawl_id"])
    assert crawl.tags_str == "imported,firefox" and crawl.seed_count == 21
    assert (tmp_path / crawl.source_file).read_bytes() == data  # kept verbatim
    assert crawl.source_file.startswith("sources/") and crawl.source_file.endswith(f"-{crawl.id}.html")


def test_raw_body_with_bad_entries_keeps_the_good_ones(client):
    text = (
        b"https://example.com/a\n"
        b"javascript:alert(1)\n"
        b"https://example.com/style.css\n"
        b"https://example.com/a\n"
        b"ftp://example.com/file\n"
        b"https://example.com/b\n"
    )
    response = client.post("/api/v1/imports?tags=t1", content=text, headers={"Content-Type": "text/plain"})
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["counts"]["accepted"] == 2 and body["counts"]["duplicates"] == 1
    reasons = {r["value"]: r["reason"] for r in body["rejected"]}
    assert reasons["https://example.com/style.css"] == "blocked by URL_DENYLIST"
    assert "unsupported scheme 'ftp'" in reasons["ftp://example.com/file"]


def test_nothing_to_import_is_422_naming_the_format(client):
    response = client.post("/api/v1/imports", content=b'{"items": []}', headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert "no URLs found (format tried:" in response.json()["detail"]
    response = client.post("/api/v1/imports?format=nope", content=b"https://example.com/")
    assert response.status_code == 422 and "unknown format 'nope'" in response.json()["detail"]


def test_only_new_skips_urls_archived_before_unless_asked(client, db):
    now = utcnow()
    crawl = Crawl(id=new_id(), status=STARTED, retry_at=now, output_dir="x")
    with db.write() as s:
        s.add(crawl)
        s.flush()
        (archived, never), _ = q.insert_snapshots(
            s,
            crawl,
            [Seed.parse("https://example.com/old"), Seed.parse("https://example.com/cancelled")],
            depth=0,
            parent_id=None,
            now=now,
        )
        s.add(ArchiveResult(id=new_id(), snapshot_id=archived, plugin="wget", hook_name="h", status="succeeded"))
        s.add(ArchiveResult(id=new_id(), snapshot_id=never, plugin="wget", hook_name="h", status="skipped"))
    # a snapshot that never had a succeeded result was not archived: it is imported again
    text = b"https://example.com/old\nhttps://example.com/new\nhttps://example.com/cancelled\n"
    body = client.post("/api/v1/imports", content=text).json()
    assert body["counts"]["accepted"] == 2 and body["counts"]["skipped_existing"] == 1
    body = client.post("/api/v1/imports?only_new=false", content=text).json()
    assert body["counts"]["accepted"] == 3 and body["counts"]["skipped_existing"] == 0
    created = client.post("/api/v1/crawls", json={"urls": ["https://example.com/old"], "only_new": False})
    assert created.status_code == 201 and created.json()["urls"] == 1


def test_a_binary_upload_is_refused(client):
    response = client.post(
        "/api/v1/imports", content=b"\x7fELF\x02\x01\x01\x00\x00\x00https://example.com/ in a binary"
    )
    assert response.status_code == 422 and "binary file" in response.json()["detail"]


def test_several_files_make_one_crawl_and_sources_keep_no_password(client, db, tmp_path):
    bookmarks = b'<!DOCTYPE NETSCAPE-Bookmark-file-1><DL><DT><A HREF="https://alice:s3cret-Pa55@example.com/private/">P</A></DL>'
    urls = b"https://example.com/one\nhttps://example.com/two\n"
    response = client.post(
        "/api/v1/imports", files=[("file", ("bookmarks.html", bookmarks)), ("file", ("urls.txt", urls))]
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["format"] == "mixed" and body["counts"]["accepted"] == 3
    with db.read() as s:
        crawl = s.get(Crawl, body["crawl_id"])
        seeds = list(s.scalars(select(CrawlSeed).where(CrawlSeed.crawl_id == crawl.id).order_by(CrawlSeed.position)))
    assert len(crawl.source_files) == 2
    kept = b"".join((tmp_path / path).read_bytes() for path in crawl.source_files)
    assert b"s3cret-Pa55" not in kept and b"https://example.com/private/" in kept
    # the URL is stored without its credentials; they are kept sealed, for the capture
    assert seeds[0].url == "https://example.com/private/" and "s3cret" not in seeds[0].credentials
    assert secrets.unseal(seeds[0].credentials) == "alice:s3cret-Pa55"


@pytest.mark.parametrize(
    "config, key",
    [
        ('{"WGET_TIMEOUT": "abc"}', "config.WGET_TIMEOUT"),
        ('{"WGET_ARGS_EXTRA": ["--post-file=/etc/passwd"]}', "config.WGET_ARGS_EXTRA"),
        ('{"NODE_OPTIONS": "--import=data:text/javascript,1"}', "config.NODE_OPTIONS"),
    ],
)
def test_import_config_is_checked_like_a_crawls(client, config, key):
    response = client.post("/api/v1/imports", params={"config": config}, content=b"https://example.com/")
    assert response.status_code == 422 and key in response.text


def test_a_snapshot_url_that_only_differs_in_escapes_is_not_new(client, db):
    body = client.post(
        "/api/v1/imports", content=b"https://example.com/p%c3%bcr-b.html\nhttps://example.com/p%C3%BCr-b.html\n"
    ).json()
    assert body["counts"]["accepted"] == 1 and body["counts"]["duplicates"] == 1
    with db.read() as s:
        assert s.scalar(select(CrawlSeed.url).where(CrawlSeed.crawl_id == body["crawl_id"])) == (
            "https://example.com/p%c3%bcr-b.html"  # fetched as the user gave it
        )
