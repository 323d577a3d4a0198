"""Pages real users' inputs break archivers on, archived end to end by the whole stack (with the
browser) on a local site: a Latin-1 page, PDFs with and without an extension, a page behind
HTTP Basic auth, 404 and 500 pages, a redirect, and a feed with relative links.

Checked: every snapshot sealed with a result for every hook of its plan; the right result per
kind; HTTP statuses on the snapshots and counted in the summary; a 500 captured again; and the
page's password in no row, no file and no log.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest
from sqlalchemy import inspect, select, text

from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, CrawlSchedule, Snapshot
from boxcar.shared.plugins import get_catalog
from boxcar.shared.settings import DEFAULT_PLUGINS
from tests.fault_site import PASSWORD, PDF_TITLE, USER, FaultSite
from tests.helpers import api, load_crawl, submit, wait_sealed, wait_until


@pytest.fixture
def site():
    with FaultSite() as running:
        yield running


def test_odd_pages_come_out_right_and_no_password_leaks(sqlite_url, nats_url, make_stack, site, tmp_path):
    stack = make_stack(sqlite_url, nats_url, env={"URL_RETRY_BACKOFF": "1"})
    private = site.url("/private/").replace("http://", f"http://{USER}:{PASSWORD}@")
    urls = {
        "latin1": site.url("/latin1/page?q=H%F6he"),
        "pdf": site.url("/doc.pdf"),
        "manual": site.url("/manual"),
        "private": private,
        "404": site.url("/status/404"),
        "500": site.url("/status/500"),
        "redirect": site.url("/redirect"),
    }
    crawl_id = submit(stack, urls=list(urls.values()), config={"MAX_URL_ATTEMPTS": 2})
    state = wait_sealed(stack, crawl_id, timeout=600)
    assert state["snapshots"]["sealed"] == state["snapshots"]["total"] == len(urls)
    assert state["http_errors"] == 2 and state["network_errors"] == 0

    crawl, snaps, results = load_crawl(Database(sqlite_url), crawl_id)
    by_key = {
        key: next(s for s in snaps if s.url.split("/", 3)[-1] == url.split("/", 3)[-1]) for key, url in urls.items()
    }
    mine: dict[str, dict[str, object]] = defaultdict(dict)
    for r in results:
        mine[r.snapshot_id][r.hook_name] = r
    hooks = {h.name for h in get_catalog().snapshot_hooks(DEFAULT_PLUGINS)}
    for snap in snaps:
        assert set(mine[snap.id]) == hooks, f"{snap.url} is missing results: {hooks - set(mine[snap.id])}"

    def result(key: str, plugin: str):
        return next(r for r in mine[by_key[key].id].values() if r.plugin == plugin)

    # a Latin-1 query: wget's file name is not UTF-8 on the server side, yet its result is recorded
    assert result("latin1", "wget").status == "succeeded", result("latin1", "wget").notes
    assert by_key["latin1"].title == "Höhe und Größe"
    # documents: kept by staticfile with the extension their type implies, titled from the PDF
    for key in ("pdf", "manual"):
        document = result(key, "staticfile")
        assert document.status == "succeeded" and document.output_str.endswith(".pdf"), document.output_str
        assert by_key[key].title == PDF_TITLE
        for plugin in ("dom", "pdf", "seo"):
            assert result(key, plugin).status == "skipped", (key, plugin, result(key, plugin).output_str)
    assert result("manual", "staticfile").output_str == "staticfile/manual.pdf"
    # Basic auth: captured with the credentials, stored without them
    assert by_key["private"].url == site.url("/private/") and by_key["private"].title == "Private Page"
    assert result("private", "wget").status == "succeeded"
    # HTTP errors are on the snapshot, and a 5xx is captured again
    assert (by_key["404"].http_status, by_key["404"].attempts) == (404, 1)
    assert (by_key["500"].http_status, by_key["500"].attempts) == (500, 2)
    assert by_key["latin1"].http_status == 200
    assert by_key["redirect"].final_url == site.url("/final/")

    # the feed: relative links resolved against the feed's URL, the link-less item counted
    client = api(stack)
    feed = client.post("/api/v1/feeds", json={"url": site.url("/feeds/relative.xml")}).json()
    feed_state = wait_until(
        lambda: (f := client.get(f"/api/v1/feeds/{feed['id']}").json())["last_polled_at"] and f, 120, "a feed poll"
    )
    assert feed_state["items_rejected"] == 1 and "no URL" in feed_state["last_rejection"]
    db = Database(sqlite_url)
    with db.read() as s:
        feed_crawl = s.scalar(select(Crawl.id).where(Crawl.schedule_id == feed["id"]))
    wait_sealed(stack, feed_crawl, timeout=300)
    with db.read() as s:
        feed_urls = set(s.scalars(select(Snapshot.url).where(Snapshot.crawl_id == feed_crawl)))
        assert s.get(CrawlSchedule, feed["id"]).last_error == ""
    assert feed_urls == {site.url("/items/five.html"), site.url("/items/six.html")}

    stack.stop()  # every file closed; the browser's profile is gone
    assert_nowhere(PASSWORD, db, [stack.data_dir, tmp_path / "nats"])


def assert_nowhere(secret: str, db: Database, roots: list[Path]) -> None:
    """``secret`` is in no text column of any table and in no file under ``roots``."""
    with db.engine.connect() as conn:
        for table in inspect(conn).get_table_names():
            for row in conn.execute(text(f'SELECT * FROM "{table}"')):
                assert secret not in repr(tuple(row)), f"the password is in a {table} row: {row}"
    needle = secret.encode()
    for root in roots:
        for path in root.rglob("*"):
            if path.is_file() and not path.is_symlink():
                assert needle not in path.read_bytes(), f"the password is in {path}"
                assert secret not in path.name, f"the password is in a file name: {path}"
