"""Plain text, markdown and URL lists.

- :func:`extract_urls` finds every http(s) URL in free text or markdown.
- ``parse_text`` (formats ``text`` and ``markdown``) imports what :func:`extract_urls` finds.
- ``parse_url_list`` (format ``url_list``) reads one URL per line; ``#`` comments, blank lines and
  lines that are not URLs are skipped.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator

from ._common import HTTP_TOKEN, URL_TOKEN, Collector, decode_bytes

_STOP = r"\s<>\"\x00-\x1f\x7f"
_MD_URL = rf"https?://(?:[^{_STOP}()]|\([^{_STOP}()]*\))+"
_TOKEN = re.compile(
    # [text](url "optional title")
    rf"\[(?P<text>[^\[\]\n]{{0,2000}})\]\(\s*<?(?P<mdurl>{_MD_URL})>?(?:\s+(?:\"[^\"\n]*\"|'[^'\n]*'))?\s*\)"
    # a URL that is a whole unquoted CSV field (at a line start or right after a "," / ";") ends at
    # the field delimiter: a CSV writer quotes a field that holds its delimiter
    rf"|(?:^|(?<=,))(?P<field>https?://[^{_STOP},]+)"
    rf"|(?<=;)(?P<sfield>https?://[^{_STOP};]+)"
    # a bare URL in prose (also covers <autolinks>: '<' and '>' end a URL)
    rf"|(?<![A-Za-z0-9])(?P<url>https?://[^{_STOP}]+)",
    re.IGNORECASE | re.MULTILINE,
)
_TRAILING = ".,;:!?"
_PAIRS = {")": "(", "]": "["}
_MD_HINT = re.compile(r"\[[^\[\]\n]*\]\(\s*<?https?://|<https?://[^\s<>]+>", re.IGNORECASE)


def _trim(url: str) -> str:
    """Drop trailing punctuation and unbalanced closing brackets from a bare URL."""
    while url:
        last = url[-1]
        if last in _TRAILING:
            url = url[:-1]
        elif last in _PAIRS and url.count(last) > url.count(_PAIRS[last]):
            url = url[:-1]
        else:
            break
    return url


def _iter_urls(text: str) -> Iterator[tuple[str, str | None, int]]:
    """Yield ``(url, title, offset)`` for each http(s) URL in ``text``, in order."""
    for match in _TOKEN.finditer(text):
        if match.group("mdurl") is not None:
            url = match.group("mdurl").replace("&amp;", "&")
            title = match.group("text").strip() or None
            start = match.start("mdurl")
        else:
            group = next(name for name in ("field", "sfield", "url") if match.group(name) is not None)
            url = _trim(match.group(group).replace("&amp;", "&"))
            title = None
            start = match.start(group)
        if url.split("://", 1)[1]:
            yield url, title, start


def extract_urls(text: str) -> list[tuple[str, str | None]]:
    """Find the http(s) URLs in plain text or markdown.

    Args:
        text: any text.

    Returns:
        ``(url, title)`` pairs in document order, duplicates kept. A URL starts with ``http://`` or
        ``https://`` (any case) and ends at whitespace, ``<``, ``>``, ``"`` or a control character;
        trailing ``. , ; : ! ?`` and unbalanced closing ``)``/``]`` are dropped, balanced ones kept.
        A URL that starts a line, or follows a ``,`` or ``;`` directly, is an unquoted CSV field:
        it also ends at the next ``,`` (at a line start or after ``,``) or ``;`` (after ``;``), so
        ``2024-11-13,https://a.example/x,Next`` gives ``https://a.example/x``. In prose (after a
        space or other text) commas and semicolons stay part of the URL
        (``see https://en.wikipedia.org/wiki/Hello,_World``).
        ``[text](url)`` gives ``url`` with title ``text``; bare URLs and ``<autolinks>`` have no
        title (``None``). ``&amp;`` is decoded to ``&``. URLs are not otherwise checked: a
        returned URL may still fail :func:`boxcar.shared.urls.canonicalize`.

    Raises:
        Nothing for any ``str`` input.
    """
    return [(url, title) for url, title, _ in _iter_urls(text)]


def sniff_text(text: str) -> str:
    """``url_list``, ``markdown`` or ``text`` for a decoded text document."""
    lines = [line.strip() for line in text.splitlines()]
    content = [line for line in lines if line and not line.startswith("#")]
    if content:
        url_lines = sum(1 for line in content if HTTP_TOKEN.match(line))
        if url_lines and url_lines * 2 >= len(content):
            return "url_list"
    total = sum(1 for _ in _iter_urls(text))
    markdown = len(_MD_HINT.findall(text))
    if total and markdown * 2 >= total:
        return "markdown"
    return "text"


def parse_text(data: bytes, hint: object, col: Collector, *, folder_tags: bool = False) -> None:
    """Formats ``text`` and ``markdown``: every URL :func:`extract_urls` finds is a record."""
    text = hint if isinstance(hint, str) else decode_bytes(data)
    line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
    for url, title, offset in _iter_urls(text):
        line = bisect.bisect_right(line_starts, offset)
        col.add(f"line {line}", url, title=title, decode=False)


def parse_url_list(data: bytes, hint: object, col: Collector, *, folder_tags: bool = False) -> None:
    """Format ``url_list``: one URL per line.

    Blank lines and ``#`` comments are skipped; a line that is one token with a scheme (or a bare
    ``www.`` domain) is a record (non-http(s) ones are rejected); other lines are searched for
    URLs like plain text.
    """
    text = hint if isinstance(hint, str) else decode_bytes(data)
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        where = f"line {number}"
        if URL_TOKEN.match(line) or (line.lower().startswith("www.") and " " not in line):
            col.add(where, line.replace("&amp;", "&"), decode=False)
            continue
        for url, title, _ in _iter_urls(line):
            col.add(where, url, title=title, decode=False)
