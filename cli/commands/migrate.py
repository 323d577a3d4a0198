"""``boxcar migrate``: bring the database schema up to date (Alembic)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from boxcar.cli.common import (
    common_options,
    err,
    settings_for,
)

if TYPE_CHECKING:
    pass


@click.command()
@common_options
def migrate(data_dir) -> None:
    """Create or upgrade the database schema (services also do this at start)."""
    from boxcar.shared.db import Database

    settings = settings_for(data_dir)
    Database.for_settings(settings).upgrade()
    err.print(f"schema up to date ({settings.sqlalchemy_url.split('@')[-1]})")
