"""Feed subscriptions end to end: a feed with 5 items, then 8 (same GUIDs for the first 5),
then unchanged (answered 304); a broken feed shows its error and backs off."""

from __future__ import annotations

import hashlib
import threading
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from xml.etree import ElementTree

import httpx
import pytest
from sqlalchemy import select

from boxcar.ingest.access import operator
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, Snapshot
from tests.helpers import api, wait_sealed, wait_until


class FeedServer:
    """Serves the corpus feed with ``limit`` items at /feed.xml, with an ETag and 304s."""

    def __init__(self, corpus: str) -> None:
        self.limit = 5
        self.requests: list[dict] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - stdlib name
                outer.requests.append(dict(self.headers))
                if self.path == "/broken.xml":
                    self.send_response(500)
                    self.end_headers()
                    return
                body = httpx.get(f"{corpus}/feed.xml?limit={outer.limit}").content
                etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
                if self.headers.get("If-None-Match") == etag:
                    self.send_response(304)
                    self.send_header("ETag", etag)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", "application/rss+xml")
                self.send_header("ETag", etag)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def items(self) -> list[tuple[str, str, datetime]]:
        body = httpx.get(f"{self.url}/feed.xml").content
        return [
            (i.findtext("link"), i.findtext("title"), parsedate_to_datetime(i.findtext("pubDate")).astimezone(UTC))
            for i in ElementTree.fromstring(body).iter("item")
        ]


@pytest.fixture
def feed_server(corpus_server):
    server = FeedServer(corpus_server)
    yield server
    server.server.shutdown()


def test_repolling_archives_only_new_items(pg_url, nats_url, make_stack, feed_server):
    stack = make_stack(pg_url, nats_url, env={"PLUGINS": "wget"})
    client = api(stack)
    feed = client.post(
        "/api/v1/feeds", json={"url": f"{feed_server.url}/feed.xml", "schedule": "daily", "tags": ["subscribed"]}
    )
    assert feed.status_code == 201, feed.text
    feed_id = feed.json()["id"]
    db = Database(pg_url)

    def crawls() -> list[Crawl]:
        with db.read() as s:
            return list(s.scalars(select(Crawl).where(Crawl.schedule_id == feed_id).order_by(Crawl.created_at)))

    def poll_and_wait(n_crawls: int) -> None:
        before = client.get(f"/api/v1/feeds/{feed_id}").json()["last_polled_at"]
        if before is not None:
            assert client.post(f"/api/v1/feeds/{feed_id}/poll").status_code == 202
        wait_until(
            lambda: client.get(f"/api/v1/feeds/{feed_id}").json()["last_polled_at"] not in (None, before),
            60,
            "the feed to be polled",
        )
        made = wait_until(lambda: len(crawls()) == n_crawls and crawls(), 60, f"{n_crawls} crawl(s) from the feed")
        for crawl in made:
            wait_sealed(stack, crawl.id, timeout=300)

    poll_and_wait(1)  # the first poll happens on subscribing
    feed_server.limit = 8
    poll_and_wait(2)
    poll_and_wait(2)  # nothing changed: a conditional GET answered 304, no new crawl
    assert feed_server.requests[-1].get("If-None-Match"), "the last poll was not conditional"

    with db.read() as s:
        snaps = list(
            s.scalars(select(Snapshot).join(Crawl, Crawl.id == Snapshot.crawl_id).where(Crawl.schedule_id == feed_id))
        )
    items = feed_server.items()
    assert len(items) == 8
    assert sorted(s.url for s in snaps) == sorted(url for url, _, _ in items)  # 8, none twice
    by_url = {s.url: s for s in snaps}
    for url, title, published in items:
        assert by_url[url].title == title
        assert by_url[url].bookmarked_at == published
    first, second = crawls()
    assert first.seed_count == 5 and second.seed_count == 3
    state = client.get(f"/api/v1/feeds/{feed_id}").json()
    assert state["items_seen"] == 8 and state["crawls"] == 2 and state["failures"] == 0 and state["last_error"] == ""
    tags = client.get("/api/v1/snapshots", params={"crawl_id": first.id}).json()["items"][0]["tags"]
    assert "subscribed" in tags


def test_a_failing_feed_shows_its_error_and_backs_off(pg_url, nats_url, make_stack, feed_server):
    stack = make_stack(pg_url, nats_url, env={"PLUGINS": "wget"})
    client = api(stack)
    feed_id = client.post("/api/v1/feeds", json={"url": f"{feed_server.url}/broken.xml"}).json()["id"]
    state = wait_until(
        lambda: (f := client.get(f"/api/v1/feeds/{feed_id}").json())["failures"] and f, 60, "the failed poll"
    )
    assert "HTTP 500" in state["last_error"]
    assert state["status"] == "queued" and state["crawls"] == 0
    retry_in = datetime.fromisoformat(state["next_poll_at"]) - datetime.fromisoformat(state["last_polled_at"])
    assert 0 < retry_in.total_seconds() <= 61  # first back-off step: a minute, not the hourly schedule
    assert client.post(f"/api/v1/feeds/{feed_id}/pause").status_code == 202
    wait_until(lambda: client.get(f"/api/v1/feeds/{feed_id}").json()["status"] == "paused", 30, "the pause")
    assert client.delete(f"/api/v1/feeds/{feed_id}").status_code == 204
    assert client.get(f"/api/v1/feeds/{feed_id}").status_code == 404


def test_feed_endpoints_validate_and_need_a_token(pg_url, nats_url, make_stack):
    stack = make_stack(pg_url, nats_url, env={"PLUGINS": "wget"})
    client = api(stack)
    bad = client.post("/api/v1/feeds", json={"url": "https://example.com/feed", "schedule": "every tuesday"})
    assert bad.status_code == 422 and "schedule" in bad.text
    bad = client.post("/api/v1/feeds", json={"url": "gopher://example.com/feed"})
    assert bad.status_code == 422 and "unsupported scheme" in bad.text
    anonymous = httpx.post(f"{stack.api_url}/api/v1/feeds", json={"url": "https://example.com/feed"})
    assert anonymous.status_code == 401


def test_a_url_schedule_archives_again_and_the_snapshot_shows_what_changed(sqlite_url, nats_url, make_stack):
    """``every: minute``: the first run at once, the next at the minute; each run a new snapshot
    (ONLY_NEW off for schedules), and the later snapshot's text diff names the changed line.
    Listed with its runs, paused and removed through the API the CLI calls."""
    visits = {"n": 0}

    class Changing(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - stdlib name
            visits["n"] += 1
            body = (
                "<html><head><title>Prices</title></head><body><h1>Prices today</h1>"
                f"<p>Visit number {visits['n']} of the price page.</p><p>Bread is cheap.</p></body></html>"
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Changing)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/prices"
    try:
        stack = make_stack(sqlite_url, nats_url, env={"PLUGINS": "wget,htmltotext"})
        client = api(stack)
        made = client.post("/api/v1/schedules", json={"urls": [url], "every": "minute", "tags": ["watch"]})
        assert made.status_code == 201, made.text
        schedule_id = made.json()["id"]
        assert client.post("/api/v1/schedules", json={"urls": ["not a url"]}).status_code == 422
        db = Database(sqlite_url)

        def two_sealed_runs():
            with db.read() as s:
                crawls = list(s.scalars(select(Crawl).where(Crawl.schedule_id == schedule_id)))
            return crawls if len(crawls) >= 2 and all(c.status == "sealed" for c in crawls[:2]) else None

        crawls = wait_until(two_sealed_runs, 200, "two runs of the schedule to seal")
        for crawl in crawls[:2]:
            wait_sealed(stack, crawl.id, timeout=120)
        with db.read() as s:
            snaps = list(s.scalars(select(Snapshot).where(Snapshot.url == url).order_by(Snapshot.created_at)))
        assert len(snaps) >= 2  # archived again although ONLY_NEW is on for ordinary crawls
        from boxcar.ingest.library import SnapshotLibrary

        changes = SnapshotLibrary(db, stack.data_dir).changes(snaps[1].id, viewer=operator("system"))
        assert changes is not None and changes.previous_id == snaps[0].id
        assert changes.added >= 1 and changes.removed >= 1 and any("Visit number" in line for line in changes.lines)

        [listed] = client.get("/api/v1/schedules").json()
        assert listed["urls"] == [url] and listed["runs"] >= 2 and listed["every"] == "minute"
        assert client.post(f"/api/v1/schedules/{schedule_id}/pause").status_code == 202
        wait_until(lambda: client.get("/api/v1/schedules").json()[0]["status"] == "paused", 30, "the schedule to pause")
        assert client.delete(f"/api/v1/schedules/{schedule_id}").status_code == 204
        assert client.get("/api/v1/schedules").json() == []
    finally:
        server.shutdown()
