"""The runner's decisions, as plain functions over a real SQLite database (no NATS needed):
what a completion, a failure, a retryable status or a cancel turns into."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import event, select

from boxcar.crawl_runner import queries as q
from boxcar.crawl_runner.decisions import Decisions
from boxcar.crawl_runner.planner import plan_for
from boxcar.shared.clock import utcnow
from boxcar.shared.crawlconfig import CrawlConfig
from boxcar.shared.db import Database
from boxcar.shared.db.models import Crawl, Snapshot, SnapshotTask
from boxcar.shared.messages import ArchiveResultRecord, HookTask, Seed, SnapshotEvent, TaskCompleted
from boxcar.shared.plugins import get_catalog
from boxcar.shared.settings import Settings


@pytest.fixture
def runner(tmp_path) -> Decisions:
    db = Database(f"sqlite:///{tmp_path / 'index.sqlite3'}")
    db.upgrade()
    settings = Settings(data_dir=tmp_path, url_retry_backoff=30)
    yield Decisions(settings, db)
    db.dispose()


def make_crawl(runner: Decisions, urls: list[str], **config) -> str:
    crawl = Crawl.new(
        user="system",
        first_url=urls[0],
        seed_count=0,
        plugins=["wget", "htmltotext"],
        config=CrawlConfig.build(runner.settings, runner.catalog, config, environ={}).values,
        max_depth=1,
    )
    crawl.status = "started"
    with runner.db.write() as s:
        s.add(crawl)
        s.flush()
        q.insert_snapshots(s, crawl, [Seed.parse(u) for u in urls], depth=0, parent_id=None, now=utcnow())
    return crawl.id


def start(runner: Decisions, crawl_id: str) -> list:
    return runner.start_snapshots(crawl_id)


def tasks(out) -> list[HookTask]:
    return [o.msg for o in out if isinstance(o.msg, HookTask)]


def complete(runner, task: HookTask, **fields) -> list:
    return runner.record_completion(TaskCompleted.of(task, **fields), fields.pop("discovered", []))


def test_stages_run_in_order_then_snapshot_and_crawl_seal(runner):
    crawl_id = make_crawl(runner, ["https://example.com/"])
    [fetch] = tasks(start(runner, crawl_id))
    assert (fetch.family, fetch.stage, fetch.plugins) == ("fetch", 1, ["wget"])
    [extract] = tasks(complete(runner, fetch, http_status=200))
    assert (extract.family, extract.stage) == ("extract", 2)
    out = complete(runner, extract)
    events = [o.subject for o in out]
    assert "events.snapshot.sealed" in events and "events.crawl.sealed" in events
    with runner.db.read() as s:
        snap = s.scalar(select(Snapshot).where(Snapshot.crawl_id == crawl_id))
        assert snap.status == "sealed" and snap.http_status == 200
    assert complete(runner, extract) == []  # a redelivered completion changes nothing


def test_a_failed_task_gives_each_of_its_hooks_a_failed_result(runner):
    crawl_id = make_crawl(runner, ["https://example.com/"])
    [fetch] = tasks(start(runner, crawl_id))
    out = complete(runner, fetch, status="failed", error="task failed 3 deliveries")
    stand_ins = [o.msg for o in out if isinstance(o.msg, ArchiveResultRecord)]
    hooks = {h.name for h in get_catalog().snapshot_hooks(["wget"])}
    assert {r.hook_name for r in stand_ins} == hooks
    assert all(r.fallback and r.status == "failed" and "3 deliveries" in r.output_str for r in stand_ins)
    assert tasks(out), "the snapshot goes on to its next stage"


def test_retryable_status_queues_the_snapshot_again_until_attempts_run_out(runner):
    crawl_id = make_crawl(runner, ["https://example.com/"], MAX_URL_ATTEMPTS=2)
    [fetch] = tasks(start(runner, crawl_id))
    out = complete(runner, fetch, http_status=503)
    assert [o.msg.status for o in out if isinstance(o.msg, SnapshotEvent)] == ["queued"]
    with runner.db.read() as s:
        snap = s.scalar(select(Snapshot).where(Snapshot.crawl_id == crawl_id))
        assert snap.status == "queued" and snap.retry_at > utcnow() + timedelta(seconds=25)
        assert snap.http_status is None  # the next attempt says what it sees
    with runner.db.write() as s:
        s.get(Snapshot, snap.id).retry_at = utcnow()
    [again] = tasks(start(runner, crawl_id))
    assert again.task_id != fetch.task_id and again.attempt == 2
    [extract] = tasks(complete(runner, again, http_status=503))  # the last attempt goes on
    assert extract.stage == 2
    with runner.db.read() as s:
        assert s.get(Snapshot, snap.id).http_status == 503


def test_network_error_is_retryable_and_recorded(runner):
    crawl_id = make_crawl(runner, ["https://example.com/"], MAX_URL_ATTEMPTS=2)
    [fetch] = tasks(start(runner, crawl_id))
    complete(runner, fetch, network_error="wget: failed: Connection refused.")
    with runner.db.read() as s:
        snap = s.scalar(select(Snapshot).where(Snapshot.crawl_id == crawl_id))
        assert snap.status == "queued"


def test_discovered_urls_become_children_within_the_crawl_limit(runner):
    crawl_id = make_crawl(runner, ["https://example.com/"], CRAWL_MAX_URLS=3)
    [fetch] = tasks(start(runner, crawl_id))
    found = [Seed.parse(f"https://example.com/{i}", source="parse_html_urls") for i in range(10)]
    runner.record_completion(TaskCompleted.of(fetch), found)
    with runner.db.read() as s:
        children = list(s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id, Snapshot.depth == 1)))
    assert len(children) == 2  # 3 snapshots in all
    assert all(c.parent_snapshot_id for c in children)


def test_cancel_seals_everything_with_skipped_results_for_unfinished_hooks(runner):
    crawl_id = make_crawl(runner, ["https://example.com/a", "https://example.com/b"], CRAWL_MAX_CONCURRENT_SNAPSHOTS=1)
    [fetch] = tasks(start(runner, crawl_id))
    with runner.db.write() as s:
        assert q.cancel_crawl(s, crawl_id, utcnow())
    out = runner.stop_crawl(crawl_id)
    stand_ins = [o.msg for o in out if isinstance(o.msg, ArchiveResultRecord)]
    assert {r.plugin for r in stand_ins} == {"wget", "htmltotext"}
    assert all(r.status == "skipped" and r.output_str == "cancelled" for r in stand_ins)
    assert [o.subject for o in out][-1] == "events.crawl.sealed"
    with runner.db.read() as s:
        assert {x.status for x in s.scalars(select(Snapshot).where(Snapshot.crawl_id == crawl_id))} == {"sealed"}
        assert s.get(Crawl, crawl_id).status == "sealed"
        assert s.get(SnapshotTask, fetch.task_id).status == "cancelled"
    assert complete(runner, fetch) == []  # the cancelled task's late completion changes nothing
    assert start(runner, crawl_id) == []


def test_a_crawl_config_disabling_a_plugin_plans_without_it(runner):
    crawl_id = make_crawl(runner, ["https://example.com/"], WGET_ENABLED=False)
    with runner.db.read() as s:
        plan = plan_for(s.get(Crawl, crawl_id), runner.settings, runner.catalog, runner.families)
    assert "wget" not in plan.hooks_from(plan.first_stage).__repr__() and plan.families(plan.first_stage) == {
        "extract": ["htmltotext"]
    }


def test_a_small_crawl_behind_a_huge_one_starts_at_once(runner):
    huge = make_crawl(runner, [f"https://big.example/{i}" for i in range(300)], CRAWL_MAX_CONCURRENT_SNAPSHOTS=2)
    runner.start_due_snapshots()
    small = make_crawl(runner, ["https://small.example/"])
    out = runner.start_due_snapshots()  # the huge crawl is at its limit: the small one is served
    assert [t.crawl_id for t in tasks(out)] == [small]
    with runner.db.read() as s:
        assert q.started_count(s, huge) == 2 and q.started_count(s, small) == 1


def test_every_update_of_a_snapshot_or_crawl_on_the_way_to_the_seal_is_guarded(runner):
    """Moving a snapshot through its stages and sealing it changes its row and its crawl's only
    through the named conditional UPDATEs (``WHERE … status = …``), seven of them, and the commit
    flushes no UPDATE of its own (a change to an object the runner holds would be one)."""
    crawl_id = make_crawl(runner, ["https://example.com/"])
    [fetch] = tasks(start(runner, crawl_id))
    updates: list[str] = []

    def seen(conn, cursor, statement, parameters, context, executemany):
        if statement.lstrip().upper().startswith("UPDATE"):
            updates.append(" ".join(statement.split()))

    event.listen(runner.db.engine, "before_cursor_execute", seen)
    try:
        [extract] = tasks(complete(runner, fetch, http_status=200))
        out = complete(runner, extract)
    finally:
        event.remove(runner.db.engine, "before_cursor_execute", seen)
    assert "events.crawl.sealed" in [o.subject for o in out]
    rows = [u for u in updates if u.startswith(("UPDATE snapshot ", "UPDATE crawl "))]
    assert len(rows) == 7, updates  # lock, response, move; lock, seal, the crawl's lock and seal
    for statement in rows:
        table = statement.split()[1]
        assert f"{table}.status = " in statement.partition(" WHERE ")[2], statement
