"""The spans a stack exports, kept on disk so a crawl's trace can be opened without a collector
(``boxcar trace CRAWL_ID``).

Each process writes ``DATA_DIR/logs/spans-<service>-<pid>.jsonl``: one OTLP/JSON
``ExportTraceServiceRequest`` per line (the OpenTelemetry protocol's JSON encoding, as the
collector's file exporter writes it: ``resourceSpans`` → ``scopeSpans`` → ``spans``, ids in hex),
made by the OTel SDK's own OTLP encoder. Files rotate at ``SPAN_LOG_MAX_BYTES`` (two old
generations kept, ``logging.handlers.RotatingFileHandler``), and when a process starts, the
oldest files beyond ``SPAN_LOG_TOTAL_BYTES`` in the folder are removed: the folder stays bounded
however many processes came and went.
"""

from __future__ import annotations

import base64
import json
import logging
import logging.handlers
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from google.protobuf.json_format import MessageToDict
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

SPAN_LOG_MAX_BYTES = 8 * 1024 * 1024
SPAN_LOG_TOTAL_BYTES = 256 * 1024 * 1024
PATTERN = "spans-*.jsonl*"


def _hex_ids(node: Any) -> Any:
    """OTLP/JSON writes trace and span ids as hex, not protobuf JSON's base64."""
    if isinstance(node, dict):
        return {
            k: (base64.b64decode(v).hex() if k in ("traceId", "spanId", "parentSpanId") and v else _hex_ids(v))
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def prune(folder: Path, total: int = SPAN_LOG_TOTAL_BYTES) -> None:
    """Remove the oldest span files until the folder holds at most ``total`` bytes of them."""
    files = sorted(folder.glob(PATTERN), key=lambda p: p.stat().st_mtime, reverse=True)
    kept = 0
    for path in files:
        size = path.stat().st_size
        if kept + size > total:
            path.unlink(missing_ok=True)
        else:
            kept += size


class SpanFileExporter(SpanExporter):
    """An OTel SDK span exporter appending OTLP/JSON lines to a rotated file (module docstring)."""

    def __init__(self, folder: Path, service: str, max_bytes: int = SPAN_LOG_MAX_BYTES) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        prune(folder)
        self._log = logging.Logger(f"boxcar.spans.{service}", level=logging.INFO)  # not in the tree
        handler = logging.handlers.RotatingFileHandler(
            folder / f"spans-{service}-{os.getpid()}.jsonl", maxBytes=max_bytes, backupCount=2, encoding="utf-8"
        )
        handler.setFormatter(logging.Formatter("%(message)s"))
        self._log.addHandler(handler)
        self._handler = handler

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        try:
            request = _hex_ids(MessageToDict(encode_spans(spans)))
            self._log.info(json.dumps(request, separators=(",", ":")))
        except (OSError, ValueError):
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self._handler.close()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        self._handler.flush()
        return True


def read_spans(folder: Path, trace_id: str | None = None) -> Iterator[dict[str, Any]]:
    """Every span in the folder's span files (of one trace when ``trace_id`` is given) as a flat
    dict: ``traceId``, ``spanId``, ``parentSpanId``, ``name``, ``service``, ``start``/``end``
    (ns), ``error`` (status code 2), ``attributes`` (key → value); unreadable lines skipped."""
    for path in sorted(folder.glob(PATTERN)):
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        for line in lines:
            if trace_id and trace_id not in line:
                continue
            try:
                request = json.loads(line)
            except ValueError:
                continue
            for resource in request.get("resourceSpans", []):
                attrs = _attributes(resource.get("resource", {}).get("attributes", []))
                service = str(attrs.get("service.name", ""))
                for scope in resource.get("scopeSpans", []):
                    for span in scope.get("spans", []):
                        if trace_id and span.get("traceId") != trace_id:
                            continue
                        yield {
                            "traceId": span.get("traceId", ""),
                            "spanId": span.get("spanId", ""),
                            "parentSpanId": span.get("parentSpanId", ""),
                            "name": span.get("name", ""),
                            "service": service,
                            "start": int(span.get("startTimeUnixNano", 0)),
                            "end": int(span.get("endTimeUnixNano", 0)),
                            "error": span.get("status", {}).get("code") in (2, "STATUS_CODE_ERROR"),
                            "attributes": _attributes(span.get("attributes", [])),
                        }


def _attributes(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for pair in pairs:
        value = pair.get("value", {})
        out[pair.get("key", "")] = next(iter(value.values()), None) if value else None
    return out


class SpanNode:
    """One span of a trace with its children (start order): what ``boxcar trace`` and the crawl
    page draw. ``offset``/``duration`` in seconds from the trace's first span."""

    def __init__(self, span: dict[str, Any], origin: int) -> None:
        self.span = span
        self.children: list[SpanNode] = []
        self.offset = (span["start"] - origin) / 1e9
        self.duration = max(0, span["end"] - span["start"]) / 1e9

    @property
    def label(self) -> str:
        """The span's name with what identifies its subject (URL, plugin, status)."""
        attrs = self.span["attributes"]
        extra = [str(attrs[k]) for k in ("boxcar.url", "url.full", "boxcar.plugin", "boxcar.status") if attrs.get(k)]
        return str(self.span["name"]) + (f" ({', '.join(extra)})" if extra else "")


def trace_tree(spans: list[dict[str, Any]]) -> list[SpanNode]:
    """The spans as trees: each span under its parent, roots (no parent in the set: the crawl's
    span, or spans whose parent was never kept) in start order."""
    if not spans:
        return []
    origin = min(s["start"] for s in spans)
    nodes = {s["spanId"]: SpanNode(s, origin) for s in spans}
    roots: list[SpanNode] = []
    for node in sorted(nodes.values(), key=lambda n: n.span["start"]):
        parent = nodes.get(node.span["parentSpanId"])
        (parent.children if parent is not None and parent is not node else roots).append(node)
    return roots


def trace_id_of(carrier: dict[str, str] | None) -> str:
    """The trace id in a W3C ``traceparent`` carrier (``Crawl.trace_context``); "" without one."""
    parts = (carrier or {}).get("traceparent", "").split("-")
    return parts[1] if len(parts) == 4 else ""
