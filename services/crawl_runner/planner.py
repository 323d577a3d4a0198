"""Stage plans: which families run, in which order, for a crawl's snapshots."""

from __future__ import annotations

from boxcar.shared.crawlconfig import CrawlConfig
from boxcar.shared.db.models import Crawl
from boxcar.shared.families import FamilyTable
from boxcar.shared.plugins import Hook, PluginCatalog
from boxcar.shared.settings import Settings


class Plan:
    """A snapshot's stages: ``[(stage, {family: [plugin, ...]})]`` in run order.

    Raises:
        ValueError: no stage (nothing enabled to run).
    """

    def __init__(self, stages: list[tuple[int, dict[str, list[str]]]], catalog: PluginCatalog) -> None:
        if not stages:
            raise ValueError("a plan needs at least one enabled plugin")
        self.stages = stages
        self.catalog = catalog
        self._order = [n for n, _ in stages]

    @property
    def first_stage(self) -> int:
        return self._order[0]

    def families(self, stage: int) -> dict[str, list[str]]:
        """``{family: plugins}`` dispatched at ``stage``."""
        return dict(self.stages)[stage]

    def next_stage(self, stage: int) -> int | None:
        """The stage after ``stage``; None after the last one (the snapshot seals)."""
        i = self._order.index(stage)
        return self._order[i + 1] if i + 1 < len(self._order) else None

    def hooks_from(self, stage: int) -> list[Hook]:
        """Every snapshot hook of ``stage`` and the stages after it (what is still to report)."""
        plugins = [p for n, fams in self.stages if n >= stage for ps in fams.values() for p in ps]
        return self.catalog.snapshot_hooks(plugins)


def plan_for(crawl: Crawl, settings: Settings, catalog: PluginCatalog, families: FamilyTable) -> Plan:
    """The stage plan for a crawl's snapshots.

    The crawl's plugin selection (or ``PLUGINS``) plus required plugins, minus those its config
    disables (``<PLUGIN>_ENABLED=false``), keeping only plugins with snapshot hooks that a family
    runs. The config is the crawl's own (``CrawlConfig``), the same values its hooks get.

    Raises:
        ValueError: nothing is left to run.
    """
    selected = list(crawl.plugins or settings.plugins)
    config = CrawlConfig(dict(crawl.config or {}))
    enabled = catalog.enabled_plugins(selected, config.plugin_environ({}))
    runnable = [p for p in enabled if catalog[p].snapshot_hooks() and families.family_of(p)]
    return Plan(families.plan(runnable), catalog)
