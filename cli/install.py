"""``boxcar install``: provision every binary the enabled plugins need, ahead of any crawl.

Resolves each plugin's ``required_binaries`` (with Boxcar's overrides, ``boxcar.shared.binaries``)
the way the binary-resolver does — host binaries first, managed installs into ``ABXPKG_LIB_DIR``
as the fallback — and reports a table. A second run finds everything and installs nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from boxcar.binary_resolver.resolver import resolve_binary
from boxcar.shared.binaries import DISABLED_BY_DEFAULT, ESBUILD
from boxcar.shared.families import load_families
from boxcar.shared.messages import BinaryReply, BinaryRequest
from boxcar.shared.plugins import PluginCatalog
from boxcar.shared.secrets import public_environ
from boxcar.shared.settings import Settings


@dataclass
class Row:
    """One line of the report: a binary of a plugin, or a plugin that will not run."""

    plugin: str
    binary: str
    status: str  # a binary: found | installed | missing; a plugin (binary ""): ready | unrunnable | disabled
    version: str = ""
    where: str = ""


@dataclass
class InstallReport:
    rows: list[Row] = field(default_factory=list)
    unrunnable: list[str] = field(default_factory=list)  # enabled plugins with a missing binary

    @property
    def ok(self) -> bool:
        return not self.unrunnable


def install(
    settings: Settings, catalog: PluginCatalog, families: list[str] | None = None, allow_apt: bool = False
) -> InstallReport:
    """Resolve (installing when needed) the binaries of the enabled default plugins.

    Args:
        families: only the plugins these families run (default: all of the selection).
        allow_apt: also let apt install host packages (root only; changes the machine).
    """
    table = load_families()
    selected = [
        p
        for p in settings.plugins
        if families is None or ((f := table.family_of(p)) is not None and f.name in families)
    ]
    environ = public_environ()
    environ["ABXPKG_LIB_DIR"] = str(settings.lib_dir)
    plugins = catalog.with_requirements(selected)
    report = InstallReport()
    # what will not run, and why: the selection's disabled plugins and every extension plugin
    shown = catalog.disabled(list(dict.fromkeys(plugins + [p for p in DISABLED_BY_DEFAULT if p in catalog])), environ)
    for plugin, why in shown.items():
        report.rows.append(Row(plugin, "", "disabled", where=why))
    enabled = catalog.enabled_plugins(selected, environ)
    resolved = catalog.resolve_config(enabled, environ)
    providers = list(settings.binary_install_providers) + (["apt"] if allow_apt else [])
    settings.lib_dir.mkdir(parents=True, exist_ok=True)
    answers: dict[str, tuple[bool, Row]] = {}
    for plugin in enabled:
        section = {**resolved.get("base", {}), **resolved.get(plugin, {})}
        for _key, record in catalog.required_binaries(plugin, section, str(settings.lib_dir)):
            cache_key = json.dumps(record, sort_keys=True, default=str)
            if cache_key not in answers:
                reply = resolve_binary(
                    BinaryRequest.from_record(record, plugin=plugin, machine=settings.machine_name),
                    settings.lib_dir,
                    providers,
                    settings.machine_name,
                )
                row = _row(plugin, record["name"], reply)
                answers[cache_key] = (reply.ok, row)
                report.rows.append(row)
            if not answers[cache_key][0] and plugin not in report.unrunnable:
                report.unrunnable.append(plugin)
    # a plugin that requires an unrunnable one can't run either (title needs chrome)
    for plugin in enabled:
        if plugin not in report.unrunnable and any(r in report.unrunnable for r in catalog.with_requirements([plugin])):
            report.unrunnable.append(plugin)
    # each enabled plugin's state: ready, or why it cannot run (its hooks will be recorded skipped)
    missing = {r.plugin: f"{r.binary} missing: {r.where}" for r in report.rows if r.status == "missing"}
    for plugin in enabled:
        if plugin in report.unrunnable:
            why = missing.get(plugin) or "needs " + ", ".join(
                r for r in catalog.with_requirements([plugin]) if r in report.unrunnable and r != plugin
            )
            report.rows.append(Row(plugin, "", "unrunnable", where=why[:500]))
        else:
            report.rows.append(Row(plugin, "", "ready"))
    # esbuild, which bundles the browser hooks' puppeteer-core (WARM_HOOKS); optional: without it
    # they load the package unbundled, so a missing one is shown but makes no plugin unrunnable
    if "chrome" in enabled and settings.warm_hooks:
        reply = resolve_binary(
            BinaryRequest.from_record(ESBUILD, plugin="chrome", machine=settings.machine_name),
            settings.lib_dir,
            providers,
            settings.machine_name,
        )
        report.rows.append(_row("chrome", ESBUILD["name"], reply, missing="optional: "))
    return report


def _row(plugin: str, binary: str, reply: BinaryReply, missing: str = "") -> Row:
    """The report's line for ``plugin``'s ``binary`` from the resolver's ``reply`` (``missing``:
    put before the reason it is missing)."""
    if reply.ok and reply.binary:
        b = reply.binary
        return Row(
            plugin, binary, "installed" if reply.installed else "found", b.version, f"{b.abspath} ({b.binprovider})"
        )
    return Row(plugin, binary, "missing", where=f"{missing}{reply.error}")
