"""The family table: plan shape, overrides, and that it covers every plugin with snapshot hooks."""

from __future__ import annotations

import pytest

from boxcar.shared.families import DEFAULT_FAMILIES, FamilyTable, load_families
from boxcar.shared.plugins import get_catalog
from boxcar.shared.settings import DEFAULT_PLUGINS


def test_default_plan_is_browser_fetch_and_media_then_extract_and_parse_then_index():
    table = FamilyTable(DEFAULT_FAMILIES)
    assert table.plan(DEFAULT_PLUGINS) == [
        (
            1,
            {
                "browser": [
                    "chrome",
                    "title",
                    "screenshot",
                    "pdf",
                    "dom",
                    "headers",
                    "redirects",
                    "responses",
                    "consolelog",
                    "dns",
                    "sslcerts",
                    "seo",
                    "chrome_mhtml",
                    "staticfile",
                    "singlefile",
                    "parse_dom_outlinks",
                ],
                "fetch": ["wget", "favicon", "git"],
                "media": ["ytdlp", "gallerydl"],
            },
        ),
        (
            2,
            {"extract": ["htmltotext", "trafilatura", "readability", "defuddle"], "parse": ["parse_html_urls"]},
        ),
        (3, {"index": ["hashes"]}),
    ]


def test_every_installed_plugin_with_snapshot_hooks_has_a_family():
    catalog = get_catalog()
    table = load_families({})
    with_hooks = [name for name, plugin in catalog.plugins.items() if plugin.snapshot_hooks()]
    assert table.unknown(with_hooks) == []


def test_families_can_be_overridden_from_the_environment():
    table = load_families({"FAMILIES": '{"all": {"stage": 1, "plugins": ["wget", "hashes"]}}'})
    assert table.plan(["hashes", "wget"]) == [(1, {"all": ["wget", "hashes"]})]
    with pytest.raises(ValueError, match="FAMILIES must be JSON"):
        load_families({"FAMILIES": "[1, 2]"})
