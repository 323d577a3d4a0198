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
