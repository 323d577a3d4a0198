"""HTTP controllers: parse, call a service, return a schema."""

from __future__ import annotations

from typing import Annotated

import anyio.to_thread
from litestar import Controller, Request, get, post
from litestar.di import NamedDependency
from litestar.exceptions import HTTPException, NotFoundException
from litestar.params import FromPath, JSONBody, QueryParameter
from litestar.status_codes import HTTP_201_CREATED, HTTP_422_UNPROCESSABLE_ENTITY

from boxcar.ingest.schemas import CrawlCreate, CrawlCreated, CrawlStatus, SnapshotPage
from boxcar.ingest.services import CrawlService, InputError
from boxcar.shared import bus
from boxcar.shared.messages import CrawlQueued, encode


def unprocessable(exc: InputError) -> HTTPException:
    return HTTPException(status_code=HTTP_422_UNPROCESSABLE_ENTITY, detail=str(exc), extra={"field": exc.field})


async def wake_runners(request: Request, crawl_id: str) -> None:
    """Tell crawl-runners a crawl is due (best effort: they poll the database anyway)."""
    nc = getattr(request.app.state, "nats", None)
    if nc is not None and nc.is_connected:
        await nc.publish(bus.SUBJECT_CRAWL_QUEUED, encode(CrawlQueued(crawl_id=crawl_id)), headers=bus.trace_headers())


class CrawlController(Controller):
    path = "/api/v1/crawls"
    tags = ["crawls"]

    @post("/", operation_id="CreateCrawl", status_code=HTTP_201_CREATED)
    async def create_crawl(
        self, request: Request, data: JSONBody[CrawlCreate], crawl_service: NamedDependency[CrawlService]
    ) -> CrawlCreated:
        """Queue URLs for archiving.

        Args:
            data: URLs (strings, or objects with url/title/tags/bookmarked_at), tags, max_depth
                (0–4), plugins (default: the server's PLUGINS), config overrides, label.

        Returns:
            The new crawl's id; follow it with ``GET /api/v1/crawls/{id}``.
        """
        try:
            crawl = await anyio.to_thread.run_sync(crawl_service.create_crawl, data)
        except InputError as exc:
            raise unprocessable(exc) from None
        await wake_runners(request, crawl.id)
        return CrawlCreated(id=crawl.id, status=crawl.status, urls=len(crawl.seeds))

    @get("/{crawl_id:str}", operation_id="GetCrawl", sync_to_thread=True)
    def get_crawl(self, crawl_id: FromPath[str], crawl_service: NamedDependency[CrawlService]) -> CrawlStatus:
        """A crawl's status with its snapshots and results counted by status.

        Returns:
            ``snapshots``: {queued, started, paused, sealed, total}; ``results``: {succeeded,
            failed, skipped, noresults, …}.
        """
        status = crawl_service.crawl_status(crawl_id)
        if status is None:
            raise NotFoundException(f"no crawl {crawl_id}")
        return status


class SnapshotController(Controller):
    path = "/api/v1/snapshots"
    tags = ["snapshots"]

    @get("/", operation_id="ListSnapshots", sync_to_thread=True)
    def list_snapshots(
        self,
        crawl_service: NamedDependency[CrawlService],
        crawl_id: Annotated[str | None, QueryParameter(description="only this crawl's snapshots")] = None,
        limit: Annotated[int, QueryParameter(ge=1, le=1000)] = 100,
        offset: Annotated[int, QueryParameter(ge=0)] = 0,
    ) -> SnapshotPage:
        """Snapshots, oldest first, each with its ArchiveResults and tags."""
        return crawl_service.list_snapshots(crawl_id, limit, offset)
