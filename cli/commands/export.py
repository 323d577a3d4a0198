"""``boxcar export FORMAT``: snapshots out as WACZ, JSON Lines, JSON, CSV, Netscape bookmarks, RSS
or Atom (``boxcar.ingest.exports``), read from the database and the archive directly."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from boxcar.cli.common import common_options, err, fail, open_database, settings_for

TEXT_FORMATS = ("jsonl", "json", "csv", "html", "rss", "atom")


@click.command("export")
@common_options
@click.argument("format", type=click.Choice(["wacz", *TEXT_FORMATS]))
@click.option("--snapshot", "snapshot_id", default="", help="One snapshot (id)")
@click.option("--crawl", "crawl_id", default="", help="A crawl's snapshots (id)")
@click.option("--tag", default="", help="A tag's snapshots")
@click.option("--search", "q", default="", help="A search's snapshots (same syntax as boxcar search)")
@click.option(
    "-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None, help="File (default: stdout)"
)
@click.option("--base-url", default="http://127.0.0.1:8000", show_default=True, help="Snapshot links in feeds")
def export_cmd(data_dir, format, snapshot_id, crawl_id, tag, q, output, base_url) -> None:
    """Export snapshots: all of them, or one (--snapshot), a crawl's, a tag's or a search's.

    WACZ (Webrecorder's format: WARCs, index, pages with their text) needs -o; the others go to
    stdout unless -o is given. Progress goes to stderr.
    """
    from rich.progress import Progress, SpinnerColumn, TextColumn

    from boxcar.ingest import exports
    from boxcar.ingest.access import operator
    from boxcar.ingest.library import SnapshotLibrary
    from boxcar.shared.archive_store import ArchiveStore

    settings = settings_for(data_dir)
    db = open_database(settings)
    library = SnapshotLibrary(db, settings.data_dir, store=ArchiveStore.from_settings(settings))
    chosen = exports.Selection(snapshot_id=snapshot_id, crawl_id=crawl_id, tag=tag, q=q)
    if crawl_id and not exports.crawl_exists(db, crawl_id):
        fail(f"no crawl {crawl_id} in {settings.data_dir}")
    limit = exports.FEED_SIZE if format in ("rss", "atom") else exports.MAX_EXPORT
    ids = exports.selected_ids(db, library, chosen, operator(settings.archive_user), limit)
    if not ids and format not in ("rss", "atom"):
        fail(f"nothing to export: no snapshot matches ({chosen.describe()})")
    if format == "wacz":
        if output is None:
            fail("a WACZ is a zip file: give -o FILE.wacz")
        with Progress(SpinnerColumn(), TextColumn("{task.description}"), console=err, transient=False) as bar:
            task = bar.add_task("exporting", total=None)
            try:
                pages = exports.write_wacz(
                    db,
                    library.store,
                    settings.data_dir,
                    ids,
                    output,
                    title=f"Boxcar: {chosen.describe()}",
                    progress=lambda text: bar.update(task, description=text),
                )
            except exports.ExportError as exc:
                fail(str(exc))
        err.print(f"{output}: {pages} page(s) from {len(ids)} snapshot(s)")
        return
    rows = exports.records(library, ids, operator(settings.archive_user))
    if format in ("rss", "atom"):
        chunks = iter(
            [
                exports.feed(
                    rows, format, title=f"Boxcar: {chosen.describe()}", base_url=base_url.rstrip("/"), self_url=base_url
                )
            ]
        )
    else:
        writer = {"jsonl": exports.jsonl, "json": exports.json_array, "csv": exports.csv_rows, "html": exports.netscape}
        chunks = writer[format](rows)
    out = output.open("w", encoding="utf-8") if output else sys.stdout
    try:
        for chunk in chunks:
            out.write(chunk)
    finally:
        if output:
            out.close()
            err.print(f"{output}: {len(ids)} snapshot(s)")
