"""Alembic environment: migrations run on the connection Boxcar hands over, or on DATABASE_URL."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine
from sqlalchemy.engine import Connection

from boxcar.shared.db.models import Base
from boxcar.shared.search import is_search_table

config = context.config
target_metadata = Base.metadata


def include_name(name: str | None, type_: str, _parent: object) -> bool:
    """Autogenerate compares the ORM models only: the search index's tables are raw DDL."""
    return not (type_ == "table" and is_search_table(name))


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite ALTERs via table copies
        compare_type=True,
        include_name=include_name,
    )
    with context.begin_transaction():
        context.run_migrations()


connection = config.attributes.get("connection")
if connection is not None:
    _run(connection)
else:
    from boxcar.shared.settings import get_settings

    engine = create_engine(config.get_main_option("sqlalchemy.url") or get_settings().sqlalchemy_url)
    with engine.connect() as conn:
        _run(conn)
