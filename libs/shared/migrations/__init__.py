"""Alembic migrations for Boxcar's schema (Postgres and SQLite).

Run with ``boxcar migrate`` or implicitly: every service upgrades the schema at start under a
lock (``Database.upgrade``; long-lived services in a short-lived child, ``Database.upgrade_in_child``,
which runs ``python -m boxcar.shared.migrations``). New revision: ``alembic -c libs/shared/alembic.ini revision
--autogenerate -m "..."`` with ``DATABASE_URL`` pointing at a database on the previous revision.
"""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy.engine import Connection

MIGRATIONS_DIR = Path(__file__).resolve().parent


def alembic_config(connection: Connection | None = None) -> Config:
    """An Alembic config pointing at this package (and at ``connection`` when given)."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if connection is not None:
        config.attributes["connection"] = connection
    return config


def upgrade_connection(connection: Connection, revision: str = "head") -> None:
    """Upgrade the database behind ``connection`` to ``revision``."""
    command.upgrade(alembic_config(connection), revision)
    connection.commit()
