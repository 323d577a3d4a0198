"""``boxcar demo``: serve the bundled demo site on loopback and archive it (what ``make run`` does)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import click

from boxcar.cli.common import (
    common_options,
    err,
)
from boxcar.shared.crawlconfig import MAX_DEPTH

if TYPE_CHECKING:
    pass


@click.command()
@common_options
@click.option("--depth", default=1, type=click.IntRange(0, MAX_DEPTH), help="Link hops from the demo index (default 1)")
@click.option("--json", "as_json", is_flag=True)
def demo(data_dir, depth, as_json) -> None:
    """Serve the bundled demo site on 127.0.0.1 and archive it (works offline)."""
    from boxcar.cli.commands.add import add
    from boxcar.cli.demo import serve_demo_site

    # the demo site is on 127.0.0.1: an embedded stack started for the demo may fetch loopback
    os.environ.setdefault("URL_ALLOW_PRIVATE", "true")
    with serve_demo_site() as url:
        err.print(f"demo site at {url}")
        ctx = click.get_current_context()
        ctx.invoke(
            add,
            data_dir=data_dir,
            inputs=(url,),
            depth=depth,
            tags=("demo",),
            plugins="",
            format_=None,
            only_new=False,
            wait=True,
            as_json=as_json,
            dry_run=False,
            api=None,
            token=None,
            timeout=None,
        )
