"""Alembic migrations produce exactly the models' schema, on SQLite and on Postgres."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from boxcar.shared.db.models import Base


def test_migrations_match_models(db):
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []


def test_upgrade_is_idempotent(db):
    db.upgrade()
    db.upgrade()
