"""The order a task runs its hooks in, and which of them start together.

ArchiveBox 0.9 runs a snapshot's hooks in ``(NN, name)`` order, a foreground hook to completion
before the next, a background hook waited for until it is ready. Boxcar keeps that order with two
changes, each of which leaves every hook's own outputs as they were:

- **first look** (``run_order``): a foreground hook of a plugin whose ``quirks`` row says
  ``first_look`` (title, screenshot) runs as soon as the plugins it requires have run, before the
  task's other foreground hooks: the snapshot page has its title and picture about 1 s after the
  page loaded instead of after SingleFile, the PDF and MHTML (issue 31's *first look*). Those
  hooks only read the page; a row's ``first_look_when_equal`` keys name the settings under which
  that holds (the screenshot's viewport is the tab's own).
- **start batches** (``start_batches``): a run of background hooks of plugins that neither are nor
  require one another (the browser's listeners: console log, DNS, TLS, responses, redirects,
  headers, static file; the fetchers: wget, yt-dlp, gallery-dl, git, favicon) start at once, and
  the next hook starts when all of them are ready, as it did when each was started and waited for
  in turn (about 0.2 s each for a Node listener: ~1.2 s of the browser task's first second).
  Likewise a run of foreground hooks whose plugins' ``quirks`` rows say ``reads_page`` (each only
  reads the tab; the rows say which, and why the others are not) start at once, and the next hook
  starts when all of them have exited. Each still runs after every hook that may change the page
  before it in the order and before every one after it, so it reads the page in
  the state it read it in before. Each of these hooks waits on its own for the page's load and
  then 200 ms more (abx-plugins' ``connectToPage(postLoadDelayMs=200)``); together they wait once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from boxcar.shared.plugins import Hook, PluginCatalog
from boxcar.shared.quirks import quirk


def _early(hook: Hook, settings: Mapping[str, Any]) -> bool:
    row = quirk(hook.plugin)
    if not row.first_look or hook.is_background:
        return False
    return len({str(settings.get(key)) for key in row.first_look_when_equal}) <= 1


def run_order(hooks: list[Hook], catalog: PluginCatalog, resolved: Mapping[str, Mapping[str, Any]]) -> list[Hook]:
    """``hooks`` (in ``(NN, name)`` order) in the order a task runs them.

    Args:
        hooks: one task's snapshot hooks, as ``PluginCatalog.snapshot_hooks`` gives them.
        catalog: for the plugins' ``required_plugins``.
        resolved: the task's resolved config, ``{plugin: {KEY: value}}`` (for
            ``first_look_when_equal``).

    Returns:
        The same hooks: each first-look foreground hook moved to just after the last hook of the
        plugins it requires (after first-look hooks moved there before it, NN order among them);
        every other hook in its place.
    """
    settings = {key: value for conf in resolved.values() for key, value in conf.items()}
    early = [h for h in hooks if _early(h, settings)]
    out = [h for h in hooks if h not in early]
    moved: set[str] = set()
    for hook in early:
        needs = set(catalog.with_requirements([hook.plugin])) - {hook.plugin}
        at = max((i for i, h in enumerate(out) if h.plugin in needs), default=-1) + 1
        while at < len(out) and out[at].name in moved:
            at += 1
        out.insert(at, hook)
        moved.add(hook.name)
    return out


def start_batches(hooks: list[Hook], catalog: PluginCatalog) -> list[list[Hook]]:
    """``hooks`` (in run order) grouped as the task starts them.

    A batch is either one hook, or consecutive hooks of one kind whose plugins are all different and
    none of which requires another's (``required_plugins``, transitively). The kinds: background
    hooks, and foreground hooks of ``reads_page`` plugins. A hook whose plugin waits for the
    background hooks to stop (``wait_for_background_cleanup``), one that opens the tab
    (``tab_hook``), and any other foreground hook is a batch of its own.

    Returns:
        The hooks, in order, as a list of batches.
    """
    batches: list[list[Hook]] = []
    requires: dict[str, set[str]] = {}

    def needs(plugin: str) -> set[str]:
        if plugin not in requires:
            requires[plugin] = set(catalog.with_requirements([plugin])) - {plugin}
        return requires[plugin]

    def kind(hook: Hook) -> str:
        """What batch the hook may share: "background", "reads_page", or "" (none)."""
        row = quirk(hook.plugin)
        if catalog[hook.plugin].waits_for_background or (row.tab_hook and row.tab_hook in hook.name):
            return ""
        if hook.is_background:
            return "background"
        return "reads_page" if row.reads_page else ""

    kinds: list[str] = []  # each batch's kind
    for hook in hooks:
        last = batches[-1] if batches else None
        this = kind(hook)
        if last is not None and this and this == kinds[-1]:
            plugins = {h.plugin for h in last}
            if hook.plugin not in plugins and not needs(hook.plugin) & plugins:
                if not any(hook.plugin in needs(p) for p in plugins):
                    last.append(hook)
                    continue
        batches.append([hook])
        kinds.append(this)
    return batches
