"""``boxcar search``: full-text search of the archive."""

from __future__ import annotations

import json
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


@click.command("search")
@common_options
@click.argument("query", nargs=-1, required=True)
@click.option("--tag", default="", help="Only snapshots with this tag")
@click.option("--limit", default=20, type=click.IntRange(1, 1000))
@click.option("--json", "as_json", is_flag=True, help="One JSON object per match")
def search_cmd(data_dir, query, tag, limit, as_json) -> None:
    """Full-text search of titles, URLs, tags and page text: words, "a phrase", -excluded, a or b."""
    from boxcar.ingest.access import operator
    from boxcar.ingest.library import SnapshotLibrary
    from boxcar.shared.archive_store import ArchiveStore
    from boxcar.shared.search import SearchHit

    settings = settings_for(data_dir)
    library = SnapshotLibrary(open_database(settings), settings.data_dir, store=ArchiveStore.from_settings(settings))
    rows = library.search(" ".join(query), tag, limit, viewer=operator(settings.archive_user))
    for row in rows:
        snippet = SearchHit(row.id, 0.0, row.snippet_html).snippet
        if as_json:
            click.echo(
                json.dumps(
                    {
                        "id": row.id,
                        "url": row.url,
                        "title": row.title,
                        "tags": row.tags,
                        "status": row.status,
                        "created_at": row.created_at.isoformat(),
                        "snippet": snippet,
                    }
                )
            )
        else:
            err.print(f"[bold]{row.title or row.url}[/]  [dim]{row.id}[/]\n  {row.url}\n  [dim]{snippet[:200]}[/]")
    if not rows and not as_json:
        err.print("no matches")
