"""The order a task runs its hooks in (``hook_executor.order``), on abx-plugins' real catalogue
and config schemas."""

from __future__ import annotations

import pytest

from boxcar.hook_executor.order import run_order, start_batches
from boxcar.shared.families import DEFAULT_FAMILIES, FamilyTable
from boxcar.shared.plugins import PluginCatalog
from boxcar.shared.quirks import quirk
from boxcar.shared.settings import DEFAULT_PLUGINS


@pytest.fixture(scope="module")
def catalog() -> PluginCatalog:
    return PluginCatalog()


def _browser_hooks(catalog: PluginCatalog, environ: dict[str, str] | None = None):
    browser = _task_plugins(catalog)["browser"]
    hooks = catalog.snapshot_hooks(browser)
    return hooks, catalog.resolve_config(browser, environ or {})


def _task_plugins(catalog: PluginCatalog) -> dict[str, list[str]]:
    """The default selection's tasks, by family, as the runner plans them."""
    plan = FamilyTable(DEFAULT_FAMILIES).plan(DEFAULT_PLUGINS)
    return {family: catalog.with_requirements(plugins) for _, families in plan for family, plugins in families.items()}


def _names(hooks) -> list[str]:
    return [h.name.split("__", 1)[1].split(".")[0] for h in hooks]


def test_title_and_screenshot_run_right_after_the_page_loads(catalog):
    hooks, resolved = _browser_hooks(catalog)
    order = _names(run_order(hooks, catalog, resolved))
    navigate = order.index("30_chrome_navigate")
    assert order[navigate + 1 : navigate + 3] == ["51_screenshot", "54_title"]
    # every listener still starts before the page loads; the rest keep their NN order
    assert all(order.index(n) < navigate for n in order if n.startswith("2"))
    rest = [n for n in order if n not in ("51_screenshot", "54_title")]
    assert rest == [n for n in _names(hooks) if n not in ("51_screenshot", "54_title")]
    assert sorted(order) == sorted(_names(hooks))


def test_a_screenshot_at_another_size_than_the_tab_keeps_its_place(catalog):
    hooks, resolved = _browser_hooks(catalog, {"SCREENSHOT_RESOLUTION": "390,844"})
    order = _names(run_order(hooks, catalog, resolved))
    navigate = order.index("30_chrome_navigate")
    assert order[navigate + 1] == "54_title"
    assert order.index("50_singlefile") < order.index("51_screenshot") < order.index("52_pdf")


def test_the_browser_s_listeners_start_together_after_the_tab(catalog):
    hooks, resolved = _browser_hooks(catalog)
    batches = [_names(b) for b in start_batches(run_order(hooks, catalog, resolved), catalog)]
    listeners = next(b for b in batches if "24_responses" in b)
    assert {"21_consolelog", "22_dns", "23_sslcerts", "24_responses", "25_redirects", "27_headers"} <= set(listeners)
    # the tab opens alone, after the browser and before its listeners; a foreground hook shares a
    # batch only with others that only read the page
    tab = batches.index(["01_chrome_tab"])
    assert batches.index(["00_chrome_launch"]) < tab < batches.index(listeners)
    for batch in batches:
        members = [h for h in hooks if _names([h])[0] in batch]
        if len(batch) > 1 and not all(h.is_background for h in members):
            assert all(not h.is_background and quirk(h.plugin).reads_page for h in members)


def test_hooks_that_only_read_the_page_start_together_between_those_that_change_it(catalog):
    hooks, resolved = _browser_hooks(catalog)
    order = run_order(hooks, catalog, resolved)
    batches = [_names(b) for b in start_batches(order, catalog)]
    assert ["54_title", "38_seo"] in batches
    assert ["53_dom", "54_chrome_mhtml", "64_parse_dom_outlinks"] in batches
    for alone in ("30_chrome_navigate", "51_screenshot", "50_singlefile", "52_pdf"):
        assert [alone] in batches
    # each reader still starts after every hook before it in the run order that may change the
    # page, and before every one after it
    names = _names(order)
    changers = [n for h, n in zip(order, names, strict=True) if not h.is_background and not quirk(h.plugin).reads_page]
    at = {name: i for i, batch in enumerate(batches) for name in batch}
    for h, name in zip(order, names, strict=True):
        if quirk(h.plugin).reads_page:
            for changer in changers:
                assert (at[changer] < at[name]) == (names.index(changer) < names.index(name))


def test_fetchers_start_together_and_nothing_joins_a_plugin_it_requires(catalog):
    for plugins in _task_plugins(catalog).values():
        hooks = catalog.snapshot_hooks(plugins)
        for batch in start_batches(hooks, catalog):
            names = {h.plugin for h in batch}
            assert len(names) == len(batch)
            for h in batch:
                assert not (set(catalog.with_requirements([h.plugin])) - {h.plugin}) & names
    fetch = catalog.snapshot_hooks(["wget", "ytdlp", "gallerydl", "git", "favicon"])
    assert [len(b) for b in start_batches(fetch, catalog)] == [5]
