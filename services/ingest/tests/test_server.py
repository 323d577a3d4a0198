"""The HTTP server's one-second tick: it still serves and stamps ``Date``, and a stop is not held
back by the tick (the tick is made an hour long here, so waiting for it would fail the test)."""

from __future__ import annotations

import asyncio
import socket

import httpx
import pytest
from litestar import Litestar, get

from boxcar.ingest import server as server_module


@get("/ping", sync_to_thread=False)
def ping() -> str:
    return "pong"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("handle_signals", [False, True])
def test_setting_should_exit_stops_the_server_without_waiting_for_the_tick(monkeypatch, handle_signals):
    monkeypatch.setattr(server_module, "TICK", 3600.0)
    port = _free_port()
    http = server_module.server(Litestar([ping]), "127.0.0.1", port, handle_signals=handle_signals)

    async def scenario() -> None:
        serving = asyncio.create_task(http.serve())
        while not http.started:
            assert not serving.done(), serving.exception()
            await asyncio.sleep(0.01)
        async with httpx.AsyncClient() as client:
            response = await client.get(f"http://127.0.0.1:{port}/ping")
        assert response.text == "pong"
        assert response.headers["date"].endswith(" GMT")
        assert not http.should_exit

        http.should_exit = True
        await asyncio.wait_for(serving, 30)  # an hour's tick would time out here

    asyncio.run(scenario())
    assert http.should_exit
