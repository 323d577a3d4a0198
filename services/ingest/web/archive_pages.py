"""Routes for archived content: ``/archive/{id}/{path}`` (both origins) and WARC replay (the
archive origin only). What is safe to send, and how, is ``archive.ArchiveFiles``'s to say."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from litestar import Controller, HttpMethod, MediaType, Request, Response, get, route
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import PathParameter
from litestar.response import File, Redirect, Template

from boxcar.ingest.library import SnapshotLibrary
from boxcar.ingest.web import replay
from boxcar.ingest.web.accounts import require_viewer, viewer_of
from boxcar.ingest.web.archive import ArchiveFiles, archive_origin

PathStr = Annotated[str, PathParameter()]
NOT_FOUND = "no such archived file"
#: What ReplayWeb.page's service worker answers for its base URL (``getIndexHtml`` in its sw.js).
REPLAY_INDEX = (
    '<!doctype html>\n<html>\n<head><script src="/replay/ui.js"></script></head>\n'
    "<body>\n<replay-app-main></replay-app-main>\n</body></html>\n"
)


class ArchiveFilesController(Controller):
    """Snapshot files, each kept inside its snapshot dir and sandboxed by the security mode."""

    include_in_schema = False

    @route(
        "/archive/{snapshot_id:str}/{path:path}", http_method=[HttpMethod.GET, HttpMethod.HEAD], guards=[require_viewer]
    )
    async def archived_file(
        self, request: Request, snapshot_id: PathStr, path: PathStr, archive_files: NamedDependency[ArchiveFiles]
    ) -> File | Redirect:
        """One archived file, or 404 for anything outside the snapshot's directory. ``HEAD`` gives the
        same headers without the body (uvicorn drops it), for link checkers and download managers."""
        state = request.app.state
        if state.settings.archive_security_mode == "separate-origin" and not state.is_archive_origin:
            origin = archive_origin(state.settings, str(request.url))
            if not origin:
                raise NotFoundException("ARCHIVE_SECURITY_MODE=separate-origin needs ARCHIVE_PORT or ARCHIVE_ORIGIN")
            return Redirect(f"{origin}{request.url.path}", status_code=307)
        viewer = await viewer_of(request)
        found = await anyio.to_thread.run_sync(archive_files.find, snapshot_id, path.lstrip("/"), viewer)
        if found is None:
            raise NotFoundException(NOT_FOUND)
        attachment = "attachment" in found.headers.get("Content-Disposition", "")
        headers = {k: v for k, v in found.headers.items() if k != "Content-Disposition"}
        # the type as described, never with Litestar's "; charset=utf-8" added to every text/*: an
        # archived page in another encoding names its own (<meta charset>) and must be read with it
        headers["content-type"] = found.media_type
        return File(
            path=found.path,
            filename=found.path.name,
            media_type=found.media_type,
            headers=headers,
            content_disposition_type="attachment" if attachment else "inline",
        )


class ReplayController(Controller):
    """ReplayWeb.page on the archive origin: its viewer page for a snapshot, and its two files."""

    include_in_schema = False

    @get("/replay-view/{snapshot_id:str}", guards=[require_viewer])
    async def viewer(
        self, request: Request, snapshot_id: PathStr, library: NamedDependency[SnapshotLibrary]
    ) -> Template:
        """The viewer of the snapshot's WARC, starting at its URL."""
        viewer = await viewer_of(request)
        detail = await anyio.to_thread.run_sync(lambda: library.detail(snapshot_id[:32], viewer=viewer))
        if detail is None or "replay" not in detail.links or not replay.available(request.app.state.settings):
            raise NotFoundException("nothing to replay")
        snap = detail.snapshot
        return Template(
            template_name="replay.html",
            context={
                "title": snap.title or snap.url,
                "url": snap.url,
                "source": f"/archive/{snap.id}/{detail.links['replay']}",
            },
        )

    @get("/replay/")
    async def index(self, request: Request) -> Response[str]:
        """The viewer's inner page, as its service worker would serve it. The embed frames
        ``/replay/?source=…``; on the first visit the just-registered worker may not control that
        frame yet, the embed reloads it at most three times and then shows what the server sent
        (replayweb.page issue #412). Answering with the same page as the worker makes that first
        load work instead of showing a 404 until the user reloads."""
        if not replay.available(request.app.state.settings):
            raise NotFoundException(NOT_FOUND)
        return Response(REPLAY_INDEX, media_type=MediaType.HTML, headers={"X-Content-Type-Options": "nosniff"})

    @get("/replay/{name:str}")
    async def asset(self, request: Request, name: PathStr) -> File:
        """``ui.js`` or ``sw.js`` of the pinned ``replaywebpage`` package."""
        settings = request.app.state.settings
        if name not in replay.ASSETS or not replay.available(settings):
            raise NotFoundException(NOT_FOUND)
        return File(
            path=replay.assets_dir(settings) / name,
            media_type="application/javascript",
            content_disposition_type="inline",
            headers={"Service-Worker-Allowed": "/replay/", "X-Content-Type-Options": "nosniff"},
        )
