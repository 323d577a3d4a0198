"""Typed settings from the environment: one object every service reads.

Names follow ArchiveBox where a setting means the same thing (``DATA_DIR``, ``TIMEOUT``,
``PLUGINS``, ``CRAWL_MAX_URLS``, ``CRAWL_MAX_CONCURRENT_SNAPSHOTS``, ``ONLY_NEW``, …); Boxcar's own
knobs (``NATS_URL``, ``DATABASE_URL``, ``EXECUTOR_CONCURRENCY``, …) are unprefixed too, so one
``.env`` file drives a whole compose deployment. Plugin settings (``WGET_TIMEOUT``,
``SAVE_WARC``, …) are not modelled here: they pass through the environment to the hooks, which
resolve them with abx-plugins' own ``config.json`` schemas (see ``boxcar.shared.plugins``).
"""

from __future__ import annotations

import functools
import os
import socket
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

#: Plugins enabled when neither the request nor ``PLUGINS`` names any: ArchiveBox 0.9's default
#: captures that work on a self-hosted machine without accounts, extensions or third parties.
#: A real browser's captures (title, screenshot, PDF, DOM, a one-file SingleFile copy, MHTML,
#: headers, redirects, every response, console log, DNS and TLS facts, SEO metadata, outlinks),
#: wget's mirror and WARC, favicon, git repositories, media (yt-dlp, gallery-dl), readable text
#: (htmltotext, trafilatura, Readability, Defuddle), links and a hash manifest. What is left out of
#: ArchiveBox's default set, and why, is in the README ("The default selection").
DEFAULT_PLUGINS: tuple[str, ...] = (
    "chrome",
    "title",
    "screenshot",
    "pdf",
    "dom",
    "singlefile",
    "chrome_mhtml",
    "headers",
    "redirects",
    "responses",
    "consolelog",
    "dns",
    "sslcerts",
    "seo",
    "staticfile",
    "parse_dom_outlinks",
    "wget",
    "favicon",
    "git",
    "ytdlp",
    "gallerydl",
    "htmltotext",
    "trafilatura",
    "readability",
    "defuddle",
    "parse_html_urls",
    "hashes",
)

#: ArchiveBox's default: page requisites are not pages worth a snapshot of their own.
DEFAULT_URL_DENYLIST = r"\.(css|js|otf|ttf|woff|woff2|gstatic\.com|googleapis\.com/css)(\?.*)?$"


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off")


def parse_bool(value: object) -> bool | None:
    """A boolean setting as an environment variable, a form field or a crawl's config gives it:
    ``1/true/yes/on`` and ``0/false/no/off`` (any case, surrounding spaces ignored; a bool is
    itself); None for anything else, which each caller refuses or defaults in its own words."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower()
    return True if word in TRUE_WORDS else False if word in FALSE_WORDS else None


def _csv(value: object) -> object:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


class Settings(BaseSettings):
    """Boxcar's settings, read from environment variables (case-insensitive).

    Paths are absolute after validation. Durations are in seconds.
    """

    model_config = SettingsConfigDict(case_sensitive=False, extra="ignore")

    # --- where things are
    data_dir: Path = Field(default=Path("./data"), description="Root of the archive (ArchiveBox layout), a path")
    database_url: str = Field(
        default="",
        description=(
            "SQLAlchemy/libpq URL of the database; empty: SQLite at DATA_DIR/index.sqlite3. libpq's "
            "parameters pass through (sslmode, sslrootcert, target_session_attrs, ...), and so do several "
            "hosts (postgresql://user@db1:5432,db2:5432/boxcar?target_session_attrs=read-write)"
        ),
    )
    store_url: str = Field(
        default="",
        description=(
            "Where the archive's files live: empty (DATA_DIR itself) or s3://bucket[/prefix]?endpoint=http://host:9000 "
            "(an S3-compatible store; credentials from AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY). With a bucket, "
            "executors capture in a scratch dir and need no shared volume; DATA_DIR is a local cache"
        ),
    )
    store_cache_max: Annotated[int, NoDecode] = Field(
        default=10 * 1024**3,
        ge=0,
        description="With a bucket (STORE_URL): bytes of snapshot copies a process (ingest, `boxcar export`) keeps in "
        "DATA_DIR to serve, replay and export them; past it the least recently used go, none used in the last minute "
        "(0 = no limit; 500m, 2g …)",
    )
    db_pool_size: int = Field(
        default=5, ge=1, description="Postgres connections each process keeps open (SQLAlchemy pool_size)"
    )
    db_max_overflow: int = Field(
        default=10, ge=0, description="Postgres connections each process may open beyond DB_POOL_SIZE at a peak"
    )
    nats_url: str = Field(
        default="nats://127.0.0.1:4222",
        description="NATS server with JetStream (the CLI starts one); a cluster's servers comma-separated",
    )
    nats_replicas: int = Field(
        default=1,
        ge=1,
        le=5,
        description="Replicas of each JetStream stream and bucket Boxcar creates (3 on a three-server cluster)",
    )
    archive_user: str = Field(default="system", description="User name in the archive/users/<user>/ paths")
    abxpkg_lib_dir: Path | None = Field(
        default=None, description="Managed binaries (ABXPKG_LIB_DIR); default DATA_DIR/lib"
    )
    cookies_dir: Path | None = Field(default=None, description="Directory of cookies files a crawl may pick by name")
    secret_key: str = Field(
        default="", description="Key sealing URL credentials (any string); default a random one in DATA_DIR/.boxcar"
    )

    # --- what a crawl does (per crawl too: these are CrawlConfig's Boxcar settings)
    plugins: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: list(DEFAULT_PLUGINS),
        description="Plugins a crawl runs when it names none, comma-separated",
    )
    timeout: int = Field(
        default=60, description="Seconds a hook may run (ArchiveBox TIMEOUT; <PLUGIN>_TIMEOUT overrides)"
    )
    crawl_max_urls: int = Field(
        default=10_000,
        ge=0,
        description="Snapshots a crawl may grow to by following links (0 = no limit; the URLs given all count)",
    )
    crawl_max_concurrent_snapshots: int = Field(default=8, ge=1, description="Snapshots of one crawl in flight at once")
    domain_max_concurrent: int = Field(
        default=0, ge=0, description="Snapshots of one host name captured at once, all crawls together (0 = no limit)"
    )
    domain_requests_per_minute: int = Field(
        default=0, ge=0, description="Captures of one host name started per minute, all crawls together (0 = no limit)"
    )
    crawl_timeout: int = Field(
        default=0, ge=0, description="Seconds a crawl may run before it is stopped (0 = no limit)"
    )
    snapshot_max_size: Annotated[int, NoDecode] = Field(
        default=1024**3, ge=0, description="Bytes one hook may write for one snapshot (0 = no limit; 500m, 2g …)"
    )
    only_new: bool = Field(default=True, description="Skip URLs some crawl archived before (true/false)")
    span_log: bool = Field(
        default=True,
        description="Keep every exported span in DATA_DIR/logs/spans-*.jsonl (OTLP/JSON, bounded) for `boxcar trace`",
    )
    url_allowlist: str = Field(default="", description="Only archive URLs matching: a regex, domains, or a JSON list")
    url_denylist: str = Field(
        default=DEFAULT_URL_DENYLIST, description="Never archive URLs matching (as URL_ALLOWLIST)"
    )
    url_allow_private: bool = Field(
        default=False,
        description="Archive pages on private, loopback and link-local addresses (a LAN); never the stack's own "
        "services or cloud metadata unless URL_ALLOWLIST names them",
    )
    egress_proxy: bool = Field(
        default=True,
        description="Send hooks' requests through the executor's egress proxy, which enforces URL_ALLOW_PRIVATE "
        "on every address and redirect (off only where the network itself does that)",
    )
    max_url_attempts: int = Field(
        default=3, ge=1, le=20, description="Captures of a URL that answers 429/5xx or fails to connect"
    )
    url_retry_backoff: float = Field(
        default=60.0, gt=0, description="Seconds before the first re-capture of such a URL (doubling each time)"
    )

    # --- the services
    runner_idle_interval: float = Field(
        default=30.0, gt=0, description="Seconds between the runner's passes when nothing wakes it"
    )
    runner_max_deliver: int = Field(
        default=8, ge=1, description="Deliveries of a runner or projector message before it is dead-lettered"
    )
    task_pickup_timeout: float = Field(
        default=120.0, gt=0, description="Seconds a task may wait with no executor of its family alive before it fails"
    )
    snapshot_lease_seconds: int = Field(default=300, ge=5, description="Seconds a runner's lease on a stage lasts")
    crawl_lease_seconds: int = Field(default=15, ge=1, description="Seconds between a started crawl's seal checks")
    executor_concurrency: int = Field(
        default=4,
        ge=1,
        description="Tasks one hook-executor process runs at once (fetch, extract, parse, index; the browser "
        "and media families have their own below)",
    )
    browser_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Tasks one browser-family executor runs at once, each a tab in its Chromium (default "
        "EXECUTOR_CONCURRENCY, at most 3: every tab costs memory in Chromium and in its Node hooks; a task mostly "
        "waits on the page and on hook starts — on 2 cores, 40 pages, 3 at once archived 18% more per minute than 2, "
        "for +117 MiB at the peak)",
    )
    extract_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Tasks one extract-family executor runs at once (default EXECUTOR_CONCURRENCY, at most one per "
        "CPU this process may use): text extraction is CPU-bound, so more at once only contend — and each holds a "
        "parsed page in memory",
    )
    media_concurrency: int | None = Field(
        default=None,
        ge=1,
        description="Tasks one media-family executor runs at once (default EXECUTOR_CONCURRENCY, at most 2): "
        "yt-dlp and gallery-dl downloads are long and large, so a deployment may run fewer at once and scale "
        "the pool",
    )

    def family_concurrency(self, family: str) -> int:
        """Tasks at once for one executor of ``family``: ``BROWSER_CONCURRENCY`` / ``MEDIA_CONCURRENCY`` /
        ``EXTRACT_CONCURRENCY`` when set, else ``EXECUTOR_CONCURRENCY`` — capped at 3 for the browser and
        2 for the media family, at the CPUs this process may use for the extract family (measured on 2 cores,
        130 pages: extract at 2 instead of 4 lost no throughput and used less CPU and memory)."""
        if family == "browser":
            return self.browser_concurrency or min(self.executor_concurrency, 3)
        if family == "media":
            return self.media_concurrency or min(self.executor_concurrency, 2)
        if family == "extract":
            return self.extract_concurrency or min(self.executor_concurrency, len(os.sched_getaffinity(0)))
        return self.executor_concurrency

    task_ack_wait: int = Field(
        default=60, ge=5, description="Seconds JetStream waits for a task's ack (heartbeats extend it)"
    )
    task_max_deliver: int = Field(default=3, ge=1, description="Deliveries of a hook task before it is reported failed")
    warm_hooks: bool = Field(
        default=True,
        description="Fork Python hooks from a warm interpreter (and a second Python like trafilatura's, and "
        "yt-dlp and gallery-dl from warmed ones), cache Node's compiled modules, and load the browser hooks' "
        "puppeteer-core from one bundle: the same hooks, a fraction of the CPU",
    )
    warm_node_hosts: bool = Field(
        default=True,
        description="With WARM_HOOKS: run the browser's hooks (navigate, title, screenshot, pdf, dom, …), its "
        "listeners (headers, responses, staticfile, …) and the tab daemon one after another in long-lived Node "
        "processes that have loaded puppeteer-core, instead of a Node process each",
    )
    warm_idle_timeout: float = Field(
        default=300.0,
        ge=0,
        description="Seconds a warm interpreter waits for the next hook before it exits and gives its memory back "
        "(the next hook starts it again; 0 = never). An executor whose plugins have Python hooks starts "
        "its hooks' interpreter (about 35 MiB) at boot, so an idle executor holds it this long after start",
    )
    hook_kill_grace: float = Field(default=5.0, ge=0, description="Seconds between SIGTERM and SIGKILL for a hook")
    browser_recycle_after: int = Field(
        default=50, ge=0, description="Snapshots per Chromium before a fresh one (0 = never)"
    )
    browser_memory_limit: int = Field(
        default=3 * 1024**3, ge=0, description="Bytes of Chromium memory (RSS) that force a fresh one (0 = no limit)"
    )
    binary_install_providers: Annotated[list[str], NoDecode] = Field(
        default_factory=lambda: ["uv", "pip", "npm", "pnpm"],
        description="abxpkg providers allowed to install missing binaries (apt/brew change the host), comma-separated",
    )
    binary_resolve_timeout: float = Field(default=600.0, gt=0, description="Seconds to wait for one binary to resolve")
    binaries_site: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9_-]*$",
        description="Name of the machines sharing one ABXPKG_LIB_DIR: executors ask only a binary-resolver of "
        "their site (another host: its own name and binary-resolver; default one site)",
    )

    # --- the embedded stack (`boxcar up`, `boxcar add` without a running stack)
    embedded_shape: Literal["one", "processes"] = Field(
        default="one", description="Every service in one process (one), or one process each (processes)"
    )
    embedded_families: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Executor families to start (default: those PLUGINS needs), comma-separated"
    )

    # --- the API
    api_host: str = Field(default="127.0.0.1", description="Address ingest listens on")
    api_port: int = Field(default=8000, description="Port ingest listens on")
    max_request_body: int = Field(default=64 * 1024 * 1024, description="Bytes accepted in one request (413 above)")
    public_reads: bool = Field(
        default=False,
        description="Show the admins' archives (GET endpoints, the list, snapshot pages, files) without a token or "
        "login; never a member's (true/false)",
    )
    public_url: str = Field(
        default="",
        description="Public base URL of the web UI and API, e.g. https://boxcar.example.lan (webhooks' links, and "
        "the origin whose form posts are taken where a proxy rewrites Host; empty: links are relative)",
    )

    # --- metrics (Prometheus)
    metrics_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="Port on which each service process serves its Prometheus metrics at /metrics, with no token "
        "(0 = off; ingest's API serves them at /metrics with a token either way)",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="Address METRICS_PORT listens on (Compose: 0.0.0.0, reached on the stack's internal network only)",
    )

    # --- webhooks (the webhook-sender)
    webhook_max_attempts: int = Field(
        default=6, ge=1, description="Times a webhook delivery is tried before it is marked failed"
    )
    webhook_retry_seconds: float = Field(
        default=30.0, gt=0, description="Seconds before a failed webhook delivery's first retry (doubled each time)"
    )

    # --- the web UI
    session_max_age: int = Field(
        default=14 * 24 * 3600, ge=60, description="Seconds a login session lasts after its last use"
    )
    trusted_proxies: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Addresses or CIDRs of an authenticating reverse proxy (Authelia, Authentik, oauth2-proxy) "
        "whose TRUSTED_USER_HEADER logs the web UI in; the header is ignored from any other peer (empty: off), "
        "comma-separated",
    )
    trusted_user_header: str = Field(
        default="Remote-User",
        description="Header naming the user the proxy authenticated (Remote-User: Authelia, Authentik; "
        "X-Forwarded-User: oauth2-proxy)",
    )
    trusted_header_create_users: bool = Field(
        default=False, description="Create the user the trusted header names on its first visit (true/false)"
    )
    oidc_issuer: str = Field(
        default="",
        description="OpenID Connect issuer URL for the login page's single sign-on button (discovery at "
        "ISSUER/.well-known/openid-configuration; empty: off)",
    )
    oidc_client_id: str = Field(default="", description="Boxcar's client id at the OpenID provider")
    oidc_client_secret: str = Field(default="", description="Its client secret (empty: a public client, PKCE only)")
    oidc_username_claim: str = Field(
        default="preferred_username",
        description="ID token or userinfo claim that names the Boxcar user of a first single sign-on (later "
        "ones find their user by the provider account it was bound to)",
    )
    oidc_create_users: bool = Field(
        default=True, description="Create the user on their first single sign-on (true/false)"
    )
    oidc_link_existing_users: bool = Field(
        default=False,
        description="Let a first single sign-on take the existing Boxcar user of its name if no provider account "
        "is bound to it yet (then bound to this one; off: only the users single sign-on creates are bound)",
    )
    oidc_scopes: str = Field(default="openid profile email", description="Scopes asked of the OpenID provider")
    oidc_redirect_uri: str = Field(
        default="",
        description="Callback URL registered at the provider (default: /login/oidc/callback on the URL the "
        "browser used; set it behind a proxy that changes the scheme or host)",
    )
    archive_security_mode: Literal["no-scripts", "sandboxed-scripts", "separate-origin"] = Field(
        default="no-scripts",
        description="How archived pages are served (ArchiveBox's SERVER_SECURITY_MODE idea): no-scripts (a "
        "sandbox, scripts never run), sandboxed-scripts (scripts run in a sandbox with an opaque origin, no "
        "cookies or storage), separate-origin (only at ARCHIVE_ORIGIN, scripts allowed there)",
    )
    local_token_file: Path | None = Field(
        default=None,
        description="Where the ingest keeps the CLI's own API token, created if missing (the embedded stack sets "
        "this to DATA_DIR/.boxcar/api_token; unset: none)",
    )
    archive_port: int = Field(
        default=0,
        ge=0,
        description="Port where ingest also serves archived files and WARC replay on their own origin "
        "(0 = none: no replay unless ARCHIVE_ORIGIN points at one)",
    )
    archive_origin: str = Field(
        default="",
        description="Public URL of that origin, e.g. https://archive.example.lan (default: the API's host "
        "name on ARCHIVE_PORT)",
    )

    machine_name: str = Field(
        default_factory=socket.gethostname, description="This machine's name (default the hostname)"
    )

    @field_validator("plugins", "binary_install_providers", "embedded_families", mode="before")
    @classmethod
    def _split_csv(cls, value: object) -> object:
        return _csv(value)

    @field_validator("trusted_proxies", mode="before")
    @classmethod
    def _networks(cls, value: object) -> object:
        import ipaddress

        value = _csv(value)
        if isinstance(value, list):
            for item in value:
                try:
                    ipaddress.ip_network(str(item), strict=False)
                except ValueError as exc:
                    raise ValueError(f"TRUSTED_PROXIES: {item!r} is no IP address or CIDR network") from exc
        return value

    @field_validator("snapshot_max_size", "store_cache_max", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        if isinstance(value, str):
            from boxcar.shared.crawlconfig import parse_size

            return parse_size(value)
        return value

    @field_validator("data_dir", mode="after")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().resolve()

    @property
    def span_log_dir(self) -> Path | None:
        """Where this stack keeps its spans (``boxcar.shared.spanlog``): ``DATA_DIR/logs``, or
        None with ``SPAN_LOG=false``."""
        return self.data_dir / "logs" if self.span_log else None

    @property
    def runtime_ports_dir(self) -> Path:
        """Where this machine's processes register the ports they open at run time
        (``boxcar.shared.egress.RuntimePorts``): ``DATA_DIR/tmp/<MACHINE_NAME>/ports``."""
        return self.data_dir / "tmp" / self.machine_name / "ports"

    @property
    def lib_dir(self) -> Path:
        """``ABXPKG_LIB_DIR``: where the binary-resolver installs and projects binaries."""
        return (self.abxpkg_lib_dir or self.data_dir / "lib").expanduser().resolve()

    @property
    def nats_servers(self) -> list[str]:
        """``NATS_URL`` as the list of servers a client may connect to (``nats://a:4222,nats://b:4222``
        → two), blanks dropped; nats-py takes a list, not a comma-separated string."""
        return [server.strip() for server in self.nats_url.split(",") if server.strip()]

    @property
    def sqlalchemy_url(self) -> str:
        """The database URL with the driver Boxcar uses (psycopg 3 for Postgres); see
        ``postgres_sqlalchemy_url``."""
        url = self.database_url.strip()
        if not url:
            return f"sqlite:///{self.data_dir / 'index.sqlite3'}"
        for prefix in ("postgres://", "postgresql://"):
            if url.startswith(prefix):
                return postgres_sqlalchemy_url(url[len(prefix) :])
        return url


def _libpq_parts(rest: str) -> tuple[str, str, str, str]:
    """``(userinfo, "@" or "", hosts, path-and-query)`` of a libpq URI after ``postgresql://``."""
    end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    userinfo, at, hosts = rest[:end].rpartition("@")
    return userinfo, at, hosts, rest[end:]


def libpq_hosts(url: str) -> list[str]:
    """Each ``host[:port]`` of a Postgres URL (a libpq host list, ``postgresql://u@db1:5432,db2:5433/x``,
    names several); ``[]`` for a URL of another scheme."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme.startswith("postgres"):
        return []
    return [host for host in _libpq_parts(rest)[2].split(",") if host]


def postgres_sqlalchemy_url(rest: str) -> str:
    """A libpq connection URI (``rest``: what follows ``postgresql://``) as the SQLAlchemy URL of
    the psycopg 3 driver. The query's parameters are libpq's and pass through unchanged (TLS:
    ``sslmode``, ``sslrootcert``, ``sslcert``, ``sslkey``; failover: ``target_session_attrs``). A
    libpq host list (``db1:5432,db2:5433``, libpq's "Connection URIs", PostgreSQL docs §34.1.1.2),
    which SQLAlchemy cannot parse, becomes its form for several hosts (``@/db?host=db1:5432&host=db2:5433``,
    SQLAlchemy's "Specifying multiple fallback hosts"); libpq then tries them in turn.
    """
    userinfo, at, hosts, tail = _libpq_parts(rest)
    if "," not in hosts:
        return "postgresql+psycopg://" + rest
    path, _, query = tail.partition("?")
    params = [f"host={host}" for host in hosts.split(",") if host]
    if query:
        params.append(query)
    return f"postgresql+psycopg://{userinfo}{at}{path or '/'}?{'&'.join(params)}"


@functools.cache
def get_settings() -> Settings:
    """The process-wide settings, read once from the environment."""
    return Settings()


def settings_table() -> str:
    """The README's settings table (Markdown), rendered from the fields' descriptions; a crawl's
    ``config`` may set the ones marked *per crawl*."""
    from boxcar.shared.crawlconfig import CRAWL_SETTINGS

    rows = ["| variable | default | |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        key = name.upper()
        default = field.get_default(call_default_factory=True, validated_data={})
        if isinstance(default, list):
            default = ",".join(default)
        if key in ("DATA_DIR",):
            default = "./data"
        if key == "MACHINE_NAME":
            default = "the hostname"
        shown = "" if default in (None, "") else f"`{default}`".replace("|", "\\|")
        note = " *(per crawl)*" if key in CRAWL_SETTINGS else ""
        rows.append(f"| `{key}` | {shown} | {field.description}{note} |")
    return "\n".join(rows)
