"""Per-host politeness (issue 30): ``DOMAIN_MAX_CONCURRENT`` holds across every crawl and runner
(the test site counts the requests in flight per host name), a crawl may lower it, and another
host's pages go ahead meanwhile. ``DOMAIN_REQUESTS_PER_MINUTE`` is checked on the claim itself."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sqlalchemy import select

from boxcar.crawl_runner import queries as q
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, Snapshot
from tests.helpers import api, wait_sealed


class CountingSite(ThreadingHTTPServer):
    """Pages that take 0.3 s, with the most requests ever in flight at once per Host name."""

    daemon_threads = True

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.now: dict[str, int] = {}
        self.most: dict[str, int] = {}
        super().__init__(("127.0.0.1", 0), Page)


class Page(BaseHTTPRequestHandler):
    server: CountingSite

    def do_GET(self) -> None:  # noqa: N802 - stdlib name
        host = (self.headers.get("Host") or "").split(":")[0]
        site = self.server
        with site.lock:
            site.now[host] = site.now.get(host, 0) + 1
            site.most[host] = max(site.most.get(host, 0), site.now[host])
        try:
            time.sleep(0.3)
            body = f"<html><head><title>{self.path}</title></head><body><p>{host}</p></body></html>".encode()
            self.send_response(200 if not self.path.startswith("/robots") else 404)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        finally:
            with site.lock:
                site.now[host] -= 1

    def log_message(self, *args) -> None:
        pass


def test_one_host_never_has_more_than_its_limit_in_flight(sqlite_url, nats_url, make_stack):
    site = CountingSite()
    threading.Thread(target=site.serve_forever, daemon=True).start()
    port = site.server_address[1]
    try:
        stack = make_stack(sqlite_url, nats_url, env={"PLUGINS": "wget", "DOMAIN_MAX_CONCURRENT": "2"})
        client = api(stack)
        slow = client.post(  # this crawl lowers the limit for its host to 1
            "/api/v1/crawls",
            json={"urls": [f"http://127.0.0.1:{port}/a{i}" for i in range(30)], "config": {"DOMAIN_MAX_CONCURRENT": 1}},
        )
        assert slow.status_code == 201, slow.text
        raised = client.post(
            "/api/v1/crawls", json={"urls": ["http://127.0.0.1/x"], "config": {"DOMAIN_MAX_CONCURRENT": 5}}
        )
        assert raised.status_code == 422 and "lower" in raised.text  # a crawl never raises the operator's
        other = client.post("/api/v1/crawls", json={"urls": [f"http://localhost:{port}/b{i}" for i in range(30)]})
        assert other.status_code == 201, other.text
        wait_sealed(stack, other.json()["id"], timeout=300)
        db = Database(sqlite_url)
        with db.read() as s:
            a_open = s.scalar(
                select(Snapshot.id).where(Snapshot.crawl_id == slow.json()["id"], Snapshot.status != "sealed").limit(1)
            )
        assert a_open is not None, "the other host's pages should finish while the slow host's are still going"
        wait_sealed(stack, slow.json()["id"], timeout=300)
        assert site.most["127.0.0.1"] == 1, site.most  # the crawl's lower limit held
        assert 1 <= site.most["localhost"] <= 2, site.most  # the operator's held for the other host
        with db.read() as s:
            made = s.scalars(select(Snapshot.domain).join(Crawl).where(Crawl.id == slow.json()["id"])).all()
        assert set(made) == {"127.0.0.1"}  # the host is known from the start
        db.dispose()
    finally:
        site.shutdown()


def test_requests_per_minute_hold_back_a_busy_host(db: Database):
    """Three captures of a host started in the last minute and a limit of three a minute: none
    more now; another host is free; a minute later the host may start again."""
    now = utcnow()
    crawl = Crawl.new(user="system", first_url="http://busy.example/", seed_count=6, now=now)
    crawl.status = "started"
    with db.write() as s:
        s.add(crawl)
        s.flush()
        for i, host in enumerate(["busy.example"] * 5 + ["calm.example"]):
            s.add(
                Snapshot(
                    id=f"{i:032x}",
                    crawl_id=crawl.id,
                    url=f"http://{host}/{i}",
                    url_hash=f"{i:064x}",
                    domain=host,
                    status="sealed" if i < 3 else "queued",
                    started_at=now - timedelta(seconds=20) if i < 3 else None,
                    retry_at=now,
                    output_dir=f"archive/x/{i}",
                    created_at=now + timedelta(seconds=i),
                )
            )
    with db.write() as s:
        assert q.host_allowance(s, now, (0, 3)) == {"busy.example": 0}
        claimed = q.claim_queued_snapshots(s, crawl.id, 10, now, timedelta(minutes=5), 1, (0, 3))
        assert [x.domain for x in claimed] == ["calm.example"]
    later = now + timedelta(seconds=61)
    with db.write() as s:
        claimed = q.claim_queued_snapshots(s, crawl.id, 10, later, timedelta(minutes=5), 1, (0, 3))
        assert [x.domain for x in claimed] == ["busy.example", "busy.example"]
    with db.write() as s:
        assert q.host_allowance(s, later, (1, 3)) == {"busy.example": -1, "calm.example": 0}
