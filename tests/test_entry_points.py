"""A URL is canonicalized exactly once, where it enters Boxcar: along the API, import, feed and
discovered-link paths, and never again on its way to a snapshot (no NATS needed: the decisions
are called directly on a real SQLite database)."""

from __future__ import annotations

import sys
from collections import Counter

import pytest

from boxcar.crawl_runner import queries as q
from boxcar.crawl_runner.decisions import Decisions
from boxcar.crawl_runner.feeds import feed_items
from boxcar.hook_executor.hooks import HookProcess
from boxcar.ingest.api.schemas import CrawlCreate
from boxcar.ingest.services import CrawlService
from boxcar.shared import messages, urls
from boxcar.shared.db import Database
from boxcar.shared.families import load_families
from boxcar.shared.messages import TaskCompleted
from boxcar.shared.plugins import get_catalog, parse_hook
from boxcar.shared.settings import Settings

N = 7


@pytest.fixture
def calls(monkeypatch) -> Counter:
    """How often URLs were canonicalized, by what."""
    counted: Counter = Counter()
    real = urls.canonical_parts

    def counting(url: str):
        counted[url] += 1
        return real(url)

    monkeypatch.setattr(messages, "canonical_parts", counting)
    monkeypatch.setattr(urls, "canonical_parts", counting)
    return counted


@pytest.fixture
def runner(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'index.sqlite3'}")
    db.upgrade()
    yield Decisions(Settings(data_dir=tmp_path), db)
    db.dispose()


def started_crawl(runner: Decisions, crawl_id: str) -> list:
    """Start the crawl and seed it, as the runner's pass does; returns its first tasks."""
    with runner.db.read() as s:
        seen = s.get(q.Crawl, crawl_id).retry_at
    runner.start_crawl(crawl_id, seen)
    runner.seed_crawls()
    return [o.msg for o in runner.start_snapshots(crawl_id) if hasattr(o.msg, "task_id")]


def test_api_path(calls, runner):
    service = CrawlService(runner.db, runner.settings, get_catalog(), load_families())
    body = CrawlCreate(urls=[f"HTTPS://Example.com/{i}" for i in range(N)], plugins=["wget"])
    crawl, _ = service.create_crawl(body, owner="system")
    assert sum(calls.values()) == N
    started_crawl(runner, crawl.id)
    assert sum(calls.values()) == N and set(calls.values()) == {1}


def test_import_path(calls, runner):
    service = CrawlService(runner.db, runner.settings, get_catalog(), load_families())
    data = "\n".join(f"https://example.com/{i}" for i in range(N)).encode()
    outcome = service.create_import(
        [(data, "urls.txt")], format=None, tags=[], max_depth=0, plugins=["wget"], only_new=None, owner="system"
    )
    started_crawl(runner, outcome.crawl.id)
    assert sum(calls.values()) == N and set(calls.values()) == {1}


def test_feed_path(calls, runner):
    items = "".join(f"<item><link>https://example.com/{i}</link></item>" for i in range(N))
    by_key, _ = feed_items(f'<rss version="2.0"><channel>{items}</channel></rss>'.encode(), "https://example.com/f")
    assert len(by_key) == N and sum(calls.values()) == N


def test_discovered_link_path(calls, runner, tmp_path):
    plugin = tmp_path / "plugins" / "probe"
    plugin.mkdir(parents=True)
    hook_file = plugin / "on_Snapshot__10_probe.py"
    hook_file.write_text("")
    proc = HookProcess(parse_hook("probe", hook_file), [sys.executable], tmp_path, {}, 10)
    proc.records = [{"type": "Snapshot", "url": f"https://example.com/found/{i}"} for i in range(N)]
    found = proc.discovered()
    assert sum(calls.values()) == N
    service = CrawlService(runner.db, runner.settings, get_catalog(), load_families())
    crawl, _ = service.create_crawl(
        CrawlCreate(urls=["https://example.com/"], plugins=["wget"], max_depth=1), owner="system"
    )
    calls.clear()
    [task] = started_crawl(runner, crawl.id)
    runner.record_completion(TaskCompleted.of(task), found)
    assert not calls, f"canonicalized again on their way to snapshots: {sorted(calls)}"
    with runner.db.read() as s:
        assert s.scalar(q.select(q.func.count()).where(q.Snapshot.depth == 1)) == N
