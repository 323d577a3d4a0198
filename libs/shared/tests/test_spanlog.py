"""Spans kept on disk: real SDK spans written as OTLP/JSON lines, read back as one trace's tree;
files rotate and the folder stays bounded."""

from __future__ import annotations

import json

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import Status, StatusCode

from boxcar.shared import spanlog


def provider_writing_to(folder, service="crawl-runner", max_bytes=spanlog.SPAN_LOG_MAX_BYTES) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(spanlog.SpanFileExporter(folder, service, max_bytes)))
    return provider


def test_spans_round_trip_as_otlp_json_and_make_a_tree(tmp_path):
    provider = provider_writing_to(tmp_path)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("crawl") as root:
        with tracer.start_as_current_span("task fetch") as task:
            task.set_attribute("boxcar.url", "https://example.com/")
            with tracer.start_as_current_span("hook wget") as hook:
                hook.set_attribute("boxcar.plugin", "wget")
                hook.set_status(Status(StatusCode.ERROR))
    with tracer.start_as_current_span("another trace"):
        pass
    provider.shutdown()
    trace_id = format(root.get_span_context().trace_id, "032x")
    [path] = tmp_path.glob("spans-crawl-runner-*.jsonl")
    first = json.loads(path.read_text().splitlines()[0])
    span = first["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(span["traceId"]) == 32 and int(span["traceId"], 16)  # OTLP/JSON: hex ids
    spans = list(spanlog.read_spans(tmp_path, trace_id))
    assert {s["name"] for s in spans} == {"crawl", "task fetch", "hook wget"}
    [tree] = spanlog.trace_tree(spans)
    assert tree.span["name"] == "crawl" and tree.span["service"] == "crawl-runner"
    [task_node] = tree.children
    assert task_node.label == "task fetch (https://example.com/)"
    [hook_node] = task_node.children
    assert hook_node.span["error"] and hook_node.label == "hook wget (wget)"
    assert spanlog.trace_id_of({"traceparent": f"00-{trace_id}-{'1' * 16}-01"}) == trace_id
    assert spanlog.trace_id_of(None) == ""


def test_span_files_rotate_and_the_folder_stays_bounded(tmp_path):
    provider = provider_writing_to(tmp_path, max_bytes=2000)
    tracer = provider.get_tracer("t")
    for n in range(200):
        with tracer.start_as_current_span(f"span {n}"):
            pass
    provider.shutdown()
    files = list(tmp_path.glob("spans-*"))
    assert 1 < len(files) <= 3  # the current file and two old generations
    assert all(f.stat().st_size <= 4000 for f in files)
    spanlog.prune(tmp_path, total=3000)
    assert sum(f.stat().st_size for f in tmp_path.glob("spans-*")) <= 3000
