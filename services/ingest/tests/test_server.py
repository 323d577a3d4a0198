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


def test_the_api_and_archive_apps_keep_the_services_log_level_and_format(tmp_path):
    """Litestar configures the root logger itself unless told not to (its default
    ``LoggingConfig``: INFO, its own handler and format). The apps are made after the service's
    ``setup_logging``, so without ``logging_config=None`` they undid it: ``LOG_LEVEL=DEBUG`` was
    ignored and log lines lost their bound (``MAX_LOG_MESSAGE``). uvicorn's server likewise logs
    through its own handler unless ``log_config=None``. Run in a process of its own:
    pytest's handlers on the root logger would make ``setup_logging`` a no-op here."""
    import os
    import subprocess
    import sys

    from boxcar.shared.service import MAX_LOG_MESSAGE

    program = """
import logging, sys
from boxcar.shared.service import setup_logging
setup_logging("ingest")
from boxcar.ingest.app import create_app, create_archive_app
from boxcar.shared.db import Database
from boxcar.shared.settings import Settings
settings = Settings(data_dir=sys.argv[1], nats_url="nats://127.0.0.1:9")
db = Database.for_settings(settings)
from boxcar.ingest.server import server
server(create_app(settings, db), "127.0.0.1", 0)
create_archive_app(settings, db)
log = logging.getLogger("boxcar.probe")
log.debug("a debug line")
log.info("x" * 100_000)
logging.getLogger("uvicorn.error").warning("y" * 100_000)
"""
    env = {**os.environ, "LOG_LEVEL": "DEBUG"}
    env.pop("DATABASE_URL", None)
    done = subprocess.run(
        [sys.executable, "-c", program, str(tmp_path)], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "boxcar.probe" in line]
    assert len(lines) == 2, done.stderr[-2000:]
    assert " DEBUG ingest[" in lines[0] and lines[0].endswith("boxcar.probe: a debug line")
    assert " INFO ingest[" in lines[1] and len(lines[1]) < MAX_LOG_MESSAGE + 200
    [uvicorn] = [line for line in done.stderr.splitlines() if "yyy" in line]  # uvicorn's own too
    assert " WARNING ingest[" in uvicorn and "uvicorn.error: yyy" in uvicorn and len(uvicorn) < MAX_LOG_MESSAGE + 200
