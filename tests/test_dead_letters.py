"""A message that can never be handled is dead-lettered (with its error) after ``max_deliver`` at
most, on every consumer, and never retried forever; a poison payload at once."""

from __future__ import annotations

import asyncio

import nats
import pytest

from boxcar.shared import bus
from tests.helpers import wait_until

POISON = b'{"this is": "not the message this subject carries"}'


async def dead_letters(nats_url: str) -> dict[str, list[str]]:
    """``{consumer: [original subject, …]}`` of what is in ``DEADLETTER`` now."""
    nc = await nats.connect(nats_url)
    js = nc.jetstream()
    out: dict[str, list[str]] = {}
    try:
        info = await js.stream_info(bus.DEADLETTER_STREAM)
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(bus.DEADLETTER_STREAM, seq)
            out.setdefault(msg.subject.split(".", 1)[1], []).append(msg.headers["Boxcar-Subject"])
    except Exception:
        return {}
    finally:
        await nc.close()
    return out


@pytest.mark.parametrize(
    "subject, consumer",
    [
        ("events.task.completed.fetch", bus.RUNNER_CONSUMER),
        ("control.crawl.0123456789abcdef0123456789abcdef", bus.RUNNER_CONTROL_CONSUMER),
        (bus.SUBJECT_ARCHIVERESULT, bus.PROJECTOR_CONSUMER),
        ("tasks.hooks.fetch", bus.family_consumer("fetch")),
    ],
)
def test_poison_on_every_consumer_is_dead_lettered_once(subject, consumer, sqlite_url, nats_url, make_stack):
    make_stack(sqlite_url, nats_url, families=["fetch"])

    async def publish() -> None:
        nc = await nats.connect(nats_url)
        await nc.jetstream().publish(subject, POISON)
        await nc.close()

    asyncio.run(publish())
    found = wait_until(lambda: asyncio.run(dead_letters(nats_url)).get(consumer), 60, f"a dead letter from {consumer}")
    assert found == [subject]


def test_a_message_that_always_fails_ends_after_max_deliver(nats_url):
    attempts: list[int] = []

    async def scenario() -> None:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        await bus.ensure_streams(js)
        await bus.ensure_consumer(js, bus.EVENTS_STREAM, "always-fails", "events.test.>", ack_wait=5, max_deliver=3)
        sub = await bus.pull(js, bus.EVENTS_STREAM, "always-fails")
        await js.publish("events.test.x", b"{}")
        stop = asyncio.Event()

        async def handler(msg) -> None:
            attempts.append(msg.metadata.num_delivered)
            if msg.metadata.num_delivered >= 3:
                asyncio.get_running_loop().call_later(2, stop.set)  # time for a wrongful 4th delivery
            raise RuntimeError("the database said no")

        await bus.consume(js, sub, handler, consumer="always-fails", stop=stop, max_deliver=3)
        await nc.close()

    asyncio.run(scenario())
    assert attempts == [1, 2, 3]
    letters = asyncio.run(dead_letters(nats_url))
    assert letters.get("always-fails") == ["events.test.x"]
