"""What every ``boxcar`` command shares: the error console, failing with a message and an exit
code, settings for ``--data-dir``, and the one client helper (``api_for``: a running stack's API,
or an embedded stack started for the command)."""

from __future__ import annotations

import contextlib
import functools
import os
import signal
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import click
from rich.console import Console

from boxcar.cli.client import BoxcarClient, local_token, running_stack
from boxcar.shared.settings import Settings

if TYPE_CHECKING:
    from boxcar.cli.stack import EmbeddedStack

err = Console(stderr=True)


def _interrupt(signum, _frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def stop_on_signals() -> None:
    """SIGTERM and SIGHUP (a closed terminal) stop us like Ctrl-C: cleanly, stack included."""
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _interrupt)


def fail(message: str, code: int = 1) -> None:
    err.print(f"[bold red]error:[/] {message}")
    sys.exit(code)


def settings_for(data_dir: str | None) -> Settings:
    if data_dir:
        os.environ["DATA_DIR"] = data_dir
    return Settings()


@contextlib.contextmanager
def api_for(
    settings: Settings, api: str | None, token: str | None = None
) -> Iterator[tuple[BoxcarClient, EmbeddedStack | None]]:
    """A client of a running stack (``--api``, ``BOXCAR_API_URL`` or DATA_DIR's stack.json), or of an
    embedded stack started here and stopped on exit. The token is ``--token``/``BOXCAR_API_TOKEN``,
    else the CLI's own token for this data dir."""
    url = api or os.environ.get("BOXCAR_API_URL")
    token = token or os.environ.get("BOXCAR_API_TOKEN") or ""
    if not url and (info := running_stack(settings.data_dir)):
        url = info["api_url"]
    if url:
        yield BoxcarClient(url, token or local_token(settings.data_dir)), None
        return
    from boxcar.cli.stack import EmbeddedStack, StackError

    stack = EmbeddedStack(settings, use_external_nats=bool(os.environ.get("NATS_URL")))
    err.print(f"[dim]no running Boxcar for {settings.data_dir}: starting an embedded one …[/]")
    stop_on_signals()
    try:
        stack.start()
    except StackError as exc:
        fail(str(exc))
    try:
        yield BoxcarClient(stack.api_url, stack.token), stack
    finally:
        err.print("[dim]stopping the embedded Boxcar …[/]")
        stack.stop()


def common_options(fn):
    @click.option("--data-dir", envvar="DATA_DIR", default=None, help="Archive root (default ./data)")
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs)

    return wrapper


def running_client(settings: Settings, api: str | None, token: str | None) -> BoxcarClient:
    url = api or os.environ.get("BOXCAR_API_URL")
    if not url and (info := running_stack(settings.data_dir)):
        url = info["api_url"]
    if not url:
        fail(f"no running Boxcar for {settings.data_dir}: start one with `boxcar up` (or pass --api)")
    return BoxcarClient(url, token or os.environ.get("BOXCAR_API_TOKEN") or local_token(settings.data_dir))


def open_database(settings: Settings, *, must_exist: bool = True):
    from boxcar.shared.db import Database

    if must_exist and not settings.database_url and not (settings.data_dir / "index.sqlite3").exists():
        fail(f"no archive in {settings.data_dir} (set DATA_DIR or DATABASE_URL)")
    db = Database.for_settings(settings)
    db.upgrade()
    return db
