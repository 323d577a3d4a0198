"""``boxcar``: run Boxcar on one machine and feed it URLs.

The group and its commands, each in ``boxcar.cli.commands.<command>``: ``up`` (the whole stack,
foreground, Ctrl-C stops it), ``add`` (archive URLs or files, against a running stack or an
embedded one brought up for the duration), ``list``, ``status``, ``crawl``, ``feeds``, ``search``,
``remove``, ``reindex``, ``token``, ``user``, ``install``, ``demo``, ``migrate``, ``import-archivebox``. What they share
is in ``boxcar.cli.common``.
"""

from __future__ import annotations

import click

from boxcar.cli.commands import (
    add as add_command,
)
from boxcar.cli.commands import (
    crawl as crawl_command,
)
from boxcar.cli.commands import (
    demo as demo_command,
)
from boxcar.cli.commands import (
    export as export_command,
)
from boxcar.cli.commands import (
    feeds as feeds_command,
)
from boxcar.cli.commands import (
    import_archivebox as import_archivebox_command,
)
from boxcar.cli.commands import (
    install as install_command,
)
from boxcar.cli.commands import (
    list as list_command,
)
from boxcar.cli.commands import (
    migrate as migrate_command,
)
from boxcar.cli.commands import (
    reindex as reindex_command,
)
from boxcar.cli.commands import (
    remove as remove_command,
)
from boxcar.cli.commands import (
    schedule as schedule_command,
)
from boxcar.cli.commands import (
    search as search_command,
)
from boxcar.cli.commands import (
    status as status_command,
)
from boxcar.cli.commands import (
    token as token_command,
)
from boxcar.cli.commands import (
    trace as trace_command,
)
from boxcar.cli.commands import (
    up as up_command,
)
from boxcar.cli.commands import (
    user as user_command,
)


@click.group()
def cli() -> None:
    """Boxcar: a self-hosted web archiver built on the ArchiveBox plugin suite."""


cli.add_command(add_command.add)
cli.add_command(up_command.up)
cli.add_command(list_command.list_)
cli.add_command(demo_command.demo)
cli.add_command(migrate_command.migrate)
cli.add_command(token_command.token)
cli.add_command(status_command.status_cmd)
cli.add_command(crawl_command.crawl)
cli.add_command(feeds_command.feeds)
cli.add_command(install_command.install_cmd)
cli.add_command(user_command.user)
cli.add_command(search_command.search_cmd)
cli.add_command(remove_command.remove_cmd)
cli.add_command(reindex_command.reindex_cmd)
cli.add_command(export_command.export_cmd)
cli.add_command(trace_command.trace_cmd)
cli.add_command(schedule_command.schedule)
cli.add_command(import_archivebox_command.import_archivebox)


if __name__ == "__main__":
    cli()
