"""The web UI's pages: server-rendered Jinja2 templates, htmx for the parts that update in place.

Controllers stay thin: they read the form or query, call a service (``SnapshotLibrary``,
``CrawlService``, ``FeedService``, ``Signals``, ``accounts``) and render a template or redirect.
Every form carries Litestar's CSRF token; pages that change the archive need a login
(``require_login``); pages that only show it need a login or ``PUBLIC_READS=true``
(``require_viewer``). A crawl's status is never changed here: pause, resume and cancel are
requests to the crawl-runner (``Signals.control``), "archive again" is a new crawl.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Annotated, Any
from urllib.parse import urlencode, urlsplit

import anyio.to_thread
from litestar import Controller, Request, Response, get, post
from litestar.datastructures import UploadFile
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException
from litestar.params import PathParameter, QueryParameter
from litestar.response import Redirect, Template

from boxcar.ingest import access, routes
from boxcar.ingest.api.auth import SCOPES, create_token, list_tokens, revoke_token
from boxcar.ingest.api.exports import base_url_of, export_response, selection
from boxcar.ingest.api.schemas import CrawlCreate, FeedCreate, SeedIn
from boxcar.ingest.feeds import FeedService
from boxcar.ingest.library import SnapshotBusy, SnapshotFilter, SnapshotLibrary
from boxcar.ingest.quotas import QuotaExceeded
from boxcar.ingest.services import CrawlService, InputError
from boxcar.ingest.signals import BusUnavailable, Signals
from boxcar.ingest.web import accounts, replay
from boxcar.ingest.web.accounts import SESSION_COOKIE, require_login, require_viewer, viewer_of
from boxcar.ingest.web.archive import archive_origin
from boxcar.shared import spanlog, urls
from boxcar.shared.crawlconfig import parse_depth
from boxcar.shared.db.models import LIST_VIEWS
from boxcar.shared.importers import extract_urls
from boxcar.shared.messages import CrawlControl, ScheduleControl, clean_text

ID = "{snapshot_id:str}"
PathStr = Annotated[str, PathParameter()]
QueryStr = Annotated[str, QueryParameter()]


def _archive_base(request: Request) -> str:
    """Prefix of ``/archive/…`` links: the archive origin in ``separate-origin`` mode, else ""."""
    settings = request.app.state.settings
    if settings.archive_security_mode == "separate-origin":
        return archive_origin(settings, str(request.url))
    return ""


async def render(
    request: Request, name: str, status_code: int = 200, headers: dict[str, str] | None = None, **context: Any
) -> Template:
    """A page with what every template uses: the viewer, the archive link prefix, the query."""
    return Template(
        template_name=name,
        context={
            "viewer": await viewer_of(request),
            "archive_base": _archive_base(request),
            "q": context.pop("q", ""),
            **context,
        },
        status_code=status_code,
        headers=headers,
    )


async def settings_page(request: Request, status_code: int = 200, **context: Any) -> Template:
    """``/settings``: the viewer's API tokens, shares and webhooks (with their last deliveries),
    and ``context`` (a token or webhook secret just made, shown once; a flash)."""
    from boxcar.ingest.webhooks import WebhookService

    viewer = await viewer_of(request)
    state = request.app.state
    tokens = await anyio.to_thread.run_sync(list_tokens, state.db, viewer)
    shares = await anyio.to_thread.run_sync(access.list_shares, state.db, viewer)
    hooks = await anyio.to_thread.run_sync(WebhookService(state.db, state.settings).overview, viewer)
    context.setdefault("new_token", "")
    return await render(
        request,
        "settings.html",
        status_code=status_code,
        tokens=tokens,
        shares=shares,
        webhooks=hooks,
        **save_from_anywhere(request),
        **context,
    )


def save_from_anywhere(request: Request) -> dict[str, str]:
    """``/settings``' bookmarklet and this server's origin, as the browser reached it. The
    bookmarklet opens ``/add?url=…&title=…`` in a new tab (the current one if pop-ups are blocked);
    ``/add`` needs a session, so it works where the person is logged in."""
    origin = urls.origin(str(request.url))
    add = json.dumps(origin + routes.ADD + "?url=")
    code = (
        f"(()=>{{const u={add}+encodeURIComponent(location.href)+'&title='+encodeURIComponent(document.title);"
        "if(!window.open(u,'_blank'))location.href=u})()"
    )
    return {"bookmarklet": "javascript:" + code, "origin": origin}


def shared_urls(url: str, text: str, title: str) -> list[str]:
    """The http(s) URLs a share or bookmarklet sent: ``url`` if it is one, else those found in
    ``text``, else in ``title`` (apps differ in where they put the link); duplicates dropped."""
    found = [u for u, _ in extract_urls(url)] if url else []
    if not found:
        found = [u for u, _ in extract_urls(text)] or [u for u, _ in extract_urls(title)]
    return list(dict.fromkeys(found))


def _split(value: str) -> list[str]:
    return [v.strip() for v in value.replace("\n", ",").split(",") if v.strip()]


def _date(value: str | None) -> datetime | None:
    try:
        return datetime.fromisoformat(value).replace(tzinfo=UTC) if value else None
    except ValueError:
        return None


#: the most snapshots one bulk action takes (a page of the list is 50)
BULK_LIMIT = 1000


def _with_flash(target: str, message: str) -> str:
    """``target`` with a ``flash`` message for the page to show once."""
    return target + ("&" if "?" in target else "?") + urlencode({"flash": message})


def _is_htmx(request: Request) -> bool:
    return request.headers.get("hx-request") == "true"


def _safe_next(target: str) -> str:
    """Only a local path may be a redirect target after login (no open redirect)."""
    parts = urlsplit(target or "/")
    if parts.scheme or parts.netloc or not target.startswith("/") or target.startswith("//"):
        return "/"
    return target


class SnapshotPages(Controller):
    """``/`` (list and search) and ``/snapshots/{id}`` (one snapshot, tags, delete, again)."""

    include_in_schema = False

    @get(routes.HOME, guards=[require_viewer])
    async def index(
        self,
        request: Request,
        library: NamedDependency[SnapshotLibrary],
        q: QueryStr = "",
        tag: QueryStr = "",
        status: QueryStr = "",
        domain: QueryStr = "",
        crawl_id: QueryStr = "",
        date_from: QueryStr = "",
        date_to: QueryStr = "",
        cursor: QueryStr = "",
    ) -> Template:
        """The snapshot list, newest first, or search results (``q``), with filters: what the
        viewer may read (``access.readable_snapshots``)."""
        viewer = await viewer_of(request)
        end = _date(date_to)
        filters = SnapshotFilter(
            tag=tag,
            crawl_id=crawl_id,
            status=status,
            domain=domain,
            date_from=_date(date_from),
            date_to=end + timedelta(days=1) if end else None,
            q=q,
        )
        page = await anyio.to_thread.run_sync(lambda: library.list(filters, cursor[:100], viewer=viewer))
        params = {k: v for k, v in request.query_params.items() if k != "cursor" and v}
        next_url = "/?" + urlencode({**params, "cursor": page.next_cursor}) if page.next_cursor else ""
        view = viewer.list_view
        context = {"page": page, "next_url": next_url, "q": q, "view": view}
        if _is_htmx(request) and cursor:
            return await render(request, "_snapshot_cards.html" if view == "grid" else "_snapshot_rows.html", **context)
        tags = await anyio.to_thread.run_sync(lambda: library.tags(viewer=viewer))
        return await render(
            request,
            "snapshots.html",
            f=filters,
            all_tags=tags,
            date_from=date_from,
            date_to=date_to,
            here=request.url.path + (f"?{request.url.query}" if request.url.query else ""),
            flash=str(request.query_params.get("flash", ""))[:300],
            **context,
        )

    @get(f"/snapshots/{ID}", guards=[require_viewer])
    async def snapshot(
        self, request: Request, snapshot_id: PathStr, library: NamedDependency[SnapshotLibrary]
    ) -> Template:
        """One snapshot: its facts, tags, outputs, every result, and the actions (its owner's)."""
        viewer = await viewer_of(request)
        detail = await anyio.to_thread.run_sync(lambda: library.detail(snapshot_id[:32], viewer=viewer))
        if detail is None:
            raise NotFoundException(f"no snapshot {snapshot_id[:32]}")
        mine = await anyio.to_thread.run_sync(lambda: library.can_change(detail.snapshot.id, viewer=viewer))
        shares = []
        if mine and viewer.logged_in:
            shares = [
                x
                for x in await anyio.to_thread.run_sync(access.list_shares, request.app.state.db, viewer)
                if x.kind == "snapshot" and x.target == detail.snapshot.id
            ]
        settings = request.app.state.settings
        replay_url = ""
        if "replay" in detail.links and archive_origin(settings, str(request.url)) and replay.available(settings):
            replay_url = f"/snapshots/{snapshot_id}/replay"
        return await render(
            request,
            "snapshot.html",
            snap=detail.snapshot,
            detail=detail,
            replay_url=replay_url,
            mine=mine,
            shares=shares,
            new_link=str(request.query_params.get("link", ""))[:200],
        )

    @get(f"/snapshots/{ID}/changes", guards=[require_viewer])
    async def changes(
        self, request: Request, snapshot_id: PathStr, library: NamedDependency[SnapshotLibrary]
    ) -> Template:
        """What changed in the readable text since the previous snapshot of this URL (htmx, when
        the section is opened)."""
        viewer = await viewer_of(request)
        found = await anyio.to_thread.run_sync(lambda: library.changes(snapshot_id[:32], viewer=viewer))
        return await render(request, "_changes.html", changes=found)

    @get(f"/snapshots/{ID}/replay", guards=[require_viewer])
    async def replay_page(
        self, request: Request, snapshot_id: PathStr, library: NamedDependency[SnapshotLibrary]
    ) -> Template:
        """The WARC replayed by ReplayWeb.page, framed from the archive origin."""
        viewer = await viewer_of(request)
        detail = await anyio.to_thread.run_sync(lambda: library.detail(snapshot_id[:32], viewer=viewer))
        origin = archive_origin(request.app.state.settings, str(request.url))
        if detail is None or "replay" not in detail.links or not origin:
            raise NotFoundException("nothing to replay")
        return await render(
            request,
            "replay_frame.html",
            snap=detail.snapshot,
            frame_url=f"{origin}/replay-view/{snapshot_id}",
            from_browser=detail.links["replay"] == detail.links.get("browser_warc"),
        )

    @post(f"/snapshots/{ID}/tags", guards=[require_login])
    async def set_tags(
        self,
        request: Request,
        snapshot_id: PathStr,
        library: NamedDependency[SnapshotLibrary],
        signals: NamedDependency[Signals],
    ) -> Template | Redirect:
        """Replace the snapshot's tags (the projector then re-indexes it)."""
        form = await request.form()
        viewer = await viewer_of(request)
        names = _split(str(form.get("tags", "")))
        tags = await anyio.to_thread.run_sync(lambda: library.set_tags(snapshot_id[:32], names, viewer=viewer))
        if tags is None:
            raise NotFoundException(f"no snapshot {snapshot_id[:32]}")
        await signals.tags_changed([snapshot_id])
        if _is_htmx(request):
            detail = await anyio.to_thread.run_sync(lambda: library.detail(snapshot_id[:32], viewer=viewer))
            return await render(request, "_tags.html", snap=detail.snapshot, detail=detail, mine=True)
        return Redirect(f"/snapshots/{snapshot_id}", status_code=303)

    @post(f"/snapshots/{ID}/delete", guards=[require_login])
    async def delete(
        self, request: Request, snapshot_id: PathStr, library: NamedDependency[SnapshotLibrary]
    ) -> Template | Redirect:
        """Delete the snapshot's rows and files (the page asked for confirmation)."""
        viewer = await viewer_of(request)
        try:
            found = await anyio.to_thread.run_sync(lambda: library.delete(snapshot_id[:32], viewer=viewer))
        except SnapshotBusy as exc:
            return await render(request, "error.html", status_code=409, code=409, detail=str(exc))
        if not found:
            raise NotFoundException(f"no snapshot {snapshot_id[:32]}")
        return Redirect("/?deleted=1", status_code=303)

    @post(f"/snapshots/{ID}/archive-again", guards=[require_login])
    async def archive_again(
        self,
        request: Request,
        snapshot_id: PathStr,
        library: NamedDependency[SnapshotLibrary],
        crawl_service: NamedDependency[CrawlService],
        signals: NamedDependency[Signals],
    ) -> Redirect:
        """A new crawl (the viewer's) of this snapshot's URL, with its tags and its crawl's plugins."""
        viewer = await viewer_of(request)
        detail = await anyio.to_thread.run_sync(lambda: library.detail(snapshot_id[:32], viewer=viewer))
        if detail is None:
            raise NotFoundException(f"no snapshot {snapshot_id[:32]}")
        body = CrawlCreate(
            urls=[detail.snapshot.url],
            tags=detail.tags,
            plugins=list(detail.crawl.plugins or []) if detail.crawl else [],
            only_new=False,
            label=f"again: {detail.snapshot.title or detail.snapshot.url}"[:200],
        )
        crawl, _ = await anyio.to_thread.run_sync(lambda: crawl_service.create_crawl(body, owner=viewer.username))
        await signals.crawl_queued(crawl.id)
        return Redirect(f"/crawls/{crawl.id}", status_code=303)

    @post(routes.BULK, guards=[require_login])
    async def bulk(
        self,
        request: Request,
        library: NamedDependency[SnapshotLibrary],
        crawl_service: NamedDependency[CrawlService],
        signals: NamedDependency[Signals],
    ) -> Template | Redirect | Response:
        """One action on the snapshots ticked in the list or grid: ``tag``/``untag`` (the
        ``tags`` field), ``archive-again`` (one crawl of their URLs, each with its tags),
        ``export`` (a JSON Lines download) or ``delete`` (the page asked once; a snapshot being
        captured is kept and named)."""
        form = await request.form()
        viewer = await viewer_of(request)
        ids = list(dict.fromkeys(str(i)[:32] for i in form.getall("ids")))[:BULK_LIMIT] if "ids" in form else []
        action = str(form.get("action", ""))
        tags = _split(str(form.get("tags", "")))
        back = _safe_next(str(form.get("next", "/")))
        if not ids:
            return await render(request, "error.html", status_code=422, code=422, detail="tick some snapshots first")
        if action in ("tag", "untag"):
            if not tags:
                return await render(request, "error.html", status_code=422, code=422, detail=f"{action}: give tags")
            change = library.add_tags if action == "tag" else library.remove_tags
            found = await anyio.to_thread.run_sync(lambda: change(ids, tags, viewer=viewer))
            await signals.tags_changed(found)
            return Redirect(
                _with_flash(back, f"{'Tagged' if action == 'tag' else 'Untagged'} {len(found)}."), status_code=303
            )
        if action == "export":
            rows = await anyio.to_thread.run_sync(lambda: library.export_rows(ids, viewer=viewer))
            body = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
            return Response(
                body,
                media_type="application/x-ndjson",
                headers={"Content-Disposition": 'attachment; filename="boxcar-snapshots.jsonl"'},
            )
        if action == "archive-again":
            rows = await anyio.to_thread.run_sync(lambda: library.export_rows(ids, viewer=viewer))
            seeds: list[str | SeedIn] = [SeedIn(url=r["url"], title=r["title"], tags=r["tags"]) for r in rows]
            if not seeds:
                raise NotFoundException("none of these snapshots exists")
            create = CrawlCreate(urls=seeds, only_new=False, label=f"again: {len(seeds)} snapshot(s)")
            crawl, _ = await anyio.to_thread.run_sync(lambda: crawl_service.create_crawl(create, owner=viewer.username))
            await signals.crawl_queued(crawl.id)
            return Redirect(f"/crawls/{crawl.id}", status_code=303)
        if action == "delete":
            busy: list[str] = []
            deleted = 0

            def run() -> None:
                nonlocal deleted
                for sid in ids:
                    try:
                        deleted += library.delete(sid, viewer=viewer)
                    except SnapshotBusy:
                        busy.append(sid)

            await anyio.to_thread.run_sync(run)
            kept = f" {len(busy)} being captured kept." if busy else ""
            return Redirect(_with_flash(back, f"Deleted {deleted}.{kept}"), status_code=303)
        return await render(request, "error.html", status_code=422, code=422, detail=f"no action {action[:20]!r}")

    @get(f"{routes.EXPORT_PAGES}/{{format:str}}", guards=[require_viewer])
    async def export(
        self,
        request: Request,
        format: PathStr,
        library: NamedDependency[SnapshotLibrary],
        snapshot_id: QueryStr = "",
        crawl_id: QueryStr = "",
        tag: QueryStr = "",
        q: QueryStr = "",
    ) -> Response:
        """The export links of the list, snapshot and crawl pages (``api/exports.py``)."""
        chosen = selection(snapshot_id[:32], crawl_id[:32], tag[:100], q[:1000])
        viewer = await viewer_of(request)
        return await export_response(request, library, format[:10], chosen, base_url_of(request), viewer)

    @post(routes.LIST_VIEW, guards=[require_login])
    async def list_view(self, request: Request) -> Redirect:
        """Remember the list's layout (``list``/``grid``) for this person."""
        form = await request.form()
        view = str(form.get("view", ""))
        if view not in LIST_VIEWS:
            raise NotFoundException(f"no view {view[:20]!r}")
        viewer = await viewer_of(request)
        await anyio.to_thread.run_sync(accounts.set_list_view, request.app.state.db, viewer.user_id, view)
        return Redirect(_safe_next(str(form.get("next", "/"))), status_code=303)


class CrawlPages(Controller):
    """``/crawls`` and ``/crawls/{id}`` with live progress and pause / resume / cancel."""

    include_in_schema = False

    @get(routes.CRAWL_PAGES, guards=[require_viewer])
    async def crawls(
        self, request: Request, library: NamedDependency[SnapshotLibrary], cursor: QueryStr = ""
    ) -> Template:
        viewer = await viewer_of(request)
        rows, nxt = await anyio.to_thread.run_sync(lambda: library.crawls(cursor[:100], viewer=viewer))
        return await render(request, "crawls.html", crawls=rows, next_cursor=nxt)

    @get("/crawls/{crawl_id:str}", guards=[require_viewer])
    async def crawl(
        self,
        request: Request,
        crawl_id: PathStr,
        crawl_service: NamedDependency[CrawlService],
        library: NamedDependency[SnapshotLibrary],
    ) -> Template:
        """A crawl's progress (live) and its newest snapshots."""
        viewer = await viewer_of(request)
        status = await anyio.to_thread.run_sync(lambda: crawl_service.crawl_status(crawl_id[:32], viewer=viewer))
        if status is None:
            raise NotFoundException(f"no crawl {crawl_id[:32]}")
        page = await anyio.to_thread.run_sync(lambda: library.list(SnapshotFilter(crawl_id=status.id), viewer=viewer))
        next_url = f"/?crawl_id={status.id}&cursor={page.next_cursor}" if page.next_cursor else ""
        return await render(request, "crawl.html", crawl=status, page=page, next_url=next_url)

    @get("/crawls/{crawl_id:str}/trace", guards=[require_viewer])
    async def trace(self, request: Request, crawl_id: PathStr, library: NamedDependency[SnapshotLibrary]) -> Template:
        """The crawl's trace as a waterfall (htmx, when the section is opened): the spans the stack
        kept (``boxcar.shared.spanlog``), as ``boxcar trace`` prints them."""
        folder = request.app.state.settings.span_log_dir
        viewer = await viewer_of(request)

        def load() -> tuple[list[spanlog.SpanNode], float]:
            trace_id = library.trace_id(crawl_id[:32], viewer=viewer)
            if not trace_id or folder is None:
                return [], 0.0
            spans = list(spanlog.read_spans(folder, trace_id))
            roots = spanlog.trace_tree(spans)
            end = max(((s["end"] - min(x["start"] for x in spans)) / 1e9 for s in spans), default=0.0)
            return roots, end

        roots, total = await anyio.to_thread.run_sync(load)
        return await render(request, "_trace.html", roots=roots, total=max(total, 0.001))

    @get("/crawls/{crawl_id:str}/progress", guards=[require_viewer])
    async def progress(
        self, request: Request, crawl_id: PathStr, crawl_service: NamedDependency[CrawlService]
    ) -> Template:
        """The progress block alone, polled by htmx every second until the crawl is sealed."""
        viewer = await viewer_of(request)
        status = await anyio.to_thread.run_sync(lambda: crawl_service.crawl_status(crawl_id[:32], viewer=viewer))
        if status is None:
            raise NotFoundException(f"no crawl {crawl_id[:32]}")
        return await render(request, "_crawl_progress.html", crawl=status)

    @post("/crawls/{crawl_id:str}/{action:str}", guards=[require_login])
    async def control(
        self,
        request: Request,
        crawl_id: PathStr,
        action: PathStr,
        crawl_service: NamedDependency[CrawlService],
        signals: NamedDependency[Signals],
    ) -> Template | Redirect:
        """Ask the crawl-runner to pause, resume or cancel the crawl."""
        if action not in ("pause", "resume", "cancel"):
            raise NotFoundException(f"no action {action[:20]}")
        viewer = await viewer_of(request)
        if await anyio.to_thread.run_sync(lambda: crawl_service.crawl_status(crawl_id[:32], viewer=viewer)) is None:
            raise NotFoundException(f"no crawl {crawl_id[:32]}")
        try:
            await signals.control("crawl", crawl_id, CrawlControl(crawl_id=crawl_id, action=action))
        except BusUnavailable as exc:
            return await render(request, "error.html", status_code=503, code=503, detail=str(exc))
        return Redirect(f"/crawls/{crawl_id}", status_code=303)


class AddPage(Controller):
    """``/add``: URLs or files, depth, tags, plugins; then the crawl's page."""

    include_in_schema = False

    @get(routes.ADD, guards=[require_login])
    async def form(
        self,
        request: Request,
        crawl_service: NamedDependency[CrawlService],
        url: Annotated[str, QueryParameter(max_length=8192)] = "",
        title: Annotated[str, QueryParameter(max_length=2000)] = "",
        text: Annotated[str, QueryParameter(max_length=20_000)] = "",
        tags: Annotated[str, QueryParameter(max_length=2000)] = "",
    ) -> Template:
        """The form, prefilled from the query: the bookmarklet sends ``url`` and ``title``, a
        phone's share sheet (the manifest's ``share_target``) ``url``, ``title`` and ``text``, where
        many apps put the URL inside ``text``."""
        shared = shared_urls(url, text, title)
        form = {"urls": "\n".join(shared), "tags": tags, "depth": 0, "plugins": [], "title": ""}
        error = ""
        if len(shared) == 1:
            form["title"] = clean_text(title)[:500]
        if (url or text or title) and not shared:
            what = (url or text or title)[:200]
            error = f"nothing to archive in what was shared: {what!r} is not an http(s) URL and holds none"
        return await self._form(request, crawl_service, form, error, 200)

    async def _form(self, request, crawl_service, form, error: str = "", status_code: int = 200) -> Template:
        groups = await anyio.to_thread.run_sync(crawl_service.plugin_choices)
        chosen = form.get("plugins") or [p.name for g in groups.values() for p in g if p.default]
        return await render(
            request,
            "add.html",
            status_code=status_code,
            form={**form, "plugins": chosen},
            error=error,
            plugin_groups=groups,
        )

    @post(routes.ADD_PREVIEW, guards=[require_login])
    async def preview(self, request: Request, crawl_service: NamedDependency[CrawlService]) -> Template:
        """What the pasted URLs and chosen files hold (htmx, as they change): entries, new, merged,
        archived before, rejected with reasons. Nothing is queued."""
        form = await request.form()
        uploads = [u for u in form.getall("file") if isinstance(u, UploadFile)] if "file" in form else []
        files = [(data, u.filename or "") for u in uploads if (data := await u.read())]
        text = str(form.get("urls", "")).strip()
        if text:
            files.append((text.encode(), "urls.txt"))
        if not files:
            return await render(request, "_add_preview.html", preview=None, error="")
        try:
            owner = (await viewer_of(request)).username
            preview = await anyio.to_thread.run_sync(lambda: crawl_service.preview(files, owner=owner))
        except InputError as exc:
            return await render(request, "_add_preview.html", preview=None, error=str(exc).split(": ", 1)[-1])
        return await render(request, "_add_preview.html", preview=preview, error="")

    @post(routes.ADD, guards=[require_login])
    async def submit(
        self, request: Request, crawl_service: NamedDependency[CrawlService], signals: NamedDependency[Signals]
    ) -> Template | Redirect:
        """Create the crawl (URLs) or import (files) and show its page."""
        form = await request.form()
        uploads = [u for u in form.getall("file") if isinstance(u, UploadFile)] if "file" in form else []
        files = [(data, u.filename or "") for u in uploads if (data := await u.read())]
        fields = {
            "urls": str(form.get("urls", "")),
            "title": clean_text(str(form.get("title", "")))[:500],
            "tags": str(form.get("tags", "")),
            "depth": str(form.get("depth", "0")),
            "plugins": [str(p) for p in form.getall("plugins")] if "plugins" in form else [],
        }
        try:
            depth = parse_depth(fields["depth"])
        except ValueError as exc:
            return await self._form(request, crawl_service, fields, f"depth: {exc}", 422)
        urls = [line.strip() for line in fields["urls"].splitlines() if line.strip()]
        owner = (await viewer_of(request)).username
        try:
            if files:
                if urls:
                    files.append(("\n".join(urls).encode(), "urls.txt"))
                outcome = await anyio.to_thread.run_sync(
                    lambda: crawl_service.create_import(
                        files,
                        format=None,
                        tags=_split(fields["tags"]),
                        max_depth=depth,
                        plugins=fields["plugins"],
                        only_new=None,
                        owner=owner,
                    )
                )
                crawl = outcome.crawl
            elif urls:
                # a title came with one shared URL (bookmarklet, share sheet): it is that page's
                seeds: list[str | SeedIn] = (
                    [SeedIn(url=urls[0], title=fields["title"])] if (len(urls) == 1 and fields["title"]) else list(urls)
                )
                body = CrawlCreate(urls=seeds, tags=_split(fields["tags"]), max_depth=depth, plugins=fields["plugins"])
                crawl, _ = await anyio.to_thread.run_sync(lambda: crawl_service.create_crawl(body, owner=owner))
            else:
                return await self._form(request, crawl_service, fields, "give some URLs or a file", 422)
        except InputError as exc:
            return await self._form(request, crawl_service, fields, str(exc), 422)
        except QuotaExceeded as exc:
            return await self._form(request, crawl_service, fields, str(exc), 429)
        await signals.crawl_queued(crawl.id)
        return Redirect(f"/crawls/{crawl.id}", status_code=303)


class FeedPages(Controller):
    """``/feeds``: subscribe, pause, resume, poll now, remove."""

    include_in_schema = False

    @get(routes.FEED_PAGES, guards=[require_viewer])
    async def feeds(self, request: Request, feed_service: NamedDependency[FeedService]) -> Template:
        viewer = await viewer_of(request)
        return await render(
            request, "feeds.html", feeds=await anyio.to_thread.run_sync(lambda: feed_service.list(viewer=viewer))
        )

    @post(routes.FEED_PAGES, guards=[require_login])
    async def subscribe(
        self, request: Request, feed_service: NamedDependency[FeedService], signals: NamedDependency[Signals]
    ) -> Template | Redirect:
        form = await request.form()
        viewer = await viewer_of(request)
        try:
            body = FeedCreate(
                url=str(form.get("url", "")),
                schedule=str(form.get("schedule", "") or "daily"),
                tags=_split(str(form.get("tags", ""))),
                max_depth=parse_depth(form.get("depth", "0")),
            )
            feed = await anyio.to_thread.run_sync(lambda: feed_service.create(body, owner=viewer.username))
        except (InputError, ValueError) as exc:
            feeds = await anyio.to_thread.run_sync(lambda: feed_service.list(viewer=viewer))
            return await render(request, "feeds.html", status_code=422, feeds=feeds, error=str(exc))
        await signals.feed_due(feed.id)
        return Redirect("/feeds", status_code=303)

    @post("/feeds/{feed_id:str}/{action:str}", guards=[require_login])
    async def control(
        self,
        request: Request,
        feed_id: PathStr,
        action: PathStr,
        feed_service: NamedDependency[FeedService],
        signals: NamedDependency[Signals],
    ) -> Template | Redirect:
        viewer = await viewer_of(request)
        if await anyio.to_thread.run_sync(lambda: feed_service.get(feed_id[:32], viewer=viewer)) is None:
            raise NotFoundException(f"no feed {feed_id[:32]}")
        if action == "remove":
            await anyio.to_thread.run_sync(lambda: feed_service.delete(feed_id[:32], viewer=viewer))
        elif action in ("poll", "pause", "resume"):
            try:
                await signals.control("schedule", feed_id, ScheduleControl(schedule_id=feed_id, action=action))
            except BusUnavailable as exc:
                return await render(request, "error.html", status_code=503, code=503, detail=str(exc))
        else:
            raise NotFoundException(f"no action {action[:20]}")
        return Redirect("/feeds", status_code=303)


class AccountPages(Controller):
    """``/login``, ``/logout`` and ``/settings`` (API tokens)."""

    include_in_schema = False

    @get(routes.LOGIN)
    async def login_form(self, request: Request, next: QueryStr = "/") -> Template:
        return await render(request, "login.html", next=_safe_next(next))

    @post(routes.LOGIN)
    async def login(self, request: Request) -> Template | Redirect:
        """Check the password; on success a fresh session cookie and the page asked for."""
        form = await request.form()
        state = request.app.state
        username, password = str(form.get("username", ""))[:64], str(form.get("password", ""))[:1024]
        next_url = _safe_next(str(form.get("next", "/")))
        client = request.client.host if request.client else ""
        wait = await anyio.to_thread.run_sync(accounts.login_locked, state.db, username, client)
        user_id = None if wait else await anyio.to_thread.run_sync(accounts.authenticate, state.db, username, password)
        if user_id is None and not wait:
            wait = await anyio.to_thread.run_sync(accounts.record_login_failure, state.db, username, client)
        if wait:  # the same answer for every name: locked-out logins never reveal which exist
            minutes = max(1, round(wait / 60))
            return await render(
                request,
                "login.html",
                status_code=429,
                headers={"Retry-After": accounts.retry_after(wait)},
                next=next_url,
                flash=f"Too many failed logins. Try again in {minutes} minute{'s' if minutes > 1 else ''}.",
                flash_kind="error",
            )
        if user_id is None:
            return await render(
                request,
                "login.html",
                status_code=401,
                next=next_url,
                flash="Wrong user name or password.",
                flash_kind="error",
            )
        await anyio.to_thread.run_sync(accounts.clear_login_failures, state.db, username)
        old = request.cookies.get(SESSION_COOKIE, "")
        await anyio.to_thread.run_sync(accounts.end_session, state.db, old)
        token = await anyio.to_thread.run_sync(
            accounts.start_session, state.db, user_id, state.settings.session_max_age
        )
        response = Redirect(next_url, status_code=303)
        accounts.set_session_cookie(response, token, state.settings.session_max_age, request.url.scheme == "https")
        return response

    @post(routes.LOGOUT)
    async def logout(self, request: Request) -> Redirect:
        await anyio.to_thread.run_sync(accounts.end_session, request.app.state.db, request.cookies.get(SESSION_COOKIE))
        response = Redirect("/login", status_code=303)
        response.delete_cookie(SESSION_COOKIE, path="/")
        return response

    @get(routes.SETTINGS, guards=[require_login])
    async def settings(self, request: Request) -> Template:
        return await settings_page(request)

    @post("/settings/tokens", guards=[require_login])
    async def create(self, request: Request) -> Template:
        """A new API token, shown once on the page that answers this form."""
        form = await request.form()
        db = request.app.state.db
        name = str(form.get("name", ""))[:128]
        scope = str(form.get("scope", "")) or ("read" if form.get("read_only") else "write")
        if scope not in SCOPES:
            raise NotFoundException(f"no token scope {scope[:20]!r}")
        viewer = await viewer_of(request)
        token = await anyio.to_thread.run_sync(
            lambda: create_token(db, name or "web UI", scope=scope, owner=viewer.username)
        )
        response = await settings_page(request, status_code=201, new_token=token, new_scope=scope)
        response.headers["Cache-Control"] = "no-store"
        return response

    @post("/settings/tokens/{token_id:str}/revoke", guards=[require_login])
    async def revoke(self, request: Request, token_id: PathStr) -> Redirect:
        viewer = await viewer_of(request)
        if not await anyio.to_thread.run_sync(revoke_token, request.app.state.db, token_id[:32], viewer):
            raise NotFoundException("no such token")
        return Redirect("/settings", status_code=303)


def login_redirect(request: Request, exc: Exception) -> Response:
    """No session: a page asked for with GET goes to the login form; anything else (a form post,
    an archived file) is a 401."""
    if request.method == "GET" and not request.url.path.startswith(routes.NOT_PAGES):
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return Redirect(f"/login?{urlencode({'next': target})}", status_code=303)
    return Response({"status_code": 401, "detail": "log in first"}, status_code=401)
