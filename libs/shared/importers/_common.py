"""Shared pieces of the importers: result types, byte decoding, URL checks, tags, dates.

Everything here is internal to :mod:`boxcar.shared.importers`; the public names (``Entry``,
``Rejected``, ``ImportResult``) are re-exported from the package.
"""

from __future__ import annotations

import ast
import codecs
import html
import html.entities
import json
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit

import msgspec

from boxcar.shared.messages import Seed
from boxcar.shared.urls import InvalidURL, strip_userinfo

MAX_EXCERPT = 300


class Entry(msgspec.Struct, kw_only=True):
    """One imported bookmark / item.

    Attributes:
        url: an absolute http(s) URL exactly as the source gave it, with HTML/XML entities decoded
            and surrounding whitespace trimmed (not otherwise normalized).
        title: the record's title, trimmed; ``None`` when empty or absent.
        tags: the record's explicit tags, trimmed, without empties or duplicates, in source order
            (folder names are added only when the caller asked for ``folder_tags``).
        bookmarked_at: when the record was bookmarked / saved / visited, timezone-aware UTC, or
            ``None`` when the source has no usable date.
        guid: a feed item's GUID / Atom id / JSON Feed id (what feed subscriptions key items on),
            ``None`` for other formats or when the item has none.

    An entry is the record as its source gave it; where it enters Boxcar it becomes a ``Seed``
    (``ImportResult.seeds``), which is when its URL is canonicalized.
    """

    url: str
    title: str | None = None
    tags: list[str] = []
    bookmarked_at: datetime | None = None
    guid: str | None = None


class Rejected(msgspec.Struct, kw_only=True):
    """A record that could not become an :class:`Entry`.

    Attributes:
        where: where the record is in the input, e.g. ``"line 12"``, ``"item 3"``, ``"row 5"``,
            ``"bookmark 7"``.
        value: the offending URL, or a short excerpt of the record (at most 300 characters).
        reason: why it was rejected, e.g. ``"unsupported scheme 'place'"``.
    """

    where: str
    value: str
    reason: str


class ImportResult(msgspec.Struct, kw_only=True):
    """What :func:`boxcar.shared.importers.parse` found in one input.

    Attributes:
        format: the format name used (one of ``FORMATS``).
        entries: the importable records in document order; duplicate URLs are kept.
        rejected: records whose URL was non-http(s), empty, relative, absent or unparseable.
    """

    format: str
    entries: list[Entry]
    rejected: list[Rejected]

    def seeds(self, seal: Callable[[str], str] | None = None) -> tuple[list[tuple[Entry, Seed]], list[Rejected]]:
        """The entries as ``Seed``s (``Seed.parse``: canonical URL, cleaned title and tags, URL
        credentials sealed with ``seal`` or dropped without it), each beside its entry; an entry
        whose URL cannot be archived (a bad host or port) becomes a ``Rejected`` instead."""
        pairs: list[tuple[Entry, Seed]] = []
        rejected: list[Rejected] = []
        for number, entry in enumerate(self.entries, 1):
            try:
                seed = Seed.parse(
                    entry.url,
                    title=entry.title,
                    tags=entry.tags,
                    bookmarked_at=entry.bookmarked_at,
                    source=f"entry {number}",
                    seal=seal,
                )
            except InvalidURL as exc:
                rejected.append(
                    Rejected(where=f"entry {number}", value=excerpt(strip_userinfo(entry.url)), reason=exc.reason)
                )
                continue
            pairs.append((entry, seed))
        return pairs, rejected


# --------------------------------------------------------------------------- decoding

_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32-le"),
    (codecs.BOM_UTF32_BE, "utf-32-be"),
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
_DECLARED = (
    re.compile(rb"""<\?xml[^>]{0,200}?encoding\s*=\s*["']([A-Za-z0-9._:-]{1,40})["']""", re.I),
    re.compile(rb"""<meta[^>]{0,300}?charset\s*=\s*["']?([A-Za-z0-9._:-]{1,40})""", re.I),
)
_WESTERN = {"latin-1", "iso8859-1", "ascii", "cp1252"}


def _decode_western(data: bytes) -> str:
    try:
        return data.decode("cp1252")
    except UnicodeDecodeError:
        return data.decode("latin-1")


def decode_bytes(data: bytes) -> str:
    """Decode input bytes: BOM, then a declared charset, then UTF-8, then windows-1252.

    ISO-8859-1 and US-ASCII declarations are read as windows-1252 (as browsers do). Never raises.
    """
    for bom, codec in _BOMS:
        if data.startswith(bom):
            return data[len(bom) :].decode(codec, errors="replace")
    if len(data) >= 4 and data[0] and not data[1] and data[2] and not data[3]:
        return data.decode("utf-16-le", errors="replace")
    if len(data) >= 4 and not data[0] and data[1] and not data[2] and data[3]:
        return data.decode("utf-16-be", errors="replace")
    head = data[:4096]
    for pattern in _DECLARED:
        match = pattern.search(head)
        if not match:
            continue
        try:
            codec = codecs.lookup(match.group(1).decode("ascii")).name
        except (LookupError, UnicodeDecodeError):
            break
        if codec in _WESTERN:
            return _decode_western(data)
        if codec != "utf-8":
            try:
                return data.decode(codec)
            except (UnicodeDecodeError, LookupError):
                pass
        break
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return _decode_western(data)


# --------------------------------------------------------------------------- entities

_STRICT_REF = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_ATTR_REF = re.compile(r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[A-Za-z][A-Za-z0-9]*;?)")


def unescape_strict(text: str) -> str:
    """Decode only complete (``;``-terminated) character references, e.g. ``&amp;`` -> ``&``."""
    if "&" not in text:
        return text
    return _STRICT_REF.sub(lambda m: html.unescape(m.group(0)), text)


def unescape_attr(value: str) -> str:
    """Decode character references in an HTML attribute value the way browsers do.

    Unlike :func:`html.unescape`, a legacy entity without ``;`` followed by ``=`` or a letter
    is kept literally, so ``?a=1&notify=2`` stays as it is (``&not`` is not decoded).
    """
    if "&" not in value:
        return value

    def repl(match: re.Match[str]) -> str:
        body = match.group(1)
        if body.startswith("#") or body.endswith(";"):
            return html.unescape(match.group(0))
        if body in html.entities.html5 and value[match.end() : match.end() + 1] != "=":
            return html.entities.html5[body]
        return match.group(0)

    return _ATTR_REF.sub(repl, value)


# --------------------------------------------------------------------------- URLs

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")
#: One whitespace-free token that is a URL with a scheme (any scheme, so that non-http(s) ones can
#: be rejected with their reason rather than ignored).
URL_TOKEN = re.compile(
    r"^(?:[A-Za-z][A-Za-z0-9+.\-]*://|(?:mailto|javascript|data|about|place|view-source|magnet|tel|urn):)\S*$",
    re.IGNORECASE,
)
#: One whitespace-free token that starts with ``http://`` or ``https://``.
HTTP_TOKEN = re.compile(r"^https?://\S+$", re.IGNORECASE)


def has_scheme(url: str) -> bool:
    """True when ``url`` starts with a URI scheme (``http:``, ``mailto:``...): it is not a relative reference."""
    return _SCHEME.match(url) is not None


def is_absolute_http(url: str) -> bool:
    """Whether ``url`` is structurally an absolute http(s) URL with a host (a base to resolve
    against); a parse check only, the URL is not canonicalized here."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a malformed port
    except ValueError:
        return False
    return parts.scheme.lower() in ("http", "https") and bool(parts.hostname)


def url_problem(url: str) -> str | None:
    """Why ``url`` (already entity-decoded and trimmed) is not archivable, or ``None`` if it is."""
    if not url:
        return "empty URL"
    match = _SCHEME.match(url)
    if not match:
        if url.lower().startswith("www."):
            return "no scheme (a bare domain is not an absolute http(s) URL)"
        return "relative URL with no base"
    scheme = match.group(1).lower()
    if scheme not in ("http", "https"):
        return f"unsupported scheme {scheme!r}"
    return None


def excerpt(value: object) -> str:
    """A short (<= 300 characters) printable excerpt of a record or value."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            text = repr(value)
    text = text.strip()
    return text if len(text) <= MAX_EXCERPT else text[: MAX_EXCERPT - 1] + "…"


# --------------------------------------------------------------------------- titles and tags


def clean_title(value: object) -> str | None:
    """A trimmed title string, or ``None`` for empty / missing / non-text values."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        value = str(value)
    if not isinstance(value, str):
        return None
    value = value.strip()
    return value or None


_MAX_LIST_CELL = 100_000


def list_cell(value: str) -> list[str] | None:
    """The items of a cell written as a list: a JSON array (``["a", "b"]``, Instapaper) or a Python
    list literal (``['a', 'b']``, Readwise Reader), read with :func:`json.loads` else
    :func:`ast.literal_eval` (never ``eval``).

    Returns:
        The string items (numbers as text; other items skipped), ``[]`` for ``[]``, or ``None``
        when ``value`` is not such a list (then it is an ordinary separated string). Never raises.
    """
    text = value.strip()
    if len(text) < 2 or text[0] != "[" or text[-1] != "]" or len(text) > _MAX_LIST_CELL:
        return None
    try:
        items = json.loads(text)
    except (ValueError, RecursionError):
        try:
            items = ast.literal_eval(text)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return None
    if not isinstance(items, list):
        return None
    return [
        item if isinstance(item, str) else str(item)
        for item in items
        if isinstance(item, str | int | float) and not isinstance(item, bool)
    ]


def split_tags(value: str, mode: str = "auto") -> list[str]:
    """Split a tag string.

    A value that is a JSON or Python-literal list (see :func:`list_cell`) gives its items, whatever
    the mode. Otherwise ``mode``: ``"comma"``, ``"space"``, ``"pipe"`` (``|`` if present, else
    comma) or ``"auto"`` (comma if present, else ``|`` if present, else whitespace).
    """
    listed = list_cell(value)
    if listed is not None:
        return listed
    if mode == "auto":
        mode = "comma" if "," in value else "pipe" if "|" in value else "space"
    if mode == "space":
        return value.split()
    if mode == "pipe":
        return value.split("|") if "|" in value else value.split(",")
    return value.split(",")


def clean_tags(*groups: Iterable[object] | None) -> list[str]:
    """Merge tag lists: keep strings, trim them, drop empties and duplicates, keep order."""
    seen: dict[str, None] = {}
    for group in groups:
        if not group:
            continue
        for tag in group:
            if isinstance(tag, str):
                tag = tag.strip()
                if tag:
                    seen.setdefault(tag, None)
    return list(seen)


# --------------------------------------------------------------------------- dates

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_WEBKIT_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)
_NUMBER = re.compile(r"^[+-]?\d+(?:\.\d+)?$")
_TZ_WORD = re.compile(r"\s*(?:UTC|GMT|Z)$", re.I)


def from_epoch(value: float | int) -> datetime | None:
    """Epoch number to UTC datetime, picking the unit by magnitude.

    seconds (< 1e11), milliseconds (< 1e14), microseconds (< 1.1e16), WebKit/Chrome microseconds
    since 1601 (< 1e17), else nanoseconds. Zero, negative and out-of-range values give ``None``.
    """
    try:
        if value <= 0:
            return None
        if value < 1e11:
            return _EPOCH + timedelta(seconds=value)
        if value < 1e14:
            return _EPOCH + timedelta(milliseconds=value)
        if value < 1.1e16:
            return _EPOCH + timedelta(microseconds=value)
        if value < 1e17:
            return _WEBKIT_EPOCH + timedelta(microseconds=value)
        return _EPOCH + timedelta(microseconds=value / 1000)
    except (OverflowError, ValueError, TypeError):
        return None


def to_datetime(value: object) -> datetime | None:
    """Best-effort date parsing: epoch numbers (any unit), ISO-8601, RFC 2822, Apache log dates.

    Naive results are taken as UTC. Returns ``None`` when nothing fits; never raises.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return from_epoch(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if _NUMBER.match(text):
        return from_epoch(int(text) if text.lstrip("+-").isdigit() else float(text))
    result: datetime | None = None
    candidates = [text]
    if _TZ_WORD.search(text):
        candidates.append(_TZ_WORD.sub("", text) + "+00:00")
    for candidate in candidates:
        try:
            result = datetime.fromisoformat(candidate)
            break
        except ValueError:
            continue
    if result is None:
        try:
            result = parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            result = None
    if result is None:
        try:
            result = datetime.strptime(text, "%d/%b/%Y:%H:%M:%S %z")
        except ValueError:
            return None
    try:
        if result.tzinfo is None:
            return result.replace(tzinfo=UTC)
        return result.astimezone(UTC)
    except (OverflowError, ValueError):
        return None


# --------------------------------------------------------------------------- collecting results


class Collector:
    """Accumulates entries and rejections while a parser walks its input."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.rejected: list[Rejected] = []

    def reject(self, where: str, value: object, reason: str) -> None:
        """Record a rejected record (``value`` is shortened to an excerpt)."""
        self.rejected.append(Rejected(where=where, value=excerpt(value), reason=reason))

    def add(
        self,
        where: str,
        url: object,
        *,
        title: object = None,
        tags: Iterable[object] | None = None,
        when: datetime | None = None,
        record: object = None,
        decode: bool = True,
        guid: str | None = None,
    ) -> bool:
        """Check ``url`` and add an :class:`Entry`, or a :class:`Rejected` saying why not.

        ``decode``: decode ``;``-terminated entities in ``url`` and ``title`` (sources whose parser
        already decoded them pass ``False``). ``record`` is what to show when there is no URL.
        Returns True when an entry was added.
        """
        if url is None:
            self.reject(where, record if record is not None else (title or ""), "no URL in record")
            return False
        if not isinstance(url, str):
            self.reject(where, url, "URL is not a string")
            return False
        clean = (unescape_strict(url) if decode else url).strip()
        problem = url_problem(clean)
        if problem is not None:
            if problem == "empty URL" and record is not None:
                self.reject(where, record, "no URL in record")
            else:
                self.reject(where, clean, problem)
            return False
        if decode and isinstance(title, str):
            title = unescape_strict(title)
        self.entries.append(
            Entry(url=clean, title=clean_title(title), tags=clean_tags(tags), bookmarked_at=when, guid=guid)
        )
        return True
