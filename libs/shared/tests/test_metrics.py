"""``boxcar.shared.metrics``: names in prometheus_client's conventions, the ``METRICS_PORT``
server, joined registries, and ``db.after_commit`` (what the runner's counters rely on)."""

from __future__ import annotations

import socket

import httpx
import pytest
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import text

from boxcar.shared import metrics
from boxcar.shared.db import Database, after_commit
from boxcar.shared.settings import Settings

#: label names that would make a series per object (unbounded)
UNBOUNDED = {"id", "crawl_id", "snapshot_id", "task_id", "url", "domain", "error", "user", "path"}


def boxcar_metrics() -> list:
    return [m for m in vars(metrics).values() if hasattr(m, "_name") and hasattr(m, "_labelnames")]


def test_every_metric_follows_the_conventions():
    found = boxcar_metrics()
    assert len(found) >= 15
    for metric in found:
        name = metric._name
        assert name.startswith("boxcar_"), name
        if isinstance(metric, Counter):  # prometheus_client keeps a counter's name without _total
            assert not name.endswith("_total"), name
        elif not isinstance(metric, Gauge):  # a histogram: a duration, in seconds
            assert name.endswith("_seconds"), name
        assert not UNBOUNDED & set(metric._labelnames), f"{name}: unbounded label"
        assert metric._documentation, name


def test_serve_answers_in_the_text_format_and_settings_turn_it_on(tmp_path):
    registry = CollectorRegistry()
    counter = Counter("boxcar_example", "An example", ["outcome"], registry=registry)
    counter.labels("ok").inc(3)
    server = metrics.serve(0, registry=registry)
    try:
        body = httpx.get(f"http://127.0.0.1:{server.port}/metrics", timeout=5).text
        families = {f.name: f for f in text_string_to_metric_families(body)}
        family = families["boxcar_example"]
        assert family.type == "counter"
        assert [s.value for s in family.samples if s.name == "boxcar_example_total"] == [3.0]
    finally:
        server.stop()
    assert metrics.serve_settings(Settings(data_dir=tmp_path)) is None  # METRICS_PORT=0: off


def test_a_port_in_use_is_logged_and_the_service_goes_on(tmp_path, caplog):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert metrics.serve_settings(Settings(data_dir=tmp_path, metrics_port=port)) is None
    assert "could not listen" in caplog.text


def test_serve_settings_registers_the_port_so_no_hook_can_fetch_it(tmp_path):
    from boxcar.shared.egress import RuntimePorts

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    settings = Settings(data_dir=tmp_path, metrics_port=port)
    server = metrics.serve_settings(settings)
    assert server is not None
    try:
        assert port in RuntimePorts(settings.runtime_ports_dir).ports()
        body = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
        names = {family.name for family in text_string_to_metric_families(body)}
        assert {"boxcar_hooks", "boxcar_claims", "process_cpu_seconds"} <= names
    finally:
        server.stop()


def test_joined_registries_read_first_and_show_both():
    one, two = CollectorRegistry(), CollectorRegistry()
    Gauge("boxcar_one", "One", registry=one).set(1)
    gauge = Gauge("boxcar_two", "Two", registry=two)
    combined = metrics.joined(one, two, before=lambda: gauge.set(7))
    assert combined.get_sample_value("boxcar_one") == 1
    assert combined.get_sample_value("boxcar_two") == 7

    def broken() -> None:
        raise RuntimeError("the database is away")

    assert metrics.joined(one, before=broken).get_sample_value("boxcar_one") == 1  # still answers


def test_after_commit_runs_on_commit_only(tmp_path):
    db = Database(f"sqlite:///{tmp_path / 'x.sqlite3'}")
    calls: list[str] = []
    with db.write() as s:
        s.execute(text("SELECT 1"))
        after_commit(s, lambda: calls.append("committed"))
        assert calls == []
    assert calls == ["committed"]
    with pytest.raises(ZeroDivisionError), db.write() as s:
        after_commit(s, lambda: calls.append("rolled back"))
        1 / 0  # noqa: B018 - the transaction fails
    with db.write() as s:  # a later transaction does not run the rolled-back one's callbacks
        s.execute(text("SELECT 1"))
    assert calls == ["committed"]
    db.dispose()


def test_known_label_values_start_at_zero():
    assert REGISTRY.get_sample_value("boxcar_claims_total", {"row": "crawl", "outcome": "lost"}) is not None
    assert REGISTRY.get_sample_value("boxcar_feed_polls_total", {"outcome": "failed"}) is not None
