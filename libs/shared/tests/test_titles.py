"""Snapshot titles: og:title first, else the document title without its site-name suffix."""

from __future__ import annotations

import pytest

from boxcar.shared.titles import clean_document_title, page_title


@pytest.mark.parametrize(
    "title, expected",
    [
        (
            "Get your Frontend JavaScript Code Covered | Code | Nicolas Perriault",
            "Get your Frontend JavaScript Code Covered | Code",
        ),
        (
            "Just-released Minecraft exploit makes it easy to crash game servers | Ars Technica",
            "Just-released Minecraft exploit makes it easy to crash game servers",
        ),
        ("Mozilla - Wikipedia", "Mozilla - Wikipedia"),  # too little would be left
        ("Home", "Home"),
        ("  spaced   out  title ", "spaced out title"),
    ],
)
def test_clean_document_title(title, expected):
    assert clean_document_title(title) == expected


def test_og_title_wins_over_the_document_title():
    seo = {"title": "Article | Site", "og:title": "The Article"}
    assert page_title("Article | Site", seo) == "The Article"
    assert page_title("A long article title here | Site", {}) == "A long article title here"
    assert page_title("A long article title here | Site", None) == "A long article title here"
