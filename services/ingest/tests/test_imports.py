"""POST /api/v1/imports on real export files: counts, rejections, the stored source, the policy."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from litestar.testing import TestClient

from boxcar.crawl_runner import queries as q
from boxcar.ingest.app import create_app
from boxcar.ingest.auth import create_token
from boxcar.shared.db.models import STARTED, Crawl, utcnow
from boxcar.shared.ids import new_id
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
    assert crawl.tags_str == "imported,firefox" and len(crawl.seeds) == 21
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
    crawl = Crawl(id=new_id(), status=STARTED, retry_at=now, seeds=[], output_dir="x")
    with db.write() as s:
        s.add(crawl)
        s.flush()
        q.insert_snapshots(
            s, crawl, [q.NewSnapshot("https://example.com/old")], depth=0, parent_id=None, now=now, user="system"
        )
    text = b"https://example.com/old\nhttps://example.com/new\n"
    body = client.post("/api/v1/imports", content=text).json()
    assert body["counts"]["accepted"] == 1 and body["counts"]["skipped_existing"] == 1
    body = client.post("/api/v1/imports?only_new=false", content=text).json()
    assert body["counts"]["accepted"] == 2 and body["counts"]["skipped_existing"] == 0
    created = client.post("/api/v1/crawls", json={"urls": ["https://example.com/old"], "only_new": False})
    assert created.status_code == 201 and created.json()["urls"] == 1


def test_a_binary_upload_is_refused(client):
    response = client.post(
        "/api/v1/imports", content=b"\x7fELF\x02\x01\x01\x00\x00\x00https://example.com/ in a binary"
    )
    assert response.status_code == 422 and "binary file" in response.json()["detail"]
