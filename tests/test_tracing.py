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
