"""``bus.consume``'s ``linger``: a consumer with a batch handler (the result-projector) waits a
moment for more messages before handling a batch, so the events that come while it waits are
projected in one transaction with the first instead of one by one; without ``linger`` they are not."""

from __future__ import annotations

import asyncio

import nats
import pytest

from boxcar.shared import bus


def _handled(nats_url: str, linger: float) -> list[tuple[str, list[bytes]]]:
    """Publish one event, start a consumer (up to 2 messages a batch), and publish a second event
    right after the consumer's first fetch returned; ``[(how, [payload, …]), …]`` as handled."""
    handled: list[tuple[str, list[bytes]]] = []

    async def scenario() -> None:
        nc = await nats.connect(nats_url)
        js = nc.jetstream()
        await bus.ensure_streams(js)
        await bus.ensure_consumer(js, bus.EVENTS_STREAM, "lingering", "events.test.>", ack_wait=30, max_deliver=3)
        sub = await bus.pull(js, bus.EVENTS_STREAM, "lingering")
        await js.publish("events.test.first", b"first")
        stop = asyncio.Event()
        fetch = sub.fetch
        published: list[bool] = []

        async def fetch_then_publish(batch: int = 1, timeout: float | None = 5, **kwargs):
            msgs = await fetch(batch, timeout=timeout, **kwargs)
            if msgs and not published:  # the second event comes while the consumer has the first
                published.append(True)
                await js.publish("events.test.second", b"second")
            return msgs

        sub.fetch = fetch_then_publish  # the real fetch, on the real server, plus that publish

        def record(how: str, payloads: list[bytes]) -> None:
            handled.append((how, payloads))
            if sum(len(p) for _, p in handled) == 2:
                stop.set()

        async def one(msg) -> None:
            record("one", [msg.data])

        async def many(msgs) -> None:
            record("batch", [m.data for m in msgs])

        await asyncio.wait_for(
            bus.consume(
                js, sub, one, consumer="lingering", stop=stop, max_deliver=3, batch=2, batch_handler=many, linger=linger
            ),
            60,
        )
        await nc.close()

    asyncio.run(scenario())
    return handled


@pytest.mark.parametrize(
    "linger, expected",
    [
        (30.0, [("batch", [b"first", b"second"])]),  # the batch is full at once: no 30 s wait
        (0.0, [("one", [b"first"]), ("one", [b"second"])]),
    ],
)
def test_linger_gathers_what_comes_while_waiting(nats_url, linger, expected):
    assert _handled(nats_url, linger) == expected
