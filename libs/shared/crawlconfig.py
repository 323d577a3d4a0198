"""A crawl's settings, merged once: the operator's environment, then the request's overrides.

``CrawlConfig.build`` runs where a crawl is made (ingest for API requests and imports, the
crawl-runner for feed polls). It takes the *per-crawl* settings from the environment, lays the
request's ``config`` over them, validates every key and value, and the result is stored on the
Crawl and carried in each ``HookTask``. The runner plans and the executors run from those same
values, so a setting cannot mean one thing to the planner and another to a hook.

Per-crawl settings are an allow-list (DESIGN.md rule 7: a crawl's ``config`` never chooses
binaries, arguments or paths):

- ``<PLUGIN>_ENABLED`` (and ArchiveBox's ``SAVE_*``/``USE_*`` aliases), booleans;
- ``TIMEOUT`` and ``<PLUGIN>_TIMEOUT``, whole seconds 1–``MAX_TIMEOUT``;
- ``CHECK_SSL_VALIDITY`` and ``<PLUGIN>_CHECK_SSL_VALIDITY``, booleans;
- ``USER_AGENT`` and ``<PLUGIN>_USER_AGENT``, a line of text;
- ``RESOLUTION`` and ``<PLUGIN>_RESOLUTION``, ``WIDTH,HEIGHT``;
- ``MEDIA_MAX_SIZE``/``YTDLP_MAX_SIZE``, a size like ``750m``;
- ``COOKIES_FILE``: the *name* of a file in the operator's ``COOKIES_DIR``;
- Boxcar's own crawl limits and URL policy (``CRAWL_SETTINGS``).

Everything else (``WGET_ARGS_EXTRA``, ``WGET_BINARY``, ``NODE_OPTIONS``, ``PYTHON*``, ``LD_*``,
``PATH``, proxies, …) is refused with an error naming the key; hooks get such variables only
from the operator's own environment.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import msgspec

from boxcar.shared.plugins import PluginCatalog
from boxcar.shared.settings import Settings, parse_bool
from boxcar.shared.urls import UrlFilter

MAX_TIMEOUT = 24 * 3600

#: The most link hops a crawl may follow from its seeds (``max_depth``: 0 = the seeds only).
MAX_DEPTH = 4


def parse_depth(value: object) -> int:
    """A crawl's ``max_depth`` from a form or query value: a whole number 0–``MAX_DEPTH``.

    Raises:
        ValueError: anything else (the message says what is allowed).
    """
    try:
        depth = int(str(value).strip() or 0)
    except ValueError:
        raise ValueError(f"must be a whole number 0–{MAX_DEPTH}") from None
    if not 0 <= depth <= MAX_DEPTH:
        raise ValueError(f"must be 0–{MAX_DEPTH}")
    return depth


_RESOLUTION = re.compile(r"^\d{2,5},\d{2,5}$")
_SIZE = re.compile(r"^\d{1,12}[kmgt]?b?$", re.IGNORECASE)
_COOKIE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class ConfigError(ValueError):
    """A crawl ``config`` key or value that is refused; ``key`` names it, ``str()`` says why."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key


class CrawlSetting(msgspec.Struct, frozen=True):
    """One of Boxcar's own per-crawl settings: its kind and what it means (for the README).

    ``limit``: the operator's value is a ceiling a crawl may only lower; ``zero_is_unlimited``:
    0 means "no limit" (so a crawl may not set 0 under an operator's non-zero value)."""

    kind: str  # "bool" | "int" | "bytes" | "regex"
    description: str
    minimum: int = 0
    maximum: int = 2**31
    limit: bool = False
    zero_is_unlimited: bool = False


#: Boxcar's per-crawl settings (ArchiveBox's names), always stored with their effective value.
CRAWL_SETTINGS: dict[str, CrawlSetting] = {
    "CRAWL_MAX_URLS": CrawlSetting(
        "int", "snapshots per crawl (0 = no limit)", 0, 10_000_000, limit=True, zero_is_unlimited=True
    ),
    "CRAWL_MAX_CONCURRENT_SNAPSHOTS": CrawlSetting(
        "int", "snapshots of one crawl in flight at once", 1, 1024, limit=True
    ),
    "DOMAIN_MAX_CONCURRENT": CrawlSetting(
        "int",
        "snapshots of one host name captured at once, every crawl's together (0 = no limit)",
        0,
        1024,
        limit=True,
        zero_is_unlimited=True,
    ),
    "DOMAIN_REQUESTS_PER_MINUTE": CrawlSetting(
        "int",
        "captures of one host name started a minute, every crawl's together (0 = no limit)",
        0,
        100_000,
        limit=True,
        zero_is_unlimited=True,
    ),
    "ONLY_NEW": CrawlSetting("bool", "skip URLs some crawl archived before"),
    "URL_ALLOWLIST": CrawlSetting("regex", "only archive URLs matching"),
    "URL_DENYLIST": CrawlSetting("regex", "never archive URLs matching"),
    "MAX_URL_ATTEMPTS": CrawlSetting(
        "int", "captures of a URL that answers 429/5xx or fails to connect", 1, 20, limit=True
    ),
    "SNAPSHOT_MAX_SIZE": CrawlSetting(
        "bytes", "bytes one hook may write for a snapshot (0 = no limit)", 0, 2**50, limit=True, zero_is_unlimited=True
    ),
    "CRAWL_TIMEOUT": CrawlSetting(
        "int",
        "seconds a crawl may run before it is stopped (0 = no limit)",
        0,
        10**9,
        limit=True,
        zero_is_unlimited=True,
    ),
}

#: Hard bounds whatever the operator says: a screenshot or PDF viewport (pixels, width and
#: height; Chromium's largest texture is 16384).
MAX_RESOLUTION = (16384, 16384)


def parse_size(text: str) -> int:
    """``1024``, ``500k``, ``750m``, ``2g``, ``1t`` (``b`` optional, case-insensitive) in bytes.

    Raises:
        ValueError: not such a size.
    """
    match = re.fullmatch(r"\s*(\d{1,15})\s*([kmgt]?)b?\s*", text, re.IGNORECASE)
    if not match:
        raise ValueError(f"expected a size like 500m or 2g, got {text[:40]!r}")
    size: int = int(match[1]) * 1024 ** "_kmgt".index(match[2].lower() or "_")
    return size


class CrawlConfig(msgspec.Struct, frozen=True):
    """The validated per-crawl settings: ``{KEY: value as an environment string}``.

    Holds Boxcar's ``CRAWL_SETTINGS`` (always) and the plugin settings that the environment or
    the request set (a plugin setting left out takes abx-plugins' schema default everywhere).
    """

    values: dict[str, str] = {}

    # ------------------------------------------------------------------ building

    @classmethod
    def build(
        cls,
        settings: Settings,
        catalog: PluginCatalog,
        overrides: Mapping[str, Any] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> CrawlConfig:
        """Merge ``environ``'s per-crawl settings, then ``overrides`` (a request's ``config``).

        Args:
            settings: the operator's settings (defaults of ``CRAWL_SETTINGS``, ``COOKIES_DIR``).
            overrides: keys and JSON values (str, int, float, bool) from the request.
            environ: the operator's environment (default ``os.environ``); keys that are not
                per-crawl settings are ignored here (they stay machine settings).

        Raises:
            ConfigError: an override key that is not a per-crawl setting, or an ill-typed value.
        """
        import os

        environ = os.environ if environ is None else environ
        values = {
            "CRAWL_MAX_URLS": str(settings.crawl_max_urls),
            "CRAWL_MAX_CONCURRENT_SNAPSHOTS": str(settings.crawl_max_concurrent_snapshots),
            "DOMAIN_MAX_CONCURRENT": str(settings.domain_max_concurrent),
            "DOMAIN_REQUESTS_PER_MINUTE": str(settings.domain_requests_per_minute),
            "ONLY_NEW": str(settings.only_new).lower(),
            "URL_ALLOWLIST": settings.url_allowlist,
            "URL_DENYLIST": settings.url_denylist,
            "MAX_URL_ATTEMPTS": str(settings.max_url_attempts),
            "SNAPSHOT_MAX_SIZE": str(settings.snapshot_max_size),
            "CRAWL_TIMEOUT": str(settings.crawl_timeout),
        }
        keys = _AllowList.of(catalog)
        for key, raw in environ.items():
            canonical = keys.canonical(key)
            if canonical and canonical not in CRAWL_SETTINGS:
                values[canonical] = raw  # the operator's own value, trusted as the hooks read it
        operator = _OperatorLimits(catalog, keys, values, settings)
        for key, raw in (overrides or {}).items():
            canonical = keys.canonical(str(key))
            if canonical is None:
                raise ConfigError(str(key)[:80], keys.refusal(str(key)))
            value = keys.check(canonical, raw, settings)
            operator.check(canonical, value)
            values[canonical] = value
        return cls(values)

    # ------------------------------------------------------------------ reading

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.values.get(key, "").strip().lower()
        parsed = parse_bool(value)
        return default if parsed is None else parsed

    def number(self, key: str, default: int = 0) -> int:
        try:
            return int(self.values[key])
        except (KeyError, ValueError):
            return default

    @property
    def only_new(self) -> bool:
        return self.flag("ONLY_NEW", True)

    @property
    def max_urls(self) -> int:
        return self.number("CRAWL_MAX_URLS")

    @property
    def max_concurrent_snapshots(self) -> int:
        return max(1, self.number("CRAWL_MAX_CONCURRENT_SNAPSHOTS", 8))

    @property
    def domain_limits(self) -> tuple[int, int]:
        """``(DOMAIN_MAX_CONCURRENT, DOMAIN_REQUESTS_PER_MINUTE)``, 0 = no limit."""
        return self.number("DOMAIN_MAX_CONCURRENT"), self.number("DOMAIN_REQUESTS_PER_MINUTE")

    @property
    def max_url_attempts(self) -> int:
        return max(1, self.number("MAX_URL_ATTEMPTS", 1))

    @property
    def snapshot_max_size(self) -> int:
        """Bytes one hook may write (0 = no limit)."""
        return self.number("SNAPSHOT_MAX_SIZE")

    @property
    def crawl_timeout(self) -> int:
        """Seconds a crawl may run (0 = no limit)."""
        return self.number("CRAWL_TIMEOUT")

    def url_filter(self) -> UrlFilter:
        """The crawl's ``URL_ALLOWLIST``/``URL_DENYLIST`` (validated when the config was built)."""
        return UrlFilter(self.values.get("URL_ALLOWLIST", ""), self.values.get("URL_DENYLIST", ""))

    def plugin_environ(self, machine_environ: Mapping[str, str]) -> dict[str, str]:
        """The string settings a hook of this crawl sees: the machine's environment with every
        per-crawl key taken from this config instead (so a hook never sees a per-crawl value the
        planner did not), Boxcar's own crawl settings left out."""
        keys = _AllowList.cached()
        env = {k: v for k, v in machine_environ.items() if keys is None or keys.canonical(k) is None}
        env.update({k: v for k, v in self.values.items() if k not in CRAWL_SETTINGS})
        return env


class _AllowList:
    """Which keys a crawl may set, derived once from the installed plugins' ``config.json``."""

    _instance: _AllowList | None = None

    def __init__(self, catalog: PluginCatalog) -> None:
        self.types: dict[str, str] = {}  # canonical key -> schema type
        self.aliases: dict[str, str] = {}  # alias -> canonical key
        for plugin in catalog.plugins.values():
            for key, prop in (plugin.schema.get("properties") or {}).items():
                if prop.get("x-scope") == "crawl_execution" or not _allowed_plugin_key(key, prop):
                    continue
                self.types[key] = str(prop.get("type") or "string")
                for alias in prop.get("x-aliases") or []:
                    self.aliases[str(alias)] = key
        for key in ("TIMEOUT", "USER_AGENT", "CHECK_SSL_VALIDITY", "RESOLUTION", "COOKIES_FILE", "MEDIA_MAX_SIZE"):
            self.types.setdefault(key, "integer" if key == "TIMEOUT" else "boolean" if "SSL" in key else "string")

    @classmethod
    def of(cls, catalog: PluginCatalog) -> _AllowList:
        if cls._instance is None:
            cls._instance = cls(catalog)
        return cls._instance

    @classmethod
    def cached(cls) -> _AllowList | None:
        if cls._instance is None:
            from boxcar.shared.plugins import get_catalog

            cls._instance = cls(get_catalog())
        return cls._instance

    def canonical(self, key: str) -> str | None:
        """The setting ``key`` names (an alias gives its canonical key), or None if a crawl may
        not set it."""
        if key in CRAWL_SETTINGS or key in self.types:
            return key
        return self.aliases.get(key)

    def refusal(self, key: str) -> str:
        upper = key.upper()
        if re.search(r"_(BINARY|ARGS|ARGS_EXTRA|EXTRA_ARGS|DEFAULT_ARGS)$", upper):
            return "binaries and their arguments come only from the operator's environment"
        if re.search(r"(_DIR|_PATH|_FILE|_DB)$", upper) or upper in ("PATH", "HOME"):
            return "paths come only from the operator's environment"
        if re.match(r"^(NODE_|PYTHON|LD_|DYLD_|BROWSER$|HTTPS?_PROXY$|ALL_PROXY$|NO_PROXY$)", upper):
            return "interpreter, loader and proxy variables come only from the operator's environment"
        return "not a per-crawl setting (enable/disable flags, timeouts, user agent, SSL checks, limits, URL lists)"

    def check(self, key: str, raw: Any, settings: Settings) -> str:
        """``raw`` as the environment string for ``key``, validated by the key's kind.

        Raises:
            ConfigError: the value does not fit.
        """
        if isinstance(raw, (dict, list)) or raw is None:
            raise ConfigError(key, "expected a single value (string, number or boolean)")
        text = str(raw).lower() if isinstance(raw, bool) else str(raw)
        if any(ch < " " for ch in text) or "{" in text or "}" in text or len(text) > 2048:
            raise ConfigError(key, "control characters, braces and values over 2048 characters are not allowed")
        spec = CRAWL_SETTINGS.get(key)
        kind = spec.kind if spec else _kind(key, self.types.get(key, "string"))
        if kind == "bool":
            parsed = parse_bool(text)
            if parsed is None:
                raise ConfigError(key, f"expected true or false, got {text[:40]!r}")
            return "true" if parsed else "false"
        if kind == "int":
            try:
                number = int(text.strip())
            except ValueError:
                raise ConfigError(key, f"expected a whole number, got {text[:40]!r}") from None
            low, high = (spec.minimum, spec.maximum) if spec else (1, MAX_TIMEOUT)
            if not low <= number <= high:
                raise ConfigError(key, f"must be between {low} and {high}")
            return str(number)
        if kind == "bytes":
            assert spec is not None  # only Boxcar's own settings are of this kind
            try:
                number = parse_size(text)
            except ValueError as exc:
                raise ConfigError(key, str(exc)) from None
            if not spec.minimum <= number <= spec.maximum:
                raise ConfigError(key, f"must be between {spec.minimum} and {spec.maximum} bytes")
            return str(number)
        if kind == "regex":
            try:
                UrlFilter(text) if key == "URL_ALLOWLIST" else UrlFilter("", text)
            except ValueError as exc:
                raise ConfigError(key, str(exc).removeprefix(f"{key}: ")) from None
            return text
        if kind == "resolution" and not _RESOLUTION.match(text.strip()):
            raise ConfigError(key, f"expected WIDTH,HEIGHT like 1440,2000, got {text[:40]!r}")
        if kind == "size" and not _SIZE.match(text.strip()):
            raise ConfigError(key, f"expected a size like 750m, got {text[:40]!r}")
        if kind == "cookies":
            return _cookie_file(key, text.strip(), settings)
        return text


class _OperatorLimits:
    """The operator's limits as ceilings for a crawl's overrides: a crawl may lower them, never
    raise them (nor lift them with 0 where 0 means "no limit").

    Boxcar's own limits (``CrawlSetting.limit``) are compared with the operator's value; a
    plugin's timeout, media size limit and viewport with the operator's effective value of that
    key (their environment, else abx-plugins' default); the generic ``TIMEOUT``,
    ``MEDIA_MAX_SIZE`` with the operator's own value of that key; a viewport (``RESOLUTION``,
    ``<PLUGIN>_RESOLUTION``) with the operator's own value of it or of ``RESOLUTION``, else
    ``MAX_RESOLUTION``.
    """

    def __init__(self, catalog: PluginCatalog, keys: _AllowList, operator: Mapping[str, str], settings: Settings):
        self.catalog = catalog
        self.keys = keys
        self.operator = dict(operator)
        self.settings = settings
        self._resolved: dict[str, Any] | None = None

    def check(self, key: str, value: str) -> None:
        """Raises ``ConfigError`` when ``value`` would raise the operator's limit for ``key``."""
        spec = CRAWL_SETTINGS.get(key)
        if spec is not None:
            if spec.limit:
                self._at_most(key, int(value), int(self.operator[key]), spec.zero_is_unlimited)
            return
        if key == "TIMEOUT" or key.endswith("_TIMEOUT"):
            ceiling = self.settings.timeout if key == "TIMEOUT" else self._effective(key)
            if ceiling is not None:
                self._at_most(key, int(value), int(ceiling), False, "seconds")
        elif key.endswith("MAX_SIZE"):
            ceiling = self._effective(key) if key != "MEDIA_MAX_SIZE" else self._effective("YTDLP_MAX_SIZE")
            if ceiling is not None:
                self._at_most(key, parse_size(value), parse_size(str(ceiling)), False, "bytes")
        elif key.endswith("RESOLUTION"):
            own = self.operator.get(key) or self.operator.get("RESOLUTION")
            width, height = (int(n) for n in value.split(","))
            limit = tuple(int(n) for n in own.split(",")) if own and _RESOLUTION.match(own) else None
            ceiling = limit or MAX_RESOLUTION
            if width > ceiling[0] or height > ceiling[1]:
                whose = "the operator's" if limit else "the largest"
                raise ConfigError(key, f"may not exceed {whose} {ceiling[0]},{ceiling[1]}")

    def _at_most(self, key: str, value: int, ceiling: int, zero_is_unlimited: bool, unit: str = "") -> None:
        if zero_is_unlimited and ceiling == 0:
            return  # the operator set no limit
        unit = f" {unit}" if unit else ""
        if zero_is_unlimited and value == 0:
            raise ConfigError(key, f"0 (no limit) would lift the operator's limit of {ceiling}{unit}")
        if value > ceiling:
            raise ConfigError(key, f"may only lower the operator's limit of {ceiling}{unit}")

    def _effective(self, key: str) -> Any:
        """The operator's value of a plugin ``key`` as its hooks would resolve it (None: unknown)."""
        if self._resolved is None:
            environ = {k: v for k, v in self.operator.items() if k not in CRAWL_SETTINGS}
            sections = self.catalog.resolve_config(list(self.catalog.plugins), environ)
            self._resolved = {k: v for section in sections.values() for k, v in section.items()}
        return self.operator.get(key) or self._resolved.get(key)


def _allowed_plugin_key(key: str, prop: Mapping[str, Any]) -> bool:
    kind = prop.get("type")
    if key.endswith("_ENABLED") or key.endswith("CHECK_SSL_VALIDITY"):
        return kind == "boolean"
    if key.endswith("_TIMEOUT"):
        return kind == "integer"
    if key.endswith("_USER_AGENT") or key.endswith("_RESOLUTION") or key.endswith("_MAX_SIZE"):
        return kind == "string"
    return key.endswith("_COOKIES_FILE")


def _kind(key: str, schema_type: str) -> str:
    if schema_type == "boolean":
        return "bool"
    if key == "TIMEOUT" or key.endswith("_TIMEOUT"):
        return "int"
    if key.endswith("RESOLUTION"):
        return "resolution"
    if key.endswith("MAX_SIZE"):
        return "size"
    if key.endswith("COOKIES_FILE"):
        return "cookies"
    return "text"


def _cookie_file(key: str, name: str, settings: Settings) -> str:
    """A cookies file chosen by name from the operator's ``COOKIES_DIR``; its absolute path."""
    if not name:
        return ""
    directory = settings.cookies_dir
    if directory is None:
        raise ConfigError(key, "no COOKIES_DIR is configured on this server")
    if not _COOKIE_NAME.match(name):
        raise ConfigError(key, "give the name of a file in COOKIES_DIR, not a path")
    path = (directory / name).resolve()
    if path.parent != directory.resolve() or not path.is_file():
        raise ConfigError(key, f"no cookies file {name!r} in COOKIES_DIR")
    return str(path)
