"""``boxcar import-archivebox PATH``: an ArchiveBox 0.7/0.8/0.9 collection into this archive,
without capturing anything again (``boxcar.cli.archivebox_import``)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from boxcar.cli.common import common_options, err, fail, open_database, settings_for


@click.command("import-archivebox")
@common_options
@click.argument("path", type=click.Path(exists=True, file_okay=False, path_type=Path))
@click.option("--user", default=None, help="Owner of what is imported (default: ARCHIVE_USER)")
@click.option("--link", is_flag=True, help="Hard-link the files instead of copying them (copies across file systems)")
@click.option("--dry-run", is_flag=True, help="Count what would be imported; write nothing")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON on stdout")
def import_archivebox(data_dir, path: Path, user: str | None, link: bool, dry_run: bool, as_json: bool) -> None:
    """Import the ArchiveBox collection at PATH (its data dir: index.sqlite3 and archive/).

    Snapshots, titles, tags, bookmark dates and every result with its files come over; the
    source is only read. A second run adds only what is new. What can't be mapped is listed.
    With --link the files are hard links to ArchiveBox's (don't edit them in either place).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from boxcar.cli.archivebox_import import import_collection
    from boxcar.shared.archive_store import ArchiveStore

    settings = settings_for(data_dir)
    owner = user or settings.archive_user
    url = settings.sqlalchemy_url
    if dry_run:
        db = None
        if not url.startswith("sqlite:///") or Path(url.removeprefix("sqlite:///")).exists():
            from boxcar.shared.db import Database

            db = Database(url)  # only read: no migration in a dry run (a missing table reads as empty)
    else:
        db = open_database(settings, must_exist=False)
    if db is not None and owner != settings.archive_user:
        from boxcar.ingest.web.accounts import list_users

        if owner not in {u.username for u in list_users(db)}:
            fail(f"no user {owner}: make one with `boxcar user create {owner}` first", 2)
    try:
        with Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), console=err, transient=True
        ) as bar:
            task = bar.add_task("importing", total=None)
            report = import_collection(
                db,
                settings.data_dir,
                path,
                user=owner,
                link=link,
                dry_run=dry_run,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
                store=None if dry_run else ArchiveStore.from_settings(settings),  # a dry run writes nothing
            )
    except (OSError, ValueError) as exc:  # StoreUnavailable among them: the bucket did not answer
        fail(str(exc))
    finally:
        if db is not None:
            db.dispose()
    if as_json:
        click.echo(json.dumps({"dry_run": dry_run, "user": owner, **report.as_dict()}, indent=2))
    verb = "would import" if dry_run else "imported"
    err.print(
        f"ArchiveBox {report.version} collection at {path}: {report.snapshots_found} snapshot(s), "
        f"{report.snapshots_existing} already here; {verb} {report.snapshots_new} snapshot(s), "
        f"{report.results_new} result(s), {report.files} file(s) ({report.bytes} bytes) for user {owner}"
    )
    if report.results_by_plugin:
        err.print("  results: " + ", ".join(f"{k}={v}" for k, v in sorted(report.results_by_plugin.items())))
    if not dry_run and (report.linked or report.copied):
        err.print(f"  files: {report.linked} hard-linked, {report.copied} copied")
    if report.link_fallback:
        err.print(f"  [yellow]{report.link_fallback}[/]")
    if report.problems:
        err.print(f"[yellow]not mapped ({len(report.problems)}):[/]")
        for line in report.problems:
            err.print(f"  - {line}", markup=False, highlight=False)
