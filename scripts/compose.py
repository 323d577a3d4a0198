#!/usr/bin/env python3
"""Boxcar's Compose stack with `docker compose` or `podman-compose`, whichever this machine has.

    python3 scripts/compose.py up              # set-up if needed, build images, start, wait for every healthcheck
    python3 scripts/compose.py down [-v]       # stop and remove the containers (-v: and the data volumes)
    python3 scripts/compose.py build           # only the images (and print their sizes)
    python3 scripts/compose.py ps              # each container: service, state, health, restarts
    python3 scripts/compose.py exec SERVICE CMD...        # e.g. exec ingest boxcar token create --name cli
    python3 scripts/compose.py scale SERVICE=N            # e.g. scale hook-executor-fetch=3
    python3 scripts/compose.py compose ARGS...            # any compose command, e.g. compose logs ingest

`make compose-up` / `make compose-down` call this. Stdlib only, Python >= 3.9, so it runs with the
host's python3 and needs no venv.

Engine: Docker when its daemon answers and `docker compose` exists, else Podman (with
podman-compose). Where neither is present and we are root on Debian, `setup` installs podman,
runc, debootstrap with apt-get and podman-compose (PyPI) into ~/.cache/boxcar/podman-compose; on a
machine that forbids raising RLIMIT_NOFILE (some sandboxes) it also writes, once,
`[containers] default_ulimits = []` and `[engine] runtime = "runc"` to
/etc/containers/containers.conf (crun and podman's default ulimits fail there).

Images: by default every image is built here from Debian packages (no image registry needed):
a base image (deploy/build-base.sh, reused when present), Boxcar's image on it (one image for
every service), and Postgres and NATS images (deploy/compose.local.yml). With --registry (or
BOXCAR_COMPOSE_LOCAL=0) Postgres and NATS are the official images and Boxcar's image builds on
the official Python image. When podman builds, the host's CA bundle is mounted into the build
(for registries reached through a TLS-intercepting proxy; never baked into an image).

Environment: BOXCAR_COMPOSE_PROJECT (default boxcar), BOXCAR_API_PUBLISH (host port of the API,
default 8000; e.g. 127.0.0.1:8000), URL_ALLOW_PRIVATE (true to archive pages on your LAN),
BOXCAR_ENGINE (docker|podman), BOXCAR_BUILD_CA (CA bundle to mount, '' for none),
COMPOSE_ENV_FILE (env files of the repository, comma-separated, whose variables apply to every
command, e.g. deploy/cluster.env for the three-server NATS cluster, deploy/store.env for executors
on a volume of their own; COMPOSE_PROFILES become --profile flags), BOXCAR_COMPOSE_EXTRA (more
compose files, comma-separated, after the others; the compose test's S3 server).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BASE_IMAGE = "localhost/boxcar-base:trixie"
BOXCAR_IMAGE = "boxcar:latest"
LOCAL_IMAGES = {  # service: (image, dockerfile under deploy/)
    "nats": ("localhost/boxcar-nats:latest", "nats/Dockerfile"),
    "postgres": ("localhost/boxcar-postgres:latest", "postgres/Dockerfile"),
}
PODMAN_COMPOSE_VENV = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "boxcar" / "podman-compose"
PODMAN_COMPOSE_SPEC = "podman-compose>=1.3,<2"
CONTAINERS_CONF = Path("/etc/containers/containers.conf")
HOST_CA = "/etc/ssl/certs/ca-certificates.crt"
LOG = Path(tempfile.gettempdir()) / "boxcar-compose.log"


def say(message: str) -> None:
    print(f"[compose] {message}", flush=True)


class Failed(Exception):
    """A step failed; the message says which and where its output is."""


def run(
    cmd: list[str],
    *,
    check: bool = True,
    capture: bool = False,
    env: dict | None = None,
    timeout: float | None = None,
    log: bool = False,
    errors: str = "strict",
) -> subprocess.CompletedProcess:
    """Run ``cmd``; with ``log`` its output goes to LOG (shown when it fails). ``errors``: how
    captured output that is not UTF-8 is decoded (``"replace"`` for a container's log)."""
    if log:
        with LOG.open("a") as out:
            out.write(f"\n$ {' '.join(cmd)}\n")
            out.flush()
            proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, timeout=timeout, cwd=REPO)
        if check and proc.returncode:
            tail = LOG.read_text(errors="replace").splitlines()[-40:]
            raise Failed(f"`{' '.join(cmd)}` exited {proc.returncode}; the end of {LOG}:\n" + "\n".join(tail))
        return proc
    proc = subprocess.run(cmd, capture_output=capture, text=True, errors=errors, env=env, timeout=timeout, cwd=REPO)
    if check and proc.returncode:
        detail = (proc.stderr or proc.stdout or "").strip()[-2000:] if capture else ""
        raise Failed(f"`{' '.join(cmd)}` exited {proc.returncode}" + (f": {detail}" if detail else ""))
    return proc


def works(cmd: list[str]) -> bool:
    try:
        return subprocess.run(cmd, capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# --- set-up -------------------------------------------------------------------------------------


def is_root() -> bool:
    return os.geteuid() == 0


def apt_install(packages: list[str]) -> None:
    if not (is_root() and shutil.which("apt-get")):
        raise Failed(f"missing {' '.join(packages)}: install them (e.g. sudo apt-get install {' '.join(packages)})")
    say(f"installing {' '.join(packages)} with apt-get")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    run(["apt-get", "update", "-qq"], env=env, log=True)
    run(["apt-get", "install", "-y", "-qq", *packages], env=env, log=True)


def setrlimit_forbidden() -> bool:
    """True where raising RLIMIT_NOFILE is refused even to root (a sandbox): crun and podman's
    default ulimits fail there."""
    probe = "import resource; resource.setrlimit(resource.RLIMIT_NOFILE, (1048576, 1048576))"
    if not is_root():
        return False
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode != 0


def ensure_containers_conf(path: Path = CONTAINERS_CONF) -> bool:
    """Set ``[containers] default_ulimits = []`` and ``[engine] runtime = "runc"`` in ``path``,
    keeping everything else; True when the file changed. Idempotent."""
    wanted = {"containers": ("default_ulimits", "[]"), "engine": ("runtime", '"runc"')}
    lines = path.read_text().splitlines() if path.exists() else []
    out: list[str] = []
    section = None
    done: set[str] = set()

    def close(sec):
        if sec in wanted and sec not in done:
            key, value = wanted[sec]
            out.append(f"{key} = {value}")
            done.add(sec)

    skipping = 0  # brackets still open in a multi-line value being replaced
    for line in lines:
        if skipping:
            skipping += line.count("[") - line.count("]")
            continue
        header = re.match(r"^\s*\[([A-Za-z0-9_.]+)\]\s*$", line)
        if header:
            close(section)
            section = header.group(1)
            out.append(line)
            continue
        if section in wanted:
            key, value = wanted[section]
            if re.match(rf"^\s*{key}\s*=", line):
                if section not in done:
                    out.append(f"{key} = {value}")
                    done.add(section)
                old_value = line.split("=", 1)[1].split("#", 1)[0]
                skipping = max(0, old_value.count("[") - old_value.count("]"))
                continue
        out.append(line)
    close(section)
    for sec, (key, value) in wanted.items():
        if sec not in done:
            out += ["", f"[{sec}]", f"{key} = {value}"]
    text = "\n".join(out).strip("\n") + "\n"
    if path.exists() and path.read_text() == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return True


def podman_compose_command() -> list[str] | None:
    for candidate in (shutil.which("podman-compose"), str(PODMAN_COMPOSE_VENV / "bin" / "podman-compose")):
        if candidate and os.access(candidate, os.X_OK):
            out = subprocess.run([candidate, "version"], capture_output=True, text=True)
            found = re.search(r"podman-compose version:?\s*(\d+)\.(\d+)", out.stdout + out.stderr)
            if found and (int(found.group(1)), int(found.group(2))) >= (1, 3):
                return [candidate]
    return None


class Engine:
    """The container engine and its compose command."""

    def __init__(self, name: str, compose: list[str]) -> None:
        self.name = name
        self.compose_cmd = compose

    def __call__(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return run([self.name, *args], **kw)

    def describe(self) -> str:
        version = subprocess.run([self.name, "--version"], capture_output=True, text=True).stdout.strip()
        compose = subprocess.run([*self.compose_cmd, "version"], capture_output=True, text=True).stdout
        compose = next((line for line in compose.splitlines() if "compose" in line.lower()), compose.strip())
        return f"{version}; {compose.strip()}"


def detect_engine(install: bool = True, need_debootstrap: bool = True) -> Engine:
    """Docker (daemon up, compose plugin) or Podman (+ podman-compose), installing Podman's
    tools when missing and allowed."""
    choice = os.environ.get("BOXCAR_ENGINE", "")
    if (
        choice in ("", "docker")
        and shutil.which("docker")
        and works(["docker", "info"])
        and works(["docker", "compose", "version"])
    ):
        return Engine("docker", ["docker", "compose"])
    if choice == "docker":
        raise Failed("BOXCAR_ENGINE=docker but no Docker daemon or `docker compose` answers")
    missing = [p for p, exe in (("podman", "podman"), ("runc", "runc")) if not shutil.which(exe)]
    if need_debootstrap and not shutil.which("debootstrap"):
        missing.append("debootstrap")
    if missing:
        if not install:
            raise Failed(f"missing {' '.join(missing)}")
        apt_install(missing)
    if setrlimit_forbidden() and ensure_containers_conf():
        say(f"{CONTAINERS_CONF}: default_ulimits = [], runtime = runc (this machine forbids raising rlimits)")
    compose = podman_compose_command()
    if compose is None:
        if not install:
            raise Failed("podman-compose is missing (pip install podman-compose)")
        say(f"installing {PODMAN_COMPOSE_SPEC} into {PODMAN_COMPOSE_VENV}")
        if not works([sys.executable, "-m", "venv", "--help"]):
            apt_install(["python3-venv"])
        run([sys.executable, "-m", "venv", "--clear", str(PODMAN_COMPOSE_VENV)], log=True)
        run([str(PODMAN_COMPOSE_VENV / "bin" / "pip"), "install", "--quiet", PODMAN_COMPOSE_SPEC], log=True)
        compose = podman_compose_command()
        if compose is None:
            raise Failed(f"podman-compose did not install; see {LOG}")
    return Engine("podman", compose)


# --- the stack ----------------------------------------------------------------------------------


def env_file_values(path: Path) -> dict[str, str]:
    """``KEY=VALUE`` lines of a Compose env file (``#`` comments and blank lines skipped; no
    quoting or interpolation, which Boxcar's env files do not use)."""
    values = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            values[key.strip()] = value.strip()
    return values


class Stack:
    """One Compose project of Boxcar."""

    def __init__(self, engine: Engine, project: str | None = None, local: bool | None = None) -> None:
        self.engine = engine
        self.project = project or os.environ.get("BOXCAR_COMPOSE_PROJECT", "boxcar")
        if local is None:
            local = os.environ.get("BOXCAR_COMPOSE_LOCAL", "1").lower() not in ("0", "false", "no")
        self.local = local
        self.files = ["docker-compose.yml"] + (["deploy/compose.local.yml"] if local else [])
        self.files += [f.strip() for f in os.environ.get("BOXCAR_COMPOSE_EXTRA", "").split(",") if f.strip()]
        # COMPOSE_ENV_FILE (e.g. deploy/cluster.env): their variables as if they were set here
        self.file_env: dict[str, str] = {}
        for name in os.environ.get("COMPOSE_ENV_FILE", "").split(","):
            if name.strip():
                self.file_env.update(env_file_values(REPO / name.strip()))

    # compose
    def env(self) -> dict:
        env = dict(os.environ)
        env.update(self.file_env)
        if self.local:
            env.setdefault("BOXCAR_BASE_IMAGE", BASE_IMAGE)
        return env

    def profiles(self) -> list[str]:
        """COMPOSE_PROFILES (environment or env file), passed as `--profile` flags too: older
        podman-compose reads only the flags."""
        return [p.strip() for p in self.env().get("COMPOSE_PROFILES", "").split(",") if p.strip()]

    def compose(self, *args: str, check: bool = True, log: bool = True, timeout: float | None = 900):
        files = [arg for f in self.files for arg in ("-f", f)]
        profiles = [arg for p in self.profiles() for arg in ("--profile", p)]
        return run(
            [*self.engine.compose_cmd, "-p", self.project, *files, *profiles, *args],
            check=check,
            log=log,
            capture=not log,
            env=self.env(),
            timeout=timeout,
        )

    # images
    def build_ca_args(self) -> list[str]:
        ca = os.environ.get("BOXCAR_BUILD_CA", HOST_CA)
        if self.engine.name != "podman" or not ca or not os.path.exists(ca):
            return []
        return ["--volume", f"{ca}:/run/host-ca.crt:ro", "--build-arg", "CA_BUNDLE=/run/host-ca.crt"]

    def image_exists(self, image: str) -> bool:
        return works([self.engine.name, "image", "inspect", image])

    def build(self) -> dict[str, int]:
        """Build every image this stack needs; returns {image: bytes}."""
        base = os.environ.get("BOXCAR_BASE_IMAGE", BASE_IMAGE) if self.local else ""
        if self.local and not self.image_exists(base):
            if base != BASE_IMAGE:
                raise Failed(f"BOXCAR_BASE_IMAGE={base} does not exist")
            started = time.monotonic()
            say(f"building the base image {base} from Debian packages (debootstrap)")
            run(["sh", "deploy/build-base.sh", base], env=dict(os.environ, ENGINE=self.engine.name), log=True)
            say(f"built {base} in {time.monotonic() - started:.0f}s")
        elif self.local:
            say(f"reusing the base image {base}")
        base_args = ["--build-arg", f"BASE_IMAGE={base}"] if base else []
        ca = self.build_ca_args()
        builds = [(BOXCAR_IMAGE, "deploy/Dockerfile", ".")]
        if self.local:
            builds += [(image, f"deploy/{dockerfile}", "deploy") for image, dockerfile in LOCAL_IMAGES.values()]
        for image, dockerfile, context in builds:
            started = time.monotonic()
            say(f"building {image} ({dockerfile})")
            self.engine("build", "-f", dockerfile, "-t", image, *base_args, *ca, context, log=True)
            say(f"built {image} in {time.monotonic() - started:.0f}s")
        sizes = {image: self.image_size(image) for image, _, _ in builds}
        if base:
            sizes[base] = self.image_size(base)
        say("image sizes: " + ", ".join(f"{image} {mb(size)}" for image, size in sizes.items()))
        return sizes

    def image_size(self, image: str) -> int:
        out = self.engine("image", "inspect", "--format", "{{.Size}}", image, capture=True).stdout.strip()
        return int(float(out or 0))

    # containers
    def containers(self, service: str | None = None, running: bool = False) -> list[dict]:
        """``inspect`` of this project's containers (optionally one service's, only running)."""
        label = [f"--filter=label=com.docker.compose.project={self.project}"]
        if service:
            label.append(f"--filter=label=com.docker.compose.service={service}")
        ids = self.engine("ps", "-aq", *label, capture=True).stdout.split()
        if not ids:
            return []
        proc = self.engine("inspect", *ids, capture=True, check=False)
        found = []
        for c in json.loads(proc.stdout or "[]"):
            if running and not c["State"].get("Running"):
                continue
            found.append(c)
        return sorted(found, key=lambda c: c["Name"])

    def container(self, service: str) -> dict:
        found = self.containers(service, running=True)
        if not found:
            raise Failed(f"no running container of {service}")
        return found[0]

    @staticmethod
    def service_of(c: dict) -> str:
        return (c["Config"].get("Labels") or {}).get("com.docker.compose.service", "")

    @staticmethod
    def has_healthcheck(c: dict) -> bool:
        test = (c["Config"].get("Healthcheck") or {}).get("Test") or []
        return bool(test) and test[0] != "NONE"

    def healthy(self, c: dict) -> bool:
        if self.engine.name == "podman":
            # podman runs healthchecks from systemd timers; where there is no systemd they only run
            # when asked, so ask (it runs the container's own healthcheck command)
            return works(["podman", "healthcheck", "run", c["Id"]])
        state = self.engine("inspect", "--format", "{{.State.Health.Status}}", c["Id"], capture=True, check=False)
        return state.stdout.strip() == "healthy"

    def wait_healthy(self, services: list[str] | None = None, timeout: float = 300) -> float:
        """Wait until every running container (of ``services``) with a healthcheck passes it.
        Containers are checked in parallel; one that passed is not checked again."""
        started = reported = time.monotonic()
        passed: set[str] = set()
        pending: dict[str, dict] = {}
        with ThreadPoolExecutor(max_workers=8) as pool:
            while True:
                found = [c for c in self.containers() if services is None or self.service_of(c) in services]
                todo = [
                    c for c in found if self.has_healthcheck(c) and c["Id"] not in passed and c["State"].get("Running")
                ]
                results = list(pool.map(self.healthy, todo))
                passed.update(c["Id"] for i, c in enumerate(todo) if results[i])
                pending = {c["Name"].lstrip("/"): c for c in found if self.has_healthcheck(c) and c["Id"] not in passed}
                if found and not pending:
                    return time.monotonic() - started
                if time.monotonic() - started > timeout:
                    break
                if time.monotonic() - reported > 30:
                    say(f"waiting for the healthchecks of {', '.join(sorted(pending))}")
                    reported = time.monotonic()
                time.sleep(1)
        for name, c in pending.items():
            logs = self.engine("logs", "--tail", "30", c["Id"], capture=True, check=False)
            say(f"{name}: {c['State'].get('Status')}, not healthy; its last lines:\n{logs.stdout}{logs.stderr}")
        raise Failed(f"not healthy after {timeout:.0f}s: {', '.join(sorted(pending)) or 'no containers'}")

    def services(self) -> list[str]:
        """The services Compose would start (the default profile), in the file's order."""
        proc = self.compose("config", "--services", log=False, check=True)
        return proc.stdout.split()

    def up(self, build: bool = True) -> None:
        """Images; then Postgres and NATS until healthy, migrate until it exits 0, every other
        service until healthy. Started in that order with `--no-deps`: podman-compose passes
        depends_on to podman as `--requires`, which podman 4.3 cannot start (and with podman
        < 4.6 it does not wait for `service_healthy`), so the order is kept here instead; with
        Docker it is the same order that depends_on gives."""
        if build:
            self.build()
        started = time.monotonic()
        # every service back to the file's one replica, as `docker compose up` does (podman-compose
        # would leave replicas added by --scale running with their old configuration)
        self.remove(self.scaled_replicas())
        services = self.services()
        infra = [s for s in services if s in ("postgres", "nats", "s3") or s.startswith("nats-")]
        self.compose("up", "-d", "--no-deps", *infra)
        self.wait_healthy(infra, timeout=120)
        say(f"{' and '.join(infra)} healthy after {time.monotonic() - started:.0f}s")
        self.compose("up", "-d", "--no-deps", "migrate")
        deadline = time.monotonic() + 300
        while True:
            migrate = self.containers("migrate")
            if migrate and not migrate[0]["State"].get("Running") and migrate[0]["State"].get("Status") != "created":
                break
            if time.monotonic() > deadline:
                raise Failed("migrate did not finish within 300s")
            time.sleep(1)
        if migrate[0]["State"].get("ExitCode") != 0:
            logs = self.engine("logs", migrate[0]["Id"], capture=True, check=False)
            raise Failed(f"migrate exited {migrate[0]['State'].get('ExitCode')}: {(logs.stdout + logs.stderr)[-2000:]}")
        rest = [s for s in services if s not in infra and s != "migrate"]
        self.compose("up", "-d", "--no-deps", *rest)
        waited = self.wait_healthy()
        say(f"every container healthy after {time.monotonic() - started:.0f}s (the last wait {waited:.0f}s)")

    def down(self, volumes: bool = False) -> None:
        """Stop and remove every container of the project (and with ``volumes`` its volumes).
        podman-compose's `down` knows only the replicas the file declares, so replicas added with
        `--scale` are removed here first, and anything still left after it by the project label."""
        self.remove(self.scaled_replicas())
        self.compose("down", "-t", "10", *(["-v"] if volumes else []))
        self.remove([c["Id"] for c in self.containers()])
        if volumes:
            left = self.volumes()
            if left:
                self.engine("volume", "rm", "-f", *left, log=True)
        if self.engine.name == "podman" and works(["podman", "network", "exists", f"{self.project}_default"]):
            self.engine("network", "rm", f"{self.project}_default", check=False, log=True)

    def scaled_replicas(self) -> list[str]:
        """Ids of the containers beyond each service's first (added with --scale)."""
        return [
            c["Id"]
            for c in self.containers()
            if (c["Config"].get("Labels") or {}).get("com.docker.compose.container-number", "1") != "1"
        ]

    def remove(self, ids: list[str]) -> None:
        if ids:
            self.engine("stop", "-t", "10", *ids, check=False, log=True)
            self.engine("rm", "-f", *ids, log=True)

    def volumes(self) -> list[str]:
        out = self.engine(
            "volume", "ls", "-q", f"--filter=label=com.docker.compose.project={self.project}", capture=True, check=False
        ).stdout.split()
        return out

    def scale(self, service: str, replicas: int) -> None:
        self.compose("up", "-d", "--no-deps", "--no-recreate", "--scale", f"{service}={replicas}", service)

    def exec(self, service: str, *cmd: str, capture: bool = True) -> subprocess.CompletedProcess:
        return self.engine("exec", self.container(service)["Id"], *cmd, capture=capture)

    def ps(self) -> list[str]:
        rows = []
        for c in self.containers():
            health = ""
            if self.has_healthcheck(c) and c["State"].get("Running"):
                health = "healthy" if self.healthy(c) else "unhealthy"
            rows.append(
                f"{c['Name'].lstrip('/'):45} {self.service_of(c):24} {c['State'].get('Status', ''):9} "
                f"{health:9} restarts={c.get('RestartCount', 0)}"
            )
        return rows


def mb(size: int) -> str:
    return f"{size / 1e6:.0f} MB"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--registry", action="store_true", help="official Postgres/NATS/Python images (needs a registry)")
    ap.add_argument("--project", default=None, help="Compose project name (default boxcar)")
    sub = ap.add_subparsers(dest="command", required=True)
    sub.add_parser("setup", help="install what the engine needs (root)")
    sub.add_parser("build", help="build the images")
    up = sub.add_parser("up", help="build, start, wait for every healthcheck")
    up.add_argument("--no-build", action="store_true")
    down = sub.add_parser("down", help="stop and remove the containers")
    down.add_argument("-v", "--volumes", action="store_true", help="and the data volumes (deletes the archive)")
    sub.add_parser("ps", help="containers, health, restarts")
    ex = sub.add_parser("exec", help="run a command in a service's container")
    ex.add_argument("service")
    ex.add_argument("cmd", nargs=argparse.REMAINDER)
    sc = sub.add_parser("scale", help="SERVICE=N")
    sc.add_argument("spec")
    co = sub.add_parser("compose", help="any compose command")
    co.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    local = False if args.registry else None
    if args.command in ("setup", "build", "up", "down", "scale"):
        LOG.write_text("")
    try:
        needs_base = args.command in ("setup", "build", "up") and not args.registry
        engine = detect_engine(install=args.command in ("setup", "build", "up"), need_debootstrap=needs_base)
        stack = Stack(engine, args.project, local)
        if args.command == "setup":
            say(engine.describe())
        elif args.command == "build":
            stack.build()
        elif args.command == "up":
            say(f"{engine.describe()}; project {stack.project}; files {' '.join(stack.files)}")
            stack.up(build=not args.no_build)
            publish = os.environ.get("BOXCAR_API_PUBLISH", "8000")
            archive = os.environ.get("BOXCAR_ARCHIVE_PUBLISH", "8001")
            say(
                f"up: the web UI and API are on http://{'localhost:' + publish if ':' not in publish else publish}/, "
                f"archived pages on http://{'localhost:' + archive if ':' not in archive else archive}/ "
                "(a login: python3 scripts/compose.py exec ingest boxcar user create admin; a token: "
                "python3 scripts/compose.py exec ingest boxcar token create --name cli)"
            )
        elif args.command == "down":
            stack.down(volumes=args.volumes)
            say("down" + (" (volumes removed)" if args.volumes else " (volumes kept)"))
        elif args.command == "ps":
            print("\n".join(stack.ps()))
        elif args.command == "exec":
            interactive = "-it" if sys.stdin.isatty() else "-i"  # a terminal: prompts (passwords) work
            return engine("exec", interactive, stack.container(args.service)["Id"], *args.cmd, check=False).returncode
        elif args.command == "scale":
            service, _, replicas = args.spec.partition("=")
            stack.scale(service, int(replicas))
            stack.wait_healthy([service])
            say(f"{service}: {len(stack.containers(service, running=True))} running and healthy")
        elif args.command == "compose":
            files = [a for f in stack.files for a in ("-f", f)]
            return subprocess.run(
                [*engine.compose_cmd, "-p", stack.project, *files, *args.args], env=stack.env(), cwd=REPO
            ).returncode
    except Failed as exc:
        print(f"[compose] error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
