"""``python -m boxcar.ingest``: serve the API and web UI with uvicorn on ``API_HOST:API_PORT``, and,
with ``ARCHIVE_PORT``, archived files and WARC replay on their own origin on that port."""

from __future__ import annotations

import asyncio
import contextlib

import uvicorn

from boxcar.ingest.app import create_app, create_archive_app
from boxcar.shared import telemetry
from boxcar.shared.db import Database
from boxcar.shared.service import setup_logging
from boxcar.shared.settings import get_settings


class _SecondServer(uvicorn.Server):
    """The archive origin's server: the main one owns the signals and stops it when it stops."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


async def serve_both(settings) -> None:
    db = Database(settings.sqlalchemy_url)
    await asyncio.to_thread(db.upgrade)
    main = uvicorn.Server(
        uvicorn.Config(
            create_app(settings, db),
            host=settings.api_host,
            port=settings.api_port,
            log_level="warning",
            access_log=False,
        )
    )
    archive = _SecondServer(
        uvicorn.Config(
            create_archive_app(settings, db),
            host=settings.api_host,
            port=settings.archive_port,
            log_level="warning",
            access_log=False,
        )
    )
    second = asyncio.create_task(archive.serve())
    try:
        await main.serve()
    finally:
        archive.should_exit = True
        await second
        db.dispose()


def main() -> None:
    setup_logging("ingest")
    telemetry.setup_tracing("ingest")
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    try:
        if settings.archive_port:
            asyncio.run(serve_both(settings))
        else:
            uvicorn.run(
                create_app(settings),
                host=settings.api_host,
                port=settings.api_port,
                log_level="warning",
                access_log=False,
            )
    finally:
        telemetry.shutdown_tracing()  # flush spans still buffered


if __name__ == "__main__":
    main()
