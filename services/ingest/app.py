"""The ingest service: a Litestar app (OpenAPI at ``/schema``)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
from contextlib import asynccontextmanager
from pathlib import Path

import anyio.to_thread
from litestar import Litestar, Request, Response, get
from litestar.config.cors import CORSConfig
from litestar.config.csrf import CSRFConfig
from litestar.datastructures import MutableScopeHeaders, ResponseHeader, State
from litestar.di import Provide
from litestar.exceptions import HTTPException, ServiceUnavailableException
from litestar.exceptions.http_exceptions import RequestEntityTooLarge
from litestar.openapi import OpenAPIConfig
from litestar.plugins.htmx import HTMXPlugin
from litestar.plugins.jinja import JinjaTemplateEngine
from litestar.static_files import create_static_files_router
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR
from litestar.template.config import TemplateConfig
from sqlalchemy import text
from sqlalchemy.exc import InterfaceError, OperationalError, SQLAlchemyError

from boxcar.ingest import routes
from boxcar.ingest.access import Viewer
from boxcar.ingest.api.archivebox import ArchiveBoxController
from boxcar.ingest.api.auth import API_KEY_HEADER, ARCHIVEBOX_KEY_HEADER, ensure_local_token, require_admin_token
from boxcar.ingest.api.controllers import (
    CrawlControlController,
    CrawlController,
    FeedController,
    SearchController,
    SnapshotController,
    WebhookController,
)
from boxcar.ingest.api.exports import ExportController
from boxcar.ingest.api.imports import ImportController
from boxcar.ingest.api.openapi import READS, SECURITY, components, document
from boxcar.ingest.api.schedules import ScheduleController
from boxcar.ingest.feeds import FeedService, UrlScheduleService
from boxcar.ingest.library import SnapshotLibrary
from boxcar.ingest.metrics import HTTP as HTTP_METRICS
from boxcar.ingest.metrics import metrics, serve_port
from boxcar.ingest.quotas import QuotaExceeded
from boxcar.ingest.services import CrawlService
from boxcar.ingest.signals import Signals
from boxcar.ingest.status import StackStatus, stack_status
from boxcar.ingest.web.accounts import LoginRequired, viewer_of
from boxcar.ingest.web.archive import ArchiveFiles
from boxcar.ingest.web.archive_pages import ArchiveFilesController, ReplayController
from boxcar.ingest.web.cross_origin import CrossOriginProtection
from boxcar.ingest.web.hooks import WebhookPages
from boxcar.ingest.web.pages import AccountPages, AddPage, CrawlPages, FeedPages, SnapshotPages, login_redirect
from boxcar.ingest.web.people import AdminPages, SharePages
from boxcar.ingest.web.pwa import AppShell
from boxcar.ingest.web.sso import SSOPages
from boxcar.ingest.webhooks import WebhookService
from boxcar.shared import bus, secrets, telemetry
from boxcar.shared.archive_store import ArchiveStore, StoreUnavailable
from boxcar.shared.db import Database
from boxcar.shared.families import load_families
from boxcar.shared.plugins import get_catalog
from boxcar.shared.settings import Settings, get_settings

log = logging.getLogger("boxcar.ingest")
HERE = Path(__file__).resolve().parent


@get(routes.HEALTH, operation_id="Health", tags=["health"], raises=[ServiceUnavailableException])
async def health(state: State) -> Response[dict[str, bool]]:
    """Readiness: ``db`` whether the database answers (503 when it does not: the API cannot serve),
    ``nats`` whether wake-ups and control requests reach the runners."""
    nc = getattr(state, "nats", None)
    db_ok = await anyio.to_thread.run_sync(_database_answers, state.db)
    body = {"ok": db_ok, "db": db_ok, "nats": bool(nc is not None and nc.is_connected)}
    return Response(body, status_code=200 if db_ok else 503)


def _database_answers(db: Database) -> bool:
    try:
        with db.read() as s:
            s.execute(text("SELECT 1"))
        return True
    except SQLAlchemyError:
        return False


def database_unavailable(request: Request, exc: OperationalError) -> Response:
    """A database that does not answer is the server's trouble for now: 503, logged, nothing lost."""
    log.error("%s %s: database unavailable: %s", request.method, request.url.path, str(exc).splitlines()[0][:300])
    return Response(
        {"status_code": 503, "detail": "the database is unavailable; try again shortly"},
        status_code=503,
        headers={"Retry-After": "5"},
    )


def store_unavailable(request: Request, exc: StoreUnavailable) -> Response:
    """The archive's store (``STORE_URL``) does not answer: 503, logged; the files are not lost."""
    log.error("%s %s: %s", request.method, request.url.path, exc)
    return Response(
        {"status_code": 503, "detail": "the archive's file store is unavailable; try again shortly"},
        status_code=503,
        headers={"Retry-After": "5"},
    )


async def provide_viewer(request: Request) -> Viewer:
    """The ``viewer`` dependency: who the request acts for (``accounts.viewer_of``)."""
    return await viewer_of(request)


def over_quota(request: Request, exc: QuotaExceeded) -> Response:
    """A crawl over its owner's limits: 429, saying which limit (nothing was stored)."""
    return Response({"status_code": 429, "detail": str(exc)}, status_code=429)


def internal_error(request: Request, exc: Exception) -> Response:
    """Any other unexpected error: logged with its traceback, a plain 500 for the client."""
    if isinstance(exc, HTTPException):
        return Response(
            {"status_code": exc.status_code, "detail": exc.detail, **({"extra": exc.extra} if exc.extra else {})},
            status_code=exc.status_code,
            headers=exc.headers,
        )
    log.exception("%s %s failed", request.method, request.url.path)
    return Response({"status_code": 500, "detail": "Internal Server Error"}, status_code=500)


@get(
    routes.STATUS,
    operation_id="StackStatus",
    tags=["status"],
    guards=[require_admin_token],
    security=SECURITY,
    raises=READS,
)
async def status(state: State) -> StackStatus:
    """The stack at a glance (an admin's token): crawls and snapshots by status, archive size and
    free disk, per executor family the tasks waiting and whether an executor is there to take
    them (``stalled_families``: pending work, no executor), and each user's usage and limits."""
    return await stack_status(state.db, state.settings, state.families, getattr(state, "nats", None))


def create_app(settings: Settings | None = None, db: Database | None = None) -> Litestar:
    """Build the ingest app.

    Args:
        settings: defaults to the environment's.
        db: defaults to a Database on ``settings.sqlalchemy_url`` (schema upgraded at start).
    """
    settings = settings or get_settings()
    own_db = db is None
    db = db or Database.for_settings(settings)
    families = load_families()
    service = CrawlService(db, settings, get_catalog(), families)
    feeds = FeedService(service)
    url_schedules = UrlScheduleService(service)
    signals = Signals()
    library = SnapshotLibrary(
        db, settings.data_dir, settings.public_reads, settings.archive_user, ArchiveStore.from_settings(settings)
    )
    archive_files = ArchiveFiles(db, settings, library.store)
    webhooks = WebhookService(db, settings)

    async def connect_nats(app: Litestar) -> None:
        # In the background: the API serves (and runners poll the database) while NATS is away.
        app.state.nats = signals.nats = await bus.connect(settings.nats_servers, "ingest")
        log.info("connected to NATS at %s", settings.nats_url)

    @asynccontextmanager
    async def lifespan(app: Litestar):
        if own_db:
            await anyio.to_thread.run_sync(db.upgrade_in_child)
        if settings.local_token_file:  # the embedded stack's CLI finds it once the API answers
            await anyio.to_thread.run_sync(
                lambda: ensure_local_token(db, settings.local_token_file, owner=settings.archive_user)
            )
        app.state.nats = None
        connecting = asyncio.create_task(connect_nats(app))
        exporter = serve_port(app, settings)  # METRICS_PORT: /metrics without a token, there
        try:
            yield
        finally:
            if exporter is not None:
                exporter.stop()
            connecting.cancel()
            if app.state.nats is not None:
                await app.state.nats.close()
            telemetry.flush_tracing()  # uvicorn re-raises SIGTERM after shutdown: flush while we can
            if own_db:
                db.dispose()

    def too_large(_: Request, exc: RequestEntityTooLarge) -> Response:
        limit = settings.max_request_body / (1024 * 1024)
        return Response(
            {"status_code": 413, "detail": f"request body larger than the {limit:g} MiB limit (MAX_REQUEST_BODY)"},
            status_code=413,
        )

    app = Litestar(
        route_handlers=[
            CrawlController,
            CrawlControlController,
            SnapshotController,
            SearchController,
            ImportController,
            FeedController,
            WebhookController,
            ArchiveBoxController,
            ScheduleController,
            ExportController,
            health,
            status,
            metrics,
            SnapshotPages,
            CrawlPages,
            AddPage,
            FeedPages,
            AccountPages,
            SharePages,
            WebhookPages,
            AdminPages,
            SSOPages,
            ArchiveFilesController,
            AppShell,
            create_static_files_router(
                path=routes.STATIC, directories=[HERE / "web" / "static"], include_in_schema=False
            ),
        ],
        exception_handlers={
            RequestEntityTooLarge: too_large,
            OperationalError: database_unavailable,
            InterfaceError: database_unavailable,
            StoreUnavailable: store_unavailable,
            LoginRequired: login_redirect,
            QuotaExceeded: over_quota,
            HTTP_500_INTERNAL_SERVER_ERROR: internal_error,
        },
        state=State(
            {
                "db": db,
                "public_reads": settings.public_reads,
                "settings": settings,
                "families": families,
                "is_archive_origin": False,
            }
        ),
        dependencies={
            "crawl_service": Provide(lambda: service, sync_to_thread=False),
            "feed_service": Provide(lambda: feeds, sync_to_thread=False),
            "webhook_service": Provide(lambda: webhooks, sync_to_thread=False),
            "schedule_service": Provide(lambda: url_schedules, sync_to_thread=False),
            "signals": Provide(lambda: signals, sync_to_thread=False),
            "library": Provide(lambda: library, sync_to_thread=False),
            "archive_files": Provide(lambda: archive_files, sync_to_thread=False),
            "viewer": Provide(provide_viewer),
        },
        template_config=TEMPLATES,
        plugins=[HTMXPlugin()],
        # no page of Boxcar's may be framed (an archived page can't overlay its buttons: clickjacking)
        response_headers=[ResponseHeader(name="X-Frame-Options", value="DENY")],
        csrf_config=CSRFConfig(
            secret=csrf_secret(settings),
            cookie_httponly=True,  # the token reaches pages in their HTML, never through document.cookie
            cookie_samesite="lax",
            exclude=routes.CSRF_EXEMPT,  # API calls carry a token, not a cookie
        ),
        lifespan=[lifespan],
        # the service set logging up (boxcar.shared.service.setup_logging: LOG_LEVEL, bounded
        # lines); Litestar's default config would replace the root logger's level and handler
        logging_config=None,
        openapi_config=OpenAPIConfig(
            title="Boxcar",
            version="0.1.0",
            path=routes.SCHEMA,
            description="Self-hosted web archiver: queue URLs, follow crawls.",
            components=components(),
        ),
        cors_config=EXTENSION_CORS,
        # a form post from another origin is refused whatever its cookies (web/cross_origin.py)
        middleware=[HTTP_METRICS.middleware, CrossOriginProtection(settings.public_url)],
        request_max_body_size=settings.max_request_body,
        before_send=[allow_every_method],
    )
    document(app)
    return app


async def allow_every_method(message, scope) -> None:
    """``Allow`` on an automatic ``OPTIONS`` answer lists every method of the path. Litestar
    rebuilds a path's route as handlers are added to it, and the ``OPTIONS`` handler made for the
    first build keeps answering that build's methods (``OPTIONS, POST`` on ``/api/v1/feeds``,
    which has ``GET`` too)."""
    if message["type"] != "http.response.start" or scope.get("method") != "OPTIONS":
        return
    handler = scope.get("route_handler")
    methods: set[str] = set()
    for path in getattr(handler, "paths", ()):
        methods |= set(scope["app"].route_handler_method_map.get(path, {}))
    if methods:
        MutableScopeHeaders.from_message(message)["Allow"] = ", ".join(sorted(methods))


#: browser extensions (Boxcar's, ArchiveBox's) call the API from their own origin with a token in a
#: header, never a cookie: those origins may read API answers, no web page's origin may
EXTENSION_CORS = CORSConfig(
    allow_origins=[],
    allow_origin_regex=r"(chrome-extension|moz-extension|safari-web-extension)://[A-Za-z0-9._-]{1,64}",
    allow_methods=["GET", "POST", "DELETE", "PATCH"],
    allow_headers=["authorization", "content-type", API_KEY_HEADER, ARCHIVEBOX_KEY_HEADER],
    allow_credentials=False,
)

TEMPLATES = TemplateConfig(directory=HERE / "web" / "templates", engine=JinjaTemplateEngine)


def csrf_secret(settings: Settings) -> str:
    """The key signing CSRF tokens, derived from ``SECRET_KEY`` (so every ingest replica agrees)."""
    material = secrets.key_material(settings.data_dir, settings.secret_key)
    return hashlib.sha256(b"boxcar csrf\0" + material.encode()).hexdigest()


def create_archive_app(settings: Settings, db: Database) -> Litestar:
    """The archive origin (``ARCHIVE_PORT``): archived files and WARC replay only, no UI or API,
    so archived scripts running there never run with Boxcar's origin. Logins come from the main
    origin's session cookie (same host, another port)."""
    library = SnapshotLibrary(
        db, settings.data_dir, settings.public_reads, settings.archive_user, ArchiveStore.from_settings(settings)
    )
    archive_files = ArchiveFiles(db, settings, library.store)
    return Litestar(
        route_handlers=[ArchiveFilesController, ReplayController],
        logging_config=None,  # as create_app's
        exception_handlers={
            OperationalError: database_unavailable,
            InterfaceError: database_unavailable,
            StoreUnavailable: store_unavailable,
            HTTP_500_INTERNAL_SERVER_ERROR: internal_error,
        },
        state=State({"db": db, "public_reads": settings.public_reads, "settings": settings, "is_archive_origin": True}),
        dependencies={
            "library": Provide(lambda: library, sync_to_thread=False),
            "archive_files": Provide(lambda: archive_files, sync_to_thread=False),
            "viewer": Provide(provide_viewer),
        },
        template_config=TEMPLATES,
        openapi_config=None,
    )
