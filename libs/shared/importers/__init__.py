"""Import parsers: turn a bookmark export, feed, history dump or text file into URLs to archive.

``parse(data)`` detects the format from the content (never from a file name) and returns an
:class:`ImportResult`: the importable http(s) records as :class:`Entry` objects, in document order
with duplicates kept, and a :class:`Rejected` for every record whose URL was non-http(s), empty,
relative or unparseable. ``parse`` never raises on malformed input: a bad record becomes a
``Rejected`` and the others are kept.

The same URL more than once in one file (a bookmark in a folder and again in the toolbar, a page
visited twice): no parser merges records, each keeps its own title, tags and date. The caller
(:func:`boxcar.shared.admission.admit`) merges records with the same canonical URL: the first
non-empty title wins, the tags are the union of every record's tags (first-seen order), and the
earliest bookmark date wins.

Formats (see ``FORMATS``):

- ``netscape`` (Netscape bookmark HTML from any browser or service), ``pocket_html``, ``html``
  (every ``<a href>`` of another HTML page), ``pinboard_xml``;
- ``rss`` (RSS 0.9x, 1.0/RDF, 2.0), ``atom``, ``jsonfeed``;
- ``chrome_json``, ``firefox_json``, ``browser_history_json``, ``pinboard_json``,
  ``wallabag_json``, ``omnivore_json``, ``linkwarden_json``, ``delicious_json``,
  ``elcurator_json``, ``readability_json``, ``json`` (any list/object of records with a URL
  field), ``jsonl``;
- ``pocket_csv``, ``raindrop_csv``, ``instapaper_csv``, ``readwise_csv`` (Readwise Reader),
  ``csv`` (any CSV whose rows hold a URL, with or without a header row);
- ``url_list``, ``markdown``, ``text``.

URLs are checked for a scheme and stored as the source gave them (entities decoded, surrounding
whitespace trimmed); ``ImportResult.seeds`` turns entries into ``Seed``s where they enter Boxcar,
which canonicalizes each URL once and rejects what cannot be archived.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from boxcar.shared.urls import strip_userinfo

from . import csvformats, feeds, jsonformats, netscape, text
from ._common import Collector, Entry, ImportResult, Rejected, decode_bytes, split_tags
from .text import extract_urls

__all__ = [
    "redact_credentials",
    "FEED_FORMATS",
    "looks_binary",
    "FORMATS",
    "Entry",
    "ImportResult",
    "Rejected",
    "UnknownFormat",
    "detect_format",
    "extract_urls",
    "parse",
    "split_tags",
]

_JSON_KINDS = (
    "chrome_json",
    "firefox_json",
    "browser_history_json",
    "pinboard_json",
    "wallabag_json",
    "omnivore_json",
    "linkwarden_json",
    "delicious_json",
    "elcurator_json",
    "readability_json",
    "json",
)
_CSV_KINDS = ("pocket_csv", "raindrop_csv", "instapaper_csv", "readwise_csv", "csv")

_Parser = Callable[..., None]
_PARSERS: dict[str, _Parser] = {
    "netscape": netscape.parse_netscape,
    "pocket_html": netscape.parse_pocket_html,
    "html": netscape.parse_html,
    "pinboard_xml": netscape.parse_pinboard_xml,
    "rss": feeds.parse_feed,
    "atom": feeds.parse_feed,
    "jsonfeed": feeds.parse_jsonfeed,
    **{kind: partial(jsonformats.parse_json, kind) for kind in _JSON_KINDS},
    "jsonl": jsonformats.parse_jsonl,
    **{kind: partial(csvformats.parse_csv, kind) for kind in _CSV_KINDS},
    "url_list": text.parse_url_list,
    "markdown": text.parse_text,
    "text": text.parse_text,
}

FORMATS: tuple[str, ...] = tuple(_PARSERS)
#: The formats a feed subscription accepts.
FEED_FORMATS: tuple[str, ...] = ("rss", "atom", "jsonfeed")
"""Every format name :func:`parse` accepts and :func:`detect_format` can return."""


class UnknownFormat(ValueError):
    """Raised by :func:`parse` for an explicit ``format`` that is not one of ``FORMATS``."""


def _sniff(data: bytes) -> tuple[str, object]:
    """The format of ``data`` plus what was already decoded/parsed on the way (or ``None``)."""
    decoded = decode_bytes(data)
    stripped = decoded.lstrip()
    if not stripped:
        return "text", decoded
    if stripped[0] in "[{":
        loaded = jsonformats.load_lenient(decoded)
        if loaded is not None:
            if loaded[0] == "jsonl":
                return "jsonl", decoded
            return jsonformats.kind_of(loaded[1]), loaded[1]
    if stripped[0] == "<" or "<!doctype netscape-bookmark-file" in decoded[:4096].lower():
        kind = netscape.sniff_markup(stripped)
        if kind is not None:
            return kind, (None if kind in ("rss", "atom") else decoded)
    kind = csvformats.sniff_csv(stripped)
    if kind is not None:
        return kind, stripped
    loaded = jsonformats.load_lenient(decoded)  # JSON after a few leading non-JSON lines
    if loaded is not None:
        if loaded[0] == "jsonl":
            return "jsonl", decoded
        return jsonformats.kind_of(loaded[1]), loaded[1]
    return text.sniff_text(decoded), decoded


def looks_binary(data: bytes) -> bool:
    """True for content that is no text format at all (an executable, an image, an archive): NUL
    bytes early on, unless it is UTF-16/32 text with a byte-order mark."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")):
        return False
    return b"\x00" in data[:8192]


def detect_format(data: bytes) -> str:
    """Detect the format of an import from its content alone (never from a file name).

    Args:
        data: the raw bytes of the file (any of UTF-8 with or without BOM, UTF-16 with BOM,
            ISO-8859-1 or windows-1252).

    Returns:
        One of ``FORMATS``. Input that is none of the structured formats is ``url_list``,
        ``markdown`` or ``text`` (so an empty input is ``text``).

    Raises:
        Nothing for any bytes input.
    """
    try:
        return _sniff(bytes(data))[0]
    except Exception:  # the sniffers are defensive; this is the last line of defence
        return "text"


def parse(
    data: bytes, format: str | None = None, *, folder_tags: bool = False, base_url: str | None = None
) -> ImportResult:
    """Parse an import file into entries to archive and rejected records.

    Args:
        data: the raw bytes of the file (a ``str`` is accepted and encoded as UTF-8).
        format: one of ``FORMATS``, or ``None`` to use :func:`detect_format`.
        folder_tags: also tag each record with the names of the folders/collections it is in
            (Netscape ``<H3>``, Chrome/Firefox folders, Linkwarden collections, CSV ``folder``).
        base_url: the absolute http(s) URL the document was fetched from, e.g. a feed's URL.
            Relative item links of feeds (``rss``, ``atom``, ``jsonfeed``) are resolved against it
            (an ``xml:base`` in the feed still applies first); without it they are resolved against
            the feed's own stated URL or home page, if any. A value that is not an absolute
            http(s) URL is ignored, and other formats ignore it. An item that still has no
            absolute http(s) URL is a ``Rejected`` saying why.

    Returns:
        An :class:`ImportResult` with ``format`` set to the format used, ``entries`` in document
        order (duplicates kept) and ``rejected`` records (non-http(s), empty, relative, absent or
        unparseable URLs; broken records).

    Raises:
        UnknownFormat: ``format`` is given and is not in ``FORMATS``. Malformed input never raises.
    """
    if format is not None and format not in _PARSERS:
        raise UnknownFormat(f"unknown import format {format!r}; expected one of {', '.join(FORMATS)}")
    if isinstance(data, str):
        data = data.encode("utf-8")
    data = bytes(data)
    col = Collector()
    hint: object = None
    try:
        if format is None:
            format, hint = _sniff(data)
        options: dict[str, object] = {"folder_tags": folder_tags}
        if format in FEED_FORMATS:
            options["base_url"] = base_url
        _PARSERS[format](data, hint, col, **options)
    except Exception as exc:  # a parser bug or a pathological input: keep what was collected
        col.reject(
            "document", data[:300].decode("utf-8", "replace"), f"parsing stopped ({exc.__class__.__name__}: {exc})"
        )
        format = format or "text"
    return ImportResult(format=format, entries=col.entries, rejected=col.rejected)


def redact_credentials(data: bytes) -> bytes:
    """An import file as kept under ``sources/``: every ``http(s)://user:password@`` in it loses its
    userinfo (the crawl keeps the credentials sealed; no file holds them in clear). Bytes that
    are not UTF-8 are kept as they are."""
    if b"@" not in data:
        return data
    return strip_userinfo(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
