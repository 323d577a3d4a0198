"""Hostile pages, big inputs and missing pieces: nothing stops other crawls, nothing is lost,
memory stays bounded, and the user is told what happened."""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select

from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, CrawlSchedule, Snapshot
from tests.fault_site import FaultSite
from tests.faults.harness import PLUGINS, MemorySampler, stack_pids
from tests.helpers import api, describe_processes, hook_processes, submit, wait_sealed, wait_until

FAMILIES = ["fetch", "extract", "parse", "index"]


@pytest.fixture
def site():
    with FaultSite() as running:
        yield running


def snapshot_count(db: Database, crawl_id: str, depth: int | None = None) -> int:
    with db.read() as s:
        query = select(func.count()).select_from(Snapshot).where(Snapshot.crawl_id == crawl_id)
        if depth is not None:
            query = query.where(Snapshot.depth == depth)
        return s.scalar(query)


def test_bad_pages_seal_within_their_timeouts_and_memory_stays_bounded(sqlite_url, nats_url, make_stack, site):
    env = {"TIMEOUT": "20", "URL_RETRY_BACKOFF": "1", "HOOK_KILL_GRACE": "1"}
    stack = make_stack(sqlite_url, nats_url, families=FAMILIES, env=env)
    bad = ["/hang", "/drip", "/drop", "/redirect-loop/0", "/status/404", "/status/500", "/big/50", "/binary"]
    with MemorySampler(lambda: stack_pids(stack)) as memory:
        crawl_id = submit(stack, urls=[site.url(p) for p in bad], plugins=PLUGINS, config={"MAX_URL_ATTEMPTS": 1})
        state = wait_sealed(stack, crawl_id, timeout=600)
    peak = memory.peak / 2**20
    print(f"FAULT bad pages: sealed {state['snapshots']['sealed']}/{len(bad)}, peak {peak:.0f} MiB")
    assert state["snapshots"]["sealed"] == len(bad)
    assert state["http_errors"] >= 2 and peak < 2048
    # a hook killed at its timeout gets SIGTERM, then SIGKILL HOOK_KILL_GRACE later, with its group:
    # what is still there 10 s after the seal is an orphan (the message says what was there at it)
    db = Database(sqlite_url)
    at_seal = describe_processes(hook_processes(crawl_id, db))
    wait_until(lambda: not hook_processes(crawl_id, db), 10, f"the crawl's hook processes to end ({at_seal})")


@pytest.mark.parametrize("links", [5000, 20000])
def test_a_page_with_thousands_of_links_loses_none_within_the_crawl_limit(
    sqlite_url, nats_url, make_stack, site, links
):
    # the operator allows crawls of this size (a crawl may only lower CRAWL_MAX_URLS)
    stack = make_stack(sqlite_url, nats_url, families=FAMILIES, env={"CRAWL_MAX_URLS": str(links + 1)})
    db = Database(sqlite_url)
    crawl_id = submit(
        stack,
        urls=[site.url(f"/links/{links}")],
        plugins=["parse_html_urls", "wget"],
        max_depth=1,
        config={"CRAWL_MAX_CONCURRENT_SNAPSHOTS": 2},
    )
    wait_until(lambda: snapshot_count(db, crawl_id, depth=1) == links, 300, f"{links} child snapshots")
    # the children are due; other crawls are not held up, and cancel stops this one promptly
    small = submit(stack, urls=[site.url("/items/small.html")], plugins=["wget"])
    wait_sealed(stack, small, timeout=120)
    assert api(stack).post(f"/api/v1/crawls/{crawl_id}/cancel").status_code == 202
    state = wait_sealed(stack, crawl_id, timeout=120)
    assert state["cancelled"] and state["snapshots"]["total"] == links + 1


def test_a_huge_import_starts_at_once_and_does_not_hold_up_a_small_crawl(sqlite_url, nats_url, make_stack, site):
    stack = make_stack(sqlite_url, nats_url, families=FAMILIES)
    db = Database(sqlite_url)
    client = api(stack)
    lines = "\n".join(site.url(f"/items/bulk-{i}.html") for i in range(10_000)).encode()
    started = time.monotonic()
    response = client.post("/api/v1/imports", content=lines, params={"plugins": "wget"})
    assert response.status_code == 201, response.text
    crawl_id = response.json()["crawl_id"]
    wait_until(lambda: snapshot_count(db, crawl_id) == 10_000, 120, "10,000 snapshot rows")
    print(f"FAULT 10,000-URL import: every snapshot row within {time.monotonic() - started:.1f} s")
    feed = client.post("/api/v1/feeds", json={"url": site.url("/feeds/items/5000.xml"), "plugins": ["wget"]}).json()
    feed_crawl = wait_until(lambda: _feed_crawl(db, feed["id"]), 120, "the 5,000-item feed's crawl")
    wait_until(lambda: snapshot_count(db, feed_crawl) == 5000, 120, "5,000 feed snapshots")
    small = submit(stack, urls=[site.url("/items/small.html")], plugins=["wget"])
    wait_sealed(stack, small, timeout=120)  # served at once, behind 15,000 queued snapshots
    for big in (crawl_id, feed_crawl):
        assert client.post(f"/api/v1/crawls/{big}/cancel").status_code == 202
    for big in (crawl_id, feed_crawl):
        assert wait_sealed(stack, big, timeout=120)["cancelled"]


def _feed_crawl(db: Database, schedule_id: str) -> str | None:
    with db.read() as s:
        return s.scalar(select(Crawl.id).where(Crawl.schedule_id == schedule_id))


def test_a_dripping_feed_does_not_hold_up_another(sqlite_url, nats_url, make_stack, site):
    stack = make_stack(sqlite_url, nats_url, families=FAMILIES)
    db = Database(sqlite_url)
    client = api(stack)
    slow = client.post("/api/v1/feeds", json={"url": site.url("/feeds/drip.xml"), "plugins": ["wget"]}).json()
    wait_until(lambda: site.hits["/feeds/drip.xml"], 60, "the dripping feed to be fetched")
    normal = client.post("/api/v1/feeds", json={"url": site.url("/feeds/items/3.xml"), "plugins": ["wget"]}).json()
    wait_until(lambda: _feed_crawl(db, normal["id"]), 60, "the normal feed polled while the other drips")
    failed = wait_until(
        lambda: (f := client.get(f"/api/v1/feeds/{slow['id']}").json())["last_error"] and f, 120, "the drip to fail"
    )
    assert "longer than" in failed["last_error"]
    with db.read() as s:
        assert s.get(CrawlSchedule, slow["id"]).failures == 1


def test_a_family_without_executor_fails_its_tasks_and_says_so(sqlite_url, nats_url, make_stack, site):
    stack = make_stack(sqlite_url, nats_url, families=["fetch"], env={"TASK_PICKUP_TIMEOUT": "5"})
    crawl_id = submit(stack, urls=[site.url("/items/x.html")], plugins=["wget", "htmltotext"])
    status = wait_until(
        lambda: (st := api(stack).get("/api/v1/status").json())["stalled_families"] and st, 60, "a stalled family"
    )
    assert status["stalled_families"] == ["extract"]
    state = wait_sealed(stack, crawl_id, timeout=120)
    results = api(stack).get("/api/v1/snapshots", params={"crawl_id": crawl_id}).json()["items"][0]["results"]
    extract = [r for r in results if r["plugin"] == "htmltotext"]
    assert extract and extract[0]["status"] == "failed" and "no executor for family extract" in extract[0]["output_str"]
    assert state["snapshots"]["sealed"] == 1
