"""The environment of a task's hooks, built once per task.

Layers, later ones winning:

1. the executor's own environment, minus Boxcar's secrets (``secrets.public_environ``) and minus every
   per-crawl setting (those come only from the task, so a hook never sees a value the planner did
   not: ``CrawlConfig.plugin_environ``);
2. the crawl's per-crawl settings (``HookTask.config``, validated at ingest);
3. abx-plugins' resolved config of the task's plugins (aliases, fallbacks, defaults), as strings;
4. the run's paths: ``SNAP_DIR``, ``CRAWL_DIR``, ``TMP_DIR``, ``DATA_DIR``, ``ABXPKG_LIB_DIR``,
   ``PATH`` (this Python's bin dir, then ``lib/env/bin``), ``BOXCAR_WORKER_ID``;
5. per hook: its plugin's binaries (``<NAME>_BINARY``, their dirs first on ``PATH`` and
   ``NODE_PATH``), ``EXTRA_CONTEXT`` and the W3C trace context.

A page behind HTTP Basic auth (``http://user:pass@host/``) is fetched with its credentials: the
browser hooks get the URL without them and the tab is given them over DevTools
(``basic_auth.BasicAuthResponder``: nothing lands in Chromium's profile), wget gets the URL
without them and a private ``WGETRC`` with ``http_user``/``http_password`` (so neither its
WARC nor its converted links hold the password in clear); other hooks get them in ``--url``.
``redact`` removes the password from everything the executor reports or logs, and ``scrub`` from
the files the hooks wrote (in place, same length, so binary formats stay valid) and from file
names.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import msgspec

from boxcar.hook_executor import media
from boxcar.hook_executor.binaries import BinaryClient, BinaryEnv
from boxcar.hook_executor.egress import proxy_env
from boxcar.hook_executor.reaper import WORKER_ENV
from boxcar.hook_executor.warm import node_compile_cache
from boxcar.shared import secrets, telemetry
from boxcar.shared.crawlconfig import CrawlConfig
from boxcar.shared.plugins import Hook, PluginCatalog
from boxcar.shared.quirks import Credentials, quirk, substitutes
from boxcar.shared.settings import Settings
from boxcar.shared.storage import write_atomic
from boxcar.shared.urls import with_userinfo

#: Per-plugin environment Boxcar sets for a hook, after everything else, and why:
#: Hooks Boxcar runs with its own script instead of the plugin's (``quirks``: which, and why).
HOOK_SUBSTITUTES: dict[str, Path] = {name: Path(__file__).with_name(script) for name, script in substitutes().items()}


def substitute(hook: Hook) -> Hook:
    """``hook``, or Boxcar's stand-in for it (same plugin and name, so its result is the plugin's)."""
    script = HOOK_SUBSTITUTES.get(hook.name)
    if script is None:
        return hook
    language = "node" if script.suffix == ".js" else "python"
    return msgspec.structs.replace(hook, path=str(script), language=language)


def boxcar_defaults(catalog: PluginCatalog) -> dict[str, str]:
    """Plugin settings Boxcar changes from abx-plugins' defaults (the operator's own win), and why.

    ``WGET_ARGS``: ``--restrict-file-names=windows,ascii`` instead of ``windows``: wget then escapes
    non-ASCII bytes of a URL (``?q=H%F6he``) as ``%F6`` in file names instead of writing the raw
    byte, which the wget hook cannot decode (it fails the capture) and no UTF-8 index can name.
    """
    wget = catalog.plugins.get("wget")
    args = ((wget.schema.get("properties") or {}).get("WGET_ARGS") or {}).get("default") if wget else None
    if not isinstance(args, list):
        return {}
    fixed = ["--restrict-file-names=windows,ascii" if a == "--restrict-file-names=windows" else a for a in args]
    return {"WGET_ARGS": json.dumps(fixed)} if fixed != args else {}


class HookEnvironment:
    """Everything a task's hooks are started with.

    Args:
        settings: the executor's settings (``DATA_DIR``, lib dir).
        catalog: the plugin catalogue.
        binaries: resolver client for ``required_binaries``.
        plugins: the plugins whose hooks will run (their requirements are resolved too).
        config: the crawl's per-crawl settings.
        dirs: ``{"SNAP_DIR", "CRAWL_DIR", "TMP_DIR"}`` for this run (``PERSONAS_DIR`` optional).
        worker_id: this executor's id (every hook carries it, so its leftovers can be found).
        url: the page URL; ``credentials`` its sealed userinfo, if any.
        machine_environ: the executor's environment (default ``os.environ``).

    Raises:
        SecretUnavailable: the credentials cannot be unsealed (another ``SECRET_KEY``).
    """

    def __init__(
        self,
        *,
        settings: Settings,
        catalog: PluginCatalog,
        binaries: BinaryClient,
        plugins: list[str],
        config: Mapping[str, str],
        dirs: Mapping[str, Path],
        worker_id: str,
        url: str = "",
        credentials: str = "",
        machine_environ: Mapping[str, str] | None = None,
        proxy: str = "",
    ) -> None:
        self.settings = settings
        self.catalog = catalog
        self.binaries = binaries
        machine = {k: v for k, v in (os.environ if machine_environ is None else machine_environ).items()}
        own = secrets.public_environ(machine)
        defaults = {
            k: v for k, v in boxcar_defaults(catalog).items() if k not in own and f"{k[:-5]}_DEFAULT_ARGS" not in own
        }
        environ = CrawlConfig(dict(config)).plugin_environ({**defaults, **own})
        environ["ABXPKG_LIB_DIR"] = str(settings.lib_dir)
        self.resolved = catalog.resolve_config(plugins, environ)
        lib = settings.lib_dir
        self.base = {
            **environ,
            **catalog.hook_env(plugins, self.resolved),
            **{key: str(path) for key, path in dirs.items()},
            "DATA_DIR": str(settings.data_dir),
            "ABXPKG_LIB_DIR": str(lib),
            "PATH": os.pathsep.join(
                [str(Path(sys.executable).parent), str(lib / "env" / "bin"), machine.get("PATH", "")]
            ),
            "PYTHON3_BINARY": sys.executable,
            WORKER_ENV: worker_id,
            **(proxy_env(proxy) if proxy else {}),
            **(node_compile_cache(settings.lib_dir) if settings.warm_hooks else {}),
        }
        self.base.setdefault("PERSONAS_DIR", str(Path(dirs.get("TMP_DIR", settings.data_dir)) / "personas"))
        userinfo = secrets.unseal(credentials) if credentials else ""
        self.url = url
        self.fetch_url = with_userinfo(url, userinfo)
        self.secrets = secrets.secret_parts(userinfo)
        self._wgetrc = None
        self.credentials: tuple[str, str] | None = None
        if userinfo:
            user, _, password = (unquote(part) for part in userinfo.partition(":"))
            self.credentials = (user, password)
            self._wgetrc = Path(dirs["TMP_DIR"]) / "wgetrc"
            self._wgetrc.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self._wgetrc, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as fh:
                fh.write(f"http_user = {user}\nhttp_password = {password}\n")
        self._binary_envs: dict[str, BinaryEnv] = {}
        self.output_limit = CrawlConfig(dict(config)).snapshot_max_size

    def url_for(self, hook: Hook) -> str:
        """The ``--url`` of ``hook``: with the page's credentials, except for wget (``WGETRC``) and
        the browser's hooks (the tab gets them over DevTools: ``basic_auth``)."""
        if self.credentials is None or self.credentials_by(hook) is not Credentials.URL:
            return self.url
        return self.fetch_url

    def credentials_by(self, hook: Hook) -> Credentials:
        """How ``hook`` gets the page's credentials (``quirks``; a hook in the tab: over DevTools)."""
        if self.in_browser(hook):
            return Credentials.DEVTOOLS
        return quirk(hook.plugin).credentials

    def in_browser(self, hook: Hook) -> bool:
        """True for a hook of the chrome plugin or of one that requires it (it runs in the tab)."""
        return "chrome" in self.catalog.with_requirements([hook.plugin])

    def scrub(self, root: Path, since_ns: int) -> int:
        """Remove the page's password from files under ``root`` changed since ``since_ns``: each
        occurrence in their bytes becomes as many ``*`` (offsets in PDFs and the like stay valid),
        each in a file name ``***``. Returns how many files were changed."""
        if not self.secrets or not root.is_dir():
            return 0
        needles = [secret.encode() for secret in self.secrets]
        changed = 0
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                path = Path(dirpath, name)
                try:
                    if path.is_symlink() or path.stat().st_mtime_ns < since_ns:
                        continue
                    data = path.read_bytes()
                except OSError:
                    continue
                scrubbed = data
                for needle in needles:
                    scrubbed = scrubbed.replace(needle, b"*" * len(needle))
                if scrubbed != data:
                    write_atomic(path, scrubbed)
                    changed += 1
                clean = self.redact(name)
                if clean != name:
                    os.replace(path, path.with_name(clean))
                    changed += 1
        return changed

    def redact(self, text: str) -> str:
        """``text`` without the page's credentials."""
        return secrets.redact(text, self.secrets) if self.secrets and text else text

    def redact_json(self, value: Any) -> Any:
        """A JSON value without the page's credentials (strings anywhere in it)."""
        if not self.secrets or value is None:
            return value
        return json.loads(self.redact(json.dumps(value)))

    async def binary_env(self, plugin: str) -> BinaryEnv:
        """Binaries of ``plugin`` and of the plugins it requires (a chrome hook needs chrome's node).

        Raises:
            BinaryUnavailable, ResolverUnreachable: from the resolver.
        """
        cached = self._binary_envs.get(plugin)
        if cached is not None:
            return cached
        lib_dir = str(self.settings.lib_dir)
        envs = []
        for name in self.catalog.with_requirements([plugin]):
            section = {**self.resolved.get("base", {}), **self.resolved.get(name, {})}
            records = self.catalog.required_binaries(name, section, lib_dir)
            envs.append(await self.binaries.env_for(name, records))
        # the required plugins' binaries first (the last required first), then the plugin's own:
        # chrome's pinned Node must come before a system directory such as pdf's /usr/bin, where a
        # `#!/usr/bin/env node` script would otherwise find another Node
        env = BinaryEnv.layered(reversed(envs))
        self._binary_envs[plugin] = env
        return env

    def hook_env(self, hook: Hook, binaries: BinaryEnv, context: Mapping[str, Any]) -> dict[str, str]:
        """The full environment of one hook process."""
        env = binaries.apply(self.base)
        env.update(quirk(hook.plugin).hook_env)
        if hook.name in HOOK_SUBSTITUTES:
            env["BOXCAR_ABX_PLUGINS_DIR"] = str(self.catalog.plugins_dir)
        env.update(media.hook_env(hook, self.resolved, env))
        if self._wgetrc is not None and self.credentials_by(hook) is Credentials.WGETRC:
            env["WGETRC"] = str(self._wgetrc)
        # the keys that differ per run here or per task are listed in warm.common.PER_RUN_ENV (a
        # Node host's config memo leaves them out of its key; one missing there only costs reuse)
        env["EXTRA_CONTEXT"] = json.dumps({**context, "plugin": hook.plugin, "hook_name": hook.name})
        # W3C context for hooks, as the OpenTelemetry environment-carrier convention spells it.
        env.update({k.upper(): v for k, v in telemetry.current_carrier().items()})
        return env

    def timeout(self, hook: Hook) -> int:
        """``<PLUGIN>_TIMEOUT``, else ``TIMEOUT``, else 60 (seconds)."""
        section = self.resolved.get(hook.plugin, {})
        return int(section.get(f"{hook.plugin.upper()}_TIMEOUT") or self.resolved.get("base", {}).get("TIMEOUT") or 60)

    def memory_limit(self, hook: Hook) -> int:
        """``<PLUGIN>_MEMORY_LIMIT``, else ``MEMORY_LIMIT`` (bytes; abx-plugins' base default 2 GiB)."""
        section = self.resolved.get(hook.plugin, {})
        value = section.get(f"{hook.plugin.upper()}_MEMORY_LIMIT") or self.resolved.get("base", {}).get("MEMORY_LIMIT")
        try:
            return max(0, int(value or 0))
        except (TypeError, ValueError):
            return 0

    def argv(self, hook: Hook, env: Mapping[str, str], args: list[str]) -> list[str]:
        """``python3 hook.py …`` / ``node hook.js …``: the hook's interpreter, never its shebang."""
        interpreter = sys.executable if hook.language == "python" else env.get("NODE_BINARY", "node")
        return [interpreter, hook.path, *args]
