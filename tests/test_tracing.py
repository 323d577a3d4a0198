"""A crawl is one OpenTelemetry trace: ingest's root span, the runner's dispatches, the executor's
tasks and hooks, the resolver's lookups and the projector's writes all share its trace id."""

from __future__ import annotations

import json
import re

from tests.helpers import submit, wait_sealed


def spans_in(log_text: str) -> list[dict]:
    """Spans the console exporter printed (pretty-printed JSON objects) in a service log."""
    spans, depth, start = [], 0, None
    for i, ch in enumerate(log_text):
        if ch == "{":
            depth, start = depth + 1, (i if depth == 0 else start)
        elif ch == "}" and depth:
            depth -= 1
            if depth == 0:
                try:
                    obj = json.loads(log_text[start : i + 1])
                except ValueError:
                    continue
                if isinstance(obj, dict) and "context" in obj and "name" in obj:
                    spans.append(obj)
    return spans


def test_one_trace_per_crawl_across_services(tmp_path, nats_url, make_stack, demo_site):
    stack = make_stack(
        f"sqlite:///{tmp_path / 'index.sqlite3'}",
        nats_url,
        env={"OTEL_TRACES_EXPORTER": "console", "PLUGINS": "wget,hashes"},
    )
    crawl_id = submit(stack, urls=[demo_site])
    wait_sealed(stack, crawl_id, timeout=300)
    stack.stop(grace=20)  # flushes every service's span exporter

    spans = {path.stem: spans_in(path.read_text(errors="replace")) for path in stack.log_dir.glob("*.log")}
    root = next(
        s for s in spans["ingest"] if s["name"] == "crawl" and s["attributes"].get("boxcar.crawl_id") == crawl_id
    )
    trace_id = root["context"]["trace_id"]
    assert re.fullmatch(r"0x[0-9a-f]{32}", trace_id)
    in_trace = {service for service, found in spans.items() if any(s["context"]["trace_id"] == trace_id for s in found)}
    assert {"ingest", "crawl-runner", "hook-executor-fetch", "hook-executor-index", "result-projector"} <= in_trace
    names = {s["name"] for found in spans.values() for s in found if s["context"]["trace_id"] == trace_id}
    assert {
        "crawl",
        "crawl.start",
        "snapshot.start",
        "task fetch",
        "hook on_Snapshot__35_wget.finite.bg",
        "task.completed",
    } <= names


def test_boxcar_trace_prints_a_crawl_s_waterfall_from_the_kept_spans(tmp_path, nats_url, make_stack, site_urls):
    """With no collector (the default: SPAN_LOG), every service keeps its spans under
    DATA_DIR/logs; ``boxcar trace`` finds the crawl's trace there and prints each snapshot's
    stages, tasks and hooks under the crawl, from every service."""
    import subprocess
    import sys
    from pathlib import Path

    stack = make_stack(f"sqlite:///{tmp_path / 'index.sqlite3'}", nats_url, env={"PLUGINS": "wget,hashes"})
    urls = site_urls(3)
    crawl_id = submit(stack, urls=urls)
    wait_sealed(stack, crawl_id, timeout=300)
    stack.stop(grace=20)  # flushes every service's span processor
    files = list((stack.data_dir / "logs").glob("spans-*.jsonl*"))
    assert files and all(json.loads(line)["resourceSpans"] for f in files for line in f.read_text().splitlines())

    boxcar = str(Path(sys.executable).parent / "boxcar")
    run = subprocess.run(
        [boxcar, "trace", crawl_id, "--json", "--data-dir", str(stack.data_dir)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    spans = [json.loads(line) for line in run.stdout.splitlines()]
    assert len({s["traceId"] for s in spans}) == 1
    services = {s["service"] for s in spans}
    assert {"ingest", "crawl-runner", "hook-executor-fetch", "hook-executor-index", "result-projector"} <= services
    names = [s["name"] for s in spans]
    assert "snapshot.start" in names and names.count("task fetch") == 3
    assert names.count("hook on_Snapshot__35_wget.finite.bg") == 3

    tree = subprocess.run(
        [boxcar, "trace", crawl_id, "--data-dir", str(stack.data_dir)],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "COLUMNS": "200"},
    )
    assert tree.returncode == 0, tree.stderr
    assert f"crawl {crawl_id}" in tree.stdout and "hook on_Snapshot__35_wget.finite.bg (wget)" in tree.stdout
    lines = tree.stdout.splitlines()
    crawl_line = next(i for i, line in enumerate(lines) if line.lstrip("└├─│ ").startswith("crawl "))
    hook_line = next(i for i, line in enumerate(lines) if "wget.finite.bg" in line)
    assert hook_line > crawl_line  # hooks drawn under the crawl's root span
    missing = subprocess.run(
        [boxcar, "trace", "0" * 32, "--data-dir", str(stack.data_dir)], capture_output=True, text=True
    )
    assert missing.returncode != 0 and "no crawl" in missing.stderr
    # the crawl page's "Trace" section draws the same tree
    from litestar.testing import TestClient

    from boxcar.ingest.app import create_app
    from boxcar.ingest.web.accounts import create_user
    from boxcar.shared.db import Database
    from boxcar.shared.settings import Settings

    db = Database(f"sqlite:///{tmp_path / 'index.sqlite3'}")
    create_user(db, "alice", "a long enough password", role="admin")
    with TestClient(create_app(Settings(data_dir=stack.data_dir, nats_url="nats://127.0.0.1:9"), db)) as c:
        token = re.search(r'name="_csrf_token" value="([^"]+)"', c.get("/login").text).group(1)
        c.post("/login", data={"username": "alice", "password": "a long enough password", "_csrf_token": token})
        assert 'id="trace"' in c.get(f"/crawls/{crawl_id}").text
        waterfall = c.get(f"/crawls/{crawl_id}/trace").text
    assert waterfall.count("hook on_Snapshot__35_wget.finite.bg (wget)") == 3 and 'class="span-bar"' in waterfall


def test_a_crawl_runner_killed_mid_crawl_stays_in_the_crawls_trace(tmp_path, nats_url, make_stack, site_urls):
    """SIGKILL the crawl-runner while a crawl runs; the supervisor starts a new one, which picks the
    crawl up from the database with the crawl's stored trace context: its spans (in a span file of
    its own, a new pid) join the same trace, and ``boxcar trace`` shows one trace for the crawl."""
    import os
    import signal
    import subprocess
    import sys
    from pathlib import Path

    from boxcar.shared.db import Database
    from boxcar.shared.spanlog import read_spans
    from tests.faults.harness import wait_progress

    url = f"sqlite:///{tmp_path / 'index.sqlite3'}"
    stack = make_stack(url, nats_url, env={"PLUGINS": "wget,hashes", "CRAWL_MAX_CONCURRENT_SNAPSHOTS": "2"})
    urls = site_urls(12)
    crawl_id = submit(stack, urls=urls)
    db = Database(url)
    wait_progress(db, crawl_id, 2)
    runner = next(c for c in stack.children if c.name == "crawl-runner")
    old_pid = runner.proc.pid
    os.kill(old_pid, signal.SIGKILL)
    runner.proc.wait()
    assert "crawl-runner" in stack.supervise_once()
    wait_sealed(stack, crawl_id, timeout=300)
    stack.stop(grace=20)
    db.dispose()

    logs = stack.data_dir / "logs"
    runner_files = {p.name for p in logs.glob("spans-crawl-runner-*.jsonl*")}
    new_files = [name for name in runner_files if f"-{old_pid}." not in name]
    assert new_files, runner_files  # the restarted runner wrote spans of its own
    spans = list(read_spans(logs))
    of_crawl = {s["traceId"] for s in spans if s["attributes"].get("boxcar.crawl_id") == crawl_id}
    assert len(of_crawl) == 1, of_crawl  # one trace, before and after the restart
    [trace_id] = of_crawl
    new_runner_spans = [s for name in new_files for s in read_spans_file(logs / name) if s["traceId"] == trace_id]
    assert new_runner_spans, "the restarted runner's work is in the crawl's trace"
    boxcar = str(Path(sys.executable).parent / "boxcar")
    run = subprocess.run(
        [boxcar, "trace", crawl_id, "--json", "--data-dir", str(stack.data_dir)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr
    printed = [json.loads(line) for line in run.stdout.splitlines()]
    assert {s["traceId"] for s in printed} == {trace_id}
    assert sum(1 for s in printed if s["name"] == "hook on_Snapshot__35_wget.finite.bg") == len(urls)


def read_spans_file(path) -> list[dict]:
    """The spans of one span file (``spanlog.read_spans`` reads a folder)."""
    import shutil
    import tempfile
    from pathlib import Path

    from boxcar.shared.spanlog import read_spans

    with tempfile.TemporaryDirectory() as folder:
        shutil.copy(path, Path(folder) / path.name)
        return list(read_spans(Path(folder)))
