"""JSON and JSONL exports.

Tree-shaped bookmark files (``chrome_json``: Chrome's ``Bookmarks`` file with ``roots``;
``firefox_json``: Firefox's backup with ``text/x-moz-place`` nodes) are walked node by node.
Everything else is a list of *records*: objects with a URL field (``url``, ``href``, ``link``,
``uri``, ``article__url``, ``given_url``, ``resolved_url``). Records are looked for in the top-level
list, or in lists under well-known container keys (``bookmarks``, ``items``, ``links``,
``collections``, ...). Only the URL field of a record is imported: never ``trap``, descriptions,
content or notes. Titles come from ``title``/``article__title``/``name`` (else ``description``,
which is the title in Pinboard-style exports); tags from ``tags``/``labels``/``tag`` (lists, lists
of ``{"name": ...}`` or separated strings); dates from the usual time fields.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from ._common import Collector, clean_tags, decode_bytes, excerpt, split_tags, to_datetime
from .feeds import is_json_feed

_URL_KEYS = ("url", "href", "link", "uri", "article__url", "given_url", "resolved_url", "bookmark_url")
_TITLE_KEYS = ("title", "article__title", "name", "resolved_title", "given_title")
_TAG_KEYS = ("tags", "labels", "tag", "keywords", "categories")
_DATE_KEYS = (
    "bookmarked_at",
    "time_added",
    "time",
    "timestamp",
    "created",
    "created_at",
    "createdat",
    "saved_at",
    "savedat",
    "date_added",
    "dateadded",
    "added",
    "added_at",
    "date",
    "date_saved",
    "published",
    "date_published",
    "publishedat",
    "updated_at",
    "updatedat",
    "date_modified",
    "lastmodified",
    "last_modified",
)
_CONTAINER_KEYS = {
    "bookmarks",
    "items",
    "links",
    "collections",
    "folders",
    "children",
    "posts",
    "entries",
    "data",
    "results",
    "articles",
    "records",
    "list",
    "urls",
    "saves",
    "documents",
    "pages",
}
_TAG_MODE = {"browser_history_json": "comma", "firefox_json": "comma"}
_MAX_DEPTH = 64


# --------------------------------------------------------------------------- loading


_WHITESPACE = re.compile(r"[ \t\r\n]*")
_VALUE_LINE = re.compile(r"^[\[{\"]", re.MULTILINE)


def iter_json_values(text: str) -> Iterator[tuple[int, Any, str | None, str]]:
    """Walk a stream of JSON values: one per line (JSON Lines), or concatenated (``{...}{...}``), or
    pretty-printed one after another, with :meth:`json.JSONDecoder.raw_decode`.

    Yields:
        ``(line, value, error, source)`` in document order: ``line`` is the 1-based line the value
        starts on; ``error`` is ``None`` for a decoded ``value``, else why the text at ``line`` is
        not JSON, and then ``source`` is that text up to the next line starting with ``{``, ``[`` or
        ``"`` (where reading resumes) and ``value`` is ``None``. Never raises.
    """
    decoder = json.JSONDecoder()
    pos, line, counted = 0, 1, 0
    while True:
        blank = _WHITESPACE.match(text, pos)  # always matches (it may match nothing)
        pos = blank.end() if blank else pos
        if pos >= len(text):
            return
        line += text.count("\n", counted, pos)
        counted = pos
        try:
            value, end = decoder.raw_decode(text, pos)
        except (ValueError, RecursionError) as exc:
            newline = text.find("\n", pos)
            resume = _VALUE_LINE.search(text, newline + 1) if newline >= 0 else None
            end = resume.start() if resume else len(text)
            yield line, None, f"invalid JSON ({exc})", text[pos:end]
        else:
            yield line, value, None, ""
        pos = end


def _is_stream(text: str) -> bool:
    """True for two or more JSON values one after another (more decoded than broken)."""
    if text.lstrip()[:1] not in ("{", "["):
        return False
    good = bad = 0
    for _, _, error, _ in iter_json_values(text):
        if error is None:
            good += 1
        else:
            bad += 1
    return good >= 2 and bad < good


def load_lenient(text: str) -> tuple[str, Any] | None:
    """Parse JSON, JSONL (or any stream of JSON values, see :func:`iter_json_values`), or JSON
    after some leading non-JSON lines.

    Returns ``("json", obj)``, ``("jsonl", text)`` or ``None`` when the text is none of these.
    """
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        pass
    else:
        lines = [line for line in text.splitlines() if line.strip()]
        if isinstance(obj, dict) and len(lines) == 1 and _is_record(obj):
            return "jsonl", text
        return "json", obj
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    objects = 0
    for line in lines:
        if line.startswith("{"):
            try:
                objects += isinstance(json.loads(line), dict)
            except (ValueError, RecursionError):
                pass
    if objects and objects * 2 >= len(lines):
        return "jsonl", text
    if _is_stream(text):  # e.g. ArchiveBox's concatenated or pretty-printed objects
        return "jsonl", text
    decoder = json.JSONDecoder()
    offset = 0
    for number, line in enumerate(text.splitlines(keepends=True)):
        if number >= 20:
            break
        stripped = line.lstrip()
        if stripped[:1] in ("[", "{"):
            try:
                obj, end = decoder.raw_decode(text, offset + len(line) - len(stripped))
            except (ValueError, RecursionError):
                pass
            else:
                if not text[end:].strip() and isinstance(obj, list | dict) and obj:
                    return "json", obj
        offset += len(line)
    return None


def kind_of(obj: Any) -> str:
    """The format name of a parsed JSON document."""
    if isinstance(obj, dict):
        if isinstance(obj.get("roots"), dict):
            return "chrome_json"
        if str(obj.get("type", "")).startswith("text/x-moz-place"):
            return "firefox_json"
        if is_json_feed(obj):
            return "jsonfeed"
        collections = obj.get("collections")
        if isinstance(collections, list) and any(isinstance(c, dict) and "links" in c for c in collections):
            return "linkwarden_json"
        bookmarks = obj.get("bookmarks")
        if isinstance(bookmarks, list) and any(isinstance(b, dict) and "article__url" in b for b in bookmarks):
            return "readability_json"
        return "json"
    if not isinstance(obj, list):
        return "json"
    keys: set[str] = set()
    for item in obj[:50]:
        if isinstance(item, dict):
            keys.update(k.lower() for k in item if isinstance(k, str))
    if any(str(item.get("type", "")).startswith("text/x-moz-place") for item in obj[:50] if isinstance(item, dict)):
        return "firefox_json"
    if {"href", "description"} <= keys and keys & {"extended", "hash", "meta", "shared", "toread"}:
        return "pinboard_json"
    if {"href", "timestamp"} <= keys and keys <= {"href", "timestamp", "description", "tags", "title"}:
        return "browser_history_json"
    if "url" in keys and keys & {"is_read", "is_fav", "is_archived", "is_starred", "reading_time", "domain_name"}:
        return "wallabag_json"
    if "url" in keys and "labels" in keys and keys & {"savedat", "slug", "readingprogress"}:
        return "omnivore_json"
    if "url" in keys and "is_saved" in keys:
        return "elcurator_json"
    if "url" in keys and keys & {"others", "owner"} and "created" in keys:
        return "delicious_json"
    return "json"


# --------------------------------------------------------------------------- records


def _lower(record: dict[Any, Any]) -> dict[str, Any]:
    return {k.lower(): v for k, v in record.items() if isinstance(k, str)}


def _is_record(node: object) -> bool:
    return isinstance(node, dict) and any(key in _lower(node) for key in _URL_KEYS)


def _first_url(low: dict[str, Any]) -> object:
    found: object = None
    for key in _URL_KEYS:
        if key in low:
            value = low[key]
            if isinstance(value, str) and value.strip():
                return value
            if found is None:
                found = value
    return found


def _title(low: dict[str, Any]) -> object:
    for key in _TITLE_KEYS:
        value = low.get(key)
        if isinstance(value, str) and value.strip():
            return value
    if not any(key in low for key in _TITLE_KEYS):
        return low.get("description")
    return None


def _tags(low: dict[str, Any], mode: str) -> list[str]:
    for key in _TAG_KEYS:
        value = low.get(key)
        if isinstance(value, str):
            return split_tags(value, mode)
        if isinstance(value, list):
            tags: list[str] = []
            for tag in value:
                if isinstance(tag, dict):
                    tag = next(
                        (tag[k] for k in ("name", "label", "title", "tag", "slug") if isinstance(tag.get(k), str)), None
                    )
                if isinstance(tag, str):
                    tags.append(tag)
            return tags
    return []


def _when(low: dict[str, Any]) -> datetime | None:
    for key in _DATE_KEYS:
        if key in low:
            when = to_datetime(low[key])
            if when is not None:
                return when
    return None


def _history_tags(chain: list[str], folders: list[str]) -> tuple[list[str], list[str]]:
    """ArchiveBox's Firefox export puts a bookmark's parent chain in ``tags``, e.g.
    ``"language,Tags,"`` (a real tag: the chain ends at Firefox's "Tags" root) or
    ``"F+,Bookmarks Toolbar,"`` (folders, which are tags only with ``folder_tags``)."""
    chain = [part.strip() for part in chain if part.strip()]
    if chain and chain[-1] == "Tags":
        return chain[:-1], folders
    return [], [*folders, *reversed(chain)]


class _Walker:
    def __init__(self, kind: str, col: Collector, folder_tags: bool, label: str = "item") -> None:
        self.kind = kind
        self.col = col
        self.folder_tags = folder_tags
        self.label = label
        self.count = 0
        self.tag_mode = _TAG_MODE.get(kind, "auto")

    def where(self) -> str:
        self.count += 1
        return f"{self.label} {self.count}"

    def record(self, record: dict[str, Any], folders: list[str], where: str | None = None) -> None:
        where = where or self.where()
        try:
            low = _lower(record)
            tags = _tags(low, self.tag_mode)
            if self.kind == "browser_history_json" and isinstance(low.get("tags"), str):
                tags, folders = _history_tags(tags, folders)
            if self.folder_tags:
                tags = [*tags, *folders]
            self.col.add(
                where, _first_url(low), title=_title(low), tags=clean_tags(tags), when=_when(low), record=record
            )
        except Exception as exc:  # one bad record never drops the others
            self.col.reject(where, record, f"unreadable record ({exc})")

    def walk(self, node: Any, folders: list[str], depth: int = 0, strings: bool = False) -> bool:
        """Import the records in ``node``; True when anything was found."""
        before = len(self.col.entries) + len(self.col.rejected)
        if depth > _MAX_DEPTH:
            return False
        if isinstance(node, dict):
            if _is_record(node):
                self.record(node, folders)
            else:
                self.descend(node, folders, depth)
        elif isinstance(node, list):
            has_records = any(_is_record(item) for item in node)
            for item in node:
                if _is_record(item):
                    self.record(item, folders)
                elif isinstance(item, dict):
                    if not self.descend(item, folders, depth) and has_records:
                        self.col.reject(self.where(), item, "no URL in record")
                elif isinstance(item, str) and strings:
                    self.col.add(self.where(), item)
                elif isinstance(item, list):
                    self.walk(item, folders, depth + 1)
        return len(self.col.entries) + len(self.col.rejected) > before

    def descend(self, node: dict[str, Any], folders: list[str], depth: int) -> bool:
        name = node.get("name") if isinstance(node.get("name"), str) else node.get("title")
        sub = [*folders, name.strip()] if isinstance(name, str) and name.strip() else folders
        found = False
        for key, value in node.items():
            if isinstance(key, str) and key.lower() in _CONTAINER_KEYS:
                if isinstance(value, list):
                    found |= self.walk(value, sub, depth + 1, strings=key.lower() in ("urls", "links"))
                elif isinstance(value, dict):  # e.g. Pocket's API: {"list": {"id": {...}}}
                    found |= self.walk(list(value.values()), sub, depth + 1)
        return found


def _walk_tree(kind: str, obj: Any, col: Collector, folder_tags: bool) -> None:
    """Chrome (``roots`` / ``type: url``) and Firefox (``text/x-moz-place``) bookmark trees."""
    walker = _Walker(kind, col, folder_tags, label="bookmark")
    stack: list[tuple[Any, list[str], int]] = []
    if kind == "chrome_json" and isinstance(obj, dict) and isinstance(obj.get("roots"), dict):
        stack = [(root, [], 0) for root in reversed(list(obj["roots"].values()))]
    elif isinstance(obj, list):
        stack = [(node, [], 0) for node in reversed(obj)]
    else:
        stack = [(obj, [], 0)]
    while stack:
        node, folders, depth = stack.pop()
        if not isinstance(node, dict) or depth > _MAX_DEPTH:
            continue
        node_type = str(node.get("type", ""))
        if node_type in ("url", "text/x-moz-place"):
            where = walker.where()
            low = _lower(node)
            url = low.get("url") if kind == "chrome_json" else low.get("uri")
            try:
                tags = split_tags(low["tags"], "comma") if isinstance(low.get("tags"), str) else []
                when = to_datetime(low.get("date_added") if kind == "chrome_json" else low.get("dateadded"))
                extra = folders if folder_tags else []
                col.add(
                    where, url, title=low.get("name") or low.get("title"), tags=[*tags, *extra], when=when, record=node
                )
            except Exception as exc:  # one bad record never drops the others
                col.reject(where, node, f"unreadable record ({exc})")
        children = node.get("children")
        if isinstance(children, list):
            name = node.get("name") or node.get("title")
            sub = [*folders, name.strip()] if isinstance(name, str) and name.strip() else folders
            stack.extend((child, sub, depth + 1) for child in reversed(children))


# --------------------------------------------------------------------------- entry points


def parse_json(kind: str, data: bytes, hint: object, col: Collector, folder_tags: bool) -> None:
    """Any JSON format but ``jsonl``/``jsonfeed``: ``hint`` is the parsed document when known."""
    obj = hint
    if hint is None:
        text = decode_bytes(data)
        loaded = load_lenient(text)
        if loaded is None:
            col.reject("document", text[:300], "not valid JSON")
            return
        if loaded[0] == "jsonl":
            parse_jsonl(data, text, col, folder_tags=folder_tags)
            return
        obj = loaded[1]
    if kind in ("chrome_json", "firefox_json"):
        _walk_tree(kind, obj, col, folder_tags)
        return
    walker = _Walker(kind, col, folder_tags)
    if not walker.walk(obj, [], strings=True) and not col.entries:
        col.reject("document", excerpt(obj), "no records with a URL field found")


def parse_jsonl(data: bytes, hint: object, col: Collector, *, folder_tags: bool = False) -> None:
    """Format ``jsonl``: a stream of JSON values, one per line or concatenated / pretty-printed one
    after another (ArchiveBox's JSON stream: ``{"href", "description", "timestamp"}`` objects).

    Each value is a record (an object with a URL field), a URL string, or a list/object holding
    records. The records are read as the same records in a JSON array would be (e.g. ``description``
    is the title when there is no title field; epoch timestamps in s, ms, µs or WebKit µs). A part
    that is not JSON is rejected ("invalid JSON") and reading resumes at the next line that starts a
    value; a value without a URL is rejected; the rest are kept.
    """
    text = hint if isinstance(hint, str) else decode_bytes(data)
    values = list(iter_json_values(text))
    records = [value for _, value, error, _ in values if error is None and isinstance(value, dict)]
    kind = kind_of(records) if records else "json"
    kind = "jsonl" if kind == "json" else kind  # e.g. browser_history_json: its tag handling
    walker = _Walker(kind, col, folder_tags, label="line")
    for number, value, error, source in values:
        where = f"line {number}"
        if error is not None:
            col.reject(where, source, error)
        elif _is_record(value):
            walker.record(value, [], where=where)
        elif isinstance(value, str):
            col.add(where, value)
        elif not _Walker(kind, col, folder_tags, label=f"{where} item").walk(value, []):
            col.reject(where, value, "no URL in record")
