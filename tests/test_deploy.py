"""Static checks of docker-compose.yml and the Dockerfile (no Docker engine here): every command
exists, every family's pool is there, every setting is one the code reads, every COPY exists."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import yaml

from boxcar.cli.main import cli
from boxcar.cli.stack import families_for
from boxcar.shared.families import load_families
from boxcar.shared.settings import DEFAULT_PLUGINS, Settings

REPO = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())


def boxcar_services() -> dict[str, dict]:
    return {name: svc for name, svc in COMPOSE["services"].items() if svc.get("image") == "boxcar:latest"}


def test_every_boxcar_command_exists():
    for name, svc in boxcar_services().items():
        command = svc["command"]
        if command[:2] == ["python", "-m"]:
            assert importlib.util.find_spec(command[2]) is not None, f"{name}: no module {command[2]}"
            assert importlib.util.find_spec(command[2] + ".__main__") is not None, f"{name}: {command[2]} not runnable"
        else:
            assert command[0] == "boxcar" and command[1] in cli.commands, f"{name}: unknown command {command}"


def test_one_executor_pool_per_default_family():
    families = load_families({}).families
    pools = {}
    for name, svc in boxcar_services().items():
        if "boxcar.hook_executor" in svc["command"]:
            family = svc["command"][svc["command"].index("--family") + 1]
            assert family in families, f"{name}: unknown family {family}"
            assert name == f"hook-executor-{family}"
            pools[family] = name
    assert set(families_for(list(DEFAULT_PLUGINS))) <= set(pools)


def test_environment_names_are_settings_the_code_reads():
    known = {name.upper() for name in Settings.model_fields} | {"OTEL_EXPORTER_OTLP_ENDPOINT", "HEALTH_FILE"}
    for name, svc in boxcar_services().items():
        unknown = set(svc.get("environment", {})) - known
        assert not unknown, f"{name}: settings nothing reads: {unknown}"
    env = COMPOSE["services"]["ingest"]["environment"]
    assert env["API_HOST"] == "0.0.0.0" and "8000:8000" in COMPOSE["services"]["ingest"]["ports"]


def test_services_wait_for_their_dependencies():
    for name, svc in boxcar_services().items():
        deps = svc.get("depends_on", {})
        if name == "migrate":
            assert deps["postgres"]["condition"] == "service_healthy"
        else:
            assert deps["migrate"]["condition"] == "service_completed_successfully", name
            assert deps["nats"]["condition"] == "service_healthy", name
            assert "healthcheck" in svc, name
    for mount in COMPOSE["services"]["nats"]["volumes"] + COMPOSE["services"]["otel-collector"]["volumes"]:
        source = mount.split(":")[0]
        if source.startswith("./"):
            assert (REPO / source).exists(), source
            yaml.safe_load((REPO / source).read_text()) if source.endswith(".yaml") else None


def test_dockerfile_copies_what_exists():
    dockerfile = (REPO / "deploy/Dockerfile").read_text()
    for sources in re.findall(r"^COPY\s+(.+?)\s+\S+$", dockerfile, re.MULTILINE):
        for source in sources.split():
            assert (REPO / source).exists(), f"COPY {source}: missing"
    assert re.search(r"^FROM python:3\.1[2-4]", dockerfile, re.MULTILINE), "image Python must be >= 3.12"
    assert "-c constraints.txt" in dockerfile
