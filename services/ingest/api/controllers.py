"""HTTP controllers: parse, call a service, return a schema."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import anyio.to_thread
import msgspec
from litestar import Controller, Request, delete, get, patch, post
from litestar.di import NamedDependency
from litestar.exceptions import NotFoundException, ServiceUnavailableException, ValidationException
from litestar.params import JSONBody, PathParameter, QueryParameter
from litestar.status_codes import (
    HTTP_201_CREATED,
    HTTP_202_ACCEPTED,
)

from boxcar.ingest import routes
from boxcar.ingest.access import Viewer
from boxcar.ingest.api.auth import require_read_access, require_token
from boxcar.ingest.api.openapi import (
    READ_ONE,
    READS,
    SECURITY,
    WRITE_ONE,
    WRITES,
    Conflict,
    Unprocessable,
)
from boxcar.ingest.api.schemas import (
    ControlAccepted,
    CrawlCreate,
    CrawlCreated,
    CrawlStatus,
    FeedCreate,
    FeedOut,
    FeedUpdate,
    SearchHitOut,
    SearchPage,
    SnapshotPage,
    WebhookCreate,
    WebhookCreated,
    WebhookDeliveryOut,
    WebhookOut,
)
from boxcar.ingest.feeds import FeedService
from boxcar.ingest.library import SnapshotBusy, SnapshotLibrary
from boxcar.ingest.services import CrawlService, InputError
from boxcar.ingest.signals import BusUnavailable, Signals
from boxcar.ingest.webhooks import WebhookService
from boxcar.shared.messages import CrawlControl, ScheduleControl

ID_PATTERN = r"^[0-9a-f]{32}$"
ObjectId = Annotated[str, PathParameter(pattern=ID_PATTERN, description="32 hex characters")]


async def strict_body[T](request: Request, struct: type[T]) -> T:
    """The request's JSON body decoded *strictly*, as the OpenAPI document describes it.

    Litestar decodes ``data`` (which gives the document its schema) with msgspec's lenient
    conversion: ``0`` for ``false``, ``"2"`` for ``2``. The API takes exactly the types it
    documents, so handlers use this decoding of the same (cached) body instead. JSON has one
    number type, so ``3.0`` is the integer ``3``, as JSON Schema reads it.

    Raises:
        ValidationException: a 400 naming the field and what was expected (msgspec's words).
    """
    try:
        return msgspec.convert(_integral(msgspec.json.decode(await request.body())), type=struct, strict=True)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise ValidationException(detail=f"Validation failed for {request.method} {request.url.path}: {exc}") from None


def _integral(value: Any) -> Any:
    """``value`` with every float that has no fractional part made an int (``3.0`` → ``3``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    if isinstance(value, list):
        return [_integral(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    return value


def unprocessable(exc: InputError) -> Unprocessable:
    return Unprocessable(detail=str(exc), extra={"field": exc.field})


class CrawlController(Controller):
    path = routes.CRAWLS
    tags = ["crawls"]

    @post(
        "/",
        operation_id="CreateCrawl",
        status_code=HTTP_201_CREATED,
        guards=[require_token],
        security=SECURITY,
        raises=WRITES,
    )
    async def create_crawl(
        self,
        request: Request,
        data: JSONBody[CrawlCreate],
        crawl_service: NamedDependency[CrawlService],
        signals: NamedDependency[Signals],
        viewer: NamedDependency[Viewer],
    ) -> CrawlCreated:
        """Queue URLs for archiving.

        Args:
            data: URLs (strings, or objects with url/title/tags/bookmarked_at), tags, max_depth
                (link hops, at most ``MAX_DEPTH``), plugins (default: the server's PLUGINS),
                config overrides, label, only_new.

        Returns:
            The new crawl's id; follow it with ``GET /api/v1/crawls/{id}``. ``urls`` counts the
            URLs queued after merging duplicates and skipping ones archived before (``only_new``).
        """
        data = await strict_body(request, CrawlCreate)
        try:
            crawl, admission = await anyio.to_thread.run_sync(
                lambda: crawl_service.create_crawl(data, owner=viewer.username)
            )
        except InputError as exc:
            raise unprocessable(exc) from None
        await signals.crawl_queued(crawl.id)
        return CrawlCreated(
            id=crawl.id,
            status=crawl.status,
            urls=crawl.seed_count,
            duplicates=admission.duplicates,
            skipped_existing=admission.skipped_existing,
        )

    @get(
        "/{crawl_id:str}",
        operation_id="GetCrawl",
        sync_to_thread=True,
        guards=[require_read_access],
        security=SECURITY,
        raises=READ_ONE,
    )
    def get_crawl(
        self, crawl_id: ObjectId, crawl_service: NamedDependency[CrawlService], viewer: NamedDependency[Viewer]
    ) -> CrawlStatus:
        """A crawl's status with its snapshots and results counted by status.

        Returns:
            ``snapshots``: {queued, started, paused, sealed, total}; ``results``: {succeeded,
            failed, skipped, noresults, …}.
        """
        status = crawl_service.crawl_status(crawl_id, viewer=viewer)
        if status is None:
            raise NotFoundException(f"no crawl {crawl_id}")
        return status


class SnapshotController(Controller):
    path = routes.SNAPSHOTS
    tags = ["snapshots"]

    @get(
        "/",
        operation_id="ListSnapshots",
        sync_to_thread=True,
        guards=[require_read_access],
        security=SECURITY,
        raises=READS,
    )
    def list_snapshots(
        self,
        crawl_service: NamedDependency[CrawlService],
        viewer: NamedDependency[Viewer],
        crawl_id: Annotated[
            str | None, QueryParameter(description="only this crawl's snapshots", pattern=ID_PATTERN)
        ] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
        offset: Annotated[int, QueryParameter(ge=0, le=2**31)] = 0,
        url: Annotated[
            str | None,
            QueryParameter(max_length=8192, description="only snapshots of this URL (as it would be added)"),
        ] = None,
    ) -> SnapshotPage:
        """Snapshots, oldest first, each with its ArchiveResults and tags (``url``: has this page
        been archived before, and where)."""
        return crawl_service.list_snapshots(crawl_id, limit, offset, url=url, viewer=viewer)

    @delete(
        "/{snapshot_id:str}",
        operation_id="DeleteSnapshot",
        guards=[require_token],
        security=SECURITY,
        raises=[*WRITE_ONE, Conflict],
        sync_to_thread=True,
    )
    def delete_snapshot(
        self, snapshot_id: ObjectId, library: NamedDependency[SnapshotLibrary], viewer: NamedDependency[Viewer]
    ) -> None:
        """Delete a snapshot: its rows (results, processes, tag links, search entry) and its files.

        Returns:
            204; 404 when there is no such snapshot; 409 while it is being captured (``started``).
        """
        try:
            found = library.delete(snapshot_id, viewer=viewer)
        except SnapshotBusy as exc:
            raise Conflict(detail=str(exc)) from None
        if not found:
            raise NotFoundException(f"no snapshot {snapshot_id}")


class SearchController(Controller):
    path = routes.SEARCH
    tags = ["search"]

    @get("/", operation_id="Search", sync_to_thread=True, guards=[require_read_access], security=SECURITY, raises=READS)
    def search(
        self,
        library: NamedDependency[SnapshotLibrary],
        viewer: NamedDependency[Viewer],
        q: Annotated[str, QueryParameter(min_length=1, max_length=1000, description="web-search syntax")],
        tag: Annotated[str | None, QueryParameter(max_length=100, description="only snapshots with this tag")] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=200)] = 20,
        offset: Annotated[int, QueryParameter(ge=0, le=10_000)] = 0,
    ) -> SearchPage:
        """Full-text search over titles, URLs, tags and the pages' readable text, best match first.

        Args:
            q: words (all must match), ``"a phrase"``, ``-excluded``, ``this or that``.

        Returns:
            The matches with a snippet of text around the matched words.
        """
        rows = library.search(q, tag or "", limit, offset, viewer=viewer)
        return SearchPage(
            query=q,
            items=[
                SearchHitOut(
                    id=r.id,
                    url=r.url,
                    title=r.title,
                    domain=r.domain,
                    status=r.status,
                    created_at=r.created_at,
                    tags=r.tags,
                    snippet=_plain(r.snippet_html),
                    snippet_html=r.snippet_html,
                )
                for r in rows
            ],
        )


def _plain(snippet_html: str) -> str:
    import html

    return html.unescape(snippet_html.replace("<mark>", "").replace("</mark>", ""))


def unavailable(exc: BusUnavailable) -> ServiceUnavailableException:
    return ServiceUnavailableException(detail=str(exc))


class CrawlControlController(Controller):
    path = routes.CRAWL
    tags = ["crawls"]

    @post(
        "/{action:str}",
        operation_id="ControlCrawl",
        status_code=HTTP_202_ACCEPTED,
        guards=[require_token],
        security=SECURITY,
        raises=WRITE_ONE,
    )
    async def control(
        self,
        crawl_id: ObjectId,
        action: Annotated[Literal["pause", "resume", "cancel"], PathParameter()],
        crawl_service: NamedDependency[CrawlService],
        signals: NamedDependency[Signals],
        viewer: NamedDependency[Viewer],
    ) -> ControlAccepted:
        """Pause (no new snapshot starts), resume, or cancel a crawl (its running hooks are killed,
        unfinished ones recorded ``skipped``: ``cancelled``, its snapshots and then it sealed).

        Returns:
            202: the crawl-runner applies it within a second; follow ``GET /api/v1/crawls/{id}``.
        """
        if await anyio.to_thread.run_sync(lambda: crawl_service.crawl_status(crawl_id, viewer=viewer)) is None:
            raise NotFoundException(f"no crawl {crawl_id}")
        try:
            await signals.control("crawl", crawl_id, CrawlControl(crawl_id=crawl_id, action=action))
        except BusUnavailable as exc:
            raise unavailable(exc) from None
        return ControlAccepted(id=crawl_id, action=action)


class FeedController(Controller):
    path = routes.FEEDS
    tags = ["feeds"]

    @post(
        "/",
        operation_id="CreateFeed",
        status_code=HTTP_201_CREATED,
        guards=[require_token],
        security=SECURITY,
        raises=WRITES,
    )
    async def create_feed(
        self,
        request: Request,
        data: JSONBody[FeedCreate],
        feed_service: NamedDependency[FeedService],
        signals: NamedDependency[Signals],
        viewer: NamedDependency[Viewer],
    ) -> FeedOut:
        """Subscribe to an RSS, Atom or JSON feed: polled on ``schedule`` (first poll now); each
        poll archives the items not seen before (by GUID, else link)."""
        data = await strict_body(request, FeedCreate)
        try:
            feed = await anyio.to_thread.run_sync(lambda: feed_service.create(data, owner=viewer.username))
        except InputError as exc:
            raise unprocessable(exc) from None
        await signals.feed_due(feed.id)
        return feed

    @get(
        "/",
        operation_id="ListFeeds",
        sync_to_thread=True,
        guards=[require_read_access],
        security=SECURITY,
        raises=READS,
    )
    def list_feeds(self, feed_service: NamedDependency[FeedService], viewer: NamedDependency[Viewer]) -> list[FeedOut]:
        """The caller's feed subscriptions with their polling state (last error, next poll, items seen)."""
        return feed_service.list(viewer=viewer)

    @get(
        "/{feed_id:str}",
        operation_id="GetFeed",
        sync_to_thread=True,
        guards=[require_read_access],
        security=SECURITY,
        raises=READ_ONE,
    )
    def get_feed(
        self, feed_id: ObjectId, feed_service: NamedDependency[FeedService], viewer: NamedDependency[Viewer]
    ) -> FeedOut:
        """One feed subscription."""
        feed = feed_service.get(feed_id, viewer=viewer)
        if feed is None:
            raise NotFoundException(f"no feed {feed_id}")
        return feed

    @patch(
        "/{feed_id:str}",
        operation_id="UpdateFeed",
        guards=[require_token],
        security=SECURITY,
        raises=[*WRITE_ONE, Unprocessable],
    )
    async def update_feed(
        self,
        request: Request,
        feed_id: ObjectId,
        data: JSONBody[FeedUpdate],
        feed_service: NamedDependency[FeedService],
        viewer: NamedDependency[Viewer],
    ) -> FeedOut:
        """Change a subscription's schedule, tags, depth, plugins, label or config."""
        data = await strict_body(request, FeedUpdate)
        try:
            feed = await anyio.to_thread.run_sync(lambda: feed_service.update(feed_id, data, viewer=viewer))
        except InputError as exc:
            raise unprocessable(exc) from None
        if feed is None:
            raise NotFoundException(f"no feed {feed_id}")
        return feed

    @delete("/{feed_id:str}", operation_id="DeleteFeed", guards=[require_token], security=SECURITY, raises=WRITE_ONE)
    async def delete_feed(
        self, feed_id: ObjectId, feed_service: NamedDependency[FeedService], viewer: NamedDependency[Viewer]
    ) -> None:
        """Unsubscribe (crawls already made stay)."""
        if not await anyio.to_thread.run_sync(lambda: feed_service.delete(feed_id, viewer=viewer)):
            raise NotFoundException(f"no feed {feed_id}")

    @post(
        "/{feed_id:str}/{action:str}",
        operation_id="ControlFeed",
        status_code=HTTP_202_ACCEPTED,
        guards=[require_token],
        security=SECURITY,
        raises=WRITE_ONE,
    )
    async def control(
        self,
        feed_id: ObjectId,
        action: Annotated[Literal["poll", "pause", "resume"], PathParameter()],
        feed_service: NamedDependency[FeedService],
        signals: NamedDependency[Signals],
        viewer: NamedDependency[Viewer],
    ) -> ControlAccepted:
        """Poll now, pause or resume a subscription (applied by the crawl-runner).

        Returns:
            202: follow ``GET /api/v1/feeds/{id}``.
        """
        if await anyio.to_thread.run_sync(lambda: feed_service.get(feed_id, viewer=viewer)) is None:
            raise NotFoundException(f"no feed {feed_id}")
        try:
            await signals.control("schedule", feed_id, ScheduleControl(schedule_id=feed_id, action=action))
        except BusUnavailable as exc:
            raise unavailable(exc) from None
        return ControlAccepted(id=feed_id, action=action)


class WebhookController(Controller):
    path = routes.WEBHOOKS
    tags = ["webhooks"]

    @post(
        "/",
        operation_id="CreateWebhook",
        status_code=HTTP_201_CREATED,
        guards=[require_token],
        security=SECURITY,
        raises=WRITES,
    )
    async def create_webhook(
        self,
        request: Request,
        data: JSONBody[WebhookCreate],
        webhook_service: NamedDependency[WebhookService],
        viewer: NamedDependency[Viewer],
    ) -> WebhookCreated:
        """Send ``events`` (snapshot.sealed, crawl.sealed, crawl.failed, feed.new_items) of the caller's archive
        (``scope`` user) or, for an admin, of every archive (``instance``) to ``url``: a signed
        JSON POST, retried with back-off. The signing secret is in this answer only."""
        data = await strict_body(request, WebhookCreate)
        try:
            return await anyio.to_thread.run_sync(lambda: webhook_service.create(data, viewer))
        except InputError as exc:
            raise unprocessable(exc) from None

    @get(
        "/",
        operation_id="ListWebhooks",
        sync_to_thread=True,
        guards=[require_read_access],
        security=SECURITY,
        raises=READS,
    )
    def list_webhooks(
        self, webhook_service: NamedDependency[WebhookService], viewer: NamedDependency[Viewer]
    ) -> list[WebhookOut]:
        """The caller's webhooks (an admin's: every one)."""
        return webhook_service.list(viewer)

    @delete(
        "/{webhook_id:str}", operation_id="DeleteWebhook", guards=[require_token], security=SECURITY, raises=WRITE_ONE
    )
    async def delete_webhook(
        self, webhook_id: ObjectId, webhook_service: NamedDependency[WebhookService], viewer: NamedDependency[Viewer]
    ) -> None:
        """Delete a webhook and its delivery log."""
        if not await anyio.to_thread.run_sync(lambda: webhook_service.delete(webhook_id, viewer)):
            raise NotFoundException(f"no webhook {webhook_id}")

    @get(
        "/{webhook_id:str}/deliveries",
        operation_id="ListWebhookDeliveries",
        sync_to_thread=True,
        guards=[require_read_access],
        security=SECURITY,
        raises=READ_ONE,
    )
    def deliveries(
        self, webhook_id: ObjectId, webhook_service: NamedDependency[WebhookService], viewer: NamedDependency[Viewer]
    ) -> list[WebhookDeliveryOut]:
        """The webhook's last 50 deliveries, newest first: status, attempts, the receiver's
        answer and the last error."""
        found = webhook_service.deliveries(webhook_id, viewer)
        if found is None:
            raise NotFoundException(f"no webhook {webhook_id}")
        return found
