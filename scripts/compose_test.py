#!/usr/bin/env python3
"""`make compose-test`: Boxcar's Compose stack built, started, used, scaled, killed and restarted.

1. Images (scripts/compose.py: base from Debian packages when absent, Boxcar, Postgres, NATS).
2. The stack up as its own project (`boxcar-test`, API on a free 127.0.0.1 port), every
   healthcheck passing; a write token made in the ingest container (`boxcar token create`).
3. 20 pages of ../shared/corpus served on the host, on the stack network's gateway address, and
   archived through the API (`POST /api/v1/crawls`), with URL_ALLOW_PRIVATE=true (the gateway is a
   private address; docker-compose.yml's default stays false).
4. Mid-crawl: `--scale hook-executor-fetch=3`; once they are healthy a second crawl of 6 more
   pages is submitted, and the new replicas must take tasks (their container hostnames in the
   Process rows' `machine`): the first crawl's fetch tasks may all be gone by then. Then the
   browser executor's container gets SIGKILL (its main process, from the host, as a crash would)
   and must come back by its restart policy.
5. Both crawls seal: every snapshot sealed with wget, screenshot, DOM and PDF results succeeded.
6. `down`, then `up`: every snapshot and every archived file is still there (named volumes).
7. `down -v`: no container or volume of the project is left.

With BOXCAR_COMPOSE_CLUSTER=1 (`make compose-test-cluster`) the stack runs the `cluster` profile
(deploy/cluster.env: three NATS servers, three replicas of each stream), step 2 checks the
replicas, and in step 4 the NATS server `nats-2` gets SIGKILL too, right after the browser
executor, and must come back by its restart policy while the crawl goes on; step 5 also checks
that no hook has two results in a snapshot.

With BOXCAR_COMPOSE_STORE=1 (`make compose-test-store`; the cluster profile too) the archive is
in an S3 bucket (deploy/store.env, STORE_URL) on the test's S3 server (tests/compose/s3.yml: moto's
server, built locally), and the executors and the binary-resolver run on a scratch volume of their
own: step 2 checks that none of them mounts the data volume; step 5 opens every output file of
every snapshot of the first crawl through the archive origin and compares it with the bucket's
listing, and checks each snapshot's `index.jsonl` in the bucket against its rows; step 6 checks
the rows only (the test's S3 server keeps objects in memory: `down` loses them).

Ends with one summary line. Stdlib only; run as root where podman must be installed.
Environment: BOXCAR_SHARED_DIR (default ../shared), BOXCAR_COMPOSE_KEEP=1 (leave the stack up
when a step fails), BOXCAR_COMPOSE_PAGES (default 20).
"""

from __future__ import annotations

import http.cookiejar
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compose import LOG, REPO, Failed, Stack, detect_engine, mb  # noqa: E402

PROJECT = "boxcar-test"
#: where a failed run leaves each container's whole log (the stack itself is taken down)
LOGS = LOG.with_name("boxcar-compose-logs")
PAGES = int(os.environ.get("BOXCAR_COMPOSE_PAGES", "20"))
MORE = 6  # the second crawl, submitted once the scaled replicas are healthy
SCALED = "hook-executor-fetch"
KILLED = "hook-executor-browser"
STORE = os.environ.get("BOXCAR_COMPOSE_STORE", "") not in ("", "0", "false", "no")
CLUSTER = STORE or os.environ.get("BOXCAR_COMPOSE_CLUSTER", "") not in ("", "0", "false", "no")
S3_IMAGE = "localhost/boxcar-s3-test:latest"
#: run in the ingest container: the bucket's files under archive/, one "path<TAB>size" line each
BUCKET_LIST = (
    "from boxcar.shared.archive_store import ArchiveStore; from boxcar.shared.settings import Settings\n"
    "for f in ArchiveStore.from_settings(Settings()).list('archive'): print(f\"{f.key[8:]}\\t{f.size}\")"
)
#: run in the ingest container: sealed snapshots whose index.jsonl in the store does not list
#: exactly their ArchiveResult rows (plugin, hook, status), one line each; "checked N" at the end
INDEX_CHECK = """
import collections, json
from sqlalchemy import select
from boxcar.shared.archive_store import ArchiveStore
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult, Snapshot
from boxcar.shared.settings import Settings
settings = Settings()
store, db = ArchiveStore.from_settings(settings), Database.for_settings(settings)
with db.read() as s:
    snaps = list(s.scalars(select(Snapshot).where(Snapshot.status == "sealed", Snapshot.attempts > 0)))
    rows = collections.Counter(s.execute(select(ArchiveResult.snapshot_id, ArchiveResult.plugin,
        ArchiveResult.hook_name, ArchiveResult.status)).all())
for snap in snaps:
    lines = [json.loads(x) for x in store.get_bytes(snap.output_dir + "/index.jsonl").splitlines()]
    listed = collections.Counter((snap.id, r["plugin"], r["hook_name"], r["status"]) for r in lines[1:])
    mine = collections.Counter({k: v for k, v in rows.items() if k[0] == snap.id})
    if listed != mine or lines[0].get("id") != snap.id:
        print("MISMATCH", snap.id, sorted(listed ^ mine)[:3])
print("checked", len(snaps))
"""
NATS_KILLED = "nats-2"  # of the cluster profile's three servers
BROWSER_PLUGINS = ("screenshot", "dom", "pdf")
T0 = time.monotonic()


def step(message: str) -> None:
    print(f"[compose-test {time.monotonic() - T0:5.0f}s] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    def __init__(self, base: str, token: str = "") -> None:
        self.base = base
        self.token = token

    def __call__(self, method: str, path: str, body: dict | None = None, timeout: float = 30) -> dict:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as exc:
            raise Failed(f"{method} {path}: {exc.code} {exc.read()[:500]!r}") from None

    def snapshots(self, crawl_id: str) -> list[dict]:
        items: list[dict] = []
        while True:
            page = self("GET", f"/api/v1/snapshots?crawl_id={crawl_id}&limit=100&offset={len(items)}")
            items += page["items"]
            if not page["items"] or len(items) >= page["total"]:
                return items


def shared_dir() -> Path:
    path = Path(os.environ.get("BOXCAR_SHARED_DIR") or REPO.parent / "shared")
    if not (path / "corpus" / "serve.py").exists():
        raise Failed(f"no corpus at {path}/corpus/serve.py (set BOXCAR_SHARED_DIR)")
    return path


def gateway(stack: Stack) -> str:
    info = json.loads(stack.engine("network", "inspect", f"{stack.project}_default", capture=True).stdout)[0]
    for subnet in info.get("subnets") or []:  # podman
        if subnet.get("gateway") and ":" not in subnet["gateway"]:
            return subnet["gateway"]
    for config in (info.get("IPAM") or {}).get("Config") or []:  # docker
        if config.get("Gateway") and ":" not in config["Gateway"]:
            return config["Gateway"]
    raise Failed(f"no IPv4 gateway on {stack.project}_default")


def serve_corpus(address: str) -> tuple[subprocess.Popen, int]:
    """serve.py on the network's gateway address (reachable from the containers, not beyond)."""
    workdir = Path(tempfile.mkdtemp(prefix="boxcar-compose-corpus-"))
    port_file = workdir / "port"
    proc = subprocess.Popen(
        [
            sys.executable,
            str(shared_dir() / "corpus" / "serve.py"),
            "0",
            "--bind",
            address,
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.DEVNULL,
        stderr=(workdir / "serve.log").open("w"),
    )
    for _ in range(100):
        if port_file.exists() and port_file.read_text().strip():
            return proc, int(port_file.read_text())
        if proc.poll() is not None:
            raise Failed(f"serve.py exited: {(workdir / 'serve.log').read_text()[-500:]}")
        time.sleep(0.1)
    raise Failed("serve.py did not start")


def machines_by_plugin(stack: Stack, plugin: str) -> dict[str, int]:
    """Process rows of ``plugin`` per machine (the container's hostname)."""
    sql = f"SELECT machine, count(*) FROM process WHERE plugin = '{plugin}' GROUP BY machine"
    out = stack.exec("postgres", "psql", "-U", "boxcar", "-d", "boxcar", "-Atc", sql).stdout
    return {m: int(n) for m, _, n in (line.partition("|") for line in out.split()) if m}


def archive_files(stack: Stack) -> dict[str, int]:
    """``{path under archive/: size}``: the data volume's files, or the bucket's (STORE)."""
    if STORE:
        out = stack.exec("ingest", "python", "-c", BUCKET_LIST).stdout
    else:
        out = stack.exec("ingest", "find", "/data/archive", "-type", "f", "-printf", "%P\t%s\n").stdout
    return {path: int(size) for path, _, size in (line.rpartition("\t") for line in out.splitlines()) if path}


def wait_crawl(api: Api, crawl_id: str, timeout: float, until=None) -> dict:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        crawl = api("GET", f"/api/v1/crawls/{crawl_id}")
        snaps = crawl["snapshots"]
        line = f"crawl {crawl['status']}: snapshots {snaps.get('sealed', 0)}/{snaps.get('total', 0)} sealed, "
        line += f"results {crawl['results']}"
        if line != last:
            step(line)
            last = line
        if crawl["error"]:
            raise Failed(f"crawl gave up: {crawl['error']}")
        if (until or (lambda c: c["status"] == "sealed" and c["results_pending"] == 0))(crawl):
            return crawl
        if time.monotonic() > deadline:
            raise Failed(f"crawl not done within {timeout:.0f}s: {crawl}")
        time.sleep(3)


def check_snapshots(snapshots: list[dict]) -> None:
    bad = []
    for snap in snapshots:
        ok = {r["plugin"] for r in snap["results"] if r["status"] == "succeeded"}
        missing = [p for p in ("wget", *BROWSER_PLUGINS) if p not in ok]
        hooks = [r["hook_name"] for r in snap["results"]]
        twice = sorted({h for h in hooks if hooks.count(h) > 1})
        if snap["status"] != "sealed" or missing or twice:
            bad.append(f"{snap['url']}: {snap['status']}, missing {missing}, two results of {twice}")
    if bad:
        raise Failed(f"{len(bad)} snapshots incomplete:\n  " + "\n  ".join(bad))


def view_through_archive_origin(stack: Stack, api: Api, snapshot: dict, every: list[dict] | None = None) -> str:
    """What a user does in the browser: log in to the web UI (a user made in the ingest container),
    then open the snapshot's screenshot, served by the archive origin (its own published port, never
    the UI's origin) with the session cookie; with ``every``, also every output file of those
    snapshots, each compared with the archive's listing (``archive_files``). Returns a line for the
    log; raises Failed."""
    password = secrets.token_urlsafe(12)
    ingest = stack.container("ingest")["Id"]
    stack.engine(
        "exec", "-e", f"BOXCAR_PASSWORD={password}", ingest, "boxcar", "user", "create", "--admin", "compose-admin"
    )
    jar = http.cookiejar.CookieJar()
    browser = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    form = browser.open(f"{api.base}/login", timeout=30).read().decode()
    csrf = re.search(r'name="_csrf_token" value="([^"]+)"', form)
    if not csrf:
        raise Failed("the login page has no CSRF token")
    fields = {"username": "compose-admin", "password": password, "_csrf_token": csrf.group(1), "next": "/"}
    browser.open(f"{api.base}/login", data=urllib.parse.urlencode(fields).encode(), timeout=30)
    if not any(c.name for c in jar if "session" in c.name):
        raise Failed(f"login did not set a session cookie (cookies: {[c.name for c in jar]})")
    origin = os.environ["ARCHIVE_ORIGIN"]
    url = f"{origin}/archive/{snapshot['id']}/screenshot/screenshot.png"
    try:
        with browser.open(url, timeout=30) as response:
            body, kind = response.read(), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        raise Failed(f"GET {url}: {exc.code}") from None
    if not body.startswith(b"\x89PNG") or not kind.startswith("image/png"):
        raise Failed(f"GET {url}: {kind}, {len(body)} bytes, not the screenshot")
    line = f"logged in; the archive origin {origin} served {snapshot['url']}'s screenshot ({len(body)} bytes)"
    if every is None:
        return line
    listed = archive_files(stack)
    opened = warcs = 0
    wrong = []
    for snap in every:
        prefix = snap["output_dir"].removeprefix("archive/")
        for r in snap["results"]:
            if r["status"] != "succeeded":
                continue
            for rel in r.get("output_files") or {}:
                if any(part.startswith(".") for part in rel.split("/")):
                    continue  # hidden files are never served (a hook's listing can catch its temp file)
                path = f"{r['plugin']}/{rel}"
                try:
                    with browser.open(f"{origin}/archive/{snap['id']}/{urllib.parse.quote(path)}", timeout=30) as got:
                        body = got.read()
                except urllib.error.HTTPError as exc:
                    wrong.append(f"{snap['id']}/{path}: {exc.code}")
                    continue
                if len(body) != listed.get(f"{prefix}/{path}"):
                    wrong.append(f"{snap['id']}/{path}: {len(body)} bytes, listed {listed.get(f'{prefix}/{path}')}")
                opened += 1
                warcs += rel.endswith((".warc.gz", ".warc")) and body[:2] in (b"\x1f\x8b", b"WA")
    if wrong:
        raise Failed(f"{len(wrong)} of {opened} archived files not served as stored: {wrong[:5]}")
    return f"{line}; every output file of {len(every)} snapshots served as stored: {opened} files, {warcs} WARCs"


def stream_replicas(stack: Stack) -> dict[str, int]:
    """``{stream: replicas}`` from the NATS server's monitoring endpoint (``/jsz``)."""
    out = stack.exec("nats", "wget", "-qO-", "http://localhost:8222/jsz?streams=true&config=true").stdout
    accounts = json.loads(out).get("account_details") or []
    return {
        d["name"]: d.get("config", {}).get("num_replicas", 1)
        for account in accounts
        for d in account.get("stream_detail") or []
    }


def sigkill_and_wait(stack: Stack, service: str) -> float:
    """SIGKILL a service's main process from the host (as a crash would) and wait until its
    restart policy has brought it back; returns the seconds that took."""
    victim = stack.container(service)
    restarts, pid = victim.get("RestartCount", 0), victim["State"]["Pid"]
    step(
        f"SIGKILL to {victim['Name'].lstrip('/')} (pid {pid} on the host, restart: "
        f"{victim['HostConfig'].get('RestartPolicy', {}).get('Name')})"
    )
    os.kill(pid, signal.SIGKILL)
    killed_at = time.monotonic()
    while time.monotonic() - killed_at < 90:
        c = next((x for x in stack.containers(service) if x["Id"] == victim["Id"]), None)
        if c and c["State"].get("Running") and c["State"].get("Pid") != pid and c.get("RestartCount", 0) > restarts:
            return time.monotonic() - killed_at
        time.sleep(0.5)
    raise Failed(f"{service} did not come back by its restart policy within 90s")


def executors_apart(stack: Stack) -> str:
    """STORE: no executor or binary-resolver container mounts the data volume ingest and the
    projector use; returns a line for the log; raises Failed."""
    apart, shared = [], []
    for c in stack.containers(running=True):
        service = stack.service_of(c)
        if not (service.startswith("hook-executor-") or service == "binary-resolver"):
            continue
        names = [m.get("Name") or m.get("Source", "") for m in c.get("Mounts") or []]
        (shared if any(n.endswith("boxcar-data") for n in names) else apart).append(service)
    ingest = [m.get("Name") or "" for m in stack.container("ingest").get("Mounts") or []]
    if shared or not apart or not any(n.endswith("boxcar-data") for n in ingest):
        raise Failed(f"executors on the data volume: {shared}; apart: {apart}; ingest's mounts: {ingest}")
    return f"archive in an S3 bucket; {len(apart)} executor/resolver containers on no volume of ingest's"


def hostname(container: dict) -> str:
    return container["Config"].get("Hostname") or container["Id"][:12]


def test(stack: Stack, summary: dict) -> None:
    step(f"engine: {stack.engine.describe()}")
    started = time.monotonic()
    sizes = stack.build()
    if STORE:
        base = os.environ.get("BOXCAR_BASE_IMAGE", "localhost/boxcar-base:trixie")
        step(f"building {S3_IMAGE} (tests/compose/s3.Dockerfile: moto's S3 server)")
        stack.engine(
            "build",
            "-f",
            "tests/compose/s3.Dockerfile",
            "-t",
            S3_IMAGE,
            "--build-arg",
            f"BASE_IMAGE={base}",
            *stack.build_ca_args(),
            "tests/compose",
            log=True,
        )
        sizes[S3_IMAGE] = stack.image_size(S3_IMAGE)
    summary["build"] = time.monotonic() - started
    summary["images"] = ", ".join(f"{image.split('/')[-1].split(':')[0]} {mb(size)}" for image, size in sizes.items())
    stack.down(volumes=True)  # what an earlier, interrupted run left

    step("up: nats and postgres, migrate, every service; waiting for every healthcheck")
    stack.up(build=False)
    api = Api(f"http://{os.environ['BOXCAR_API_PUBLISH']}")
    health = api("GET", "/healthz")
    step(f"/healthz: {health}")
    token = stack.exec("ingest", "boxcar", "token", "create", "--name", "compose-test").stdout.strip().splitlines()[-1]
    api.token = token
    status = api("GET", "/api/v1/status")
    dead = [f for f, s in status["families"].items() if not s.get("alive")]
    if dead:
        raise Failed(f"families without a live executor: {dead}")
    alive = ", ".join(f for f, s in status["families"].items() if s.get("alive"))
    step(f"token made in the ingest container; executors alive: {alive}")
    if CLUSTER:
        replicas = stream_replicas(stack)
        if not replicas or any(n != 3 for n in replicas.values()):
            raise Failed(f"cluster profile: streams and their replicas {replicas}, expected 3 each")
        summary["cluster"] = f"3 NATS servers, {len(replicas)} streams with 3 replicas"
        step(summary["cluster"])
    if STORE:
        summary["store"] = executors_apart(stack)
        step(summary["store"])

    address = gateway(stack)
    server, port = serve_corpus(address)
    try:
        listed = urllib.request.urlopen(f"http://{address}:{port}/urls.txt", timeout=10).read().decode().split()
        urls, more = listed[:PAGES], listed[PAGES : PAGES + MORE]
        step(f"corpus served on the host at http://{address}:{port}/ (the stack network's gateway); {len(urls)} pages")
        crawl_id = api("POST", "/api/v1/crawls", {"urls": urls, "tags": ["compose-test"]})["id"]
        step(f"crawl {crawl_id} submitted")

        # mid-crawl: scale the fetch pool, and see the new replicas take tasks
        wait_crawl(api, crawl_id, 300, until=lambda c: c["results"].get("succeeded", 0) > 0)
        before = {c["Id"] for c in stack.containers(SCALED)}
        step(f"scaling {SCALED} to 3")
        scaling = time.monotonic()
        stack.scale(SCALED, 3)
        created = time.monotonic() - scaling
        stack.wait_healthy([SCALED], timeout=120)
        step(f"scaled: replicas created in {created:.0f}s, healthy {time.monotonic() - scaling:.0f}s after the scale")
        new = [c for c in stack.containers(SCALED, running=True) if c["Id"] not in before]
        if len(new) != 2:
            raise Failed(f"expected 2 new {SCALED} replicas, found {len(new)}")
        step(f"replicas up: {', '.join(c['Name'].lstrip('/') for c in new)}")
        # The first crawl's fetch tasks may all be taken before the replicas are healthy (a fetch task
        # takes a few seconds; the replicas' start does not). A second crawl, submitted now that every
        # replica has its pull request waiting, gives each one tasks to take: JetStream hands a work
        # queue's messages to the waiting pull requests in turn.
        second_id = api("POST", "/api/v1/crawls", {"urls": more, "tags": ["compose-test"]})["id"]
        step(f"second crawl {second_id} submitted ({len(more)} pages) while the first runs")
        deadline = time.monotonic() + 240
        while True:
            by_machine = machines_by_plugin(stack, "wget")
            worked = [c for c in new if by_machine.get(hostname(c), 0) > 0]
            if len(worked) == len(new):
                break
            second = api("GET", f"/api/v1/crawls/{second_id}")
            if second["status"] == "sealed" or time.monotonic() > deadline:
                raise Failed(
                    f"new replicas that took tasks: {len(worked)}/{len(new)} (wget runs by machine: {by_machine})"
                )
            time.sleep(2)
        summary["replicas"] = f"{len(worked)}/{len(new)}"
        step(
            "wget runs by container: "
            + ", ".join(
                f"{c['Name'].lstrip('/')}={by_machine.get(hostname(c), 0)}"
                for c in stack.containers(SCALED, running=True)
            )
        )

        # mid-crawl: SIGKILL the browser executor (and a NATS server of the cluster); their
        # restart policy must bring them back
        came_back = sigkill_and_wait(stack, KILLED)
        summary["restart"] = f"{KILLED} SIGKILLed, back by restart policy in {came_back:.0f}s"
        if CLUSTER:
            crawl_now = api("GET", f"/api/v1/crawls/{crawl_id}")["snapshots"]
            nats_back = sigkill_and_wait(stack, NATS_KILLED)
            summary["restart"] += (
                f"; {NATS_KILLED} SIGKILLed with {crawl_now.get('sealed', 0)}/{crawl_now.get('total', 0)} sealed, "
                f"back in {nats_back:.0f}s"
            )
            stack.wait_healthy([NATS_KILLED], timeout=120)
        stack.wait_healthy([KILLED], timeout=120)
        step(summary["restart"])

        crawl = wait_crawl(api, crawl_id, 900)
        snapshots = api.snapshots(crawl_id)
        if len(snapshots) != len(urls):
            raise Failed(f"{len(snapshots)} snapshots for {len(urls)} URLs")
        check_snapshots(snapshots)
        wait_crawl(api, second_id, 300)
        second_snapshots = api.snapshots(second_id)
        if len(second_snapshots) != len(more):
            raise Failed(f"second crawl: {len(second_snapshots)} snapshots for {len(more)} URLs")
        check_snapshots(second_snapshots)
        failed: dict[str, list[str]] = {}
        for snap in snapshots:
            for r in snap["results"]:
                if r["status"] == "failed":
                    failed.setdefault(r["plugin"], []).append((r["notes"] or r["output_str"] or "")[:160])
        for plugin, notes in sorted(failed.items()):
            step(f"failed results (reported, not checked): {plugin} x{len(notes)}, e.g. {notes[0]!r}")
        summary["sealed"] = f"{len(snapshots)}/{len(urls)} + {len(second_snapshots)}/{len(more)}"
        summary["archive origin"] = view_through_archive_origin(
            stack, api, snapshots[0], every=snapshots if STORE else None
        )
        step(summary["archive origin"])
        if STORE:
            out = stack.exec("ingest", "python", "-c", INDEX_CHECK).stdout
            bad = [line for line in out.splitlines() if line.startswith("MISMATCH")]
            if bad or "checked" not in out:
                raise Failed(f"index.jsonl in the bucket differs from the rows: {bad[:5] or out[-500:]}")
            summary["index"] = f"index.jsonl in the bucket matches the rows ({out.split()[-1]} snapshots)"
            step(summary["index"])
        step(
            f"crawl sealed: {len(snapshots)} snapshots, each with wget, {', '.join(BROWSER_PLUGINS)} succeeded; "
            f"results {crawl['results']}"
        )
    finally:
        server.terminate()
        server.wait(10)

    # named volumes: down, up, everything still there
    files = archive_files(stack)
    step(
        f"down then up ({len(snapshots) + len(second_snapshots)} snapshots, {len(files)} files, "
        f"{sum(files.values()) / 1e6:.1f} MB archived)"
    )
    stack.down()
    if stack.containers():
        raise Failed("containers left after down")
    stack.up(build=False)
    again = api.snapshots(crawl_id) + api.snapshots(second_id)
    # the test's S3 server keeps objects in memory: after down there are none to compare (rows only)
    files_again = {} if STORE else archive_files(stack)
    lost = [] if STORE else [p for p, size in files.items() if files_again.get(p) != size]
    had = len(snapshots) + len(second_snapshots)
    if len(again) != had or any(s["status"] != "sealed" for s in again) or lost:
        raise Failed(
            f"after down/up: {len(again)} snapshots (had {had}), {len(lost)} files lost or changed: {lost[:5]}"
        )
    check_snapshots(again)
    summary["kept"] = f"{len(again)} snapshots" + ("" if STORE else f", {len(files_again)} files")
    step(f"data kept across down/up: {summary['kept']} (the token still works: the database kept it)")

    volumes = stack.volumes()
    stack.down(volumes=True)
    left = stack.containers() + [v for v in stack.volumes()]
    if left:
        raise Failed(f"left after down -v: {left}")
    summary["cleaned"] = f"down -v removed {len(volumes)} volumes"
    step(summary["cleaned"])


def save_logs(stack: Stack) -> None:
    """Each container's whole log into ``LOGS`` (emptied first) and its last 15 lines to stderr;
    a log that cannot be read or written is reported and the others are still saved."""
    shutil.rmtree(LOGS, ignore_errors=True)
    LOGS.mkdir()
    for c in stack.containers():
        name = c["Name"].lstrip("/")
        try:
            logs = stack.engine("logs", "--timestamps", c["Id"], capture=True, check=False, errors="replace")
            text = logs.stdout + logs.stderr
            (LOGS / f"{name}.log").write_text(text)
        except OSError as exc:
            print(f"--- {name}: its log could not be saved: {exc}", file=sys.stderr)
            continue
        if stack.service_of(c) not in ("postgres", "nats", "migrate"):
            print(f"--- {name}\n{''.join(text.splitlines(keepends=True)[-15:])}", file=sys.stderr)
    print(f"[compose-test] every container's whole log: {LOGS}/", file=sys.stderr)


def main() -> int:
    os.environ["BOXCAR_COMPOSE_PROJECT"] = PROJECT
    if CLUSTER:
        os.environ["COMPOSE_ENV_FILE"] = "deploy/cluster.env"
    if STORE:  # the test's S3 server (moto) takes any credentials; SECRET_KEY: one for every container
        os.environ["COMPOSE_ENV_FILE"] = "deploy/cluster.env,deploy/store.env"
        os.environ["BOXCAR_COMPOSE_EXTRA"] = "tests/compose/s3.yml"
        os.environ["STORE_URL"] = "s3://boxcar-archive?endpoint=http://s3:9000"
        os.environ["AWS_ACCESS_KEY_ID"] = "boxcar-compose-test"
        os.environ["AWS_SECRET_ACCESS_KEY"] = secrets.token_hex(16)
        os.environ["SECRET_KEY"] = secrets.token_hex(32)
    os.environ["BOXCAR_API_PUBLISH"] = f"127.0.0.1:{free_port()}"
    archive_port = free_port()
    os.environ["BOXCAR_ARCHIVE_PUBLISH"] = f"127.0.0.1:{archive_port}"
    os.environ["ARCHIVE_ORIGIN"] = f"http://127.0.0.1:{archive_port}"
    os.environ["URL_ALLOW_PRIVATE"] = "true"  # the corpus is on the gateway, a private address
    # One task at a time per executor, so a mid-crawl scale-up still finds fetch tasks queued (at the
    # default 4 the first fetch replica takes 20 pages' tasks before new replicas are healthy).
    os.environ["EXECUTOR_CONCURRENCY"] = "1"
    summary: dict = {}
    stack = None
    LOG.write_text("")
    try:
        stack = Stack(detect_engine(install=True), PROJECT, local=None)
        test(stack, summary)
    except (Failed, subprocess.SubprocessError, OSError, KeyError, ValueError) as exc:
        print(f"[compose-test] FAILED: {exc}", file=sys.stderr, flush=True)
        if stack is not None:
            try:
                print("\n".join(stack.ps()), file=sys.stderr)
                save_logs(stack)
                if os.environ.get("BOXCAR_COMPOSE_KEEP") != "1":
                    stack.down(volumes=True)
            except Exception as cleanup:  # noqa: BLE001 - report the first failure, not this one
                print(f"[compose-test] cleanup: {cleanup}", file=sys.stderr)
        return 1
    total = time.monotonic() - T0
    print(
        f"compose-test passed in {total:.0f}s (images {summary['build']:.0f}s): "
        + (f"{summary['cluster']}; " if CLUSTER else "")
        + (f"{summary['store']}; {summary['index']}; " if STORE else "")
        + f"sealed {summary['sealed']} "
        f"with wget+browser results; scaled {SCALED}=3, new replicas that took tasks {summary['replicas']}; "
        f"restart: {summary['restart']}, crawl sealed; {summary['archive origin']}; "
        f"data kept across down/up: {summary['kept']}; "
        f"{summary['cleaned']}; images: {summary['images']}",
        flush=True,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
