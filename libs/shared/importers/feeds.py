"""Feeds: RSS 0.9x / 1.0 (RDF) / 2.0 and Atom through feedparser, JSON Feed by hand.

An item's URL is its ``rel="alternate"`` link (or a link without ``rel``); for RSS, failing that,
its ``<guid>`` when it is a permalink. Enclosures and ``via``/``related``/``self`` links are never
items, nor are channel-level links.

Relative item links are resolved against, in this order (RFC 3986 section 5.1): an ``xml:base`` in
the feed (feedparser applies it), the ``base_url`` the caller fetched the feed from (handed to
feedparser as the ``Content-Location`` it resolves against), the feed's own URL as the feed states
it (Atom/RSS ``<link rel="self">``, JSON Feed ``feed_url``), and last its home page (RSS channel
``<link>``, Atom feed ``rel="alternate"`` link, JSON Feed ``home_page_url``); only absolute http(s)
URLs are used as bases (another ``base_url`` is ignored). An item that still has no absolute
http(s) URL is rejected with the reason (e.g. "relative URL with no base", "no URL in record"),
never dropped.

(feedparser 6.0 does not read JSON Feed, hence the small reader here.)
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin

from ._common import Collector, clean_tags, decode_bytes, excerpt, has_scheme, is_absolute_http, to_datetime


class _TextOnly(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []

    def handle_data(self, data: str) -> None:
        self.parts.append(data)


def _plain(value: str | None, detail: object) -> str | None:
    """Strip markup from an HTML-typed feed title."""
    content_type = getattr(detail, "get", lambda *_: "")("type", "") or ""
    if value and "html" in content_type and "<" in value:
        parser = _TextOnly()
        parser.feed(value)
        parser.close()
        return "".join(parser.parts)
    return value


def _struct_time(entry: dict[str, Any], *keys: str) -> datetime | None:
    for key in keys:
        value = dict.get(entry, key)  # the raw dict: no deprecated updated->published fallback
        if value:
            try:
                year, month, day, hour, minute, second = value[:6]
                return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
            except (TypeError, ValueError, OverflowError):
                continue
    return None


def _item_url(entry: dict[str, Any], is_atom: bool) -> str | None:
    links = [link for link in entry.get("links") or [] if isinstance(link, dict)]
    for link in links:
        if (link.get("rel") or "alternate") == "alternate" and link.get("href"):
            return str(link["href"])
    if not is_atom and entry.get("guidislink") and entry.get("id"):
        return str(entry["id"])
    return None


def _http_base(value: object) -> str | None:
    """``value`` when it is an absolute http(s) URL usable as a base, else ``None``."""
    if isinstance(value, str) and is_absolute_http(value.strip()):
        return value.strip()
    return None


def _resolve(url: object, base: str | None) -> object:
    """``url`` joined to ``base`` when it is a relative reference (no scheme) and there is a base."""
    if base is None or not isinstance(url, str) or not url.strip():
        return url
    return url if has_scheme(url.strip()) else urljoin(base, url.strip())


def _declared_base(parsed: dict[str, Any]) -> str | None:
    """The feed's own ``rel="self"`` URL, else its home page link (absolute http(s) only)."""
    feed = parsed.get("feed") or {}
    links = [link for link in feed.get("links") or [] if isinstance(link, dict)]
    for rel in ("self", "alternate"):
        for link in links:
            base = _http_base(link.get("href")) if (link.get("rel") or "alternate") == rel else None
            if base:
                return base
    return None


def parse_feed(
    data: bytes, hint: object, col: Collector, *, folder_tags: bool = False, base_url: str | None = None
) -> None:
    """Formats ``rss`` and ``atom``: one record per feed item/entry (read leniently).

    ``base_url`` is the URL the feed was fetched from (ignored unless it is an absolute http(s)
    URL); relative links are resolved as the module docstring says. feedparser also resolves an
    item's ``id``/``guid`` against it, so a relative GUID becomes absolute (absolute GUIDs are
    unchanged).
    """
    import feedparser  # here, not at the top: 68 modules and 2.8 MiB the API's processes need only for a feed

    given = _http_base(base_url)  # feedparser drops every link it cannot join to a broken base
    headers = {"content-location": given} if given else None
    # a stream: never treated as a URL or file name
    parsed = feedparser.parse(io.BytesIO(data), response_headers=headers)
    is_atom = str(parsed.get("version") or "").startswith("atom")
    fallback = _declared_base(parsed)
    entries = parsed.get("entries") or []
    if not entries and not parsed.get("version") and parsed.get("bozo"):
        col.reject(
            "document", data[:300].decode("utf-8", "replace"), f"not a readable feed ({parsed.get('bozo_exception')})"
        )
        return
    for number, entry in enumerate(entries, 1):
        where = f"item {number}"
        try:
            url = _resolve(_item_url(entry, is_atom), fallback)
            title = _plain(entry.get("title"), entry.get("title_detail"))
            tags = [tag.get("term") or tag.get("label") for tag in entry.get("tags") or []]
            when = _struct_time(entry, "published_parsed", "updated_parsed", "created_parsed")
            record = title or entry.get("id") or excerpt(dict(entry))
            guid = entry.get("id")
            col.add(
                where,
                url,
                title=title,
                tags=tags,
                when=when,
                record=record,
                decode=False,
                guid=str(guid).strip() if guid else None,
            )
        except Exception as exc:  # one bad item never drops the others
            col.reject(where, excerpt(entry.get("title") or ""), f"unreadable item ({exc})")


def is_json_feed(obj: object) -> bool:
    """True for a JSON Feed document (``version`` https://jsonfeed.org/…, or items + feed URLs)."""
    if not isinstance(obj, dict) or not isinstance(obj.get("items"), list):
        return False
    version = obj.get("version")
    if isinstance(version, str) and "jsonfeed.org" in version:
        return True
    return "home_page_url" in obj or "feed_url" in obj


def _jsonfeed_base(obj: dict[str, Any]) -> str | None:
    """A JSON Feed's own URL (``feed_url``), else its ``home_page_url`` (absolute http(s) only)."""
    return _http_base(obj.get("feed_url")) or _http_base(obj.get("home_page_url"))


def parse_jsonfeed(
    data: bytes, hint: object, col: Collector, *, folder_tags: bool = False, base_url: str | None = None
) -> None:
    """Format ``jsonfeed``: ``items[].url`` (never ``external_url``, attachments or content).

    A relative ``url`` is resolved against ``base_url`` (the URL the feed was fetched from; ignored
    unless it is an absolute http(s) URL), else
    against ``feed_url``, else ``home_page_url`` (the first of those two that is an absolute http(s)
    URL).
    """
    obj = hint
    if not isinstance(obj, dict):
        try:
            obj = json.loads(decode_bytes(data))
        except (ValueError, RecursionError) as exc:
            col.reject("document", decode_bytes(data[:300]), f"not valid JSON ({exc})")
            return
    items = obj.get("items") if isinstance(obj, dict) else None
    if not isinstance(items, list):
        col.reject("document", excerpt(obj), "JSON Feed without an items list")
        return
    given = _http_base(base_url)
    declared = _jsonfeed_base(obj)
    for number, item in enumerate(items, 1):
        where = f"item {number}"
        try:
            if not isinstance(item, dict):
                col.reject(where, item, "item is not an object")
                continue
            raw_tags = item.get("tags")
            tags = clean_tags(raw_tags if isinstance(raw_tags, list) else [])
            when = to_datetime(item.get("date_published")) or to_datetime(item.get("date_modified"))
            guid = item.get("id")
            col.add(
                where,
                _resolve(_resolve(item.get("url"), given), declared),
                title=item.get("title"),
                tags=tags,
                when=when,
                record=guid or item,
                guid=str(guid).strip() if guid not in (None, "") else None,
            )
        except Exception as exc:  # one bad item never drops the others
            col.reject(where, item, f"unreadable item ({exc})")
