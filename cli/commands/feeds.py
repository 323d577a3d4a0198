"""``boxcar feeds add|list|remove|poll``: feed subscriptions."""

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
from boxcar.shared.crawlconfig import MAX_DEPTH

if TYPE_CHECKING:
    pass


@click.group()
def feeds() -> None:
    """Feed subscriptions (RSS, Atom, JSON Feed) archived on a schedule."""


@feeds.command("add")
@common_options
@click.argument("url")
@click.option("--schedule", default="hourly", help="hourly, daily, weekly, monthly, yearly, or a cron expression")
@click.option("--tag", "tags", multiple=True)
@click.option("--depth", default=0, type=click.IntRange(0, MAX_DEPTH))
@click.option("--label", default="")
@click.option("--api", default=None)
@click.option("--token", default=None)
@click.option("--json", "as_json", is_flag=True)
def feeds_add(data_dir, url, schedule, tags, depth, label, api, token, as_json) -> None:
    """Subscribe to a feed (needs a running stack: `boxcar up`)."""
    settings = settings_for(data_dir)
    client = running_client(settings, api, token)
    try:
        feed = client.create_feed(
            {"url": url, "schedule": schedule, "tags": list(tags), "max_depth": depth, "label": label}
        )
    except ApiError as exc:
        fail(str(exc), 2)
    click.echo(json.dumps(feed) if as_json else f"subscribed {feed['id']}: {feed['url']} ({feed['schedule']})")


@feeds.command("list")
@common_options
@click.option("--api", default=None)
@click.option("--token", default=None)
@click.option("--json", "as_json", is_flag=True)
def feeds_list(data_dir, api, token, as_json) -> None:
    """List subscriptions with their polling state."""
    settings = settings_for(data_dir)
    try:
        items = running_client(settings, api, token).feeds()
    except ApiError as exc:
        fail(str(exc), 2)
    if as_json:
        for feed in items:
            click.echo(json.dumps(feed))
        return
    table = Table("id", "url", "schedule", "status", "items", "last error")
    for feed in items:
        table.add_row(
            feed["id"], feed["url"], feed["schedule"], feed["status"], str(feed["items_seen"]), feed["last_error"][:60]
        )
    Console().print(table)


@feeds.command("remove")
@common_options
@click.argument("feed_id")
@click.option("--api", default=None)
@click.option("--token", default=None)
def feeds_remove(data_dir, feed_id, api, token) -> None:
    """Unsubscribe (what was archived stays)."""
    settings = settings_for(data_dir)
    try:
        running_client(settings, api, token).delete_feed(feed_id)
    except ApiError as exc:
        fail(str(exc), 2)
    err.print(f"removed {feed_id}")


@feeds.command("poll")
@common_options
@click.argument("feed_id")
@click.option("--api", default=None)
@click.option("--token", default=None)
def feeds_poll(data_dir, feed_id, api, token) -> None:
    """Poll a subscription now."""
    settings = settings_for(data_dir)
    try:
        running_client(settings, api, token).control_feed(feed_id, "poll")
    except ApiError as exc:
        fail(str(exc), 2)
    err.print(f"poll of {feed_id} requested")
