"""URL policy: examples from real imports, and properties that must hold for any input."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.provisional import urls as hypothesis_urls

from boxcar.shared.urls import (
    InvalidURL,
    canonical_parts,
    canonicalize,
    origin,
    strip_userinfo,
    url_key,
    with_userinfo,
)


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


# --------------------------------------------------------------------------- the dedup key (RFC 3986 §6.2.2)


@pytest.mark.parametrize(
    "a, b",
    [
        ("https://example.com/p%C3%BCr-b.html", "https://example.com/p%c3%bcr-b.html"),
        ("https://example.com/%7Euser", "https://example.com/~user"),
        ("https://example.com/a%2db", "https://example.com/a-b"),
        ("https://example.com/?q=%41", "https://example.com/?q=A"),
    ],
)
def test_escapes_that_mean_the_same_give_one_key(a, b):
    assert url_key(canonicalize(a)) == url_key(canonicalize(b))


def test_escapes_that_differ_in_meaning_keep_different_keys():
    # a reserved character escaped is not the character itself (RFC 3986 §2.2)
    assert url_key("https://example.com/a%2Fb") != url_key("https://example.com/a/b")
    assert url_key("https://example.com/?a=1%262") != url_key("https://example.com/?a=1&2")


def test_the_url_fetched_stays_as_given():
    assert canonicalize("https://example.com/p%c3%bcr-b.html") == "https://example.com/p%c3%bcr-b.html"


_ESCAPES = st.sampled_from(["%c3%bc", "%C3%BC", "%7e", "%7E", "%2f", "%2F", "%41", "a", "-", "~", "/"])


@settings(max_examples=300)
@given(st.lists(_ESCAPES, max_size=8))
def test_url_key_is_idempotent_and_blind_to_the_case_of_escapes(parts):
    url = canonicalize("https://example.com/" + "".join(parts))
    key = url_key(url)
    assert url_key(key) == key
    flipped = re.sub(r"%[0-9A-Fa-f]{2}", lambda m: m[0].swapcase(), url)
    assert url_key(canonicalize(flipped)) == key


@settings(max_examples=300)
@given(hypothesis_urls())
def test_url_key_of_real_urls_is_idempotent(url):
    try:
        once = url_key(canonicalize(url))
    except InvalidURL:
        return
    assert url_key(canonicalize(once)) == once


def test_userinfo_is_split_off_and_can_be_put_back_or_stripped():
    url, userinfo = canonical_parts("http://alice:s3cret%40x@Example.com/private/")
    assert (url, userinfo) == ("http://example.com/private/", "alice:s3cret%40x")
    assert with_userinfo(url, userinfo) == "http://alice:s3cret%40x@example.com/private/"
    text = 'see "http://alice:pw@example.com/a" and https://bob@host.example/ or mail@example.com'
    assert strip_userinfo(text) == 'see "http://example.com/a" and https://host.example/ or mail@example.com'


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("https://Example.COM/path?q#f", "https://example.com"),
        ("https://example.com:443/", "https://example.com"),  # the scheme's default port is no part of it
        ("http://example.com:443/", "http://example.com:443"),
        ("http://user:pw@127.0.0.1:8000/x", "http://127.0.0.1:8000"),  # userinfo is not
        ("http://[::1]:80/", "http://[::1]"),
        (" HTTP://a.test ", "http://a.test"),
        ("/relative/path", ""),
        ("null", ""),  # what a sandboxed page sends as Origin
        ("http://a.test:99999/", ""),  # a malformed port
        ("http://", ""),
    ],
)
def test_origin_is_the_serialized_origin_browsers_send(url, expected):
    assert origin(url) == expected
    assert origin(origin(url)) == origin(url)  # it is one
