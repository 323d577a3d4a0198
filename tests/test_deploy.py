"""Static checks of docker-compose.yml, deploy/compose.local.yml and the Dockerfiles: every command
exists, every family's pool is there, every setting is one the code reads, every COPY exists.
`make compose-test` (scripts/compose_test.py) builds and runs the stack itself."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import yaml

from boxcar.cli.main import cli
from boxcar.cli.stack import families_for
from boxcar.shared.archive_store import CREDENTIAL_ENV
from boxcar.shared.families import load_families
from boxcar.shared.settings import DEFAULT_PLUGINS, Settings

REPO = Path(__file__).resolve().parents[1]
COMPOSE = yaml.safe_load((REPO / "docker-compose.yml").read_text())
LOCAL = yaml.safe_load((REPO / "deploy/compose.local.yml").read_text())


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
    known = {name.upper() for name in Settings.model_fields} | {
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "HEALTH_FILE",
        "EGRESS_SERVICES",
        *CREDENTIAL_ENV,  # the bucket's client reads them (archive_store.from_url)
    }
    for name, svc in boxcar_services().items():
        unknown = set(svc.get("environment", {})) - known
        assert not unknown, f"{name}: settings nothing reads: {unknown}"
    env = COMPOSE["services"]["ingest"]["environment"]
    ports = COMPOSE["services"]["ingest"]["ports"]
    assert env["API_HOST"] == "0.0.0.0" and "${BOXCAR_API_PUBLISH:-8000}:8000" in ports
    # the archive origin: its own port, published, so archived pages never run on the UI's origin
    assert env["ARCHIVE_PORT"] == "8001" and "${BOXCAR_ARCHIVE_PUBLISH:-8001}:8001" in ports


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


def copy_sources(dockerfile: Path) -> list[str]:
    """The build-context sources of a Dockerfile's COPY lines (not those from another stage)."""
    sources = []
    for line in re.findall(r"^COPY\s+(.+)$", dockerfile.read_text(), re.MULTILINE):
        words = line.split()
        if any(w.startswith("--from=") for w in words):
            continue
        sources += [w for w in words[:-1] if not w.startswith("--")]
    return sources


def test_dockerfiles_copy_what_exists():
    for dockerfile, context in (
        ("deploy/Dockerfile", "."),
        ("deploy/postgres/Dockerfile", "deploy"),
        ("deploy/nats/Dockerfile", "deploy"),
    ):
        sources = copy_sources(REPO / dockerfile)
        assert sources or dockerfile != "deploy/Dockerfile"
        for source in sources:
            assert (REPO / context / source).exists(), f"{dockerfile}: COPY {source}: missing"
    dockerfile = (REPO / "deploy/Dockerfile").read_text()
    assert "-c /opt/boxcar/src/constraints.txt" in dockerfile
    # dependencies are installed before the code is copied (cache-friendly layers)
    assert dockerfile.index("-r /tmp/requirements.txt") < dockerfile.index("COPY libs")


def test_base_image_defaults_agree():
    """The Dockerfile's default base is an official Python >= 3.12 image, and Compose's default is
    the same; the local override builds on deploy/build-base.sh's image."""
    default = re.search(r"^ARG BASE_IMAGE=(\S+)$", (REPO / "deploy/Dockerfile").read_text(), re.MULTILINE).group(1)
    assert re.fullmatch(r"docker\.io/library/python:3\.1[2-4]-slim\S*", default), default
    args = COMPOSE["x-boxcar"]["build"]["args"]
    assert args["BASE_IMAGE"] == f"${{BOXCAR_BASE_IMAGE:-{default}}}"
    assert (
        LOCAL["x-local-boxcar"]["build"]["args"]["BASE_IMAGE"] == "${BOXCAR_BASE_IMAGE:-localhost/boxcar-base:trixie}"
    )
    assert "localhost/boxcar-base:trixie" in (REPO / "deploy/build-base.sh").read_text()


def test_local_override_covers_every_image():
    """compose.local.yml builds every image of the default stack and of the `cluster` profile
    locally (Boxcar's on the local base, Postgres and NATS from Debian packages) and pulls nothing."""
    local = {name for name, svc in COMPOSE["services"].items() if set(svc.get("profiles", ["cluster"])) == {"cluster"}}
    assert set(LOCAL["services"]) == local and {"nats-2", "nats-3"} <= local
    for name in boxcar_services():
        assert LOCAL["services"][name]["pull_policy"] == "never", name
    for name in ("nats", "postgres"):
        svc = LOCAL["services"][name]
        assert svc["image"].startswith("localhost/") and svc["pull_policy"] == "never"
        assert (REPO / svc["build"]["context"] / svc["build"]["dockerfile"]).exists()
    for name in ("nats-2", "nats-3"):  # the same image as nats, built once
        assert LOCAL["services"][name]["image"] == LOCAL["services"]["nats"]["image"]
        assert LOCAL["services"][name]["pull_policy"] == "never"


def test_defaults_are_safe_for_a_homelab():
    """Private addresses stay refused unless the operator says so; tracing is optional."""
    env = COMPOSE["x-boxcar"]["environment"]
    assert env["URL_ALLOW_PRIVATE"] == "${URL_ALLOW_PRIVATE:-false}"
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "${OTEL_EXPORTER_OTLP_ENDPOINT:-}"
    assert "ingest:8000" in env["EGRESS_SERVICES"].split(",")
    for name in ("otel-collector", "jaeger"):
        assert COMPOSE["services"][name]["profiles"] == ["tracing"]
    for name, svc in boxcar_services().items():
        assert svc["restart"] == ("no" if name == "migrate" else "unless-stopped"), name


def test_heartbeat_healthcheck_agrees_with_the_services(tmp_path):
    """The services' healthcheck passes on a fresh heartbeat file and fails on a stale or missing
    one, as boxcar.shared.service.check_health does."""
    from boxcar.shared.service import check_health

    test = COMPOSE["x-boxcar"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    health = tmp_path / "health"
    for age, healthy in ((1, True), (40, False), (None, False)):
        if age is None:
            health.unlink()
        else:
            health.write_text(str(time.time() - age))
        env = {"HEALTH_FILE": str(health), "PATH": "/usr/bin:/bin"}
        proc = subprocess.run([sys.executable, *test[2:]], env=env, capture_output=True)
        assert (proc.returncode == 0) is healthy is check_health(str(health)), (age, proc.stderr)


def load_compose_script():
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import compose  # scripts/compose.py
    finally:
        sys.path.pop(0)
    return compose


def test_containers_conf_is_edited_idempotently(tmp_path):
    compose = load_compose_script()
    conf = tmp_path / "containers.conf"
    conf.write_text(
        '[containers]\nlog_size_max = -1\ndefault_ulimits = [\n  "nofile=1048576:1048576",\n]\n\n'
        '[engine]\nruntime = "crun"  # default\n\n[network]\ndns_bind_port = 53\n'
    )
    assert compose.ensure_containers_conf(conf)
    text = conf.read_text()
    parsed = tomllib.loads(text)
    assert parsed["containers"] == {"log_size_max": -1, "default_ulimits": []}
    assert parsed["engine"] == {"runtime": "runc"} and parsed["network"] == {"dns_bind_port": 53}
    assert "default_ulimits = []" in text and 'runtime = "runc"' in text
    assert "log_size_max = -1" in text and "dns_bind_port = 53" in text
    assert text.count("[containers]") == 1 and text.count("[engine]") == 1
    assert not compose.ensure_containers_conf(conf)
    assert conf.read_text() == text
    fresh = tmp_path / "new" / "containers.conf"
    assert compose.ensure_containers_conf(fresh)
    assert fresh.read_text() == '[containers]\ndefault_ulimits = []\n\n[engine]\nruntime = "runc"\n'
