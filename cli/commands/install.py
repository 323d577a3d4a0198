"""``boxcar install``: provision every binary the enabled plugins need."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click
from rich.console import Console
from rich.table import Table

from boxcar.cli.common import (
    common_options,
    err,
    fail,
    settings_for,
)

if TYPE_CHECKING:
    pass


@click.command("install")
@common_options
@click.option("--family", "families", multiple=True, help="Only this family's plugins (repeatable)")
@click.option("--allow-apt", is_flag=True, help="Let apt-get install host packages (root; changes the machine)")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row")
def install_cmd(data_dir, families, allow_apt, as_json) -> None:
    """Resolve every binary the enabled plugins need into DATA_DIR/lib (abxpkg), and report.

    Exits non-zero when an enabled plugin cannot run. Safe to repeat: a second run installs nothing.
    """
    from boxcar.cli.install import install
    from boxcar.shared.families import load_families
    from boxcar.shared.plugins import get_catalog

    settings = settings_for(data_dir)
    known = load_families().families
    unknown = [f for f in families if f not in known]
    if unknown:
        fail(f"unknown family {', '.join(unknown)}; one of {', '.join(known)}", 2)
    with err.status("resolving binaries (first run installs node, npm packages, … into the lib dir)"):
        report = install(settings, get_catalog(), list(families) or None, allow_apt=allow_apt)
    if as_json:
        for row in report.rows:
            click.echo(json.dumps(row.__dict__))
    else:
        table = Table("plugin", "binary", "status", "version", "path / reason", title=f"binaries in {settings.lib_dir}")
        colors = {"found": "green", "installed": "cyan", "missing": "red"}
        for row in report.rows:
            if row.binary:
                table.add_row(row.plugin, row.binary, f"[{colors[row.status]}]{row.status}[/]", row.version, row.where)
        console = Console(width=max(Console().width, 140))
        console.print(table, overflow="fold")
        ready = [row.plugin for row in report.rows if row.status == "ready"]
        console.print(f"[green]ready[/] ({len(ready)}): {', '.join(ready)}", soft_wrap=True)
        for row in report.rows:
            if row.status in ("disabled", "unrunnable") and not row.binary:
                label = "[dim]disabled[/]" if row.status == "disabled" else "[red]cannot run[/]"
                console.print(f"{label} [bold]{row.plugin}[/]: {row.where}", soft_wrap=True)
    from boxcar.ingest.web import replay

    try:
        err.print(f"WARC replay viewer (ReplayWeb.page {replay.VERSION}): {replay.provision(settings)}")
    except (RuntimeError, OSError) as exc:  # replay is optional: the rest of the archive works without it
        err.print(f"[yellow]WARC replay unavailable:[/] {exc}")
    if not report.ok:
        fail(f"these enabled plugins cannot run: {', '.join(report.unrunnable)} (see the table)", 1)
    err.print("[green]every enabled plugin has what it needs[/]")
