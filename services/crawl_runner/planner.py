"""Stage plans: which families run, in which order, for a crawl's snapshots."""

from __future__ import annotations

import os
from collections.abc import Mapping

from boxcar.shared.db.models import FINALIZE_STAGE, Crawl
from boxcar.shared.families import FamilyTable
from boxcar.shared.plugins import PluginCatalog
from boxcar.shared.settings import Settings


class Plan:
    """A snapshot's stages: ``[(stage, {family: [plugin, ...]})]`` then the finalize step.

    The finalize step (stage ``FINALIZE_STAGE``) is one task to the plan's last family, which
    writes the snapshot's ``index.jsonl``; its completion seals the snapshot.
    """

    def __init__(self, stages: list[tuple[int, dict[str, list[str]]]]) -> None:
        if not stages:
            raise ValueError("a plan needs at least one enabled plugin")
        self.stages = stages
        self._order = [n for n, _ in stages] + [FINALIZE_STAGE]
        self.finalize_family = list(stages[-1][1])[-1]

    @property
    def first_stage(self) -> int:
        return self._order[0]

    def families(self, stage: int) -> dict[str, list[str]]:
        """``{family: plugins}`` dispatched at ``stage`` (finalize: the finalize family, no plugins)."""
        if stage == FINALIZE_STAGE:
            return {self.finalize_family: []}
        return dict(self.stages)[stage]

    def next_stage(self, stage: int) -> int | None:
        """The stage after ``stage``; None after finalize."""
        i = self._order.index(stage)
        return self._order[i + 1] if i + 1 < len(self._order) else None

    @property
    def plugins(self) -> list[str]:
        return [p for _, fams in self.stages for ps in fams.values() for p in ps]


def crawl_environ(crawl_config: Mapping[str, str], base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The string settings hooks of this crawl see: the environment, then the crawl's overrides."""
    env = dict(os.environ if base is None else base)
    env.update({k: str(v) for k, v in (crawl_config or {}).items()})
    return env


def plan_for(crawl: Crawl, settings: Settings, catalog: PluginCatalog, families: FamilyTable) -> Plan:
    """The stage plan for a crawl's snapshots.

    The crawl's plugin selection (or ``PLUGINS``) plus required plugins, minus those disabled by
    ``<PLUGIN>_ENABLED=false``, keeping only plugins with snapshot hooks that a family runs.

    Raises:
        ValueError: nothing is left to run.
    """
    selected = list(crawl.plugins or settings.plugins)
    enabled = catalog.enabled_plugins(selected, crawl_environ(crawl.config))
    runnable = [p for p in enabled if catalog[p].snapshot_hooks() and families.family_of(p)]
    return Plan(families.plan(runnable))
