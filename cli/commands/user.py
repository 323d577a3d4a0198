"""``boxcar user create|list|role|password|disable|enable|remove|limits|unlink``: the archive's users (issue 28)."""

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
@click.option(
    "--admin/--member",
    default=None,
    help="An admin (every archive, the users, the stack's status) or a member (their own archive); "
    "default: the first user is an admin, later ones members",
)
@click.password_option(help="Prompted (twice) when not given; or set BOXCAR_PASSWORD", envvar="BOXCAR_PASSWORD")
def user_create(data_dir, name, admin, password) -> None:
    """Create a user who can log in to the web UI."""
    from boxcar.ingest.web.accounts import AccountError, create_user, list_users

    settings = settings_for(data_dir)
    db = open_database(settings, must_exist=False)
    if admin is None:
        admin = not list_users(db)  # the first person in sees what the operator's CLI archived
    role = "admin" if admin else "member"
    try:
        create_user(db, name, password, role=role, operator_name=settings.archive_user)
    except AccountError as exc:
        fail(str(exc), 2)
    err.print(f"{role} {name} created: log in at /login")


@user.command("list")
@common_options
@click.option("--json", "as_json", is_flag=True, help="One JSON object per user")
def user_list(data_dir, as_json) -> None:
    """Every user with their role, state, snapshots, disk and limits."""
    import msgspec
    from rich.table import Table

    from boxcar.ingest.quotas import usage

    rows = usage(open_database(settings_for(data_dir)))
    if as_json:
        for u in rows:
            click.echo(msgspec.json.encode(u).decode())
        return
    table = Table("user", "role", "active", "snapshots", "today", "disk", "open crawls", "limits")
    for u in rows:
        limits = ", ".join(
            f"{k} {v}"
            for k, v in (
                ("per day", u.max_snapshots_per_day),
                ("bytes", u.max_disk_bytes),
                ("crawls", u.max_concurrent_crawls),
            )
            if v is not None
        )
        table.add_row(
            u.username,
            u.role,
            "yes" if u.active else "no",
            str(u.snapshots),
            str(u.snapshots_today),
            f"{u.disk_bytes:,}",
            str(u.open_crawls),
            limits or "-",
        )
    err.print(table)


@user.command("role")
@common_options
@click.argument("name")
@click.argument("role", type=click.Choice(["admin", "member"]))
def user_role(data_dir, name, role) -> None:
    """Make a user an admin or a member."""
    from boxcar.ingest.web.accounts import set_role

    if not set_role(open_database(settings_for(data_dir)), name, role):
        fail(f"no user {name}", 2)
    err.print(f"{name} is now a {role}")


@user.command("unlink")
@common_options
@click.argument("name")
def user_unlink(data_dir, name) -> None:
    """Forget the single sign-on account a user is bound to (their first single sign-on bound it), e.g.
    after a move to another provider: with OIDC_LINK_EXISTING_USERS=true, their next single sign-on binds
    them again."""
    from boxcar.ingest.web.accounts import unbind_sso

    if not unbind_sso(open_database(settings_for(data_dir)), name):
        fail(f"no user {name}", 2)
    err.print(f"user {name} is bound to no single sign-on account now")


@user.command("disable")
@common_options
@click.argument("name")
def user_disable(data_dir, name) -> None:
    """Disable a user: their sessions end, their tokens stop working, their archive stays."""
    from boxcar.ingest.web.accounts import set_active

    if not set_active(open_database(settings_for(data_dir)), name, False):
        fail(f"no user {name}", 2)
    err.print(f"user {name} disabled")


@user.command("enable")
@common_options
@click.argument("name")
def user_enable(data_dir, name) -> None:
    """Enable a disabled user again."""
    from boxcar.ingest.web.accounts import set_active

    if not set_active(open_database(settings_for(data_dir)), name, True):
        fail(f"no user {name}", 2)
    err.print(f"user {name} enabled")


@user.command("remove")
@common_options
@click.argument("name")
@click.option(
    "--snapshots",
    type=click.Choice(["keep", "reassign", "delete"]),
    help="What happens to their snapshots (asked when not given)",
)
@click.option("--to", "to", default="", help="With --snapshots reassign: the user who gets them")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation")
def user_remove(data_dir, name, snapshots, to, yes) -> None:
    """Remove a user. Their sessions, tokens and shares end; their snapshots are kept (admins
    see them), reassigned to another user (--to) or deleted with their files: you choose."""
    from boxcar.ingest.access import operator
    from boxcar.ingest.library import SnapshotLibrary
    from boxcar.ingest.quotas import usage
    from boxcar.ingest.web.accounts import AccountError, remove_user

    settings = settings_for(data_dir)
    db = open_database(settings)
    found = usage(db, name)
    if not found:
        fail(f"no user {name}", 2)
    if snapshots is None:
        snapshots = click.prompt(
            f"{name} has {found[0].snapshots} snapshot(s): keep, reassign or delete them?",
            type=click.Choice(["keep", "reassign", "delete"]),
            err=True,
        )
    if snapshots == "reassign" and not to:
        to = click.prompt("reassign to which user", err=True)
    if not yes and not click.confirm(f"remove {name} ({snapshots} {found[0].snapshots} snapshot(s))?", err=True):
        fail("nothing removed", 1)
    library = SnapshotLibrary(db, settings.data_dir)
    me = operator(settings.archive_user)
    try:
        done = remove_user(db, name, snapshots, to, delete_snapshot=lambda sid: library.delete(sid, viewer=me))
    except AccountError as exc:
        fail(str(exc), 2)
    assert done is not None
    err.print(f"user {name} removed; {done.snapshots} snapshot(s) {snapshots}{'d to ' + to if to else ''}")


@user.command("limits")
@common_options
@click.argument("name")
@click.option("--per-day", type=click.IntRange(0), default=None, help="Snapshots a UTC day (none: no limit)")
@click.option("--disk", type=click.IntRange(0), default=None, help="Bytes of archive (none: no limit)")
@click.option("--crawls", type=click.IntRange(0), default=None, help="Crawls open at once (none: no limit)")
def user_limits(data_dir, name, per_day, disk, crawls) -> None:
    """Set a user's limits (each left out is lifted): crawls over them are refused with a 429."""
    from boxcar.ingest.quotas import set_limits

    if not set_limits(open_database(settings_for(data_dir)), name, per_day, disk, crawls):
        fail(f"no user {name}", 2)
    err.print(f"limits of {name}: per day {per_day}, disk {disk}, crawls {crawls}")


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
