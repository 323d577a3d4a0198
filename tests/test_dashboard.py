"""The ``metrics`` Compose profile, checked without running it (no image can be pulled here):
the Grafana dashboard loads — against Grafana's own dashboard types (grafana-foundation-sdk, for
the Grafana version the profile runs) with no key lost, and against a JSON Schema of Grafana's
documented dashboard model (types, required fields, ranges) — its panels tile the grid, its
queries name only metrics Boxcar defines, and Prometheus scrapes every service that serves
metrics. ``tests/test_metrics_scrape.py`` checks the same names against a real scrape."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import yaml
from prometheus_client import REGISTRY, generate_latest

from boxcar.ingest.metrics import HTTP, STACK
from tests.dashboards import (
    DASHBOARD,
    REPO,
    SCHEMA,
    dashboard_metric_names,
    exported_names,
    load_dashboard,
    metric_names,
    panels,
)

COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
PROMETHEUS = yaml.safe_load((REPO / "deploy" / "prometheus.yml").read_text())


def unknown_keys(written, loaded, path: str = "$") -> list[str]:
    """Paths of keys in ``written`` that ``loaded`` (the SDK's round trip) does not have."""
    if isinstance(written, dict):
        if not isinstance(loaded, dict):
            return [path]
        missing = []
        for key, value in written.items():
            missing += [f"{path}.{key}"] if key not in loaded else unknown_keys(value, loaded[key], f"{path}.{key}")
        return missing
    if isinstance(written, list):
        if not isinstance(loaded, list) or len(written) != len(loaded):
            return [path]
        return [
            p for i, (w, r) in enumerate(zip(written, loaded, strict=True)) for p in unknown_keys(w, r, f"{path}[{i}]")
        ]
    return [] if written == loaded else [f"{path}: {written!r} became {loaded!r}"]


def test_the_dashboard_loads_as_grafanas_own_types_with_no_key_lost():
    """Every key the dashboard has is a field of Grafana's dashboard, panel, panel-options,
    field-config and Prometheus-query types (a misspelt key would be dropped on loading)."""
    from grafana_foundation_sdk.cog import runtime
    from grafana_foundation_sdk.cog.encoder import JSONEncoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard, Panel, RowPanel
    from grafana_foundation_sdk.models.prometheus import Dataquery

    register_default_plugins()
    written = load_dashboard()
    loaded = Dashboard.from_json(written)
    assert loaded.title == "Boxcar" and loaded.uid == "boxcar-overview"
    assert not unknown_keys(written, json.loads(json.dumps(loaded, cls=JSONEncoder)))
    for panel in loaded.panels or []:
        if isinstance(panel, RowPanel):
            continue
        assert isinstance(panel, Panel) and runtime.panelcfg_config(panel.type_val) is not None, panel.type_val
        assert all(isinstance(t, Dataquery) for t in panel.targets or []), panel.title


def test_the_dashboard_matches_the_documented_model_and_tiles_the_grid():
    dashboard = load_dashboard()
    jsonschema.Draft202012Validator.check_schema(json.loads(SCHEMA.read_text()))
    jsonschema.validate(dashboard, json.loads(SCHEMA.read_text()), cls=jsonschema.Draft202012Validator)
    every = dashboard["panels"] + [p for row in dashboard["panels"] for p in row.get("panels", [])]
    ids = [p["id"] for p in every]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in cells, f"{panel['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = panel["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    for panel in panels(dashboard):
        assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_the_queries_name_only_metrics_boxcar_defines():
    """What the dashboard reads is what Boxcar's registries declare: the shared metrics and the
    process collector (default registry), ingest's stack gauges, and Litestar's HTTP metrics
    (created at a first request; ``test_metrics_scrape`` sees them in a real scrape)."""
    declared = exported_names(generate_latest(REGISTRY).decode() + generate_latest(STACK).decode())
    declared |= {
        f"{HTTP.prefix}_requests_total",
        *(f"{HTTP.prefix}_request_duration_seconds{s}" for s in ("_bucket", "_sum", "_count")),
    }
    read = dashboard_metric_names(load_dashboard())
    assert read - declared == set()
    assert {"boxcar_hooks_total", "boxcar_hook_duration_seconds_bucket", "boxcar_tasks_pending"} <= read


def test_metric_names_are_read_from_promql():
    expr = (
        'histogram_quantile(0.95, sum by (le, plugin) (rate(boxcar_hook_duration_seconds_bucket{status="x y"}'
        "[$__rate_interval]))) / on (job) group_left sum without (instance) (process_cpu_seconds_total offset 5m)"
    )
    assert metric_names(expr) == {"boxcar_hook_duration_seconds_bucket", "process_cpu_seconds_total"}


def test_prometheus_scrapes_every_service_that_serves_metrics():
    boxcar = {name: svc for name, svc in COMPOSE["services"].items() if svc.get("image") == "boxcar:latest"}
    env = COMPOSE["x-boxcar"]["environment"]
    port = int(env["METRICS_PORT"])
    assert env["METRICS_HOST"] == "0.0.0.0"
    scraped: dict[str, str] = {}
    for job in PROMETHEUS["scrape_configs"]:
        for sd in job["dns_sd_configs"]:
            assert sd["type"] == "A" and sd["port"] == port, job["job_name"]
            for name in sd["names"]:
                scraped[name] = job["job_name"]
    long_running = {name for name in boxcar if name != "migrate"}
    assert set(scraped) == long_running
    for name in long_running:  # the port is internal: never published
        assert all(str(port) not in str(p) for p in boxcar[name].get("ports", [])), name


def test_the_metrics_profile_is_pinned_and_mounts_what_exists():
    services = COMPOSE["services"]
    for name in ("prometheus", "grafana"):
        svc = services[name]
        assert svc["profiles"] == ["metrics"], name
        image, _, tag = svc["image"].rpartition(":")
        assert image.startswith("docker.io/") and tag and tag != "latest", svc["image"]
        for mount in svc["volumes"]:
            source = mount.split(":")[0]
            if source.startswith("./"):
                assert (REPO / source).exists(), source
        assert all(str(p).startswith("${") for p in svc.get("ports", [])), name  # the operator chooses
    assert "./deploy/grafana/boxcar-dashboard.json" in " ".join(services["grafana"]["volumes"])
    provisioning = REPO / "deploy" / "grafana" / "provisioning"
    [source] = yaml.safe_load((provisioning / "datasources" / "prometheus.yml").read_text())["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    [provider] = yaml.safe_load((provisioning / "dashboards" / "boxcar.yml").read_text())["providers"]
    mounted = {m.split(":")[1]: m.split(":")[0] for m in services["grafana"]["volumes"]}
    dashboards = [Path(target) for target, src in mounted.items() if src == f"./{DASHBOARD.relative_to(REPO)}"]
    assert [d.parent for d in dashboards] == [Path(provider["options"]["path"])]
    assert ":".join(services["prometheus"]["volumes"][0].split(":")[:2]) == (
        "./deploy/prometheus.yml:/etc/prometheus/prometheus.yml"
    )
