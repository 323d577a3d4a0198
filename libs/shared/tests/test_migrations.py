"""Alembic migrations produce exactly the models' schema, on SQLite and on Postgres."""

from __future__ import annotations

import subprocess
import sys

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import text

from boxcar.shared.db import Database, head_revision
from boxcar.shared.db.models import Base
from boxcar.shared.migrations import alembic_config, upgrade_connection
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


def test_upgrade_in_a_child_builds_the_schema_and_the_parent_never_imports_alembic(tmp_path):
    """Long-lived services upgrade through ``python -m boxcar.shared.migrations``: the schema is
    the same, and the service process does not hold Alembic's modules afterwards."""
    url = f"sqlite:///{tmp_path / 'index.sqlite3'}"
    script = (
        "import sys\n"
        "from boxcar.shared.db import Database\n"
        f"db = Database({url!r})\n"
        "db.upgrade_in_child()\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'alembic'))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    database = Database(url)
    try:
        with database.engine.connect() as conn:
            revision = MigrationContext.configure(conn).get_current_revision()
        assert revision == ScriptDirectory.from_config(alembic_config()).get_current_head()
        test_migrations_match_models(database)
    finally:
        database.dispose()


def test_a_failed_upgrade_in_a_child_says_why(tmp_path):
    (tmp_path / "index.sqlite3").write_bytes(b"not a database, " * 512)
    database = Database(f"sqlite:///{tmp_path / 'index.sqlite3'}")
    try:
        with pytest.raises(RuntimeError, match="schema upgrade failed .*file is not a database"):
            database.upgrade_in_child()
    finally:
        database.dispose()


def test_head_revision_is_alembics_head():
    """``head_revision`` reads the files' names; Alembic follows ``down_revision``: they agree."""
    assert head_revision() == ScriptDirectory.from_config(alembic_config()).get_current_head()


def test_upgrade_in_a_child_runs_only_below_head(db_url):
    """A new database and one a revision behind are upgraded (by the child); at head, ``at_head``
    says so and the child is not needed."""
    database = Database(db_url)
    try:
        assert not database.at_head()  # no schema yet
        previous = f"{int(head_revision()) - 1:04d}"
        with database.engine.connect() as conn:
            upgrade_connection(conn, previous)
        assert not database.at_head()
        database.upgrade_in_child()
        assert database.at_head()
        test_migrations_match_models(database)
        with database.engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = '9999'"))
        assert not database.at_head()  # a newer schema than this code knows is not "at head"
    finally:
        database.dispose()
