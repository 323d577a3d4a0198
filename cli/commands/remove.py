"""``boxcar remove``: delete snapshots, rows and files."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from boxcar.cli.common import (
    common_options,
    err,
    fail,
    open_database,
    settings_for,
)

if TYPE_CHECKING:
    pass


@click.command("remove")
@common_options
@click.argument("targets", nargs=-1, required=True)
@click.option("--yes", is_flag=True, help="Do not ask")
def remove_cmd(data_dir, targets, yes) -> None:
    """Delete snapshots (by id, or every snapshot of a URL): their rows and their files."""
    from boxcar.ingest.access import operator
    from boxcar.ingest.library import SnapshotBusy, SnapshotLibrary
    from boxcar.shared.archive_store import ArchiveStore

    settings = settings_for(data_dir)
    library = SnapshotLibrary(open_database(settings), settings.data_dir, store=ArchiveStore.from_settings(settings))
    me = operator(settings.archive_user)  # the operator's CLI: every user's snapshots
    ids: list[str] = []
    for target in targets:
        found = library.find(target, viewer=me)
        if not found:
            fail(f"no snapshot matches {target}", 2)
        ids += [i for i in found if i not in ids]
    if not yes:
        for sid in ids:
            detail = library.detail(sid, viewer=me)
            err.print(f"  {sid}  {detail.snapshot.url if detail else ''}")
        if not click.confirm(f"delete {len(ids)} snapshot(s) and their files?", err=True):
            fail("nothing deleted", 1)
    busy = 0
    for sid in ids:
        try:
            library.delete(sid, viewer=me)
        except SnapshotBusy as exc:
            busy += 1
            err.print(f"[yellow]{exc}[/]")
    err.print(f"deleted {len(ids) - busy} snapshot(s)")
    if busy:
        sys.exit(1)
