"""``boxcar token create``: API tokens for scripts (``--read-only``: reads only)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from boxcar.cli.common import (
    common_options,
    err,
    fail,
    settings_for,
)

if TYPE_CHECKING:
    pass


@click.group()
def token() -> None:
    """API tokens (stored hashed; shown once)."""


@token.command("create")
@common_options
@click.option("--name", default="", help="What the token is for")
@click.option("--read-only", is_flag=True, help="Only GET endpoints (lists, status, search)")
@click.option("--user", "owner", default="", help="The user it acts for (default ARCHIVE_USER, the operator)")
def token_create(data_dir, name, read_only, owner) -> None:
    """Create an API token and print it (use it as `Authorization: Bearer <token>`)."""
    from boxcar.ingest.api.auth import create_token
    from boxcar.ingest.web.accounts import list_users
    from boxcar.shared.db import Database

    settings = settings_for(data_dir)
    db = Database.for_settings(settings)
    db.upgrade()
    owner = owner or settings.archive_user
    if owner != settings.archive_user and owner not in {u.username for u in list_users(db)}:
        fail(f"no user {owner}", 2)
    click.echo(create_token(db, name, scope="read" if read_only else "write", owner=owner))
    err.print("[dim]store it now: only its hash is kept[/]")
