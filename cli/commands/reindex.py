"""``boxcar reindex``: rebuild the search index from rows and files."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from boxcar.cli.common import (
    common_options,
    err,
    open_database,
    settings_for,
)

if TYPE_CHECKING:
    pass


@click.command("reindex")
@common_options
def reindex_cmd(data_dir) -> None:
    """Rebuild the full-text search index from the archive's rows and files."""
    from boxcar.result_projector.fulltext import reindex
    from boxcar.shared.archive_store import ArchiveStore

    settings = settings_for(data_dir)
    db = open_database(settings)
    with err.status("indexing …") as status:
        count = reindex(
            db,
            ArchiveStore.from_settings(settings),
            progress=lambda done, total: status.update(f"indexing {done}/{total}"),
        )
    err.print(f"indexed {count} snapshot(s)")
