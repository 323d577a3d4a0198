"""Boxcar's Prometheus metrics: every name defined once, here, and the ``METRICS_PORT`` server.

The conventions of prometheus_client's docs: counters end in ``_total``, durations are seconds
(``_seconds``), sizes bytes, and every label has a bounded set of values — a family, a plugin, a
status, an outcome, a consumer's name; never an id, a URL or an error message. Each service
observes what it does at the place it already does it, and only once it is durable (the runner's
row changes are counted when their transaction commits: ``boxcar.shared.db.after_commit``):

=====================================  =============================  ==========================================
metric                                 labels                         observed where
=====================================  =============================  ==========================================
``boxcar_messages_total``              consumer, outcome              every consumer loop (``bus.consume``):
                                                                      ``acked``, ``retried`` (nak with back-off),
                                                                      ``dead_lettered``, ``handed_back`` (shutdown)
``boxcar_message_handling_seconds``    consumer                       the same loop: one handler call
``boxcar_hooks_total``                 family, plugin, status         hook-executor: each hook's ArchiveResult
                                                                      as published (succeeded, failed, skipped, …)
``boxcar_hook_duration_seconds``       family, plugin                 hook-executor: each hook process, start to end
``boxcar_task_duration_seconds``       family                         hook-executor: each task it ran
``boxcar_tasks_total``                 family, status                 crawl-runner: each task outcome it records
                                                                      (succeeded, failed, cancelled)
``boxcar_tasks_dispatched_total``      family                         crawl-runner: task messages published
``boxcar_dead_tasks_total``            family                         crawl-runner: tasks JetStream gave up on
                                                                      after ``TASK_MAX_DELIVER`` deliveries
``boxcar_claims_total``                row, outcome                   crawl-runner: each conditional claim of a
                                                                      crawl, snapshot or schedule (won or lost)
``boxcar_seals_total``                 row                            crawl-runner: crawls and snapshots sealed
``boxcar_capture_retries_total``       reason                         crawl-runner: snapshots queued to capture
                                                                      again (an HTTP status, a network error)
``boxcar_runner_pass_seconds``                                        crawl-runner: one pass over due rows
``boxcar_feed_polls_total``            outcome                        crawl-runner: feed polls (new_items,
                                                                      no_new_items, not_modified, failed)
``boxcar_feed_items_total``                                           crawl-runner: new feed items made crawls
``boxcar_projector_events_total``      kind                           result-projector: events committed
``boxcar_projector_lag_seconds``                                      result-projector: a hook's end to its
                                                                      ArchiveResult row committed
``boxcar_webhook_deliveries_total``    event, outcome                 webhook-sender: each attempt (delivered,
                                                                      retrying, failed)
``boxcar_binary_resolutions_total``    outcome                        binary-resolver: loaded, installed, failed
=====================================  =============================  ==========================================

Beside these, every process serves prometheus_client's own ``process_*`` (memory, CPU, open
files) and ``python_*`` collectors, and ingest adds its HTTP requests and the stack's gauges read
at each scrape (``boxcar.ingest.metrics``: queue depth and age per family from JetStream's
consumer info, crawls and snapshots by status, disk).

Everything is in prometheus_client's default ``REGISTRY``, so the one-process embedded stack
serves every service's metrics from one endpoint (ingest's ``/metrics``), and a service process
of its own serves its own with ``METRICS_PORT`` (``serve_settings``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from wsgiref.simple_server import WSGIServer

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from boxcar.shared.settings import Settings

log = logging.getLogger(__name__)

#: seconds: from a quick hook (a title) to a long download; HOOK_TIMEOUT caps most at minutes
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
#: seconds a result waits to be projected: milliseconds when all is well, minutes behind a backlog
LAG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0)

# ----------------------------------------------------------------------------- every consumer

MESSAGES = Counter(
    "boxcar_messages_total",
    "Messages a consumer loop settled, by outcome: acked, retried (nak with back-off), "
    "dead_lettered (given up), handed_back (at shutdown, for another replica)",
    ["consumer", "outcome"],
)
MESSAGE_SECONDS = Histogram(
    "boxcar_message_handling_seconds",
    "Seconds one message's handler ran (a hook task: the whole task)",
    ["consumer"],
    buckets=DURATION_BUCKETS,
)
MESSAGE_OUTCOMES = ("acked", "retried", "dead_lettered", "handed_back")

# ----------------------------------------------------------------------------- hook-executor

HOOKS = Counter(
    "boxcar_hooks_total",
    "Hook results an executor published, by family, plugin and ArchiveResult status",
    ["family", "plugin", "status"],
)
HOOK_SECONDS = Histogram(
    "boxcar_hook_duration_seconds",
    "Seconds a hook process ran, start to exit (background hooks: until stopped)",
    ["family", "plugin"],
    buckets=DURATION_BUCKETS,
)
TASK_SECONDS = Histogram(
    "boxcar_task_duration_seconds",
    "Seconds an executor spent on one task (a family's hooks on one snapshot)",
    ["family"],
    buckets=DURATION_BUCKETS,
)

# ----------------------------------------------------------------------------- crawl-runner

TASKS = Counter(
    "boxcar_tasks_total",
    "Task outcomes the crawl-runner recorded, by family and status (succeeded, failed, cancelled)",
    ["family", "status"],
)
TASKS_DISPATCHED = Counter(
    "boxcar_tasks_dispatched_total", "Hook task messages the crawl-runner published, by family", ["family"]
)
DEAD_TASKS = Counter(
    "boxcar_dead_tasks_total",
    "Tasks JetStream gave up on after TASK_MAX_DELIVER deliveries (their executor crashed or timed out "
    "each time); the crawl-runner records them failed",
    ["family"],
)
CLAIMS = Counter(
    "boxcar_claims_total",
    "Conditional claims the crawl-runner made, by row (crawl, snapshot, schedule) and outcome (won, or lost "
    "to another replica)",
    ["row", "outcome"],
)
SEALS = Counter("boxcar_seals_total", "Crawls and snapshots sealed", ["row"])
CAPTURE_RETRIES = Counter(
    "boxcar_capture_retries_total",
    "Snapshots queued to capture again, by reason (http_status: a 429/5xx answer; network_error)",
    ["reason"],
)
RUNNER_PASS_SECONDS = Histogram(
    "boxcar_runner_pass_seconds", "Seconds one crawl-runner pass over due rows took", buckets=DURATION_BUCKETS
)
FEED_POLLS = Counter(
    "boxcar_feed_polls_total",
    "Feed polls, by outcome: new_items, no_new_items, not_modified, failed",
    ["outcome"],
)
FEED_ITEMS = Counter("boxcar_feed_items_total", "New feed items that became a crawl's seeds")

# ----------------------------------------------------------------------------- result-projector

PROJECTED = Counter(
    "boxcar_projector_events_total",
    "Events the result-projector committed, by kind (archiveresult, process, binary, snapshot_sealed, "
    "tags_changed, other)",
    ["kind"],
)
PROJECTOR_LAG = Histogram(
    "boxcar_projector_lag_seconds",
    "Seconds from a hook's end to its ArchiveResult row being committed",
    buckets=LAG_BUCKETS,
)

# ----------------------------------------------------------------------------- webhook-sender, binary-resolver

WEBHOOK_DELIVERIES = Counter(
    "boxcar_webhook_deliveries_total",
    "Webhook delivery attempts, by event and outcome (delivered, retrying, failed: out of attempts)",
    ["event", "outcome"],
)
BINARY_RESOLUTIONS = Counter(
    "boxcar_binary_resolutions_total",
    "Binaries the binary-resolver answered for, by outcome (loaded, installed, failed)",
    ["outcome"],
)


def _initialise() -> None:
    """Label values known in advance start at 0, so ``rate()`` sees a series' first increase."""
    for row in ("crawl", "snapshot", "schedule"):
        for outcome in ("won", "lost"):
            CLAIMS.labels(row, outcome)
    for row in ("crawl", "snapshot"):
        SEALS.labels(row)
    for reason in ("http_status", "network_error"):
        CAPTURE_RETRIES.labels(reason)
    for outcome in ("new_items", "no_new_items", "not_modified", "failed"):
        FEED_POLLS.labels(outcome)
    for outcome in ("loaded", "installed", "failed"):
        BINARY_RESOLUTIONS.labels(outcome)


_initialise()


# ----------------------------------------------------------------------------- exposition


class _Joined(Collector):
    """The metrics of several registries as one collector (``before`` runs first, each scrape)."""

    def __init__(self, registries: Iterable[CollectorRegistry], before: Callable[[], None] | None) -> None:
        self.registries = list(registries)
        self.before = before

    def collect(self) -> Iterable[Metric]:
        if self.before is not None:
            try:
                self.before()
            except Exception as exc:  # a scrape still answers, with what was last read
                log.warning("metrics: refreshing before a scrape failed: %s", exc)
        for registry in self.registries:
            yield from registry.collect()


def joined(*registries: CollectorRegistry, before: Callable[[], None] | None = None) -> CollectorRegistry:
    """A registry that exposes every metric of ``registries`` (none of which may share a name),
    after calling ``before`` (e.g. reading gauges) at each scrape."""
    combined = CollectorRegistry(auto_describe=False)
    combined.register(_Joined(registries, before))
    return combined


@dataclass
class MetricsServer:
    """A running ``METRICS_PORT`` server (a daemon thread); ``stop()`` closes it."""

    httpd: WSGIServer
    thread: threading.Thread
    host: str
    port: int

    def stop(self) -> None:
        """Stop serving and free the port."""
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


def serve(port: int, host: str = "127.0.0.1", registry: CollectorRegistry = REGISTRY) -> MetricsServer:
    """Serve ``registry`` in the Prometheus text format on ``http://host:port/metrics`` (any path
    answers the same) from a daemon thread: prometheus_client's ``start_http_server``, which also
    speaks OpenMetrics and gzip to a scraper that asks for them.

    Raises:
        OSError: the port could not be bound.
    """
    httpd, thread = start_http_server(port, addr=host, registry=registry)
    return MetricsServer(httpd, thread, host, int(httpd.server_address[1]))


def serve_settings(settings: Settings, registry: CollectorRegistry = REGISTRY) -> MetricsServer | None:
    """``serve`` on ``METRICS_HOST:METRICS_PORT`` when ``METRICS_PORT`` is set (None when it is 0,
    or when the port is taken: that is logged, and the service works on without it). The port is
    registered as one of the stack's own (``RuntimePorts``) so no hook can fetch it."""
    if not settings.metrics_port:
        return None
    try:
        server = serve(settings.metrics_port, settings.metrics_host, registry)
    except OSError as exc:
        log.error(
            "metrics: could not listen on %s:%s (%s); serving none", settings.metrics_host, settings.metrics_port, exc
        )
        return None
    from boxcar.shared.egress import RuntimePorts

    try:
        RuntimePorts(settings.runtime_ports_dir).register("metrics", server.port)
    except OSError as exc:
        log.warning("metrics: could not register port %d with the egress policy: %s", server.port, exc)
    log.info("metrics on http://%s:%d/metrics", settings.metrics_host, server.port)
    return server
