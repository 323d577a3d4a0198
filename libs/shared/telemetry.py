"""OpenTelemetry set-up and W3C trace-context propagation across NATS and the database.

A crawl is one trace: ingest starts its root span and stores the span context on the Crawl row
(``Crawl.trace_context``, a ``{"traceparent": ..., "tracestate": ...}`` carrier); every message
carries the current context in its NATS headers; every consumer continues it. Work resumed from
the database (a due row rather than a message) continues the context stored on the Crawl row.

Exporting follows the standard OpenTelemetry environment: ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) sends spans over OTLP/HTTP; ``OTEL_TRACES_EXPORTER=console``
prints them; with neither, spans are created (so context still propagates) but not exported.
Whatever else, with ``SPAN_LOG`` (the default) every span is also kept under ``DATA_DIR/logs``
(``boxcar.shared.spanlog``), which ``boxcar trace`` reads.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

_configured = False


def setup_tracing(service_name: str, span_dir: Path | None = None) -> TracerProvider | None:
    """Install a TracerProvider for this process (idempotent); ``span_dir``: also keep its spans
    there (``Settings.span_log_dir``).

    Returns:
        The provider installed by this call, or None when one was already installed.
    """
    global _configured
    if _configured:
        return None
    _configured = True
    provider = TracerProvider(resource=Resource.create({"service.name": service_name}))
    if span_dir is not None:
        from boxcar.shared.spanlog import SpanFileExporter

        provider.add_span_processor(BatchSpanProcessor(SpanFileExporter(span_dir, service_name)))
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter_name == "console":
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    elif exporter_name != "none" and (
        os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT") or os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    ):
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    return provider


def shutdown_tracing() -> None:
    """Flush and stop span export (call on clean shutdown)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()


def flush_tracing() -> None:
    """Export every finished span now (before a server that re-raises SIGTERM exits)."""
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.force_flush()


def tracer(name: str = "boxcar") -> trace.Tracer:
    """The tracer Boxcar's code creates spans with."""
    return trace.get_tracer(name)


def current_carrier() -> dict[str, str]:
    """The current span context as W3C headers (``traceparent``/``tracestate``); {} if none."""
    carrier: dict[str, str] = {}
    propagate.inject(carrier)
    return carrier


def context_from(carrier: Mapping[str, str] | None) -> otel_context.Context:
    """A context to start child spans in, from NATS headers or a stored carrier."""
    return propagate.extract(dict(carrier or {}))
