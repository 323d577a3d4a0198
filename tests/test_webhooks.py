"""Webhooks on a running stack: a receiver gets each event once, signed with the webhook's
secret; a receiver that is down gets retries, then the delivery is marked failed, and the crawl
seals as if there were no webhook."""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import socket
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.helpers import api, submit, wait_sealed, wait_until


@contextlib.contextmanager
def receiver(feed: bytes = b"") -> Iterator[tuple[str, list[tuple[dict[str, str], bytes]]]]:
    """A local webhook receiver answering 204 (and serving ``feed`` at /feed.xml); yields its
    URL and the requests it got."""
    got: list[tuple[dict[str, str], bytes]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200 if feed else 404)
            self.send_header("Content-Type", "application/rss+xml")
            self.send_header("Content-Length", str(len(feed)))
            self.end_headers()
            self.wfile.write(feed)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            got.append(({k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/hook", got
    finally:
        server.shutdown()
        server.server_close()


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_receiver_gets_each_event_once_signed(tmp_path, nats_url, make_stack, site_urls):
    stack = make_stack(
        f"sqlite:///{tmp_path / 'index.sqlite3'}", nats_url, families=["fetch"], env={"PLUGINS": "wget"}, shape="one"
    )
    client = api(stack)
    with receiver() as (url, got):
        made = client.post("/api/v1/webhooks", json={"url": url, "events": ["snapshot.sealed", "crawl.sealed"]})
        assert made.status_code == 201, made.text
        secret, hook_id = made.json()["secret"], made.json()["webhook"]["id"]
        urls = site_urls(3)
        crawl_id = submit(stack, urls=urls)
        wait_sealed(stack, crawl_id, timeout=120)

        def all_delivered():
            log = client.get(f"/api/v1/webhooks/{hook_id}/deliveries").json()
            return log if len(log) == 4 and all(d["status"] == "delivered" for d in log) else None

        log = wait_until(all_delivered, 30, "4 deliveries")
        assert all(d["attempts"] == 1 and d["response_status"] == 204 for d in log)
        wait_until(lambda: len(got) >= 4, 10, "the receiver to have them")

    events = []
    for headers, body in got:
        expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
        assert hmac.compare_digest(headers["x-boxcar-signature-256"], expected)
        payload = json.loads(body)
        assert payload["event"] == headers["x-boxcar-event"]
        assert payload["delivery_id"] == headers["x-boxcar-delivery"]
        assert payload["crawl"]["id"] == crawl_id
        assert payload["crawl"]["links"]["api"] == f"/api/v1/crawls/{crawl_id}"
        events.append(payload)
    assert len(got) == 4 and len({h["x-boxcar-delivery"] for h, _ in got}) == 4  # each once
    assert sorted(e["event"] for e in events) == ["crawl.sealed"] + ["snapshot.sealed"] * 3
    snapshots = [e["snapshot"] for e in events if e["event"] == "snapshot.sealed"]
    assert sorted(s["url"] for s in snapshots) == sorted(urls)
    assert all(s["status"] == "sealed" and s["links"]["ui"] == f"/snapshots/{s['id']}" for s in snapshots)
    assert next(e for e in events if e["event"] == "crawl.sealed")["crawl"]["status"] == "sealed"


def test_a_receiver_that_is_down_gets_retries_then_the_delivery_fails_and_the_crawl_seals(
    tmp_path, nats_url, make_stack, site_urls
):
    stack = make_stack(
        f"sqlite:///{tmp_path / 'index.sqlite3'}",
        nats_url,
        families=["fetch"],
        env={"PLUGINS": "wget", "WEBHOOK_MAX_ATTEMPTS": "3", "WEBHOOK_RETRY_SECONDS": "1"},
    )
    client = api(stack)
    down = f"http://127.0.0.1:{closed_port()}/hook"
    made = client.post("/api/v1/webhooks", json={"url": down, "events": ["crawl.sealed", "snapshot.sealed"]})
    assert made.status_code == 201, made.text
    hook_id = made.json()["webhook"]["id"]
    crawl_id = submit(stack, urls=site_urls(1))
    assert wait_sealed(stack, crawl_id, timeout=120)["status"] == "sealed"  # never waits for the webhook

    def all_failed():
        log = client.get(f"/api/v1/webhooks/{hook_id}/deliveries").json()
        return log if len(log) == 2 and all(d["status"] == "failed" for d in log) else None

    log = wait_until(all_failed, 45, "both deliveries to fail")
    assert sorted(d["event"] for d in log) == ["crawl.sealed", "snapshot.sealed"]
    # tried WEBHOOK_MAX_ATTEMPTS times (1 s, then 2 s apart), then given up
    assert all(d["attempts"] == 3 and d["response_status"] is None and d["delivered_at"] is None for d in log)
    assert all("ConnectError" in d["last_error"] and made.json()["secret"] not in d["last_error"] for d in log)


def test_a_feed_poll_with_new_items_is_one_event(tmp_path, nats_url, make_stack, site_urls):
    urls = site_urls(2)
    items = "".join(f"<item><title>Item {i}</title><link>{u}</link><guid>{u}</guid></item>" for i, u in enumerate(urls))
    rss = f'<?xml version="1.0"?><rss version="2.0"><channel><title>T</title>{items}</channel></rss>'.encode()
    stack = make_stack(
        f"sqlite:///{tmp_path / 'index.sqlite3'}", nats_url, families=["fetch"], env={"PLUGINS": "wget"}, shape="one"
    )
    client = api(stack)
    with receiver(rss) as (url, got):
        made = client.post("/api/v1/webhooks", json={"url": url, "events": ["feed.new_items"]})
        assert made.status_code == 201, made.text
        secret, hook_id = made.json()["secret"], made.json()["webhook"]["id"]
        feed = client.post("/api/v1/feeds", json={"url": url.replace("/hook", "/feed.xml"), "schedule": "daily"})
        assert feed.status_code == 201, feed.text

        def delivered():
            log = client.get(f"/api/v1/webhooks/{hook_id}/deliveries").json()
            return log if log and all(d["status"] == "delivered" for d in log) else None

        log = wait_until(delivered, 45, "the feed.new_items delivery")
        wait_until(lambda: got, 10, "the receiver to have it")
        wait_sealed(stack, json.loads(got[0][1])["crawl"]["id"], timeout=60)
    assert [d["event"] for d in log] == ["feed.new_items"]
    ((headers, body),) = got
    assert headers["x-boxcar-signature-256"] == "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    payload = json.loads(body)
    assert payload["event"] == "feed.new_items" and payload["feed"]["id"] == feed.json()["id"]
    assert payload["feed"]["new_items"] == 2 and payload["feed"]["url"].endswith("/feed.xml")
