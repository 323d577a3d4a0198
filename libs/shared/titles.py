"""Choosing a snapshot's title from what the browser saw.

A page's ``og:title`` is what its publisher calls the article; without one, the document
``<title>`` usually carries the site's name too ("Article | Section | Site"). The clean-up
follows the separator rule of Mozilla Readability's ``_getArticleTitle`` (Readability.js,
Apache-2.0): drop the text after the last `` | `` / `` - `` / `` » `` … separator, unless that leaves
fewer than three words or too short a title to trust.
"""

from __future__ import annotations

import re
from typing import Any

_SEPARATORS = r"[\|\-\\/>»]"
_AFTER_LAST = re.compile(rf"(.*){_SEPARATORS} .*", re.DOTALL)
_BEFORE_FIRST = re.compile(rf"[^\|\-\\/>»]*{_SEPARATORS}(.*)", re.DOTALL)
_HIERARCHICAL = re.compile(r" [\\/>»] ")


def _words(text: str) -> int:
    return len(text.split())


def clean_document_title(title: str) -> str:
    """A document title without its site-name suffix (Readability's separator rule); the title
    itself when it has no separator or the rule would leave too little."""
    original = " ".join(title.split())
    if not re.search(rf" {_SEPARATORS} ", original):
        return original
    hierarchical = bool(_HIERARCHICAL.search(original))
    cleaned = _AFTER_LAST.sub(r"\1", original).strip()
    if _words(cleaned) < 3:
        cleaned = _BEFORE_FIRST.sub(r"\1", original).strip()
    if _words(cleaned) <= 4 and (
        not hierarchical or _words(cleaned) != _words(re.sub(_SEPARATORS + "+", "", original)) - 1
    ):
        return original
    return cleaned


def page_title(title_output: str, seo: dict[str, Any] | None) -> str:
    """The snapshot title: ``og:title`` when the page has one, else the cleaned document title.

    Args:
        title_output: what the ``title`` plugin reported (``og:title`` or ``<title>``).
        seo: the ``seo`` plugin's ``seo.json`` (meta tags by name), when it ran.
    """
    seo = seo or {}
    og = str(seo.get("og:title") or "").strip()
    if og:
        return " ".join(og.split())
    document = str(seo.get("title") or title_output or "").strip()
    return clean_document_title(document)
