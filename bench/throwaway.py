"""A throw-away Postgres database for the benchmarks that need one (``bench_claims``,
``bench_decisions``, ``bench_projector``, ``bench_ui_list``): created empty on ``TEST_PG_DSN``
(default ``postgresql://postgres@127.0.0.1:5432``, the server the tests use) and dropped, with any
connections still open to it, when the block ends, however it ends."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg

PG = os.environ.get("TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432")


@contextmanager
def throwaway_database() -> Iterator[str]:
    """Yields the new database's libpq URL (``postgresql://…/boxcar_bench_<8 hex>``); for
    SQLAlchemy, ``sqlalchemy_url`` of it. Raises ``psycopg.OperationalError`` when the server
    cannot be reached."""
    name = f"boxcar_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG}/{name}"
    finally:
        with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def sqlalchemy_url(url: str) -> str:
    """``postgresql://…`` as SQLAlchemy's psycopg 3 dialect takes it (``postgresql+psycopg://…``)."""
    return url.replace("postgresql://", "postgresql+psycopg://", 1)
