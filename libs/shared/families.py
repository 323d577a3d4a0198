"""Hook families: which executor pool runs which plugins, and in which stage.

A snapshot is planned as stages; each stage dispatches one task per family that has at least one
enabled plugin; the next stage starts when every task of the current one has completed. The
table is data: ``FAMILIES`` (a JSON object ``{"family": {"stage": N, "plugins": [...]}}``) in the
environment replaces it for a deployment.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping

import msgspec


class Family(msgspec.Struct, frozen=True):
    """One executor pool: its name, its stage (1 runs first) and the plugins it runs."""

    name: str
    stage: int
    plugins: tuple[str, ...]


DEFAULT_FAMILIES: tuple[Family, ...] = (
    Family(
        "browser",
        1,
        (
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
            "accessibility",
            "chrome_mhtml",
            "staticfile",
            "infiniscroll",
            "modalcloser",
            "mobilesize",
            "chrome_screencast",
            "singlefile",
            "ublock",
            "istilldontcareaboutcookies",
            "twocaptcha",
            "archivewebpage",
            "parse_dom_outlinks",
            "claudechrome",
            "tlsnotary",
            # site-specific exporters (drive the logged-in tab)
            "box",
            "calendar",
            "canva",
            "drawio",
            "dropbox",
            "excalidraw",
            "figma",
            "googledocs",
            "googledrive",
            "iclouddrive",
            "iwork",
            "mega",
            "microsoft365",
            "miro",
            "nextcloud",
            "notion",
            "onedrive",
            "protondocs",
            "protondrive",
            "tldraw",
            "wetransfer",
        ),
    ),
    Family("fetch", 1, ("wget", "favicon", "archivedotorg", "git")),
    Family("media", 1, ("ytdlp", "gallerydl", "forumdl", "papersdl")),
    Family(
        "extract",
        2,
        (
            "htmltotext",
            "trafilatura",
            "readability",
            "mercury",
            "defuddle",
            "liteparse",
            "opendataloader",
            "claudecodeextract",
        ),
    ),
    Family(
        "parse",
        2,
        (
            "parse_html_urls",
            "parse_txt_urls",
            "parse_rss_urls",
            "parse_netscape_urls",
            "parse_jsonl_urls",
        ),
    ),
    Family(
        "index",
        3,
        (
            "hashes",
            "search_backend_sqlite",
            "search_backend_sonic",
            "opentimestamps",
            "claudecodecleanup",
        ),
    ),
)


class FamilyTable:
    """Lookup over a set of families: plugin → family, and a snapshot's stage plan."""

    def __init__(self, families: Iterable[Family]) -> None:
        self.families: dict[str, Family] = {}
        self._by_plugin: dict[str, Family] = {}
        for family in families:
            self.families[family.name] = family
            for plugin in family.plugins:
                if plugin in self._by_plugin:
                    raise ValueError(
                        f"plugin {plugin!r} is in two families: {self._by_plugin[plugin].name} and {family.name}"
                    )
                self._by_plugin[plugin] = family

    def family_of(self, plugin: str) -> Family | None:
        """The family that runs ``plugin``, or None when no family does."""
        return self._by_plugin.get(plugin)

    def plan(self, plugins: Iterable[str]) -> list[tuple[int, dict[str, list[str]]]]:
        """Group enabled plugins into stages.

        Args:
            plugins: enabled plugin names (unknown names are ignored; validate first with
                ``unknown``).

        Returns:
            ``[(stage, {family: [plugin, ...]}), ...]`` in stage order, only stages and families
            that have at least one plugin; plugins keep the family table's order.
        """
        wanted = set(plugins)
        stages: dict[int, dict[str, list[str]]] = {}
        for family in self.families.values():
            chosen = [p for p in family.plugins if p in wanted]
            if chosen:
                stages.setdefault(family.stage, {})[family.name] = chosen
        return sorted(stages.items())

    def unknown(self, plugins: Iterable[str]) -> list[str]:
        """The names in ``plugins`` that no family runs."""
        return [p for p in plugins if p not in self._by_plugin]


def load_families(environ: Mapping[str, str] | None = None) -> FamilyTable:
    """The family table: ``DEFAULT_FAMILIES``, or ``FAMILIES`` from the environment when set.

    Raises:
        ValueError: ``FAMILIES`` is not a JSON object of ``{"stage": int, "plugins": [str]}``.
    """
    env = os.environ if environ is None else environ
    raw = env.get("FAMILIES", "").strip()
    if not raw:
        return FamilyTable(DEFAULT_FAMILIES)
    try:
        data = json.loads(raw)
        families = [Family(name, int(spec["stage"]), tuple(spec["plugins"])) for name, spec in data.items()]
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ValueError(
            f'FAMILIES must be JSON like {{"fetch": {{"stage": 1, "plugins": ["wget"]}}}}: {exc}'
        ) from None
    return FamilyTable(families)
