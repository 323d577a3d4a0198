"""``bus.consume``'s ``linger``: a consumer with a batch handler (the result-projector) waits a
moment for more messages before handling a batch, so the events that come while it waits are
projected in one transaction with the first instead of one by one; a full batch does not wait, a
batch that stays short is handled once the time is up, and without ``linger`` nothing waits."""

from __future__ import annotations

import asyncio
import time

import nats
import pytest

from boxcar.shared import bus


def _handled(nats_url: str, linger: float, second: bool) -> tuple[list[tuple[str, list[bytes]]], float]:
    """Publish one event, start a consumer (up to 2 messages a batch) and, with ``second``, publish
    another right after the consumer's first fetch returned. Returns ``[(how, [payload, …]), …]`` as
    handled, and the seconds the consumer ran."""
    handled: list[tuple[str, list[bytes]]] = []
    expected = 2 if second else 1

    async def scenario() -> float:
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
            if second and msgs and not published:  # the second event comes while the consumer has the first
                published.append(True)
                await js.publish("events.test.second", b"second")
            return msgs

        sub.fetch = fetch_then_publish  # the real fetch, on the real server, plus that publish

        def record(how: str, payloads: list[bytes]) -> None:
            handled.append((how, payloads))
            if sum(len(p) for _, p in handled) == expected:
                stop.set()

        async def one(msg) -> None:
            record("one", [msg.data])

        async def many(msgs) -> None:
            record("batch", [m.data for m in msgs])

        started = time.monotonic()
        await asyncio.wait_for(
            bus.consume(
                js, sub, one, consumer="lingering", stop=stop, max_deliver=3, batch=2, batch_handler=many, linger=linger
            ),
            60,
        )
        took = time.monotonic() - started
        await nc.close()
        return took

    took = asyncio.run(scenario())
    return handled, took


@pytest.mark.parametrize(
    "linger, second, expected",
    [
        (30.0, True, [("batch", [b"first", b"second"])]),
        (0.2, False, [("one", [b"first"])]),  # nothing more came: handled alone once the time is up
        (0.0, True, [("one", [b"first"]), ("one", [b"second"])]),
    ],
)
def test_linger_gathers_what_comes_while_waiting(nats_url, linger, second, expected):
    handled, took = _handled(nats_url, linger, second)
    assert handled == expected
    if linger == 30.0:  # the batch was full when the second came: no 30 s wait (a bound, not a timing)
        assert took < 15, took
