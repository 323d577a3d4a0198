"""Prometheus metrics of a running Boxcar, scraped as Prometheus would: during a real crawl the
counters move (and never go back), histograms have their series, everything parses with
prometheus_client's parser, and the Grafana dashboard reads only metrics that the scrape shows;
a service process of its own serves its own metrics on ``METRICS_PORT``."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import nats
from prometheus_client.parser import text_string_to_metric_families

from boxcar.cli.client import STACK_FILE
from boxcar.cli.stack import EmbeddedStack, free_port
from boxcar.crawl_runner import queries as q
from boxcar.shared import bus
from boxcar.shared.clock import utcnow
from boxcar.shared.db import Database
from boxcar.shared.db.models import STARTED, Crawl, Snapshot
from boxcar.shared.ids import new_id
from boxcar.shared.messages import ArchiveResultRecord, ResultStatus, Seed
from boxcar.shared.settings import Settings
from tests.dashboards import dashboard_metric_names, exported_names, load_dashboard
from tests.helpers import api, load_crawl, submit, wait_until


class Scrape:
    """One scrape, parsed: ``value(name, **labels)`` sums the samples whose labels include those."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.families = {f.name: f for f in text_string_to_metric_families(text)}
        self.samples = [s for f in self.families.values() for s in f.samples]

    def value(self, name: str, **labels: str) -> float:
        return sum(s.value for s in self.samples if s.name == name and labels.items() <= s.labels.items())

    def counters(self) -> dict[tuple[str, tuple], float]:
        """Every counter sample of Boxcar's (``boxcar_*_total``), by name and labels."""
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for s in self.samples
            if s.name.startswith("boxcar_") and s.name.endswith("_total")
        }


def scrape(client: httpx.Client, url: str = "/metrics") -> Scrape:
    response = client.get(url)
    assert response.status_code == 200, response.text[:300]
    assert response.headers["content-type"].startswith("text/plain")
    return Scrape(response.text)


def test_counters_move_during_a_crawl_and_parse(sqlite_url, nats_url, make_stack, site_urls):
    """The one-process stack: ingest's ``/metrics`` (a token) shows every service's metrics, and
    ``METRICS_PORT`` the same without a token. Scraped before, during and after a 4-page crawl
    (one snapshot at a time, wget then parse_html_urls: two families, two stages)."""
    port = free_port()
    env = {"PLUGINS": "wget,parse_html_urls", "CRAWL_MAX_CONCURRENT_SNAPSHOTS": "1", "METRICS_PORT": str(port)}
    stack = make_stack(sqlite_url, nats_url, families=["fetch", "parse"], env=env, shape="one")
    client = api(stack)
    assert httpx.get(f"{stack.api_url}/metrics").status_code == 401  # ingest's endpoint wants a token
    before = scrape(client)
    crawl_id = submit(stack, urls=site_urls(4))

    scrapes: list[Scrape] = []

    def sealed() -> bool:
        scrapes.append(scrape(client))
        state = client.get(f"/api/v1/crawls/{crawl_id}").json()
        return state["status"] == "sealed" and state.get("results_pending") == 0

    wait_until(sealed, 240, f"crawl {crawl_id} to seal, scraping all the while", interval=0.1)
    _, snapshots, results = load_crawl(Database(sqlite_url), crawl_id)
    assert len(snapshots) == 4 and len(results) == 8, [(r.plugin, r.status) for r in results]

    def caught_up() -> Scrape | None:  # the projector counts right after its commit
        last = scrape(client)
        return last if last.value("boxcar_projector_events_total", kind="archiveresult") >= 8 else None

    after = wait_until(caught_up, 30, "the projector's counters to catch up")

    # counters never go back, scrape after scrape, and they moved while the crawl ran
    series = [before, *scrapes, after]
    for earlier, later in zip(series, series[1:], strict=False):
        now = later.counters()
        assert all(now.get(key, 0) >= value for key, value in earlier.counters().items())
    hooks = [s.value("boxcar_hooks_total") for s in series]
    assert hooks[0] == 0 and hooks[-1] == 8
    assert any(0 < n < 8 for n in hooks), f"no scrape saw the crawl half done: {hooks}"

    # what the crawl did, counted once each
    assert after.value("boxcar_hooks_total", family="fetch", plugin="wget") == 4
    assert after.value("boxcar_hooks_total", family="parse", plugin="parse_html_urls") == 4
    assert sum(after.value("boxcar_hooks_total", status=r.status) for r in {r.status: r for r in results}.values()) == 8
    assert after.value("boxcar_tasks_dispatched_total") == 8
    assert after.value("boxcar_tasks_total", family="fetch", status="succeeded") == 4
    assert after.value("boxcar_tasks_total", family="parse", status="succeeded") == 4
    assert after.value("boxcar_messages_total", consumer="hooks-fetch", outcome="acked") == 4
    assert after.value("boxcar_claims_total", row="crawl", outcome="won") >= 1
    assert after.value("boxcar_claims_total", row="snapshot", outcome="won") == 4
    assert after.value("boxcar_seals_total", row="snapshot") == 4
    assert after.value("boxcar_seals_total", row="crawl") == 1
    assert after.value("boxcar_messages_total", outcome="dead_lettered") == 0

    # histograms: buckets up to +Inf, a sum and a count
    for name, labels, count in (
        ("boxcar_hook_duration_seconds", {"family": "fetch", "plugin": "wget"}, 4),
        ("boxcar_task_duration_seconds", {"family": "parse"}, 4),
        ("boxcar_projector_lag_seconds", {}, 8),
        ("boxcar_runner_pass_seconds", {}, 1),
    ):
        assert after.value(f"{name}_count", **labels) >= count, name
        assert after.value(f"{name}_bucket", le="+Inf", **labels) == after.value(f"{name}_count", **labels), name
        assert after.value(f"{name}_sum", **labels) > 0, name
        assert after.families[name].type == "histogram"
    assert after.value("boxcar_hook_duration_seconds_count", family="fetch", plugin="wget") == 4

    # the stack's gauges (JetStream consumer info, the database), ingest's HTTP, the process
    assert after.value("boxcar_snapshots", status="sealed") == 4
    for family in ("fetch", "parse"):
        assert ("boxcar_tasks_pending", (("family", family),)) in {
            (s.name, tuple(s.labels.items())) for s in after.samples
        }
        assert after.value("boxcar_tasks_pending_age_seconds", family=family) == 0  # none waits now
    assert after.value("litestar_requests_total", path="/api/v1/crawls", method="POST", status_code="201") == 1
    assert after.value("process_resident_memory_bytes") > 0

    # METRICS_PORT: the same metrics, no token
    unauthenticated = scrape(httpx.Client(timeout=30), f"http://127.0.0.1:{port}/metrics")
    assert set(unauthenticated.families) == set(after.families)
    assert unauthenticated.value("boxcar_seals_total", row="crawl") == 1

    # the dashboard reads nothing the stack does not export
    assert dashboard_metric_names(load_dashboard()) - exported_names(after.text) == set()


def test_a_service_process_serves_its_own_metrics(tmp_path: Path, nats_url):
    """``python -m boxcar.result_projector`` with ``METRICS_PORT``: its port answers with its own
    counters (not ingest's gauges), which move when it projects a hook's result, with the lag."""
    db_url = f"sqlite:///{tmp_path / 'index.sqlite3'}"
    db = Database(db_url)
    db.upgrade()
    now = utcnow()
    crawl = Crawl(id=new_id(), status=STARTED, retry_at=now, output_dir="x", seed_count=1, seeded=1)
    with db.write() as s:
        s.add(crawl)
        s.flush()
        q.insert_snapshots(s, crawl, [Seed.parse("https://example.com/")], depth=0, parent_id=None, now=now)
    with db.read() as s:
        snapshot_id = s.scalar(Snapshot.__table__.select().with_only_columns(Snapshot.id))
    db.dispose()

    port = free_port()
    env = {
        **os.environ,
        "DATABASE_URL": db_url,
        "NATS_URL": nats_url,
        "DATA_DIR": str(tmp_path / "data"),
        "METRICS_PORT": str(port),
    }
    with open(tmp_path / "projector.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "boxcar.result_projector"], env=env, stdout=log, stderr=subprocess.STDOUT
        )
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10)

    def answers() -> Scrape | None:
        assert proc.poll() is None, (tmp_path / "projector.log").read_text()[-2000:]
        try:
            return scrape(client)
        except httpx.TransportError:
            return None

    try:
        first = wait_until(answers, 60, "the projector's metrics port")
        assert "boxcar_projector_events" in first.families and "process_cpu_seconds" in first.families
        assert "boxcar_crawls" not in first.families  # the stack's gauges are ingest's
        assert first.value("boxcar_projector_events_total", kind="archiveresult") == 0

        ended = utcnow() - timedelta(seconds=5)
        record = ArchiveResultRecord(
            id=new_id(),
            snapshot_id=snapshot_id,
            crawl_id=crawl.id,
            plugin="wget",
            hook_name="on_Snapshot__35_wget.finite.bg",
            status=ResultStatus.SUCCEEDED,
            start_ts=ended - timedelta(seconds=1),
            end_ts=ended,
        )

        async def publish() -> None:
            nc = await nats.connect(nats_url)
            js = nc.jetstream()
            await bus.ensure_streams(js)
            await bus.publish(js, bus.SUBJECT_ARCHIVERESULT, record, msg_id=f"archiveresult.{record.id}")
            await nc.close()

        asyncio.run(publish())

        def projected() -> Scrape | None:
            last = scrape(client)
            return last if last.value("boxcar_projector_events_total", kind="archiveresult") == 1 else None

        last = wait_until(projected, 60, "the projector to count the result")
        assert last.value("boxcar_projector_lag_seconds_count") == 1
        assert last.value("boxcar_projector_lag_seconds_sum") >= 5
        assert last.value("boxcar_projector_lag_seconds_bucket", le="1.0") == 0  # 5 s late, not 1
        assert last.value("boxcar_messages_total", consumer="projector", outcome="acked") >= 1
        assert last.value("process_resident_memory_bytes") > 0
    finally:
        proc.terminate()
        proc.wait(30)
    assert proc.returncode == 0, (tmp_path / "projector.log").read_text()[-2000:]


def test_every_service_process_serves_its_own_metrics(sqlite_url, nats_url, make_stack, site_urls):
    """The processes shape, as Compose runs the services: each process serves its own metrics on
    its own port (``stack.json`` says which), each counting what that service did."""
    base = free_port()
    env = {"PLUGINS": "wget", "METRICS_PORT": str(base)}
    stack = make_stack(sqlite_url, nats_url, families=["fetch"], env=env, shape="processes")
    ports = json.loads((stack.data_dir / STACK_FILE).read_text())["metrics"]
    assert sorted(ports) == sorted(c.name for c in stack.children)
    assert len(set(ports.values())) == len(ports)
    crawl_id = submit(stack, urls=site_urls(1))
    wait_until(lambda: api(stack).get(f"/api/v1/crawls/{crawl_id}").json()["status"] == "sealed", 120, "the seal")
    client = httpx.Client(timeout=30)

    def scraped(name: str) -> Scrape:
        return scrape(client, f"http://127.0.0.1:{ports[name]}/metrics")

    def counted(name: str, metric: str, **labels: str) -> Scrape | None:
        last = scraped(name)
        return last if last.value(metric, **labels) >= 1 else None

    executor = wait_until(lambda: counted("hook-executor-fetch", "boxcar_hooks_total"), 30, "the executor's count")
    assert executor.value("boxcar_hooks_total", family="fetch", plugin="wget") == 1
    assert executor.value("boxcar_seals_total") == 0  # the runner seals, not the executor
    runner = wait_until(lambda: counted("crawl-runner", "boxcar_seals_total", row="crawl"), 30, "the runner's seal")
    assert runner.value("boxcar_hooks_total") == 0 and runner.value("boxcar_tasks_total", status="succeeded") == 1
    wait_until(lambda: counted("result-projector", "boxcar_projector_lag_seconds_count"), 30, "the projector's count")
    ingest = scraped("ingest")
    assert ingest.value("boxcar_snapshots", status="sealed") == 1  # the stack's gauges: ingest's
    assert "boxcar_crawls" not in scraped("webhook-sender").families
    for name in ports:
        assert scraped(name).value("process_resident_memory_bytes") > 0, name


def test_the_oldest_waiting_task_age_comes_from_the_stream(nats_url):
    """``boxcar_tasks_pending_age_seconds``: the age of the first task of a family its consumer has
    not delivered (JetStream's next-by-subject get), with a consumer or before one exists."""
    from boxcar.ingest.status import family_status
    from boxcar.shared.families import load_families
    from boxcar.shared.messages import HookTask

    def task(family: str, n: int) -> HookTask:
        return HookTask(
            task_id=f"t{n}",
            crawl_id="c",
            snapshot_id="s",
            url="https://example.com/",
            stage=1,
            family=family,
            snap_dir="x",
        )

    async def measure() -> tuple[dict, float]:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        await bus.ensure_streams(js)
        await bus.ensure_consumer(js, bus.TASKS_STREAM, bus.family_consumer("fetch"), bus.task_subject("fetch"))
        first = utcnow()
        for n, family in enumerate(("fetch", "parse", "fetch")):
            await bus.publish(js, bus.task_subject(family), task(family, n), msg_id=f"t{n}")
        status = await family_status(js, load_families())
        waited = (utcnow() - first).total_seconds()
        await nc.close()
        return status, waited

    status, waited = asyncio.run(measure())
    assert status["fetch"].pending == 2 and status["parse"].pending == 1
    for family in ("fetch", "parse"):  # parse: no consumer yet, read from the stream alone
        assert 0 < status[family].oldest_pending_seconds <= waited + 0.01, family
    assert status["index"].pending == 0 and status["index"].oldest_pending_seconds == 0


def test_the_processes_shape_gives_each_process_its_own_port(tmp_path):
    """``EMBEDDED_SHAPE=processes`` with ``METRICS_PORT``: the children get consecutive ports (no
    two bind the same one); with 0, none is set."""
    stack = EmbeddedStack(Settings(data_dir=tmp_path, metrics_port=9400), shape="processes")
    assert [stack._metrics_env(i) for i in range(3)] == [{"METRICS_PORT": str(9400 + i)} for i in range(3)]
    assert EmbeddedStack(Settings(data_dir=tmp_path), shape="processes")._metrics_env(2) == {}
