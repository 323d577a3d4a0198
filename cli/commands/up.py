"""``boxcar up``: the whole stack in the foreground; Ctrl-C stops it cleanly."""

from __future__ import annotations

import os
import signal
import time
from typing import TYPE_CHECKING

import click

from boxcar.cli.client import running_stack
from boxcar.cli.common import (
    common_options,
    err,
    fail,
    settings_for,
)

if TYPE_CHECKING:
    pass


@click.command()
@common_options
@click.option("--port", default=None, type=int, help="API port (default API_PORT or 8000; 0 = any free port)")
def up(data_dir: str | None, port: int | None) -> None:
    """Run the whole stack in the foreground until Ctrl-C."""
    settings = settings_for(data_dir)
    if running_stack(settings.data_dir):
        fail(f"a Boxcar stack is already running on {settings.data_dir}")
    from boxcar.cli.stack import EmbeddedStack, StackError

    stack = EmbeddedStack(
        settings,
        api_port=settings.api_port if port is None else port,
        use_external_nats=bool(os.environ.get("NATS_URL")),
    )
    stopping = []
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda *_: stopping.append(1))
    try:
        stack.start()
    except StackError as exc:
        fail(str(exc))
    err.print(f"[bold green]Boxcar is up[/]  web UI and API {stack.api_url}  (OpenAPI {stack.api_url}/schema)")
    err.print(
        f"archive origin (replay) http://127.0.0.1:{stack.archive_port}; "
        "log in with a user made by `boxcar user create NAME`"
    )
    err.print(f"data {settings.data_dir}  NATS {stack.nats_url}  executors: {', '.join(stack.families)}")
    err.print("[dim]boxcar add URL… submits here; Ctrl-C stops everything[/]")
    try:
        while not stopping:
            for name in stack.supervise_once():
                err.print(f"[yellow]{name} crashed and was restarted[/]")
            time.sleep(1)
    finally:
        err.print("stopping …")
        stack.stop()
        err.print("stopped")
