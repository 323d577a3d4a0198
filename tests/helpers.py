"""Helpers for cross-service tests: waiting on conditions, reading the archive."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import select

from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Crawl, Snapshot

INPUTS = Path(os.environ.get("BOXCAR_SHARED_DIR", Path(__file__).resolve().parents[2] / "shared")) / "inputs"


def wait_until[T](check: Callable[[], T], timeout: float, what: str, interval: float = 0.25) -> T:
    """Poll ``check`` until it returns something truthy; fail the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def api(stack) -> httpx.Client:
    """An HTTP client of a stack's API, with the stack's token."""
    return httpx.Client(base_url=stack.api_url, headers={"Authorization": f"Bearer {stack.token}"}, timeout=30)


def submit(stack, **payload) -> str:
    """POST a crawl to a stack and return its id."""
    response = api(stack).post("/api/v1/crawls", json=payload)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def wait_sealed(stack, crawl_id: str, timeout: float = 300) -> dict:
    """Wait until the crawl is sealed and every reported result is projected."""
    client = api(stack)

    def done():
        state = client.get(f"/api/v1/crawls/{crawl_id}").json()
        return state if state["status"] == "sealed" and state.get("results_pending") == 0 else None

    return wait_until(done, timeout, f"crawl {crawl_id} to seal")


def load_crawl(db: Database, crawl_id: str) -> tuple[Crawl, list[Snapshot], list[ArchiveResult]]:
    with db.read() as s:
        crawl = s.get(Crawl, crawl_id)
        snaps = list(s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id)))
        results = list(s.scalars(select(ArchiveResult).where(ArchiveResult.snapshot_id.in_([x.id for x in snaps]))))
    return crawl, snaps, results
