"""Feed subscriptions: polling due CrawlSchedules and turning new items into crawls.

A schedule is claimed like any other row (conditional update, lease on ``retry_at``). Its feed is
fetched with conditional GET (``If-None-Match``/``If-Modified-Since`` from the last response);
items are keyed by GUID, else by link, and an item seen by an earlier poll is never archived
again. New items become one crawl (their titles, dates and categories kept, the subscription's
tags added). A failed poll is retried with exponential back-off (1 min, 2, 4, … at most 6 h) and
its error is kept on the schedule; the next success resets both.
"""

from __future__ import annotations

import hashlib
import logging

import httpx

from boxcar.shared import importers

log = logging.getLogger("boxcar.crawl_runner.feeds")

USER_AGENT = "Boxcar feed poller (+https://github.com/boxcar-archiver)"
MAX_FEED_BYTES = 20 * 1024 * 1024


class FeedResponse:
    """One poll's outcome: ``not_modified``, or ``content`` with its validators."""

    def __init__(
        self, *, not_modified: bool = False, content: bytes = b"", etag: str = "", last_modified: str = ""
    ) -> None:
        self.not_modified = not_modified
        self.content = content
        self.etag = etag
        self.last_modified = last_modified


async def fetch_feed(client: httpx.AsyncClient, url: str, etag: str, last_modified: str) -> FeedResponse:
    """GET a feed conditionally.

    Raises:
        httpx.HTTPError / ValueError: network failure, an error status, or an over-large body
            (the message is what the schedule's ``last_error`` shows).
    """
    headers = {
        "User-Agent": USER_AGENT,
        "Accept": "application/rss+xml, application/atom+xml, application/feed+json, application/xml;q=0.9, */*;q=0.8",
    }
    if etag:
        headers["If-None-Match"] = etag
    if last_modified:
        headers["If-Modified-Since"] = last_modified
    async with client.stream("GET", url, headers=headers) as response:
        if response.status_code == 304:
            return FeedResponse(not_modified=True, etag=etag, last_modified=last_modified)
        if response.status_code >= 400:
            raise ValueError(f"HTTP {response.status_code} from {url}")
        body = bytearray()
        async for chunk in response.aiter_bytes():
            body.extend(chunk)
            if len(body) > MAX_FEED_BYTES:
                raise ValueError(f"feed larger than {MAX_FEED_BYTES // (1024 * 1024)} MiB")
        return FeedResponse(
            content=bytes(body),
            etag=response.headers.get("etag", ""),
            last_modified=response.headers.get("last-modified", ""),
        )


def feed_entries(content: bytes) -> tuple[str, list[tuple[str, importers.Entry]]]:
    """Parse a feed into ``(format, [(item_key, entry), ...])``.

    ``item_key`` is the sha256 of the item's GUID, or of its link when it has none.

    Raises:
        ValueError: the content is not a feed.
    """
    result = importers.parse(content)
    if result.format not in importers.FEED_FORMATS:
        raise ValueError(f"not a feed (the content looks like {result.format})")
    keyed = []
    for entry in result.entries:
        key_source = entry.guid or entry.url
        keyed.append((hashlib.sha256(key_source.encode("utf-8")).hexdigest(), entry))
    return result.format, keyed
