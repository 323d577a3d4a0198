"""What every service process does at start and stop: logging, tracing, metrics, schema, signals.

Usage (see ``nats.py examples/docs/graceful_shutdown.py``: signals set an event, the loop drains)::

    async with run_service("crawl-runner") as (settings, db, stopping):
        stopping.add_done_callback(lambda _: worker.stop())
        await worker.run()
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import sys
import time
from collections.abc import AsyncIterator, Coroutine
from pathlib import Path
from typing import Any, NoReturn

from boxcar.shared import metrics, telemetry
from boxcar.shared.db import Database
from boxcar.shared.procutil import exit_without_teardown, freeze_imports, limit_malloc_arenas
from boxcar.shared.settings import Settings, get_settings

MAX_LOG_MESSAGE = 4000  # characters of one log message; a traceback keeps its last lines


class BoundedFormatter(logging.Formatter):
    """A formatter whose lines stay bounded: a huge message (a 5 MB SQL statement, a payload) is
    cut to ``MAX_LOG_MESSAGE`` characters and a traceback to its last 40 lines."""

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        if len(record.message) > MAX_LOG_MESSAGE:
            cut = len(record.message) - MAX_LOG_MESSAGE
            record.message = f"{record.message[:MAX_LOG_MESSAGE]} … [{cut} characters cut]"
        return super().formatMessage(record)

    def formatException(self, ei: logging._SysExcInfoType) -> str:  # noqa: N802 - logging's name
        lines = super().formatException(ei).splitlines()
        if len(lines) > 40:
            lines = [lines[0], f"  … [{len(lines) - 40} lines cut]", *lines[-39:]]
        return "\n".join(line[:MAX_LOG_MESSAGE] for line in lines)


def setup_logging(service: str) -> None:
    """Log lines to stderr as ``time level service: message`` (``LOG_LEVEL``, default INFO),
    each bounded (``BoundedFormatter``)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(BoundedFormatter(f"%(asctime)s %(levelname)s {service}[%(process)d] %(name)s: %(message)s"))
    logging.basicConfig(level=os.environ.get("LOG_LEVEL", "INFO").upper(), handlers=[handler])
    for noisy in ("nats", "httpx", "alembic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)


@contextlib.asynccontextmanager
async def run_service(
    name: str, *, database: bool = True
) -> AsyncIterator[tuple[Settings, Database | None, asyncio.Future[str]]]:
    """Set a service process up and tear it down.

    Args:
        name: the service name (logs, ``service.name`` of its spans).
        database: open the database and upgrade its schema (services that own no rows skip it).

    With ``METRICS_PORT`` the process serves its Prometheus metrics there (``boxcar.shared.metrics``).

    Yields:
        ``(settings, db, stopping)``: ``db`` is None without ``database``; ``stopping`` is a
        future resolved by SIGTERM/SIGINT.
    """
    limit_malloc_arenas()  # before the tracer's and the thread pool's threads start
    setup_logging(name)
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    telemetry.setup_tracing(name, settings.span_log_dir)
    exporter = metrics.serve_settings(settings)
    db = Database.for_settings(settings) if database else None
    if db is not None:
        await asyncio.to_thread(db.upgrade_in_child)
    loop = asyncio.get_running_loop()
    stopping: asyncio.Future[str] = loop.create_future()

    def _stop(signame: str) -> None:
        logging.getLogger(name).info("%s received: finishing current work", signame)
        from boxcar.shared import bus  # here: the container healthcheck imports this module alone

        bus.stop_setup_retries()
        if not stopping.done():
            stopping.set_result(signame)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, _stop, sig.name)
    heartbeat = asyncio.create_task(_heartbeat(os.environ.get("HEALTH_FILE", "")))
    try:
        yield settings, db, stopping
    finally:
        heartbeat.cancel()
        if db is not None:
            db.dispose()
        if exporter is not None:
            exporter.stop()
        telemetry.shutdown_tracing()


def run_main(main: Coroutine[Any, Any, None]) -> NoReturn:
    """``asyncio.run(main)`` for a service's ``python -m`` entry, as the one-process stack runs
    (``cli/allinone.py``): the objects its imports made are frozen first (``procutil.freeze_imports``:
    later full collections skip them), and once ``main`` has returned (the service stopped, its
    ``run_service`` torn down) the process ends without the interpreter's teardown of its modules
    (``procutil.exit_without_teardown``: exit status 0, ``atexit`` handlers run).

    Raises:
        whatever ``main`` raises (the interpreter then exits as usual: status 1 and the traceback,
        or ``SystemExit``'s own status).
    """
    freeze_imports()
    asyncio.run(main)
    exit_without_teardown(0)


async def _heartbeat(path: str, interval: float = 5.0) -> None:
    """Touch ``HEALTH_FILE`` every few seconds while the event loop runs (container healthchecks)."""
    if not path:
        return
    while True:
        with contextlib.suppress(OSError):
            Path(path).write_text(str(time.time()))
        await asyncio.sleep(interval)


def check_health(path: str, max_age: float = 30.0) -> bool:
    """True when the heartbeat file at ``path`` is younger than ``max_age`` seconds."""
    try:
        return time.time() - float(Path(path).read_text()) < max_age
    except (OSError, ValueError):
        return False


if __name__ == "__main__":  # python -m boxcar.shared.service: a container healthcheck
    sys.exit(0 if check_health(os.environ.get("HEALTH_FILE", "/tmp/boxcar-health")) else 1)
