"""HTML-shaped inputs, read with the stdlib event parser (no DOM, so unclosed tags are harmless).

- ``netscape``: the Netscape bookmark file every browser and bookmarking service exports. A
  bookmark is an ``<A HREF>`` that follows a ``<DT>``; anchors inside ``<DD>`` text are not.
  ``TAGS`` is comma separated; ``ADD_DATE`` (else ``LAST_MODIFIED``) is an epoch in s, ms or µs.
  ``<H3>`` folder names become tags only with ``folder_tags``.
- ``pocket_html``: Pocket's ``ril_export.html`` (``<li><a href time_added tags>``).
- ``html``: any other HTML page: every ``<a href>`` is a record (resolved against ``<base>``).
- ``pinboard_xml``: Pinboard's ``<posts><post href description tag time/></posts>``.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from urllib.parse import urljoin

from ._common import Collector, decode_bytes, split_tags, to_datetime, unescape_attr

# The tolerant start-tag grammar of html.parser, used to re-read attribute values raw so that
# they can be unescaped the way browsers do (html.parser turns "&not" in "?a&notify=1" into "¬").
_TAGNAME = re.compile(r"<[a-zA-Z][^\t\n\r\f />\x00]*(?:\s|/(?!>))*")
_ATTR = re.compile(r"((?<=['\"\s/])[^\s/>][^\s/=>]*)(\s*=+\s*('[^']*'|\"[^\"]*\"|(?!['\"])[^>\s]*))?(?:\s|/(?!>))*")
_NETSCAPE_DOCTYPE = re.compile(r"<!DOCTYPE\s+NETSCAPE-Bookmark-file", re.IGNORECASE)
_PROLOG = re.compile(r"\s*(?:<\?.*?\?>|<!--.*?-->|<!(?!--)[^>]*>)", re.DOTALL)
_ROOT = re.compile(r"\s*<([A-Za-z][\w:.-]*)")
_ENDS_ANCHOR = {"a", "dt", "dd", "dl", "h3", "li", "ul", "ol", "p", "div", "td", "tr"}


def raw_attrs(starttag: str) -> dict[str, str | None]:
    """Attributes of a raw start tag, names lower-cased, values unescaped browser-style."""
    attrs: dict[str, str | None] = {}
    match = _TAGNAME.match(starttag)
    if not match:
        return attrs
    pos = match.end()
    while pos < len(starttag):
        m = _ATTR.match(starttag, pos)
        if not m or m.end() == pos:
            break
        name, rest, value = m.group(1, 2, 3)
        if not rest:
            value = None
        elif value[:1] in ("'", '"') and value[:1] == value[-1:] and len(value) >= 2:
            value = value[1:-1]
        attrs.setdefault(name.lower(), unescape_attr(value) if value else value)
        pos = m.end()
    return attrs


def sniff_markup(text: str) -> str | None:
    """Format of a document that starts with ``<``, or ``None`` if it is not markup."""
    head = text[:65536]
    if _NETSCAPE_DOCTYPE.search(head[:4096]):
        return "netscape"
    pos = 0
    while True:
        prolog = _PROLOG.match(head, pos)
        if not prolog or prolog.end() == pos:
            break
        pos = prolog.end()
    root = _ROOT.match(head, pos)
    name = root.group(1).lower() if root else ""
    if name in ("rss", "rdf:rdf", "rdf", "channel") or name.endswith(":rdf"):
        return "rss"
    if name == "feed" or name.endswith(":feed"):
        return "atom"
    if name == "posts":
        return "pinboard_xml"
    lowered = head.lower()
    if re.search(r"<dt[\s>]", lowered) and "<a " in lowered:
        return "netscape"
    if re.search(r"<li[^>]*>\s*<a\s[^>]*\btime_added\s*=", lowered) or "<title>pocket export" in lowered:
        return "pocket_html"
    if root:
        return "html"
    return None


class _Reader(HTMLParser):
    """Event-driven reader for the four HTML-shaped formats (``mode`` picks which)."""

    def __init__(self, mode: str, col: Collector, folder_tags: bool) -> None:
        super().__init__(convert_charrefs=True)
        self.mode = mode
        self.col = col
        self.folder_tags = folder_tags
        self.armed = False  # the last structural tag was <DT> (or <LI> for Pocket)
        self.folders: list[str | None] = []
        self.pending_folder: str | None = None
        self.h3_text: list[str] | None = None
        self.current: tuple[dict[str, str | None], list[str], list[str]] | None = None
        self.count = 0
        self.base: str | None = None

    # -- helpers
    def _attrs(self, attrs: list[tuple[str, str | None]]) -> dict[str, str | None]:
        raw = self.get_starttag_text()
        return raw_attrs(raw) if raw else dict(attrs)

    def _finish(self) -> None:
        if self.current is None:
            return
        attrs, text, folders = self.current
        self.current = None
        self.count += 1
        label = {"pinboard_xml": "post", "html": "link"}.get(self.mode, "bookmark")
        where = f"{label} {self.count}"
        try:
            self._emit(where, attrs, "".join(text), folders)
        except Exception as exc:  # one bad record never drops the others
            self.col.reject(where, attrs.get("href") or "", f"unreadable record ({exc})")

    def _emit(self, where: str, attrs: dict[str, str | None], text: str, folders: list[str]) -> None:
        href = attrs.get("href")
        if self.mode == "pinboard_xml":
            tags = split_tags(attrs.get("tag") or "", "space")
            self.col.add(
                where,
                href,
                title=attrs.get("description"),
                tags=tags,
                when=to_datetime(attrs.get("time")),
                record=attrs,
                decode=False,
            )
            return
        if href is not None and self.base and self.mode == "html":
            href = urljoin(self.base, href.strip())
        tags = split_tags(attrs.get("tags") or "", "comma")
        when = to_datetime(attrs.get("add_date")) or to_datetime(attrs.get("time_added"))
        if when is None:
            when = to_datetime(attrs.get("last_modified"))
        extra = folders if self.folder_tags else []
        self.col.add(where, href, title=text, tags=[*tags, *extra], when=when, record=attrs, decode=False)

    # -- events
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in _ENDS_ANCHOR:
            self._finish()
        if tag == "dt":
            self.armed = True
        elif tag == "li":
            self.armed = self.mode == "pocket_html"
        elif tag == "dd":
            self.armed = False
        elif tag == "h3":
            self.armed = False
            self.h3_text = []
        elif tag == "dl":
            self.folders.append(self.pending_folder)
            self.pending_folder = None
        elif tag == "base" and self.base is None:
            href = self._attrs(attrs).get("href")
            self.base = href.strip() if href else None
        elif tag == "post" and self.mode == "pinboard_xml":
            self.current = (self._attrs(attrs), [], [])
            self._finish()
        elif tag == "a":
            values = self._attrs(attrs)
            if self.mode == "html":
                if values.get("href") is not None:
                    self.current = (values, [], [])
            elif self.armed and self.mode in ("netscape", "pocket_html"):
                folders = [name for name in self.folders if name]
                self.current = (values, [], folders)
            self.armed = False

    def handle_endtag(self, tag: str) -> None:
        if tag in _ENDS_ANCHOR:
            self._finish()
        if tag == "h3" and self.h3_text is not None:
            self.pending_folder = "".join(self.h3_text).strip() or None
            self.h3_text = None
        elif tag == "dl":
            if self.folders:
                self.folders.pop()
            self.pending_folder = None

    def handle_data(self, data: str) -> None:
        if self.current is not None:
            self.current[1].append(data)
        if self.h3_text is not None:
            self.h3_text.append(data)

    def close(self) -> None:
        super().close()
        self._finish()


def _parse(mode: str, data: bytes, hint: object, col: Collector, folder_tags: bool) -> None:
    text = hint if isinstance(hint, str) else decode_bytes(data)
    reader = _Reader(mode, col, folder_tags)
    try:
        reader.feed(text)
        reader.close()
    except Exception as exc:  # html.parser is tolerant; keep what was read if it still fails
        reader._finish()
        col.reject("document", text[:300], f"HTML parsing stopped early ({exc})")


def parse_netscape(data: bytes, hint: object, col: Collector, *, folder_tags: bool = False) -> None:
    """Format ``netscape``: Netscape bookmark HTML (see module docstring)."""
    _parse("netscape", data, hint, col, folder_tags)


def parse_pocket_html(data: bytes, hint: object, col: Collector, *, folder_tags: bool = False) -> None:
    """Format ``pocket_html``: Pocket's ril_export.html (``<li><a href time_added tags>``)."""
    _parse("pocket_html", data, hint, col, folder_tags)


def parse_html(data: bytes, hint: object, col: Collector, *, folder_tags: bool = False) -> None:
    """Format ``html``: every ``<a href>`` of an HTML page, resolved against ``<base href>``."""
    _parse("html", data, hint, col, folder_tags)


def parse_pinboard_xml(data: bytes, hint: object, col: Collector, *, folder_tags: bool = False) -> None:
    """Format ``pinboard_xml``: ``<post href description tag time>`` (tags space separated)."""
    _parse("pinboard_xml", data, hint, col, folder_tags)
