"""``GET /metrics``: Prometheus metrics of the stack, in the conventions of prometheus_client's
docs (base units, ``_total`` counters, ``_seconds``, bounded label sets).

- HTTP requests of ingest by route template, method and status, and their durations: Litestar's
  Prometheus middleware (``litestar_requests_total``, ``litestar_request_duration_seconds``, …).
- This process's memory and CPU: prometheus_client's process collector (``process_*``).
- Whatever else this process's default registry holds: in the one-process embedded stack that is
  every service's counters and histograms (``boxcar.shared.metrics``: hooks, tasks, claims,
  seals, retries, dead letters, projector lag, feed polls, webhook deliveries).
- The stack, read when scraped (``StackStatus``, the same numbers as ``boxcar status``): crawls
  and snapshots by status, archive bytes, free disk, per executor family the tasks waiting, how
  long the oldest of them has waited, the tasks in hand and the idle executors (from JetStream's
  consumer info), which services answer, and ArchiveResults by plugin and status.

It needs a read token (``Authorization: Bearer``, as Prometheus's ``authorization`` scrape
setting sends) unless ``PUBLIC_READS=true``. With ``METRICS_PORT`` the same text is also served
on that port without a token (``serve_port``; Compose's Prometheus scrapes that, on the stack's
internal network).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from litestar import Litestar, Response, get
from litestar.datastructures import State
from litestar.exceptions import HTTPException
from litestar.plugins.prometheus import PrometheusConfig, PrometheusMiddleware
from litestar.types import ASGIApp, Receive, Scope, Send
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, Gauge, generate_latest
from sqlalchemy import func, select

from boxcar.ingest import routes
from boxcar.ingest.api.auth import require_admin_token
from boxcar.ingest.status import stack_status
from boxcar.shared import metrics as shared_metrics
from boxcar.shared.db import Database
from boxcar.shared.db.models import ArchiveResult
from boxcar.shared.settings import Settings

#: the span (status, times, whether its response started) of the request ``CountErrorStatus`` is
#: handling in this context
_REQUEST_SPAN: ContextVar[dict[str, Any] | None] = ContextVar("boxcar_request_span", default=None)


class CountErrorStatus(PrometheusMiddleware):
    """Litestar's Prometheus middleware, except that a request ended by an exception raised under
    it before any response started is counted with the exception's status (an ``HTTPException``'s
    own, else 500) and its duration, instead of 200 and 0 s. Litestar 2.25 counts such requests
    as 200 (litestar#4747; fixed upstream by #4769 after that release: drop this class once the
    pinned Litestar has it). Here that is every form post ``CSRFMiddleware`` refuses with a 403,
    and ``request.form()``'s 400 and 413: they raise outside the exception handler Litestar puts
    around each route handler, and the app's handler outside this middleware answers. (Errors of
    the handlers and guards are answered inside it and counted from what is sent, whatever status
    the app's ``exception_handlers`` give them.)"""

    def __init__(self, app: ASGIApp, config: PrometheusConfig) -> None:
        super().__init__(app, config)
        inner = self.app

        async def status_on_error(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                await inner(scope, receive, send)
            except Exception as exc:
                span = _REQUEST_SPAN.get()
                if span is not None and not span.get("started"):
                    span["status_code"] = exc.status_code if isinstance(exc, HTTPException) else 500
                    span["duration"] = time.perf_counter() - span["start_time"]
                raise

        self.app = status_on_error

    def _get_wrapped_send(self, send: Send, request_span: dict[str, Any]) -> Callable:
        # called by __call__ in the request's own task, just before it calls the app (overrides
        # a private method of Litestar's middleware: checked against 2.25)
        _REQUEST_SPAN.set(request_span)
        wrapped = super()._get_wrapped_send(send, request_span)

        async def note_start(message: Any) -> None:
            if message["type"] in ("http.response.start", "websocket.accept"):
                request_span["started"] = True
            await wrapped(message)

        return note_start


#: HTTP metrics of ingest, by route template (``group_path``: bounded labels, no ids)
HTTP = PrometheusConfig(
    app_name="boxcar-ingest",
    prefix="litestar",
    group_path=True,
    exclude=[routes.METRICS],
    middleware_class=CountErrorStatus,
)

#: the stack's gauges live in a registry of their own, filled at each scrape
STACK = CollectorRegistry(auto_describe=True)
CRAWLS = Gauge("boxcar_crawls", "Crawls by status", ["status"], registry=STACK)
SNAPSHOTS = Gauge("boxcar_snapshots", "Snapshots by status", ["status"], registry=STACK)
ARCHIVE_BYTES = Gauge("boxcar_archive_bytes", "Bytes the archive's snapshots hold", registry=STACK)
DISK_FREE = Gauge("boxcar_disk_free_bytes", "Free bytes on the file system of DATA_DIR", registry=STACK)
PENDING = Gauge("boxcar_tasks_pending", "Hook tasks waiting for an executor", ["family"], registry=STACK)
PENDING_AGE = Gauge(
    "boxcar_tasks_pending_age_seconds",
    "Seconds the oldest hook task waiting for an executor has waited (0: none waits)",
    ["family"],
    registry=STACK,
)
IN_PROGRESS = Gauge("boxcar_tasks_in_progress", "Hook tasks an executor holds", ["family"], registry=STACK)
WAITING = Gauge("boxcar_executors_idle", "Idle executors' pull requests", ["family"], registry=STACK)
UP = Gauge("boxcar_service_up", "Whether a service answers (1) or not (0)", ["service"], registry=STACK)
RESULTS = Gauge("boxcar_archive_results", "ArchiveResults by plugin and status", ["plugin", "status"], registry=STACK)

#: everything ``/metrics`` shows: this process's default registry, then the stack's gauges
EXPOSED = shared_metrics.joined(REGISTRY, STACK)


def _results(db: Database) -> list[tuple[str, str, int]]:
    with db.read() as s:
        rows = s.execute(
            select(ArchiveResult.plugin, ArchiveResult.status, func.count()).group_by(
                ArchiveResult.plugin, ArchiveResult.status
            )
        ).all()
    return [(str(p), str(st), int(n)) for p, st, n in rows]


async def refresh(state: State) -> None:
    """Read the stack (``stack_status``) into the ``STACK`` gauges."""
    status = await stack_status(state.db, state.settings, state.families, getattr(state, "nats", None))
    for name, n in status.crawls.items():
        CRAWLS.labels(name).set(n)
    for name, n in status.snapshots.items():
        SNAPSHOTS.labels(name).set(n)
    ARCHIVE_BYTES.set(status.archive_bytes)
    DISK_FREE.set(status.disk_free_bytes)
    for family, f in status.families.items():
        PENDING.labels(family).set(f.pending)
        PENDING_AGE.labels(family).set(f.oldest_pending_seconds)
        IN_PROGRESS.labels(family).set(f.in_progress)
        WAITING.labels(family).set(f.executors_waiting)
    for service, alive in status.services.items():
        UP.labels(service).set(1 if alive else 0)
    results = await asyncio.to_thread(_results, state.db)
    RESULTS.clear()
    for plugin, result_status, n in results:
        RESULTS.labels(plugin, result_status).set(n)


@get(routes.METRICS, guards=[require_admin_token], include_in_schema=False)
async def metrics(state: State) -> Response[bytes]:
    """The text exposition of every metric (module docstring)."""
    await refresh(state)
    body = await asyncio.to_thread(generate_latest, EXPOSED)
    return Response(body, media_type=CONTENT_TYPE_LATEST)


def serve_port(app: Litestar, settings: Settings) -> shared_metrics.MetricsServer | None:
    """With ``METRICS_PORT``: serve what ``/metrics`` shows on that port, without a token (the
    stack's gauges read on this app's event loop at each scrape); call it from the app's lifespan."""
    if not settings.metrics_port:
        return None
    loop = asyncio.get_running_loop()

    def read_stack() -> None:
        asyncio.run_coroutine_threadsafe(refresh(app.state), loop).result(timeout=20)

    return shared_metrics.serve_settings(settings, shared_metrics.joined(REGISTRY, STACK, before=read_stack))
