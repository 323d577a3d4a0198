"""Crashes and outages mid-crawl, with the services run separately as Compose runs them, on
Postgres and a NATS server the test controls: every scenario ends with each URL sealed once, one
result per hook, nothing stuck, no orphan process, and the first seal after the restart within
30 s. Each prints its row of the closing note's table (``FAULT …``)."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import httpx
import pytest

from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from tests.faults.harness import (
    PLUGINS,
    MemorySampler,
    NatsServer,
    assert_clean,
    outcome,
    stack_pids,
    wait_progress,
)
from tests.helpers import submit, wait_sealed, wait_until
from tests.private_postgres import PrivatePostgres

FAMILIES = ["fetch", "extract", "parse", "index"]
ENV = {"PLUGINS": ",".join(PLUGINS), "CRAWL_MAX_CONCURRENT_SNAPSHOTS": "4", "EXECUTOR_CONCURRENCY": "2"}
PAGES = 20


@pytest.fixture
def nats(tmp_path):
    server = NatsServer(tmp_path / "nats-store")
    server.start()
    yield server
    server.stop()


def api_up(stack) -> bool:
    try:
        return httpx.get(f"{stack.api_url}/healthz", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def kill(child) -> None:
    """SIGKILL a service process (its hooks die with it: PDEATHSIG)."""
    os.kill(child.proc.pid, signal.SIGKILL)
    child.proc.wait()


@pytest.mark.parametrize(
    "victim",
    ["crawl-runner", "hook-executor-fetch", "hook-executor-extract", "result-projector", "binary-resolver", "ingest"],
)
def test_sigkill_of_a_service_mid_crawl(victim, pg_url, nats, make_stack, site_urls):
    stack = make_stack(pg_url, nats.url, families=FAMILIES, env=ENV)
    db, urls = Database(pg_url), site_urls(PAGES)
    with MemorySampler(lambda: stack_pids(stack)) as memory:
        crawl_id = submit(stack, urls=urls, plugins=PLUGINS)
        wait_progress(db, crawl_id, 3)
        kill(next(c for c in stack.children if c.name == victim))
        restarted = utcnow()
        assert victim in stack.supervise_once()
        wait_until(lambda: api_up(stack), 60, f"{victim} back")
        wait_sealed(stack, crawl_id, timeout=600)
    assert_clean(
        outcome(
            db, crawl_id, urls, f"SIGKILL {victim}", restarted_at=restarted, peak=memory.peak, data_dir=stack.data_dir
        )
    )


def test_the_whole_stack_killed_and_restarted(pg_url, nats, make_stack, site_urls):
    stack = make_stack(pg_url, nats.url, families=FAMILIES, env=ENV)
    db, urls = Database(pg_url), site_urls(PAGES)
    crawl_id = submit(stack, urls=urls, plugins=PLUGINS)
    wait_progress(db, crawl_id, 3)
    for child in stack.children:  # kill -9 of everything at once, no goodbyes
        os.kill(child.proc.pid, signal.SIGKILL)
    for child in stack.children:
        child.proc.wait()
    stack.stop()  # everything is dead already: this only lets go of the data dir, as a dead process would
    restarted = utcnow()
    again = make_stack(pg_url, nats.url, families=FAMILIES, env=ENV, data_dir=stack.data_dir)
    with MemorySampler(lambda: stack_pids(again)) as memory:
        wait_sealed(again, crawl_id, timeout=600)
    assert_clean(
        outcome(
            db,
            crawl_id,
            urls,
            "kill -9 of the whole stack",
            restarted_at=restarted,
            peak=memory.peak,
            data_dir=stack.data_dir,
        )
    )


def test_two_runners_and_two_projectors_one_of_each_killed(pg_url, nats, make_stack, site_urls):
    stack = make_stack(pg_url, nats.url, families=FAMILIES, env=ENV)
    stack.add_replica("crawl-runner")
    stack.add_replica("result-projector")
    db, urls = Database(pg_url), site_urls(PAGES)
    with MemorySampler(lambda: stack_pids(stack)) as memory:
        crawl_id = submit(stack, urls=urls, plugins=PLUGINS)
        wait_progress(db, crawl_id, 3)
        kill(next(c for c in stack.children if c.name == "crawl-runner"))
        kill(next(c for c in stack.children if c.name == "result-projector-2"))
        killed_at = utcnow()  # no restart: the survivors carry on alone
        wait_sealed(stack, crawl_id, timeout=600)
    assert_clean(
        outcome(db, crawl_id, urls, "one of two runners and projectors", restarted_at=killed_at, peak=memory.peak)
    )


def test_nats_down_for_30_seconds(pg_url, nats, make_stack, site_urls):
    stack = make_stack(pg_url, nats.url, families=FAMILIES, env=ENV)
    db, urls = Database(pg_url), site_urls(PAGES)
    with MemorySampler(lambda: stack_pids(stack)) as memory:
        crawl_id = submit(stack, urls=urls, plugins=PLUGINS)
        wait_progress(db, crawl_id, 3)
        nats.stop()
        time.sleep(30)  # the outage itself: this scenario is 30 s without NATS
        nats.start()
        restarted = utcnow()
        wait_sealed(stack, crawl_id, timeout=600)
    assert_clean(
        outcome(db, crawl_id, urls, "NATS down 30 s", restarted_at=restarted, peak=memory.peak, data_dir=stack.data_dir)
    )


def test_postgres_down_for_30_seconds(nats, make_stack, site_urls, tmp_path):
    postgres = PrivatePostgres(tmp_path)
    postgres.start()
    try:  # the stack's own teardown (make_stack) stops the services after this
        stack = make_stack(postgres.url, nats.url, families=FAMILIES, env=ENV)
        db, urls = Database(postgres.url), site_urls(PAGES)
        with MemorySampler(lambda: stack_pids(stack)) as memory:
            crawl_id = submit(stack, urls=urls, plugins=PLUGINS)
            wait_progress(db, crawl_id, 3)
            postgres.stop()
            time.sleep(30)  # the outage itself
            postgres.start()
            restarted = utcnow()
            for name in stack.supervise_once():  # a service that gave up on the database comes back
                print(f"{name} was restarted after the outage")
            wait_sealed(stack, crawl_id, timeout=600)
        assert_clean(
            outcome(
                db,
                crawl_id,
                urls,
                "Postgres down 30 s",
                restarted_at=restarted,
                peak=memory.peak,
                data_dir=stack.data_dir,
            )
        )
        db.dispose()
    finally:
        postgres.stop()
        postgres.remove()


def test_every_service_stops_within_its_grace_on_sigterm(pg_url, nats, make_stack, site_urls):
    stack = make_stack(pg_url, nats.url, families=FAMILIES, env=ENV)
    db = Database(pg_url)
    crawl_id = submit(stack, urls=site_urls(6), plugins=PLUGINS)
    wait_progress(db, crawl_id, 1)
    for child in stack.children:
        child.proc.send_signal(signal.SIGTERM)
    started = time.monotonic()
    for child in stack.children:
        try:
            child.proc.wait(25)
        except subprocess.TimeoutExpired:
            pytest.fail(f"{child.name} still running 25 s after SIGTERM")
    print(f"FAULT SIGTERM: every service stopped in {time.monotonic() - started:.1f} s")
    # a clean stop, as an orchestrator reads it (compose's restart policies, systemd): status 0
    # (ingest too: uvicorn no longer raises the SIGTERM it caught again after shutting down)
    assert {child.name: child.proc.returncode for child in stack.children} == {c.name: 0 for c in stack.children}
