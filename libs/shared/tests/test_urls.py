"""URL policy: examples from real imports, and properties that must hold for any input."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.provisional import urls as hypothesis_urls

from boxcar.shared.urls import InvalidURL, canonicalize


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("HTTP://Example.COM", "http://example.com/"),
        ("https://example.com:443/a", "https://example.com/a"),
        ("http://example.com:8080/a", "http://example.com:8080/a"),
        ("https://user:secret@example.com/private", "https://example.com/private"),
        ("https://bücher.de/straße?q=ü#frag", "https://xn--bcher-kva.de/stra%C3%9Fe?q=%C3%BC#frag"),
        (
            "https://en.wikipedia.org/wiki/Python_(programming_language)",
            "https://en.wikipedia.org/wiki/Python_(programming_language)",
        ),
        ("  https://example.com/a b  ", "https://example.com/a%20b"),
        ("https://example.com/#/app/route", "https://example.com/#/app/route"),
        ("https://example.com/%7Euser", "https://example.com/%7Euser"),
        ("http://[::1]:8000/", "http://[::1]:8000/"),
    ],
)
def test_canonical_forms(raw, expected):
    assert canonicalize(raw) == expected


@pytest.mark.parametrize(
    "raw, reason",
    [
        ("ftp://example.com/file", "unsupported scheme 'ftp'"),
        ("javascript:alert(1)", "unsupported scheme 'javascript'"),
        ("place:folder=TOOLBAR", "unsupported scheme 'place'"),
        ("/relative/path", "not an absolute URL"),
        ("", "empty URL"),
        ("https://", "no host"),
        ("http://exa mple.com/", "invalid host"),
        ("http://example.com:99999/", "invalid port"),
    ],
)
def test_rejections_say_why(raw, reason):
    with pytest.raises(InvalidURL) as info:
        canonicalize(raw)
    assert reason in str(info.value)


def test_long_urls_are_kept_whole():
    url = "https://example.com/" + "a" * 9000
    assert canonicalize(url) == url


@settings(max_examples=500)
@given(st.text(max_size=300))
def test_never_crashes_and_never_emits_non_http(text):
    try:
        out = canonicalize(text)
    except InvalidURL:
        return
    assert out.startswith(("http://", "https://"))
    assert canonicalize(out) == out


@settings(max_examples=300)
@given(hypothesis_urls())
def test_idempotent_on_real_urls(url):
    try:
        once = canonicalize(url)
    except InvalidURL:
        return
    assert canonicalize(once) == once
    assert once.split(":", 1)[0] in ("http", "https")
