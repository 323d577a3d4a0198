"""``boxcar status``: crawls and snapshots by status, disk, executor families."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from boxcar.cli.client import ApiError
from boxcar.cli.common import (
    common_options,
    err,
    fail,
    running_client,
    settings_for,
)

if TYPE_CHECKING:
    pass


@click.command("status")
@common_options
@click.option("--api", default=None)
@click.option("--token", default=None)
@click.option("--json", "as_json", is_flag=True)
def status_cmd(data_dir, api, token, as_json) -> None:
    """What the running stack is doing: crawls and snapshots by status, disk, executor families."""
    settings = settings_for(data_dir)
    try:
        state = running_client(settings, api, token).status()
    except ApiError as exc:
        fail(str(exc), 2)
    if as_json:
        click.echo(json.dumps(state))
        return
    gib = 1024**3

    def counts(by_status: dict) -> str:
        return ", ".join(f"{n} {status}" for status, n in by_status.items())

    err.print(
        f"crawls: {counts(state['crawls'])}\nsnapshots: {counts(state['snapshots'])}\n"
        f"archive {state['archive_bytes'] / gib:.2f} GiB, disk {state.get('disk_used_bytes', 0) / gib:.1f} GiB used, "
        f"{state['disk_free_bytes'] / gib:.1f} GiB free in {state['data_dir']}"
    )
    services = state.get("services") or {}
    if services:
        alive = {True: "[green]alive[/]", False: "[red]DOWN[/]"}
        err.print("services " + "  ".join(f"{name} {alive[up]}" for name, up in services.items()))
    table = Table("family", "pending", "oldest waiting", "in progress", "idle executors", "alive")
    for name, fam in state["families"].items():
        alive = "[green]yes[/]" if fam["alive"] else ("[red]NO[/]" if fam["pending"] else "no")
        waited = f"{fam.get('oldest_pending_seconds', 0):.0f} s" if fam["pending"] else ""
        table.add_row(name, str(fam["pending"]), waited, str(fam["in_progress"]), str(fam["executors_waiting"]), alive)
    Console().print(table)
    for name in state["stalled_families"]:
        err.print(f"[red]family {name} has tasks waiting and no executor:[/] start `hook-executor --family {name}`")
