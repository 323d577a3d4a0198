"""``boxcar user create|password``: web UI accounts."""

from __future__ import annotations

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


@click.group()
def user() -> None:
    """Accounts of the web UI (passwords stored as Argon2id hashes)."""


@user.command("create")
@common_options
@click.argument("name")
@click.password_option(help="Prompted (twice) when not given; or set BOXCAR_PASSWORD", envvar="BOXCAR_PASSWORD")
def user_create(data_dir, name, password) -> None:
    """Create a user who can log in to the web UI."""
    from boxcar.ingest.web.accounts import AccountError, create_user

    try:
        create_user(open_database(settings_for(data_dir), must_exist=False), name, password)
    except AccountError as exc:
        fail(str(exc), 2)
    err.print(f"user {name} created: log in at /login")


@user.command("password")
@common_options
@click.argument("name")
@click.password_option(envvar="BOXCAR_PASSWORD")
def user_password(data_dir, name, password) -> None:
    """Set a user's password (their sessions end)."""
    from boxcar.ingest.web.accounts import AccountError, set_password

    try:
        if not set_password(open_database(settings_for(data_dir)), name, password):
            fail(f"no user {name}", 2)
    except AccountError as exc:
        fail(str(exc), 2)
    err.print(f"password of {name} changed")
