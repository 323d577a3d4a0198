"""ArchiveBox-compatible endpoints, for the browser extension and scripts people already have.

The shapes follow ArchiveBox 0.9's ``archivebox/api/v1_cli.py`` (``AddCommandSchema``,
``RemoveCommandSchema``, ``CLICommandResponseSchema``), ``v1_auth.py`` (``check_api_token``) and
``auth.py`` (the ``X-ArchiveBox-API-Key`` header, ``Authorization: Bearer``), and what ArchiveBox's
browser extension sends (``src/lib/archivebox.ts`` of ArchiveBox/archivebox-browser-extension:
``POST /api/v1/cli/add`` with ``urls``, ``tag``, ``depth``, ``update``, ``update_all``; ``POST
/api/v1/auth/check_api_token`` with ``token``; ``GET /api/`` to test the server URL; ``POST
/api/v1/cli/remove`` with ``filter_patterns``, ``filter_type: exact``, ``delete``).

They are mapped onto Boxcar's crawls with Boxcar's tokens:

- ``cli/add`` is an import of the URLs (``urls`` as a list, or a newline-separated string; text
  around a URL is ignored as ArchiveBox's ``parser=auto`` does, and one bad entry never drops the
  others), tagged with ``tag`` (comma-separated, ArchiveBox's spelling) and ``tags`` (a list or a
  comma-separated string), ``depth`` link hops, ``update=true`` archiving URLs again that were
  archived before (ArchiveBox: ``update`` defaults to ``not ONLY_NEW``), ``plugins`` (or 0.7's
  ``extractors``) a comma-separated plugin selection.
- ``cli/remove`` deletes the snapshots of exact URLs (``filter_type=exact`` only).
- What Boxcar cannot do is refused with a 422 naming the field, never silently dropped:
  ``index_only``, and ``filter_type`` other than ``exact``. ``update_all``, ``overwrite``, ``init``
  and ``parser`` are accepted and ignored (``overwrite`` as ``update``).

A token goes in a header (``X-ArchiveBox-API-Key``, ``X-Boxcar-Api-Key`` or ``Authorization:
Bearer``) or in the body's ``api_key`` field; ArchiveBox's ``?api_key=`` query parameter is
refused with a 401 that says why (a URL ends up in access logs and browser history).
"""

from __future__ import annotations

from typing import Annotated, Any

import anyio.to_thread
import msgspec
from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException, PermissionDeniedException, ValidationException

from boxcar.ingest import routes
from boxcar.ingest.access import Viewer
from boxcar.ingest.api.auth import token_from_headers, token_viewer
from boxcar.ingest.api.openapi import Unprocessable
from boxcar.ingest.library import SnapshotBusy, SnapshotLibrary
from boxcar.ingest.services import CrawlService, InputError
from boxcar.ingest.signals import Signals
from boxcar.shared.crawlconfig import MAX_DEPTH
from boxcar.shared.importers import split_tags

#: the endpoints of ArchiveBox's API that answer here (the README's table lists the rest)
COMPATIBLE = (
    routes.ARCHIVEBOX_API_ROOT,
    routes.ARCHIVEBOX_CHECK_TOKEN,
    routes.ARCHIVEBOX_ADD,
    routes.ARCHIVEBOX_REMOVE,
)
QUERY_TOKEN_REFUSED = (
    "send the API token in the X-ArchiveBox-API-Key header or the body's api_key field, not in the URL "
    "(URLs end up in access logs and browser history)"
)


class ArchiveBoxAdd(msgspec.Struct):
    """``POST /api/v1/cli/add`` as ArchiveBox 0.9's ``AddCommandSchema`` (unknown fields are
    ignored, as pydantic does: ArchiveBox's extension also sends ``formattedTags``)."""

    urls: list[str] | str
    tag: str = ""
    tags: list[str] | str = []
    depth: Annotated[int, msgspec.Meta(ge=0, le=MAX_DEPTH)] = 0
    update: bool | None = None
    update_all: bool = False
    overwrite: bool = False
    index_only: bool = False
    init: bool = False
    parser: str = "auto"
    plugins: str = ""
    extractors: str = ""
    api_key: str = ""


class ArchiveBoxRemove(msgspec.Struct):
    """``POST /api/v1/cli/remove`` as ArchiveBox 0.9's ``RemoveCommandSchema`` (``exact`` only)."""

    filter_patterns: list[str] = []
    filter_type: str = "exact"
    delete: bool = True
    after: float | None = 0
    before: float | None = None
    api_key: str = ""


class ArchiveBoxTokenCheck(msgspec.Struct):
    token: str = ""


class ArchiveBoxAddResult(msgspec.Struct):
    """ArchiveBox 0.9's ``result`` of ``cli/add``, plus what Boxcar knows at once. Boxcar's
    crawl-runner makes the snapshots after the crawl is queued, so ``snapshot_ids`` is empty:
    follow ``GET /api/v1/crawls/{crawl_id}``."""

    crawl_id: str
    num_snapshots: int
    snapshot_ids: list[str]
    queued_urls: list[str]
    skipped_existing: int = 0
    duplicates: int = 0
    rejected: list[str] = []


class ArchiveBoxResponse(msgspec.Struct):
    """ArchiveBox's ``CLICommandResponseSchema``."""

    success: bool
    errors: list[str]
    result: Any
    result_format: str = "json"
    stdout: str = ""
    stderr: str = ""


def _decode[T](raw: bytes, struct: type[T], path: str) -> T:
    try:
        return msgspec.json.decode(raw or b"{}", type=struct, strict=False)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValidationException(detail=f"Validation failed for POST {path}: {exc}") from None


async def _require_write(request: Request, body_key: str) -> Viewer:
    """Who a valid ``write`` token from a header or the body's ``api_key`` acts for: else 401
    (none, unknown, or one in the query string) or 403 (read-only)."""
    if "api_key" in request.query_params:
        raise NotAuthorizedException(QUERY_TOKEN_REFUSED)
    token = token_from_headers(request.headers) or body_key
    state = request.app.state
    found = await anyio.to_thread.run_sync(token_viewer, state.db, token, state.settings.archive_user)
    if found is None:
        raise NotAuthorizedException("missing or invalid API token", headers={"WWW-Authenticate": "Bearer"})
    if found[0] != "write":
        raise PermissionDeniedException("this API token is read-only")
    return found[1]


def urls_text(urls: list[str] | str) -> str:
    """The ``urls`` field as one text to import: a list's items one per line, a string as it is."""
    return "\n".join(urls) if isinstance(urls, list) else urls


def tags_of(body: ArchiveBoxAdd) -> list[str]:
    """``tag`` (ArchiveBox: comma-separated) and ``tags`` (a list or a comma-separated string)."""
    more = body.tags if isinstance(body.tags, list) else split_tags(body.tags, "comma")
    return [*split_tags(body.tag, "comma"), *more]


class ArchiveBoxController(Controller):
    """ArchiveBox's ``/api/v1/cli/*`` and ``/api/v1/auth/check_api_token`` (module docstring)."""

    include_in_schema = False

    @get(routes.ARCHIVEBOX_API_ROOT, sync_to_thread=False)
    def api_root(self) -> dict[str, Any]:
        """What ArchiveBox's extension fetches to test a server URL: any 200."""
        return {
            "name": "Boxcar",
            "api": routes.API,
            "docs": f"{routes.SCHEMA}/swagger",
            "archivebox_compatible": list(COMPATIBLE),
        }

    @post(routes.ARCHIVEBOX_CHECK_TOKEN, status_code=200)
    async def check_api_token(self, request: Request) -> dict[str, Any]:
        """``{"token": …}`` → ``{"success": bool, "user_id": str | None}`` (ArchiveBox answers 200
        either way); ``user_id`` is the name of the user the token acts for."""
        body = _decode(await request.body(), ArchiveBoxTokenCheck, request.url.path)
        state = request.app.state
        found = await anyio.to_thread.run_sync(token_viewer, state.db, body.token.strip(), state.settings.archive_user)
        return {
            "success": found is not None,
            "user_id": found[1].username if found else None,
            "scope": found[0] if found else None,
        }

    @post(routes.ARCHIVEBOX_ADD, status_code=200)
    async def add(
        self,
        request: Request,
        crawl_service: NamedDependency[CrawlService],
        signals: NamedDependency[Signals],
    ) -> ArchiveBoxResponse:
        """Queue the URLs as one crawl (module docstring); 401/403 as every write, 422 naming the
        field for what cannot be used (no URL at all, an unknown plugin, ``index_only``)."""
        body = _decode(await request.body(), ArchiveBoxAdd, request.url.path)
        viewer = await _require_write(request, body.api_key)
        if body.index_only:
            raise Unprocessable(
                detail="index_only: Boxcar does not add URLs without archiving them", extra={"field": "index_only"}
            )
        text = urls_text(body.urls)
        plugins = split_tags(body.plugins or body.extractors, "comma")
        update = body.update or body.overwrite
        try:
            outcome = await anyio.to_thread.run_sync(
                lambda: crawl_service.create_import(
                    [(text.encode(), "urls.txt")],
                    format=None,
                    tags=tags_of(body),
                    max_depth=body.depth,
                    plugins=plugins,
                    only_new=False if update else None,
                    owner=viewer.username,
                )
            )
        except InputError as exc:
            field = "urls" if exc.field == "file" else exc.field  # the URLs are imported as a text file
            raise Unprocessable(detail=f"{field}: {str(exc).split(': ', 1)[1]}", extra={"field": field}) from None
        await signals.crawl_queued(outcome.crawl.id)
        seeds = outcome.admission.seeds
        return ArchiveBoxResponse(
            success=True,
            errors=[f"{r.where}: {r.reason}" for r in outcome.rejected],
            result=ArchiveBoxAddResult(
                crawl_id=outcome.crawl.id,
                num_snapshots=len(seeds),
                snapshot_ids=[],
                queued_urls=[s.url for s in seeds],
                skipped_existing=outcome.admission.skipped_existing,
                duplicates=outcome.admission.duplicates,
                rejected=[r.value for r in outcome.rejected],
            ),
            stdout=f"queued {len(seeds)} URL(s) as crawl {outcome.crawl.id}",
        )

    @post(routes.ARCHIVEBOX_REMOVE, status_code=200)
    async def remove(self, request: Request, library: NamedDependency[SnapshotLibrary]) -> ArchiveBoxResponse:
        """Delete the snapshots of each exact URL (or snapshot id) in ``filter_patterns``; a
        snapshot being captured is reported in ``errors`` and kept."""
        body = _decode(await request.body(), ArchiveBoxRemove, request.url.path)
        viewer = await _require_write(request, body.api_key)
        if body.filter_type != "exact":
            raise Unprocessable(
                detail=f"filter_type {body.filter_type[:20]!r}: Boxcar removes exact URLs only",
                extra={"field": "filter_type"},
            )
        if not body.delete:
            raise Unprocessable(detail="delete=false: Boxcar has no index to remove from without deleting")
        removed: list[str] = []
        errors: list[str] = []

        def run() -> None:
            for pattern in body.filter_patterns[:1000]:
                for snapshot_id in library.find(pattern, viewer=viewer):
                    try:
                        if library.delete(snapshot_id, viewer=viewer):
                            removed.append(snapshot_id)
                    except SnapshotBusy as exc:
                        errors.append(str(exc))

        await anyio.to_thread.run_sync(run)
        return ArchiveBoxResponse(success=not errors, errors=errors, result={"removed": len(removed), "ids": removed})
