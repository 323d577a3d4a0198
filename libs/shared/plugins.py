"""The abx-plugins catalogue: plugins, their hooks, their config and the binaries they need.

Discovery follows ArchiveBox 0.9 / abx-dl (``reference/archivebox-0.9.md`` §5.1): every directory
under ``abx_plugins.get_plugins_dir()`` with a ``config.json`` is a plugin; its executables named
``on_{Event}__{NN}_{desc}[.finite][.daemon][.bg].{py|js}`` are hooks, ordered by ``(NN, name)``;
``.bg`` is the only behavioural flag (a background hook). Config is resolved with abx-plugins'
own resolver (``x-aliases``, ``x-fallback``, schema defaults), so Boxcar and the hooks agree on
every value.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import msgspec

from boxcar.shared.binaries import DISABLED_BY_DEFAULT, apply_override, enabled_explicitly, load_overrides

HOOK_NAME = re.compile(r"^on_(?P<event>[A-Za-z]+)__(?:(?P<order>\d+)_)?(?P<desc>.+)$")
HOOK_SUFFIXES = {".py": "python", ".js": "node"}
# Settings of Boxcar itself that hooks must never see (credentials, service wiring).


class Hook(msgspec.Struct, frozen=True):
    """One hook executable of a plugin.

    ``name`` is the file name without its extension (ArchiveResult.hook_name in ArchiveBox,
    e.g. ``on_Snapshot__35_wget.finite.bg``); ``order`` is its NN; ``language`` is ``python`` or
    ``node``; ``desc`` is the part after the NN without its flags (``wget`` above).
    """

    plugin: str
    name: str
    path: str
    event: str
    order: int
    is_background: bool
    language: str
    desc: str = ""

    @property
    def sort_key(self) -> tuple[int, str]:
        return (self.order, self.name)


class Plugin(msgspec.Struct, frozen=True):
    """A plugin directory: its name, schema (``config.json``) and hooks in run order."""

    name: str
    path: str
    schema: dict[str, Any]
    hooks: tuple[Hook, ...]

    @property
    def required_plugins(self) -> list[str]:
        return list(self.schema.get("required_plugins") or [])

    @property
    def waits_for_background(self) -> bool:
        """``wait_for_background_cleanup``: background hooks must finish before this plugin runs."""
        return bool(self.schema.get("wait_for_background_cleanup"))

    def snapshot_hooks(self) -> list[Hook]:
        return [h for h in self.hooks if h.event == "Snapshot"]


def parse_hook(plugin: str, path: Path) -> Hook | None:
    """Parse a hook file name; None for files that are not hooks."""
    language = HOOK_SUFFIXES.get(path.suffix)
    if language is None or not path.name.startswith("on_"):
        return None
    stem = path.name[: -len(path.suffix)]
    match = HOOK_NAME.match(stem)
    if not match:
        return None
    desc, *flags = match["desc"].split(".")
    return Hook(
        plugin=plugin,
        name=stem,
        path=str(path),
        event=match["event"],
        order=int(match["order"] or 0),
        is_background="bg" in flags,
        language=language,
        desc=desc,
    )


class PluginCatalog:
    """All installed abx-plugins, discovered once per process."""

    def __init__(self, plugins_dir: Path | None = None) -> None:
        if plugins_dir is None:
            import abx_plugins

            plugins_dir = Path(abx_plugins.get_plugins_dir())
        self.plugins_dir = plugins_dir
        self.plugins: dict[str, Plugin] = {}
        for entry in sorted(plugins_dir.iterdir()):
            config = entry / "config.json"
            if not config.is_file():
                continue
            schema = json.loads(config.read_text())
            hooks = sorted(
                (h for f in entry.iterdir() if (h := parse_hook(entry.name, f)) is not None),
                key=lambda h: h.sort_key,
            )
            self.plugins[entry.name] = Plugin(entry.name, str(entry), schema, tuple(hooks))

    def __contains__(self, name: str) -> bool:
        return name in self.plugins

    def __getitem__(self, name: str) -> Plugin:
        return self.plugins[name]

    def with_requirements(self, plugins: Iterable[str]) -> list[str]:
        """``plugins`` plus their transitive ``required_plugins`` (ArchiveBox's PLUGINS selector)."""
        seen: list[str] = []
        stack = list(plugins)
        while stack:
            name = stack.pop(0)
            if name in seen or name not in self.plugins:
                continue
            seen.append(name)
            stack.extend(self.plugins[name].required_plugins)
        return seen

    def snapshot_hooks(self, plugins: Iterable[str]) -> list[Hook]:
        """Every ``on_Snapshot__*`` hook of ``plugins``, in ``(NN, name)`` order."""
        hooks = [h for p in plugins if p in self.plugins for h in self.plugins[p].snapshot_hooks()]
        return sorted(hooks, key=lambda h: h.sort_key)

    def resolve_config(self, plugins: Iterable[str], environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
        """Resolve each plugin's config from ``environ`` with abx-plugins' resolver.

        Args:
            plugins: plugin names; ``base`` is always included.
            environ: string settings (process environment plus crawl overrides).

        Returns:
            ``{plugin: {KEY: typed value}}``, e.g. ``{"wget": {"WGET_TIMEOUT": 60, ...}}``.
        """
        names = tuple(sorted(set(self.with_requirements(plugins)) | {"base"}))
        resolved: dict[str, dict[str, Any]] = _resolve_cached(self, names, tuple(sorted(environ.items())))
        return resolved

    def enabled_plugins(self, selected: Iterable[str], environ: Mapping[str, str]) -> list[str]:
        """The plugins of ``selected`` (plus requirements) that are enabled (see ``disabled``)."""
        plugins = self.with_requirements(selected)
        off = self.disabled(plugins, environ)
        return [p for p in plugins if p not in off]

    def disabled(self, plugins: Iterable[str], environ: Mapping[str, str]) -> dict[str, str]:
        """``{plugin: why}`` for the plugins that will not run: ``<PLUGIN>_ENABLED=false``, or one
        of Boxcar's ``DISABLED_BY_DEFAULT`` not explicitly enabled."""
        plugins = list(plugins)
        resolved = self.resolve_config(plugins, environ)
        out = {}
        for p in plugins:
            if p in DISABLED_BY_DEFAULT and not enabled_explicitly(p, environ):
                out[p] = DISABLED_BY_DEFAULT[p]
            elif resolved.get(p, {}).get(f"{p.upper()}_ENABLED", True) is False:
                out[p] = f"{p.upper()}_ENABLED=false"
        return out

    def required_binaries(
        self, plugin: str, resolved: Mapping[str, Any], lib_dir: str
    ) -> list[tuple[str | None, dict[str, Any]]]:
        """The plugin's ``required_binaries`` records, hydrated with its resolved config and
        ``lib_dir`` (``ABXPKG_LIB_DIR``: every managed ``install_root`` lies under it).

        Boxcar's overrides (``boxcar.shared.binaries``) are applied: pins this machine's
        registries cannot satisfy are replaced by the nearest versions they carry.

        Returns:
            ``[(config_key, record), ...]`` where ``config_key`` is the ``*_BINARY`` setting the
            record's name came from (``{WGET_BINARY}`` → ``WGET_BINARY``), or None for literal names.
        """
        from abx_plugins.plugins.base.utils import hydrate_required_binary

        table = load_overrides()
        resolved = {**resolved, "ABXPKG_LIB_DIR": lib_dir}
        out = []
        for record in self.plugins[plugin].schema.get("required_binaries") or []:
            name = str(record.get("name", "")).strip()
            key = name[1:-1].strip() if name.startswith("{") and name.endswith("}") else None
            out.append((key, apply_override(name, hydrate_required_binary(record, resolved), table)))
        return out

    def hook_env(self, plugins: Iterable[str], resolved: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
        """Resolved config of ``plugins`` (and their requirements, and base) as environment strings.

        Keys the runtime derives per run (``x-scope: crawl_execution``: ``SNAP_DIR``, ``PATH``,
        ``EXTRA_CONTEXT``, …) are left out: the executor sets those itself.
        """
        env: dict[str, str] = {}
        for name in ["base", *self.with_requirements(plugins)]:
            properties = self.plugins[name].schema.get("properties") or {} if name in self.plugins else {}
            for key, value in (resolved.get(name) or {}).items():
                if (properties.get(key) or {}).get("x-scope") == "crawl_execution":
                    continue
                env[key] = env_value(value)
        return env


@functools.lru_cache(maxsize=64)
def _resolve_cached(
    catalog: PluginCatalog, names: tuple[str, ...], environ: tuple[tuple[str, str], ...]
) -> dict[str, dict[str, Any]]:
    from abx_plugins.plugins.base.utils import resolve_plugin_configs

    schemas = {n: catalog.plugins[n].schema for n in names if n in catalog.plugins}
    resolved: dict[str, dict[str, Any]] = resolve_plugin_configs(schemas, environ=dict(environ))
    return resolved


def env_value(value: Any) -> str:
    """Serialise a resolved config value for a hook's environment (abx-dl's dotenv rules)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, (list, dict)):
        return json.dumps(value)
    if value is None:
        return ""
    return str(value)


@functools.cache
def get_catalog() -> PluginCatalog:
    """The process-wide plugin catalogue."""
    return PluginCatalog()
