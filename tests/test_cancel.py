"""Cancel stops a crawl for good: its hooks are killed within seconds, nothing of it starts after
the cancel (nor after a restart), unfinished hooks are recorded ``skipped``: ``cancelled``, every
snapshot is sealed and then the crawl."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from boxcar.shared.db import Database
from boxcar.shared.db.models import Process, Snapshot
from boxcar.shared.settings import Settings
from tests.fault_site import FaultSite
from tests.helpers import api, hook_processes, is_warm_hook, load_crawl, submit, wait_sealed, wait_until

PLUGINS = ["wget", "favicon", "htmltotext", "hashes"]


def test_cancel_kills_hooks_seals_everything_and_nothing_runs_after_a_restart(
    sqlite_url, nats_url, make_stack, tmp_path
):
    db = Database(sqlite_url)
    with FaultSite() as site:
        # hooks that would hang for 10 minutes (the operator's TIMEOUT: a crawl may only lower it)
        stack = make_stack(sqlite_url, nats_url, families=["fetch", "extract", "index"], env={"TIMEOUT": "600"})
        hanging = [site.url(f"/hang/{i}") for i in range(4)]
        crawl_id = submit(stack, urls=hanging, plugins=PLUGINS)
        wait_until(lambda: sum(site.hits[f"/hang/{i}"] for i in range(4)) >= 1, 120, "a hook fetching a hanging page")
        running = wait_until(lambda: hook_processes(crawl_id, db), 30, "the crawl's hooks to run")
        if Settings().warm_hooks:  # the cancel must reach the forks too, and the check must see them
            assert any(is_warm_hook(p) for p in running), [p.pid for p in running]

        response = api(stack).post(f"/api/v1/crawls/{crawl_id}/cancel")
        assert response.status_code == 202, response.text
        state = wait_sealed(stack, crawl_id, timeout=60)
        assert state["cancelled"] and state["snapshots"]["sealed"] == state["snapshots"]["total"] == 4
        wait_until(lambda: not hook_processes(crawl_id, db), 10, "the crawl's hook processes to be killed")

        crawl, snaps, results = load_crawl(db, crawl_id)
        assert crawl.status == "sealed" and crawl.cancelled_at is not None
        assert all(s.status == "sealed" for s in snaps)
        assert crawl.modified_at >= max(s.modified_at for s in snaps), "crawl sealed before a snapshot"
        started = [s for s in snaps if s.attempts]
        assert started, "no snapshot had started"
        for snap in started:  # every hook of its plan has a result; the unfinished ones say why
            mine = [r for r in results if r.snapshot_id == snap.id]
            assert {r.plugin for r in mine} == set(PLUGINS)
            assert all(r.status != "succeeded" for r in mine)
            assert any(r.status == "skipped" and r.output_str == "cancelled" for r in mine)
        late = timedelta(seconds=1)  # a hook already being spawned when the cancel landed
        with db.read() as s:
            ids = [x.id for x in snaps]
            after = list(
                s.scalars(
                    select(Process).where(Process.snapshot_id.in_(ids), Process.started_at > crawl.cancelled_at + late)
                )
            )
        assert not after, (
            f"hooks started after the cancel at {crawl.cancelled_at}: "
            f"{[(p.hook_name, f'{p.started_at}') for p in after]}"
        )
        hits_before = sum(site.hits[f"/hang/{i}"] for i in range(4))
        processes_before = len(results)

        # a restart runs nothing of the cancelled crawl (a new crawl proves the stack is working)
        stack.stop()
        stack = make_stack(sqlite_url, nats_url, families=["fetch", "extract", "index"], data_dir=stack.data_dir)
        other = submit(stack, urls=[site.url("/items/after.html")], plugins=PLUGINS)
        wait_sealed(stack, other, timeout=300)
        assert sum(site.hits[f"/hang/{i}"] for i in range(4)) == hits_before
        _, _, results_after = load_crawl(db, crawl_id)
        assert len(results_after) == processes_before
        with db.read() as s:
            assert s.scalar(select(Snapshot.status).where(Snapshot.crawl_id == other)) == "sealed"
