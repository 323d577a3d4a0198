"""Feeds: RSS 0.9x / 1.0 (RDF) / 2.0 and Atom through feedparser, JSON Feed by hand.

An item's URL is its ``rel="alternate"`` link (or a link without ``rel``); for RSS, failing that,
its ``<guid>`` when it is a permalink. Enclosures and ``via``/``related``/``self`` links are never
items, nor are channel-level links. Relative links are resolved only when the feed gives a base
(``xml:base``); otherwise the item is rejected ("relative URL with no base").

(feedparser 6.0 does not read JSON Feed, hence the small reader here.)
"""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from html.parser import HTMLParser

import feedparser

from ._common import Collector, clean_tags, decode_bytes, excerpt, to_datetime


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


def _struct_time(entry: dict, *keys: str) -> datetime | None:
    for key in keys:
        value = dict.get(entry, key)  # the raw dict: no deprecated updated->published fallback
        if value:
            try:
                return datetime(*value[:6], tzinfo=UTC)
            except (TypeError, ValueError, OverflowError):
                continue
    return None


def _item_url(entry: dict, is_atom: bool) -> str | None:
    links = [link for link in entry.get("links") or [] if isinstance(link, dict)]
    for link in links:
        if (link.get("rel") or "alternate") == "alternate" and link.get("href"):
            return link["href"]
    if not is_atom and entry.get("guidislink") and entry.get("id"):
        return entry["id"]
    return None


def parse_feed(data: bytes, hint: object, col: Collector, *, folder_tags: bool = False) -> None:
    """Formats ``rss`` and ``atom``: one record per feed item/entry (read leniently)."""
    parsed = feedparser.parse(io.BytesIO(data))  # a stream: never treated as a URL or file name
    is_atom = str(parsed.get("version") or "").startswith("atom")
    entries = parsed.get("entries") or []
    if not entries and not parsed.get("version") and parsed.get("bozo"):
        col.reject(
            "document", data[:300].decode("utf-8", "replace"), f"not a readable feed ({parsed.get('bozo_exception')})"
        )
        return
    for number, entry in enumerate(entries, 1):
        where = f"item {number}"
        try:
            url = _item_url(entry, is_atom)
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


def parse_jsonfeed(data: bytes, hint: object, col: Collector, *, folder_tags: bool = False) -> None:
    """Format ``jsonfeed``: ``items[].url`` (never ``external_url``, attachments or content)."""
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
                item.get("url"),
                title=item.get("title"),
                tags=tags,
                when=when,
                record=guid or item,
                guid=str(guid).strip() if guid not in (None, "") else None,
            )
        except Exception as exc:  # one bad item never drops the others
            col.reject(where, item, f"unreadable item ({exc})")
