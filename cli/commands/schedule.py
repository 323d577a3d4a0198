"""``boxcar schedule add|list|pause|resume|run|remove``: URLs archived again on a schedule
(ArchiveBox's ``archivebox schedule``); each run makes new snapshots, and a snapshot's page shows
what changed since the previous one."""

from __future__ import annotations

import json

import click
from rich.console import Console
from rich.table import Table

from boxcar.cli.client import ApiError
from boxcar.cli.common import common_options, err, fail, running_client, settings_for
from boxcar.shared.crawlconfig import MAX_DEPTH

API_OPTIONS = (click.option("--api", default=None), click.option("--token", default=None))


def api_options(f):
    for option in reversed(API_OPTIONS):
        f = option(f)
    return f


@click.group()
def schedule() -> None:
    """Archive URLs again and again: every minute/hour/day/week/month/year, or on a cron expression."""


@schedule.command("add")
@common_options
@click.argument("urls", nargs=-1, required=True)
@click.option(
    "--every", default="daily", show_default=True, help="minute, hourly, daily, weekly, monthly, yearly, or cron"
)
@click.option("--tag", "tags", multiple=True)
@click.option("--depth", default=0, type=click.IntRange(0, MAX_DEPTH))
@click.option("--label", default="")
@api_options
@click.option("--json", "as_json", is_flag=True)
def schedule_add(data_dir, urls, every, tags, depth, label, api, token, as_json) -> None:
    """Archive URLS now and on a schedule (needs a running stack: `boxcar up`)."""
    settings = settings_for(data_dir)
    payload = {"urls": list(urls), "every": every, "tags": list(tags), "max_depth": depth, "label": label}
    try:
        made = running_client(settings, api, token).create_schedule(payload)
    except ApiError as exc:
        fail(str(exc), 2)
    click.echo(json.dumps(made) if as_json else f"scheduled {made['id']}: {len(made['urls'])} URL(s) {made['every']}")


@schedule.command("list")
@common_options
@api_options
@click.option("--json", "as_json", is_flag=True)
def schedule_list(data_dir, api, token, as_json) -> None:
    """URL schedules with their next run and how many runs they made."""
    settings = settings_for(data_dir)
    try:
        items = running_client(settings, api, token).schedules()
    except ApiError as exc:
        fail(str(exc), 2)
    if as_json:
        for item in items:
            click.echo(json.dumps(item))
        return
    table = Table("id", "urls", "every", "status", "runs", "next run", "last error")
    for item in items:
        first = item["urls"][0] + (f" (+{len(item['urls']) - 1})" if len(item["urls"]) > 1 else "")
        table.add_row(
            item["id"],
            first,
            item["every"],
            item["status"],
            str(item["runs"]),
            str(item["next_run_at"] or ""),
            item["last_error"][:60],
        )
    Console().print(table)


def _control(data_dir, schedule_id, api, token, action: str, said: str) -> None:
    settings = settings_for(data_dir)
    try:
        running_client(settings, api, token).control_schedule(schedule_id, action)
    except ApiError as exc:
        fail(str(exc), 2)
    err.print(f"{said} {schedule_id}")


@schedule.command("pause")
@common_options
@click.argument("schedule_id")
@api_options
def schedule_pause(data_dir, schedule_id, api, token) -> None:
    """Stop running a schedule until resumed."""
    _control(data_dir, schedule_id, api, token, "pause", "paused")


@schedule.command("resume")
@common_options
@click.argument("schedule_id")
@api_options
def schedule_resume(data_dir, schedule_id, api, token) -> None:
    """Run a paused schedule again."""
    _control(data_dir, schedule_id, api, token, "resume", "resumed")


@schedule.command("run")
@common_options
@click.argument("schedule_id")
@api_options
def schedule_run(data_dir, schedule_id, api, token) -> None:
    """Run a schedule now (its next run stays as planned after this one)."""
    _control(data_dir, schedule_id, api, token, "run", "run requested for")


@schedule.command("remove")
@common_options
@click.argument("schedule_id")
@api_options
def schedule_remove(data_dir, schedule_id, api, token) -> None:
    """Remove a schedule (what it archived stays)."""
    settings = settings_for(data_dir)
    try:
        running_client(settings, api, token).delete_schedule(schedule_id)
    except ApiError as exc:
        fail(str(exc), 2)
    err.print(f"removed {schedule_id}")
