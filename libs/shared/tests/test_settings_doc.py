"""The README's settings table is the settings' own description (one place per rule)."""

from __future__ import annotations

import os
from pathlib import Path

from boxcar.shared.settings import Settings, settings_table

README = Path(__file__).resolve().parents[3] / "README.md"


def test_every_setting_has_a_description():
    assert all(field.description for field in Settings.model_fields.values())


def test_the_readme_shows_the_rendered_table():
    text = README.read_text()
    start, end = text.index("<!-- settings:start -->\n"), text.index("<!-- settings:end -->")
    assert text[start + len("<!-- settings:start -->\n") : end].strip() == settings_table().strip(), (
        "README's settings table is stale: paste the output of "
        "`python -c 'from boxcar.shared.settings import settings_table; print(settings_table())'`"
    )


def test_heavy_families_run_fewer_tasks_at_once_unless_told():
    default = Settings()
    held = os.sched_getaffinity(0)
    os.sched_setaffinity(0, sorted(held)[:1])  # a one-CPU process: the extract cap shows on any machine
    try:
        assert [default.family_concurrency(f) for f in ("fetch", "extract", "browser", "media")] == [4, 1, 3, 2]
    finally:
        os.sched_setaffinity(0, held)
    assert Settings(extract_concurrency=3).family_concurrency("extract") == 3
    one = Settings(executor_concurrency=1)
    assert {one.family_concurrency(f) for f in ("fetch", "browser", "media")} == {1}
    own = Settings(browser_concurrency=1, media_concurrency=3)
    assert (own.family_concurrency("browser"), own.family_concurrency("media"), own.family_concurrency("parse")) == (
        1,
        3,
        4,
    )


def test_a_libpq_uri_becomes_the_psycopg_url_with_every_host_and_parameter():
    """What an operator pastes from a managed or replicated Postgres works as DATABASE_URL: libpq's
    parameters pass through, and a host list (which SQLAlchemy cannot parse) becomes its form for
    several hosts, in order."""
    from sqlalchemy.engine import make_url

    def url(database_url: str) -> str:
        return Settings(database_url=database_url).sqlalchemy_url

    assert (
        url("postgres://u:p@db:5432/boxcar?sslmode=require")
        == "postgresql+psycopg://u:p@db:5432/boxcar?sslmode=require"
    )
    assert url("postgresql+psycopg://u@db/boxcar") == "postgresql+psycopg://u@db/boxcar"  # already SQLAlchemy's
    several = url("postgresql://u:p%40ss@db1:5432,db2:5433/boxcar?target_session_attrs=read-write&sslmode=verify-full")
    parsed = make_url(several)
    assert parsed.query["host"] == ("db1:5432", "db2:5433")
    assert (parsed.username, parsed.password, parsed.database) == ("u", "p@ss", "boxcar")
    assert parsed.query["target_session_attrs"] == "read-write" and parsed.query["sslmode"] == "verify-full"
    bare = make_url(url("postgresql://db1,db2"))  # no user, port, database or parameters
    assert bare.query["host"] == ("db1", "db2") and not bare.database
