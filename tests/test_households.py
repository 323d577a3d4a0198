"""Issue 28 on a running stack: two people archive the same page; each gets a snapshot of their
own, written under their own ``archive/users/<name>/`` directory, and ``ONLY_NEW`` skips only
what that person archived before."""

from __future__ import annotations

from pathlib import Path

import httpx
from sqlalchemy import select

from boxcar.ingest.api.auth import create_token
from boxcar.ingest.web.accounts import create_user
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, Snapshot
from tests.helpers import serve_directory, wait_sealed


def test_two_users_archive_the_same_url_into_their_own_archives(sqlite_url, nats_url, make_stack, tmp_path: Path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "page.html").write_text("<html><head><title>Shared page</title></head><body><p>hello</p></body></html>")
    db = Database(sqlite_url)
    db.upgrade()
    tokens = {}
    for name in ("alice", "bob"):
        create_user(db, name, "a long enough password")
        tokens[name] = create_token(db, name, owner=name)
    with serve_directory(site) as base:
        url = f"{base}/page.html"
        stack = make_stack(sqlite_url, nats_url, env={"PLUGINS": "wget"})
        crawls = {}
        for name in ("alice", "bob"):
            with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {tokens[name]}"}) as c:
                made = c.post("/api/v1/crawls", json={"urls": [url], "only_new": True})
                assert made.status_code == 201, made.text
                crawls[name] = made.json()["id"]
                assert made.json()["urls"] == 1  # the other's snapshot is not "archived before" for this one
        for crawl_id in crawls.values():
            wait_sealed(stack, crawl_id, timeout=120)
        with db.read() as s:
            snaps = {
                c.created_by: s.scalar(select(Snapshot).where(Snapshot.crawl_id == c.id))
                for c in s.scalars(select(Crawl).where(Crawl.id.in_(list(crawls.values()))))
            }
        assert set(snaps) == {"alice", "bob"} and snaps["alice"].id != snaps["bob"].id
        for name, snap in snaps.items():
            assert snap.output_dir.startswith(f"archive/users/{name}/snapshots/")
            assert list((stack.data_dir / snap.output_dir / "wget").rglob("page.html")), name
        with httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {tokens['alice']}"}) as c:
            again = c.post("/api/v1/crawls", json={"urls": [url], "only_new": True}).json()
            assert again["skipped_existing"] == 1 and again["urls"] == 0  # hers now
            mine = c.get("/api/v1/snapshots").json()
            assert [s["id"] for s in mine["items"]] == [snaps["alice"].id]  # never bob's
    db.dispose()
