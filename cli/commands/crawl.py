"""``boxcar crawl pause|resume|cancel ID``: control a crawl (needs ``boxcar up``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

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


@click.group()
def crawl() -> None:
    """Pause, resume or cancel a crawl (needs a running stack: `boxcar up`)."""


def _crawl_control(action: str):
    @common_options
    @click.argument("crawl_id")
    @click.option("--api", default=None)
    @click.option("--token", default=None)
    @click.option("--wait", is_flag=True, help="Wait until the crawl is sealed (cancel)")
    def command(data_dir, crawl_id, api, token, wait) -> None:
        settings = settings_for(data_dir)
        client = running_client(settings, api, token)
        try:
            client.control_crawl(crawl_id, action)
        except ApiError as exc:
            fail(str(exc), 2)
        err.print(f"{action} of crawl {crawl_id} requested")
        if wait:
            try:
                state = client.wait(crawl_id, console=err)
            except ApiError as exc:
                fail(str(exc), 2)
            err.print(f"crawl {crawl_id}: {state['status']}")

    command.__doc__ = {
        "pause": "Pause a crawl: no new snapshot starts; those in flight finish.",
        "resume": "Resume a paused crawl.",
        "cancel": "Cancel a crawl: its running hooks are killed, unfinished ones recorded skipped, and it is sealed.",
    }[action]
    return command


for _action in ("pause", "resume", "cancel"):
    crawl.command(_action)(_crawl_control(_action))
