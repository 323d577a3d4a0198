"""``boxcar list``: snapshots and their results, read from the database."""

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


@click.command("list")
@common_options
@click.option("--crawl", "crawl_id", default=None, help="Only this crawl")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per snapshot")
@click.option("--limit", default=1000, type=int)
def list_(data_dir, crawl_id, as_json, limit) -> None:
    """List snapshots and their results (reads the database directly)."""
    from boxcar.ingest.access import operator
    from boxcar.ingest.services import CrawlService
    from boxcar.shared.db import Database
    from boxcar.shared.egress import refusal_kind
    from boxcar.shared.families import load_families
    from boxcar.shared.plugins import get_catalog

    settings = settings_for(data_dir)
    if not settings.database_url and not (settings.data_dir / "index.sqlite3").exists():
        fail(f"no archive in {settings.data_dir} (set DATA_DIR or DATABASE_URL)")
    db = Database.for_settings(settings)
    db.upgrade()
    service = CrawlService(db, settings, get_catalog(), load_families())
    me = operator(settings.archive_user)  # the operator's CLI: every user's snapshots
    if crawl_id and service.crawl_status(crawl_id, viewer=me) is None:
        fail(f"no crawl {crawl_id} in {settings.data_dir}")
    page = service.list_snapshots(crawl_id, limit, 0, viewer=me)
    if as_json:
        for snap in page.items:
            click.echo(
                json.dumps(
                    {
                        "id": snap.id,
                        "crawl_id": snap.crawl_id,
                        "url": snap.url,
                        "title": snap.title,
                        "status": snap.status,
                        "http_status": snap.http_status,
                        "final_url": snap.final_url,
                        "network_error": snap.network_error,
                        "refusal": snap.refusal,
                        "depth": snap.depth,
                        "parent_snapshot_id": snap.parent_snapshot_id,
                        "output_dir": str(settings.data_dir / snap.output_dir),
                        "tags": snap.tags,
                        "results": [
                            {
                                "plugin": r.plugin,
                                "hook_name": r.hook_name,
                                "status": r.status,
                                "output_str": r.output_str,
                            }
                            for r in snap.results
                        ],
                    }
                )
            )
        return
    table = Table("status", "http", "depth", "url", "title", "results")
    refusals: dict[str, int] = {}
    for snap in page.items:
        ok = sum(r.status == "succeeded" for r in snap.results)
        http = str(snap.http_status or "") or ("[red]unreachable[/]" if snap.network_error else "")
        if snap.http_status and snap.http_status >= 400:
            http = f"[red]{snap.http_status}[/]"
        outcome = f"{ok}/{len(snap.results)} ok"
        if snap.refusal:
            http, outcome = "[yellow]refused[/]", "[yellow]refused[/]"
            reason = refusal_kind(snap.refusal)
            refusals[reason] = refusals.get(reason, 0) + 1
        table.add_row(snap.status, http, str(snap.depth), snap.url, snap.title or "", outcome)
    Console().print(table)
    for reason, count in refusals.items():  # once per reason, not once per hook or per page
        err.print(f"[bold yellow]refused[/] {count} page(s): {reason}")
    if page.total > len(page.items):
        err.print(f"{len(page.items)} of {page.total} shown (--limit)")
