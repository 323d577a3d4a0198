"""``python -m boxcar.ingest``: serve the API and web UI with uvicorn on ``API_HOST:API_PORT``, and,
with ``ARCHIVE_PORT``, archived files and WARC replay on their own origin on that port."""

from __future__ import annotations

import asyncio

from boxcar.ingest.app import create_app, create_archive_app
from boxcar.ingest.server import server
from boxcar.shared import telemetry
from boxcar.shared.db import Database
from boxcar.shared.service import run_main, setup_logging
from boxcar.shared.settings import get_settings


async def serve_both(settings) -> None:
    """The API on ``API_PORT`` (it owns the signals) and the archive origin on ``ARCHIVE_PORT``
    (stopped when the API stops)."""
    db = Database.for_settings(settings)
    await asyncio.to_thread(db.upgrade_in_child)
    main = server(create_app(settings, db), settings.api_host, settings.api_port)
    archive = server(create_archive_app(settings, db), settings.api_host, settings.archive_port, handle_signals=False)
    second = asyncio.create_task(archive.serve())
    try:
        await main.serve()
    finally:
        archive.should_exit = True
        await second
        db.dispose()


async def serve(settings) -> None:
    """The API (and the archive origin, with ``ARCHIVE_PORT``) until SIGTERM/SIGINT; the spans still
    buffered are flushed at the end."""
    try:
        if settings.archive_port:
            await serve_both(settings)
        else:
            await server(create_app(settings), settings.api_host, settings.api_port).serve()
    finally:
        telemetry.shutdown_tracing()  # flush spans still buffered


def main() -> None:
    setup_logging("ingest")
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    telemetry.setup_tracing("ingest", settings.span_log_dir)
    run_main(serve(settings))


if __name__ == "__main__":
    main()
