"""Alembic migrations produce exactly the models' schema, on SQLite and on Postgres."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from boxcar.shared.db.models import Base
from boxcar.shared.search import is_search_table


def test_migrations_match_models(db):
    # the search index's tables are raw DDL (FTS5, a generated tsvector), not models
    opts = {
        "compare_type": True,
        "include_name": lambda name, type_, _: not (type_ == "table" and is_search_table(name)),
    }
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts=opts), Base.metadata)
    assert diff == []


def test_upgrade_is_idempotent(db):
    db.upgrade()
    db.upgrade()
