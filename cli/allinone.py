"""``python -m boxcar.cli.allinone --families F,…``: the whole stack as tasks of one process.

The embedded stack's default shape (``EMBEDDED_SHAPE=one``): ingest (uvicorn), the crawl-runner,
the result-projector, the binary-resolver, the webhook-sender and one hook-executor control loop per family run on
one event loop, sharing one egress proxy and one warm interpreter; hooks stay child processes.
Each service is the same class its own ``python -m boxcar.<service>`` runs, talking to the others
over NATS exactly as in Compose — only the process boundary is gone, and with it eight Python
interpreters' memory and start-up. ``EMBEDDED_SHAPE=processes`` runs one process per service.
"""

# ruff: noqa: E402 - the collector goes off before the imports below (see freeze_imports)
from __future__ import annotations

import gc

if __name__ == "__main__":  # run as the stack, not imported: see freeze_imports
    gc.disable()

import argparse
import asyncio
import contextlib
import logging
import signal

from boxcar.binary_resolver.resolver import BinaryResolver
from boxcar.crawl_runner.runner import CrawlRunner
from boxcar.hook_executor.worker import HookExecutor, SharedResources
from boxcar.ingest.app import create_app, create_archive_app
from boxcar.ingest.server import server
from boxcar.result_projector.projector import ResultProjector
from boxcar.shared import bus, telemetry
from boxcar.shared.db import Database
from boxcar.shared.procutil import limit_malloc_arenas
from boxcar.shared.service import run_main, setup_logging
from boxcar.shared.settings import get_settings
from boxcar.webhook_sender.sender import WebhookSender

log = logging.getLogger("boxcar")


async def main(families: list[str]) -> None:
    """Run every service until SIGTERM/SIGINT, then stop them all (each finishes or hands back
    its current work, as it would alone)."""
    setup_logging("boxcar")
    settings = get_settings()
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    telemetry.setup_tracing("boxcar", settings.span_log_dir)
    db = Database.for_settings(settings)
    await asyncio.to_thread(db.upgrade_in_child)
    # the egress proxy and the warm interpreters start in a thread while the apps are made here
    sharing = asyncio.create_task(asyncio.to_thread(SharedResources, settings, families))
    try:
        runner = CrawlRunner(settings, db)
        projector = ResultProjector(settings, db)
        resolver = BinaryResolver(settings)
        webhooks = WebhookSender(settings, db)
        servers = [server(create_app(settings, db), settings.api_host, settings.api_port, handle_signals=False)]
        if settings.archive_port:  # archived files and WARC replay, on their own origin
            servers.append(
                server(create_archive_app(settings, db), settings.api_host, settings.archive_port, handle_signals=False)
            )
    except BaseException:
        with contextlib.suppress(Exception):  # what started meanwhile stops with the failure
            (await sharing).stop()
        raise
    shared = await sharing
    executors = [HookExecutor(settings, family, shared=shared) for family in families]

    def stop(signame: str) -> None:
        log.info("%s received: finishing current work", signame)
        bus.stop_setup_retries()
        for http in servers:
            http.should_exit = True
        for service in (runner, projector, resolver, webhooks, *executors):
            service.stop()

    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop, sig.name)
    try:
        await asyncio.gather(
            *(http.serve() for http in servers),
            runner.run(),
            projector.run(),
            resolver.run(),
            webhooks.run(),
            *(e.run() for e in executors),
        )
    finally:
        shared.stop()
        db.dispose()
        telemetry.shutdown_tracing()


def cli() -> None:
    parser = argparse.ArgumentParser(prog="boxcar-allinone", description=__doc__)
    parser.add_argument("--families", default="", help="comma-separated executor families to run")
    args = parser.parse_args()
    limit_malloc_arenas()
    # the collector was off for the imports above; every service has stopped when main returns
    run_main(main([f for f in args.families.split(",") if f]))


if __name__ == "__main__":
    cli()
