"""``GET /api/v1/exports/{format}``: a selection of snapshots as WACZ, JSON Lines, JSON, CSV,
Netscape bookmarks, RSS or Atom (``boxcar.ingest.exports``). The UI's ``/export/{format}``
answers with the same ``export_response``.

Every format needs a read token, except the feeds: a feed reader sends no headers, so ``rss`` and
``atom`` also take a ``feed``-scoped token as ``?key=`` (that scope reads nothing else; revoke it on
``/settings``). Text formats stream; a WACZ is packaged into a temporary file first (py-wacz
writes a zip) and streamed from there, then deleted.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import anyio.to_thread
from litestar import Controller, Request, Response, get
from litestar.background_tasks import BackgroundTask
from litestar.di import NamedDependency
from litestar.exceptions import NotAuthorizedException, NotFoundException, ValidationException
from litestar.params import PathParameter, QueryParameter
from litestar.response import File, Stream

from boxcar.ingest import exports, routes
from boxcar.ingest.access import Viewer
from boxcar.ingest.api.auth import request_viewer, require_read_access, token_viewer
from boxcar.ingest.api.openapi import READS, SECURITY, Unprocessable
from boxcar.ingest.library import SnapshotLibrary

ID = r"^[0-9a-f]{32}$"
#: the query parameters an export takes (anything else is a 400, never ignored)
EXPORT_PARAMETERS = frozenset({"snapshot_id", "crawl_id", "tag", "q", "key"})
Format = Annotated[str, PathParameter(description=f"one of {', '.join(exports.FORMATS)}")]


def selection(snapshot_id: str | None, crawl_id: str | None, tag: str | None, q: str | None) -> exports.Selection:
    return exports.Selection(snapshot_id=snapshot_id or "", crawl_id=crawl_id or "", tag=tag or "", q=q or "")


async def export_response(
    request: Request,
    library: SnapshotLibrary,
    format: str,
    chosen: exports.Selection,
    base_url: str,
    viewer: Viewer,
) -> Response[Any]:
    """The export of what ``viewer`` may read of ``chosen`` in ``format``, as a download (a feed:
    inline).

    Raises:
        NotFoundException: an unknown format.
        Unprocessable: nothing selected, or no WARC to package (WACZ).
    """
    if format not in exports.FORMATS:
        raise NotFoundException(f"no export format {format[:20]!r}; one of {', '.join(exports.FORMATS)}")
    db = request.app.state.db
    media_type, extension = exports.FORMATS[format]
    limit = exports.FEED_SIZE if format in ("rss", "atom") else exports.MAX_EXPORT
    ids = await anyio.to_thread.run_sync(lambda: exports.selected_ids(db, library, chosen, viewer, limit))
    if not ids and format not in ("rss", "atom"):
        raise Unprocessable(detail=f"nothing to export: no snapshot matches ({chosen.describe()})")
    name = f"boxcar-{'-'.join(p for p in (chosen.tag, chosen.crawl_id, chosen.snapshot_id) if p) or 'export'}"
    download = {"Content-Disposition": f'attachment; filename="{name[:80]}.{extension}"'}
    title = f"Boxcar: {chosen.describe()}"
    if format == "wacz":
        handle, raw = tempfile.mkstemp(prefix="boxcar-export-", suffix=".wacz")
        os.close(handle)
        path = Path(raw)
        try:
            await anyio.to_thread.run_sync(
                lambda: exports.write_wacz(db, library.store, library.data_dir, ids, path, title=title)
            )
        except exports.ExportError as exc:
            path.unlink(missing_ok=True)
            raise Unprocessable(detail=str(exc)) from None
        except BaseException:  # the store did not answer (a 503), or anything else: no file left behind
            path.unlink(missing_ok=True)
            raise
        return File(path, filename=f"{name[:80]}.wacz", media_type=media_type, background=BackgroundTask(path.unlink))
    rows = exports.records(library, ids, viewer)
    if format in ("rss", "atom"):
        self_url = str(request.url.with_replacements(query=""))  # never the key: it would be in the feed
        body = await anyio.to_thread.run_sync(
            lambda: exports.feed(rows, format, title=title, base_url=base_url, self_url=self_url)
        )
        return Response(body, media_type=media_type)
    writer = {"jsonl": exports.jsonl, "json": exports.json_array, "csv": exports.csv_rows, "html": exports.netscape}
    return Stream(writer[format](rows), media_type=media_type, headers=download)


def base_url_of(request: Request) -> str:
    return str(request.base_url).rstrip("/")


class ExportController(Controller):
    path = routes.EXPORTS
    tags = ["exports"]

    @get("/{format:str}", operation_id="Export", security=SECURITY, raises=[*READS, Unprocessable, NotFoundException])
    async def export(
        self,
        request: Request,
        format: Format,
        library: NamedDependency[SnapshotLibrary],
        snapshot_id: Annotated[str | None, QueryParameter(pattern=ID, description="one snapshot")] = None,
        crawl_id: Annotated[str | None, QueryParameter(pattern=ID, description="a crawl's snapshots")] = None,
        tag: Annotated[str | None, QueryParameter(max_length=100, description="a tag's snapshots")] = None,
        q: Annotated[str | None, QueryParameter(max_length=1000, description="a search's snapshots")] = None,
        key: Annotated[
            str | None, QueryParameter(max_length=256, description="a feed token (rss and atom only)")
        ] = None,
    ) -> Response[Any]:
        """Export snapshots: ``wacz`` (WACZ 1.1.1 with pages and text), ``jsonl``, ``json``,
        ``csv``, ``html`` (Netscape bookmarks), ``rss``, ``atom`` (the newest 50).

        Returns:
            The file (text formats stream); 422 when nothing matches or, for WACZ, no snapshot
            has a WARC.
        """
        unknown = set(request.query_params) - EXPORT_PARAMETERS
        if unknown:  # a misspelt selection must not export the whole archive
            raise ValidationException(
                f"unknown parameter(s) {', '.join(sorted(unknown))[:200]}: the selection is "
                "snapshot_id, crawl_id, tag or q (and key for rss/atom)"
            )
        if key and format in ("rss", "atom"):
            state = request.app.state
            found = await anyio.to_thread.run_sync(token_viewer, state.db, key, state.settings.archive_user)
            if found is None or found[0] != "feed":
                raise NotAuthorizedException("unknown or revoked feed key")
            viewer = found[1]
        else:
            await require_read_access(request, None)  # type: ignore[arg-type]
            viewer = request_viewer(request)
        return await export_response(
            request, library, format, selection(snapshot_id, crawl_id, tag, q), base_url_of(request), viewer
        )
