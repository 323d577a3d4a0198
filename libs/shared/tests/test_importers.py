"""Import parsers: the shared corpus of real exports, properties of URL extraction, bad records."""

from __future__ import annotations

import csv
import io
import json
import os
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from urllib.parse import urljoin

import pytest
from hypothesis import assume, given, settings
from hypothesis import example as known_case
from hypothesis import strategies as st

from boxcar.shared.admission import admit
from boxcar.shared.importers import (
    FORMATS,
    Entry,
    ImportResult,
    UnknownFormat,
    detect_format,
    extract_urls,
    parse,
)
from boxcar.shared.urls import InvalidURL, UrlFilter, canonicalize

REPO = Path(__file__).resolve().parents[3]
INPUTS = Path(os.environ.get("BOXCAR_SHARED_DIR", REPO.parent / "shared")) / "inputs"
EXPECTED_FILE = INPUTS / "EXPECTED.json"
EXPECTED: dict[str, dict] = json.loads(EXPECTED_FILE.read_text()) if EXPECTED_FILE.is_file() else {}
needs_corpus = pytest.mark.skipif(
    not EXPECTED, reason=f"shared input corpus not found at {INPUTS} (set BOXCAR_SHARED_DIR)"
)

# EXPECTED.json's descriptive "format" labels -> the format names this package detects.
FORMAT_LABELS = {
    "netscape_html": {"netscape"},
    "pocket_html": {"pocket_html"},
    "rss2": {"rss"},
    "rss092": {"rss"},
    "rss1_rdf": {"rss"},
    "rss2_podcast": {"rss"},
    "rss2_illformed": {"rss"},
    "rss2_truncated": {"rss"},
    "atom": {"atom"},
    "atom_malformed": {"atom"},
    "jsonfeed": {"jsonfeed"},
    "generic_json": {"json", "pinboard_json"},  # ArchiveBox's JSON example is Pinboard's layout
    "jsonl": {"jsonl"},
    "archivebox_history_json": {"browser_history_json"},
    "chrome_bookmarks_json": {"chrome_json"},
    "firefox_bookmarks_json": {"firefox_json"},
    "pinboard_json": {"pinboard_json"},
    "pinboard_xml": {"pinboard_xml"},
    "delicious_json": {"delicious_json"},
    "elcurator_json": {"elcurator_json"},
    "linkwarden_json": {"linkwarden_json"},
    "omnivore_json": {"omnivore_json"},
    "readability_json": {"readability_json"},
    "wallabag_json": {"wallabag_json"},
    "pocket_csv": {"pocket_csv"},
    "raindrop_csv": {"raindrop_csv"},
    "instapaper_csv": {"instapaper_csv"},
    "markdown": {"markdown"},
    "plain_text": {"text"},
    "url_list": {"url_list"},
}


def _canonical(url: str) -> str | None:
    try:
        return canonicalize(url)
    except InvalidURL:
        return None


def _matching(result: ImportResult, url: str) -> list[Entry]:
    """Entries whose URL is ``url`` exactly or after syntax-only normalization."""
    canonical = _canonical(url)
    return [e for e in result.entries if e.url == url or (canonical and _canonical(e.url) == canonical)]


# --------------------------------------------------------------------------- the shared corpus


@needs_corpus
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_file(name: str) -> None:
    expected = EXPECTED[name]
    result = parse((INPUTS / name).read_bytes())
    assert result.format in FORMATS
    assert FORMAT_LABELS.get(expected["format"]), f"no mapping for label {expected['format']!r}"
    assert result.format in FORMAT_LABELS[expected["format"]], (expected["format"], result.format)
    for entry in result.entries:
        assert entry.url == entry.url.strip() and entry.url.lower().startswith(("http://", "https://"))
        assert entry.bookmarked_at is None or entry.bookmarked_at.utcoffset().total_seconds() == 0
        assert len(entry.tags) == len(set(entry.tags)) and all(t and t == t.strip() for t in entry.tags)
    for rejected in result.rejected:
        assert rejected.where and rejected.reason and len(rejected.value) <= 300

    distinct = {e.url for e in result.entries}
    if "url_count" in expected:
        assert len(distinct) == expected["url_count"], sorted(distinct)
    if "entry_count" in expected:
        assert len(result.entries) == expected["entry_count"]
    if "skipped_non_http_records" in expected:
        assert len(result.rejected) == expected["skipped_non_http_records"], result.rejected

    for example in expected["examples"]:
        candidates = _matching(result, example["url"])
        assert candidates, f"{example['url']} not imported from {name}"

        def fits(entry: Entry, example: dict = example) -> bool:
            if example.get("title") is not None and entry.title != example["title"]:
                return False
            if example.get("tags") is not None and not set(example["tags"]) <= set(entry.tags):
                return False
            if example.get("timestamp"):
                return entry.bookmarked_at == datetime.fromisoformat(example["timestamp"])
            return True

        assert any(fits(entry) for entry in candidates), (example, candidates)


@needs_corpus
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_corpus_detection_and_explicit_format_agree(name: str) -> None:
    data = (INPUTS / name).read_bytes()
    detected = detect_format(data)
    assert parse(data, detected) == parse(data)


# --------------------------------------------------------------------------- extract_urls properties

_label = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=12)
_segment = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_~%", max_size=12)


@st.composite
def _urls(draw: st.DrawFn) -> str:
    scheme = draw(st.sampled_from(["http", "https", "HTTPS"]))
    host = ".".join(draw(st.lists(_label, min_size=1, max_size=3))) + draw(st.sampled_from([".com", ".org", ".de"]))
    path = "/".join(draw(st.lists(_segment, max_size=4)))
    query = draw(st.one_of(st.just(""), _segment.map(lambda s: f"?q={s}&x=1")))
    url = f"{scheme}://{host}/{path}{query}"
    if draw(st.booleans()):
        url += "/wiki/Python_(language)"
    return url


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_extract_urls_never_crashes_and_returns_only_http_urls(text: str) -> None:
    for url, title in extract_urls(text):
        assert url.lower().startswith(("http://", "https://"))
        assert not any(ch.isspace() for ch in url)
        assert title is None or isinstance(title, str)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30), _urls()), max_size=8).map(" ".join))
def test_extracted_urls_canonicalize_idempotently(text: str) -> None:
    for url, _ in extract_urls(text):
        try:
            once = canonicalize(url)
        except InvalidURL:
            continue
        assert canonicalize(once) == once


@settings(max_examples=300, deadline=None)
@given(
    _urls(),
    st.sampled_from([".", ",", ";", ":", "!", "?", ")", "!)", ").", "..."]),
    st.sampled_from(["", " (see", "\n", "\t"]),
)
def test_url_in_prose_loses_trailing_punctuation(url: str, punctuation: str, prefix: str) -> None:
    text = f"Read{prefix} {url}{punctuation} and tell me what you think."
    assert extract_urls(text) == [(url, None)]


@settings(max_examples=200, deadline=None)
@given(_urls(), st.text(alphabet=st.characters(blacklist_characters="[]\n"), max_size=20))
def test_markdown_link_yields_url_and_title(url: str, title: str) -> None:
    found = extract_urls(f"- [{title}]({url}) and <{url}>")
    assert found == [(url, title.strip() or None), (url, None)]


@pytest.mark.parametrize(
    "text, expected",
    [
        ("see https://example.com/a.", [("https://example.com/a", None)]),
        ("(https://en.wikipedia.org/wiki/Monty_Python.)", [("https://en.wikipedia.org/wiki/Monty_Python", None)]),
        (
            "x https://en.wikipedia.org/wiki/Python_(programming_language), y",
            [("https://en.wikipedia.org/wiki/Python_(programming_language)", None)],
        ),
        (
            '"https://quoted.example.com/p" <https://angle.example.com/x?y=1>',
            [("https://quoted.example.com/p", None), ("https://angle.example.com/x?y=1", None)],
        ),
        ("[Hello, world!](https://example.com/)", [("https://example.com/", "Hello, world!")]),
        ("HTTPS://UPPER.example.com/Path", [("HTTPS://UPPER.example.com/Path", None)]),
        ("www.example.com, someone@example.com, ftp://x, https:// alone", []),
        ("a=https://example.com/?a=1&amp;b=2!", [("https://example.com/?a=1&b=2", None)]),
        # a URL that is an unquoted CSV field ends at the field delimiter; in prose a comma is kept
        ("https://a.example/x,Next", [("https://a.example/x", None)]),
        (
            "2024-11-13 20:00:00-05:00,https://www.example.com/,Example",
            [("https://www.example.com/", None)],
        ),
        ("a;https://a.example/p,q;Next", [("https://a.example/p,q", None)]),
        ('"https://a.example/x,y",Next', [("https://a.example/x,y", None)]),
        ("see https://en.wikipedia.org/wiki/Hello,_World now", [("https://en.wikipedia.org/wiki/Hello,_World", None)]),
    ],
)
def test_extract_urls_examples(text: str, expected: list) -> None:
    assert extract_urls(text) == expected


# --------------------------------------------------------------------------- focused behaviour


def test_jsonl_with_a_broken_line_keeps_the_good_ones() -> None:
    data = (
        b'{"url": "https://a.example/", "title": "A", "tags": "x y"}\n'
        b'{"url": "https://b.example/", broken\n'
        b'{"url": "place:sort=8"}\n'
        b'{"title": "no url here"}\n'
        b'{"href": "https://c.example/", "trap": "https://trap.example/"}\n'
    )
    result = parse(data)
    assert result.format == "jsonl"
    assert [(e.url, e.title, e.tags) for e in result.entries] == [
        ("https://a.example/", "A", ["x", "y"]),
        ("https://c.example/", None, []),
    ]
    reasons = {r.where: r.reason for r in result.rejected}
    assert set(reasons) == {"line 2", "line 3", "line 4"}
    assert reasons["line 2"].startswith("invalid JSON")
    assert reasons["line 3"] == "unsupported scheme 'place'"
    assert reasons["line 4"] == "no URL in record"


def test_netscape_with_bad_bookmarks_keeps_the_good_ones() -> None:
    data = b"""<!DOCTYPE NETSCAPE-Bookmark-file-1>
<DL><p>
<DT><A HREF="https://good.example/?a=1&amp;b=2&notify=3" ADD_DATE="1456433748" TAGS="one, two ,one">Good</A>
<DD>see <a href="https://not-a-bookmark.example/">this</a>
<DT><A HREF="javascript:alert(1)">Script</A>
<DT><A HREF="?relative">Relative</A>
<DT><A HREF=" HTTPS://Also.Good.example/path ">  Also good  </A>
</DL><p>"""
    result = parse(data)
    assert result.format == "netscape"
    assert result.entries == [
        Entry(
            url="https://good.example/?a=1&b=2&notify=3",
            title="Good",
            tags=["one", "two"],
            bookmarked_at=datetime(2016, 2, 25, 20, 55, 48, tzinfo=UTC),
        ),
        Entry(url="HTTPS://Also.Good.example/path", title="Also good"),
    ]
    assert [(r.where, r.value, r.reason) for r in result.rejected] == [
        ("bookmark 2", "javascript:alert(1)", "unsupported scheme 'javascript'"),
        ("bookmark 3", "?relative", "relative URL with no base"),
    ]


def test_unknown_explicit_format_raises() -> None:
    with pytest.raises(UnknownFormat):
        parse(b"https://example.com/", "not-a-format")
    assert issubclass(UnknownFormat, ValueError)


def test_explicit_format_is_used() -> None:
    result = parse(b"https://example.com/a\nhttps://example.com/b\n", "text")
    assert result.format == "text"
    assert [e.url for e in result.entries] == ["https://example.com/a", "https://example.com/b"]


@needs_corpus
def test_folder_tags_on_nested_netscape() -> None:
    data = (INPUTS / "netscape/netscape_nested.htm").read_bytes()
    plain = {e.url: e.tags for e in parse(data).entries}
    foldered = {e.url: e.tags for e in parse(data, folder_tags=True).entries}
    assert plain["http://nest.ed/3-1"] == ["tag3"]
    assert foldered["http://nest.ed/3-1"] == ["tag3", "Folder3", "Folder3-1"]
    assert foldered["http://nest.ed/1-1"] == ["tag1", "tag2", "multi word", "Folder1, the first,folder to encounter"]
    assert foldered["http://nest.ed/2-1"] == ["Folder2"]
    assert foldered["http://nest.ed/2"] == plain["http://nest.ed/2"] == ["tag4"]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x00\xff\xfe garbage \x80\x81",
        b"[" * 50_000,
        b"{" * 50_000,
        b"<rss><channel><item><link>",
        b"<" * 10_000,
        b'title,url\n"unterminated,https://x.example/\n',
        '<DL><DT><A HREF="https://x.example/é">é</A>'.encode("utf-16"),
        "<DL><DT><A HREF='https://x.example/'>caf\xe9</A>".encode("cp1252"),
    ],
)
def test_malformed_input_never_raises(data: bytes) -> None:
    result = parse(data)
    assert result.format in FORMATS
    assert all(e.url.lower().startswith(("http://", "https://")) for e in result.entries)


def test_decoding_of_legacy_encodings() -> None:
    utf16 = parse('<DL><DT><A HREF="https://x.example/">Café</A>'.encode("utf-16"))
    cp1252 = parse("<DL><DT><A HREF='https://x.example/'>Caf\xe9 \u2019</A>".encode("cp1252"))
    assert utf16.entries[0].title == "Café"
    assert cp1252.entries[0].title == "Café \u2019"


def test_every_format_parses_empty_input() -> None:
    for name in FORMATS:
        result = parse(b"", name)
        assert result.format == name and result.entries == []


# --------------------------------------------------------------------------- relative feed links

FEED_BASE = "http://127.0.0.1:8000/feeds/rel.xml"
RELATIVE_RSS = b"""<?xml version="1.0"?>
<rss version="2.0"><channel><title>Relative</title>
<item><title>Five</title><link>/items/five.html</link></item>
<item><title>Six</title><link>//host/items/six.html</link></item>
</channel></rss>"""
RELATIVE_ATOM = b"""<?xml version="1.0" encoding="utf-8"?>
<feed xmlns="http://www.w3.org/2005/Atom"><title>Relative</title><id>urn:rel</id>
<updated>2024-01-01T00:00:00Z</updated>
<entry><title>Five</title><id>urn:5</id><link href="/items/five.html"/><updated>2024-01-01T00:00:00Z</updated></entry>
<entry><title>Six</title><id>urn:6</id><link rel="alternate" href="//host/items/six.html"/>
<updated>2024-01-01T00:00:00Z</updated></entry>
</feed>"""


@pytest.mark.parametrize("data, kind", [(RELATIVE_RSS, "rss"), (RELATIVE_ATOM, "atom")])
def test_feed_relative_links_resolve_against_base_url(data: bytes, kind: str) -> None:
    result = parse(data, base_url=FEED_BASE)
    assert result.format == kind
    assert [(e.url, e.title) for e in result.entries] == [
        ("http://127.0.0.1:8000/items/five.html", "Five"),
        ("http://host/items/six.html", "Six"),
    ]
    assert result.rejected == []
    assert parse(data, kind, base_url=FEED_BASE) == result


@pytest.mark.parametrize("data", [RELATIVE_RSS, RELATIVE_ATOM])
def test_feed_relative_links_without_a_base_are_rejected_not_dropped(data: bytes) -> None:
    result = parse(data)
    assert result.entries == []
    assert [(r.where, r.value, r.reason) for r in result.rejected] == [
        ("item 1", "/items/five.html", "relative URL with no base"),
        ("item 2", "//host/items/six.html", "relative URL with no base"),
    ]


def test_feed_xml_base_applies_before_base_url() -> None:
    data = RELATIVE_ATOM.replace(b"<feed ", b'<feed xml:base="https://other.example/blog/" ')
    result = parse(data, base_url=FEED_BASE)
    assert [e.url for e in result.entries] == ["https://other.example/items/five.html", "https://host/items/six.html"]


def test_feed_without_base_url_falls_back_to_its_self_link_then_home_page() -> None:
    self_link = b'<link rel="self" href="https://feeds.example/x/atom.xml"/><link href="https://site.example/"/>'
    with_self = RELATIVE_ATOM.replace(b"<title>Relative</title>", b"<title>Relative</title>" + self_link, 1)
    assert [e.url for e in parse(with_self).entries] == [
        "https://feeds.example/items/five.html",
        "https://host/items/six.html",
    ]
    home_only = RELATIVE_RSS.replace(b"<title>Relative</title>", b"<title>R</title><link>https://site.example/</link>")
    assert [e.url for e in parse(home_only).entries] == [
        "https://site.example/items/five.html",
        "https://host/items/six.html",
    ]
    assert [e.url for e in parse(home_only, base_url=FEED_BASE).entries] == [
        "http://127.0.0.1:8000/items/five.html",
        "http://host/items/six.html",
    ]


def test_jsonfeed_relative_urls_resolve_against_base_url_then_feed_url_then_home_page() -> None:
    feed = {
        "version": "https://jsonfeed.org/version/1.1",
        "title": "Relative",
        "home_page_url": "https://site.example/blog/",
        "feed_url": "https://feeds.example/feed.json",
        "items": [{"id": "5", "url": "/items/five.html"}, {"id": "6", "url": "//host/items/six.html"}, {"id": "7"}],
    }

    def urls(doc: dict, base: str | None = None) -> list[str]:
        result = parse(json.dumps(doc).encode(), base_url=base)
        assert result.format == "jsonfeed"
        assert [(r.where, r.reason) for r in result.rejected][-1] == ("item 3", "no URL in record")
        return [e.url for e in result.entries]

    assert urls(feed, FEED_BASE) == ["http://127.0.0.1:8000/items/five.html", "http://host/items/six.html"]
    assert urls(feed) == ["https://feeds.example/items/five.html", "https://host/items/six.html"]
    assert urls({**feed, "feed_url": "feed.json"}) == [
        "https://site.example/items/five.html",
        "https://host/items/six.html",
    ]
    bare = {k: v for k, v in feed.items() if k not in ("feed_url", "home_page_url")}
    result = parse(json.dumps(bare).encode())
    assert result.entries == []
    reasons = [r.reason for r in result.rejected]
    assert reasons == ["relative URL with no base", "relative URL with no base", "no URL in record"]


@pytest.mark.parametrize("base", ["http://[", "javascript:alert(1)", "feeds/rel.xml", "", "  ", "ftp://h/"])
@pytest.mark.parametrize("data", [RELATIVE_RSS, RELATIVE_ATOM])
def test_feed_base_url_that_is_not_an_absolute_http_url_is_ignored(base: str, data: bytes) -> None:
    absolute = data.replace(b"/items/five.html", b"https://abs.example/five.html")
    assert parse(absolute, base_url=base) == parse(absolute)
    assert [e.url for e in parse(absolute, base_url=base).entries] == ["https://abs.example/five.html"]


_path = st.lists(_segment.filter(bool), min_size=1, max_size=4).map("/".join)
_prefix = st.sampled_from(["/", "//host.example/", "", "../", "https://abs.example/"])


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(_prefix, _path), max_size=5),
    st.sampled_from([FEED_BASE, "https://example.org/a/b/feed?x=1", None]),
    st.sampled_from(["rss", "atom"]),
)
def test_every_feed_item_is_an_entry_or_a_rejection(links: list, base: str | None, kind: str) -> None:
    hrefs = [prefix + path for prefix, path in links]
    if kind == "rss":
        items = "".join(f"<item><title>t{i}</title><link>{href}</link></item>" for i, href in enumerate(hrefs))
        data = f'<rss version="2.0"><channel><title>T</title>{items}</channel></rss>'
    else:
        items = "".join(f'<entry><id>urn:{i}</id><link href="{href}"/></entry>' for i, href in enumerate(hrefs))
        data = f'<feed xmlns="http://www.w3.org/2005/Atom"><title>T</title>{items}</feed>'
    result = parse(data.encode(), base_url=base)
    assert len(result.entries) + len(result.rejected) == len(hrefs)
    expected = [urljoin(base, h) if base else h for h in hrefs]
    assert [e.url for e in result.entries] == [u for u in expected if u.startswith(("http://", "https://"))]
    assert all(r.reason == "relative URL with no base" for r in result.rejected)


# --------------------------------------------------------------------------- header-less CSV


@settings(max_examples=300, deadline=None)
@given(
    _urls(),
    st.text(max_size=20),
    st.sampled_from(["", "2024-11-13 20:00:00-05:00,", "Title,", "1731546000;", "x\n"]),
)
def test_url_in_an_unquoted_csv_field_ends_at_the_delimiter(url: str, next_cell: str, prefix: str) -> None:
    delimiter = ";" if prefix.endswith(";") else ","
    assert extract_urls(f"{prefix}{url}{delimiter}{next_cell}")[0] == (url, None)


@settings(max_examples=200, deadline=None)
@given(_urls(), _label)
def test_comma_inside_a_url_in_prose_is_kept(url: str, more: str) -> None:
    assert extract_urls(f"Read {url},{more} and tell me.") == [(f"{url},{more}", None)]


def test_headerless_csv_history_export() -> None:
    data = (
        b"2024-11-13 20:00:00-05:00,https://www.example.com/,Example\n"
        b'2024-11-12 08:30:00-05:00,https://b.example/x?a=1,"B, the page"\n'
        b"2024-11-12 08:00:00-05:00,chrome://settings/,Settings\n"
        b"2024-11-11 08:00:00-05:00,,No URL\n"
    )
    result = parse(data)
    assert result.format == "csv"
    assert result.entries == [
        Entry(url="https://www.example.com/", title="Example", bookmarked_at=datetime(2024, 11, 14, 1, 0, tzinfo=UTC)),
        Entry(
            url="https://b.example/x?a=1", title="B, the page", bookmarked_at=datetime(2024, 11, 12, 13, 30, tzinfo=UTC)
        ),
    ]
    assert [(r.where, r.reason) for r in result.rejected] == [
        ("row 3", "unsupported scheme 'chrome'"),
        ("row 4", "no URL in record"),
    ]
    assert parse(data, "csv") == result
    # read as plain text, the URL no longer takes the next field with it
    assert [e.url for e in parse(data, "text").entries] == ["https://www.example.com/", "https://b.example/x?a=1"]


def test_headerless_csv_columns_are_guessed_per_cell() -> None:
    tsv = b"13370000000000000\thttps://www.example.com/\tExample\t3\n"
    assert parse(tsv).entries == [
        Entry(
            url="https://www.example.com/",
            title="Example",
            bookmarked_at=datetime(1601, 1, 1, tzinfo=UTC) + timedelta(microseconds=13370000000000000),
        )
    ]
    reordered = b"Example;https://www.example.com/;1731546000\n"
    assert parse(reordered).entries == [
        Entry(url="https://www.example.com/", title="Example", bookmarked_at=datetime(2024, 11, 14, 1, 0, tzinfo=UTC))
    ]


def test_csv_header_without_a_known_url_column() -> None:
    data = b"When,Location,Name\n2024-11-13 20:00:00-05:00,https://www.example.com/,Example\n"
    result = parse(data)
    assert result.format == "csv"
    assert result.entries == [
        Entry(url="https://www.example.com/", title="Example", bookmarked_at=datetime(2024, 11, 14, 1, 0, tzinfo=UTC))
    ]
    assert result.rejected == []


def test_url_list_whose_urls_hold_commas_is_not_csv() -> None:
    data = b"https://maps.example.com/@52.5,13.4,15z\nhttps://maps.example.com/@48.1,11.5,12z\n"
    result = parse(data)
    assert result.format == "url_list"
    assert [e.url for e in result.entries] == [
        "https://maps.example.com/@52.5,13.4,15z",
        "https://maps.example.com/@48.1,11.5,12z",
    ]


_title_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ABC,;'\"!?-", min_size=1, max_size=30).filter(
    lambda t: any(c.isalpha() for c in t)
)
_dates = st.datetimes(min_value=datetime(1990, 1, 2), max_value=datetime(2099, 12, 30), timezones=st.just(UTC)).map(
    lambda d: d.replace(microsecond=0)
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_urls(), _title_text, _dates), min_size=1, max_size=6),
    st.permutations([0, 1, 2]),
    st.sampled_from([",", ";", "\t"]),
    st.booleans(),
)
@known_case(  # a ";" file whose title holds commas: as many cells on "," but no date there (found by hypothesis)
    rows=[("http://0.com/", "A,,", datetime(2000, 1, 1, tzinfo=UTC))], order=[0, 1, 2], delimiter=";", epoch=False
)
def test_headerless_csv_round_trip(rows: list, order: list, delimiter: str, epoch: bool) -> None:
    assume(all(_canonical(url) for url, _, _ in rows))
    out = io.StringIO()
    writer = csv.writer(out, delimiter=delimiter)
    for url, title, when in rows:
        cells = [url, title, str(int(when.timestamp())) if epoch else when.isoformat(sep=" ")]
        writer.writerow([cells[i] for i in order])
    result = parse(out.getvalue().encode())
    assert result.format == "csv"
    assert [(e.url, e.title, e.bookmarked_at) for e in result.entries] == [
        (url, title.strip(), when) for url, title, when in rows
    ]


# --------------------------------------------------------------------------- list-valued tag cells


def test_instapaper_csv_tags_written_as_a_json_array() -> None:
    data = (
        b"URL,Title,Selection,Folder,Timestamp,Tags\n"
        b'https://go.dev/blog/,The Go Blog,,Unread,1731546000,"[""programming"",""go""]"\n'
        b"https://example.com/,Example,,Archive,1731546000,[]\n"
    )
    result = parse(data)
    assert result.format == "instapaper_csv"
    when = datetime(2024, 11, 14, 1, 0, tzinfo=UTC)
    assert result.entries == [
        Entry(url="https://go.dev/blog/", title="The Go Blog", tags=["programming", "go"], bookmarked_at=when),
        Entry(url="https://example.com/", title="Example", tags=[], bookmarked_at=when),
    ]


def test_readwise_reader_csv() -> None:
    data = (
        b"Title,URL,ID,Document tags,Saved date,Reading progress,Location,Seen\n"
        b"Why the web,https://example.com/why,01hxyz,\"['reading', 'web']\",2024-11-13 20:00:00-05:00,0.5,later,True\n"
        b"Untagged,https://example.com/untagged,01hxz0,[],2024-11-14 01:00:00+00:00,0,new,False\n"
    )
    result = parse(data)
    assert result.format == "readwise_csv"
    when = datetime(2024, 11, 14, 1, 0, tzinfo=UTC)
    assert result.entries == [
        Entry(url="https://example.com/why", title="Why the web", tags=["reading", "web"], bookmarked_at=when),
        Entry(url="https://example.com/untagged", title="Untagged", tags=[], bookmarked_at=when),
    ]
    assert result.rejected == []


@pytest.mark.parametrize(
    "cell, tags",
    [
        ('"[""programming"",""go""]"', ["programming", "go"]),
        ("\"['reading', 'web']\"", ["reading", "web"]),
        ("[]", []),
        ('"[""a, b"", ""c""]"', ["a, b", "c"]),
        ('"a,b"', ["a", "b"]),
        ("[not-a-list]", ["[not-a-list]"]),
        ("\"[__import__('os')]\"", ["[__import__('os')]"]),  # read with literal_eval, never eval
    ],
)
def test_csv_tag_cells_that_hold_lists(cell: str, tags: list[str]) -> None:
    result = parse(f"url,title,tags\nhttps://example.com/,T,{cell}\n".encode())
    assert [e.tags for e in result.entries] == [tags]


_tag = st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=12)


@settings(max_examples=200, deadline=None)
@given(st.lists(_tag, max_size=6), st.sampled_from([json.dumps, repr]), st.sampled_from(["csv", "raindrop", "json"]))
def test_list_valued_tag_cells_give_their_items(tags: list[str], dump, kind: str) -> None:
    cell = dump(tags)
    out = io.StringIO()
    writer = csv.writer(out)
    if kind == "raindrop":
        writer.writerow(["id", "title", "note", "excerpt", "url", "folder", "tags", "created", "cover", "highlights"])
        writer.writerow(["1", "T", "", "", "https://example.com/", "", cell, "", "", ""])
        data = out.getvalue()
    elif kind == "csv":
        writer.writerow(["url", "tags"])
        writer.writerow(["https://example.com/", cell])
        data = out.getvalue()
    else:  # a JSON record whose tags field is such a string
        data = json.dumps([{"url": "https://example.com/", "tags": cell}])
    result = parse(data.encode())
    expected = list(dict.fromkeys(t.strip() for t in tags if t.strip()))
    assert [e.tags for e in result.entries] == [expected]


# --------------------------------------------------------------------------- ArchiveBox's JSON stream

WEBKIT_EPOCH = datetime(1601, 1, 1, tzinfo=UTC)


def test_archivebox_json_stream_of_concatenated_objects() -> None:
    data = (
        b'{"href": "https://a.example/", "description": "A page", "timestamp": 13370000000000000}'
        b'{"href": "https://b.example/", "description": "B page", "timestamp": "1731546000"}'
    )
    result = parse(data)
    assert result.format == "jsonl"
    assert result.entries == [
        Entry(
            url="https://a.example/",
            title="A page",
            bookmarked_at=WEBKIT_EPOCH + timedelta(microseconds=13370000000000000),
        ),
        Entry(url="https://b.example/", title="B page", bookmarked_at=datetime(2024, 11, 14, 1, 0, tzinfo=UTC)),
    ]
    assert result.entries[0].bookmarked_at == datetime(2024, 9, 5, 8, 53, 20, tzinfo=UTC)
    assert result.rejected == []
    assert parse(data, "jsonl") == result
    assert parse(data, "json").entries == result.entries


def test_archivebox_json_stream_pretty_printed_keeps_the_good_objects() -> None:
    data = b"""{
  "href": "https://a.example/",
  "description": "A page",
  "timestamp": 13370000000000000
}
{
  "href": "https://c.example/", broken
}
{
  "href": "chrome://settings",
  "description": "Settings",
  "timestamp": 1731546000000000
}
{
  "href": "https://b.example/",
  "description": "B page",
  "timestamp": 1731546000000
}
"""
    result = parse(data)
    assert result.format == "jsonl"
    assert [(e.url, e.title, e.bookmarked_at) for e in result.entries] == [
        ("https://a.example/", "A page", WEBKIT_EPOCH + timedelta(microseconds=13370000000000000)),
        ("https://b.example/", "B page", datetime(2024, 11, 14, 1, 0, tzinfo=UTC)),
    ]
    assert [(r.where, r.reason.split(" (")[0]) for r in result.rejected] == [
        ("line 6", "invalid JSON"),
        ("line 9", "unsupported scheme 'chrome'"),
    ]
    assert result.rejected[0].value == '{\n  "href": "https://c.example/", broken\n}'


_moments = st.datetimes(min_value=datetime(1990, 1, 2), max_value=datetime(2090, 1, 1), timezones=st.just(UTC)).map(
    lambda d: d.replace(microsecond=0)
)
_units = {
    "s": lambda d: int(d.timestamp()),
    "s-text": lambda d: f"{d.timestamp():.3f}",
    "ms": lambda d: int(d.timestamp()) * 1000,
    "us": lambda d: int(d.timestamp()) * 1_000_000,
    "webkit": lambda d: int((d - WEBKIT_EPOCH).total_seconds()) * 1_000_000,
}


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(_urls(), _title_text, _moments, st.sampled_from(sorted(_units))), min_size=1, max_size=5),
    st.sampled_from(["", "\n", " \n\n", "pretty"]),
)
def test_json_stream_reads_like_the_same_records_in_an_array(records: list, separator: str) -> None:
    objects = [
        {"href": url, "description": title, "timestamp": _units[unit](when)} for url, title, when, unit in records
    ]
    if separator == "pretty":
        stream = "\n".join(json.dumps(o, indent=2) for o in objects)
    else:
        stream = separator.join(json.dumps(o) for o in objects)
    as_array = parse(json.dumps(objects).encode())
    as_stream = parse(stream.encode())
    assert as_stream.entries == as_array.entries
    assert [(e.url, e.title, e.bookmarked_at) for e in as_stream.entries] == [
        (url, title.strip(), when) for url, title, when, _ in records if _canonical(url)
    ]


# --------------------------------------------------------------------------- the same URL twice in one file


def _admitted(result: ImportResult) -> list[dict]:
    """The seeds the caller makes of a parse result (duplicates merged by the admission rule)."""
    pairs, _ = result.seeds()
    seeds = admit([seed for _, seed in pairs], UrlFilter()).seeds
    out = []
    for seed in seeds:
        item = {"url": seed.url, "tags": list(seed.tags)}
        if seed.title:
            item["title"] = seed.title
        if seed.bookmarked_at:
            item["bookmarked_at"] = seed.bookmarked_at.isoformat()
        out.append(item)
    return out


FIREFOX_DUPLICATE = {
    "guid": "root________",
    "title": "",
    "type": "text/x-moz-place-container",
    "root": "placesRoot",
    "children": [
        {
            "guid": "menu________",
            "title": "Bookmarks Menu",
            "type": "text/x-moz-place-container",
            "root": "bookmarksMenuFolder",
            "children": [
                {
                    "guid": "folder000001",
                    "title": "Folder",
                    "type": "text/x-moz-place-container",
                    "children": [
                        {
                            "guid": "bookmark0001",
                            "title": "Page",
                            "type": "text/x-moz-place",
                            "uri": "https://example.com/page",
                            "tags": "reading",
                            "keyword": "pg",
                            "dateAdded": 1700000000000000,
                        }
                    ],
                }
            ],
        },
        {
            "guid": "toolbar_____",
            "title": "Bookmarks Toolbar",
            "type": "text/x-moz-place-container",
            "root": "toolbarFolder",
            "children": [
                {
                    "guid": "bookmark0002",
                    "title": "Page (toolbar copy)",
                    "type": "text/x-moz-place",
                    "uri": "https://example.com/page",
                    "tags": "toolbar",
                    "dateAdded": 1710000000000000,
                }
            ],
        },
    ],
}


@pytest.mark.parametrize("folder_tags", [False, True])
def test_firefox_json_same_url_in_a_folder_and_the_toolbar(folder_tags: bool) -> None:
    result = parse(json.dumps(FIREFOX_DUPLICATE).encode(), folder_tags=folder_tags)
    assert result.format == "firefox_json"
    menu = ["Bookmarks Menu", "Folder"] if folder_tags else []
    toolbar = ["Bookmarks Toolbar"] if folder_tags else []
    # the parser keeps both records, in document order, each with its own title, tags and date
    assert result.entries == [
        Entry(
            url="https://example.com/page",
            title="Page",
            tags=["reading", *menu],
            bookmarked_at=datetime(2023, 11, 14, 22, 13, 20, tzinfo=UTC),
        ),
        Entry(
            url="https://example.com/page",
            title="Page (toolbar copy)",
            tags=["toolbar", *toolbar],
            bookmarked_at=datetime(2024, 3, 9, 16, 0, tzinfo=UTC),
        ),
    ]
    # the caller merges them: first non-empty title, union of the tags, earliest date
    assert _admitted(result) == [
        {
            "url": "https://example.com/page",
            "title": "Page",
            "tags": ["reading", *menu, "toolbar", *toolbar],
            "bookmarked_at": "2023-11-14T22:13:20+00:00",
        }
    ]


_POOL = ["https://example.com/a", "https://example.com/b", "https://example.com/c"]
_word = st.text(alphabet="abcdefghij", min_size=1, max_size=6)
_record = st.tuples(
    st.sampled_from(_POOL),
    st.one_of(st.just(""), _word.map(str.title)),
    st.lists(_word, max_size=3),
    _moments,
)


def _render(kind: str, records: list) -> bytes:
    """``records`` ``(url, title, tags, when)`` written in the format ``kind``."""
    if kind == "netscape":
        rows = "".join(
            f'<DT><A HREF="{u}" ADD_DATE="{int(w.timestamp())}" TAGS="{",".join(t)}">{ti}</A>\n'
            for u, ti, t, w in records
        )
        return f"<!DOCTYPE NETSCAPE-Bookmark-file-1>\n<DL><p>\n{rows}</DL><p>\n".encode()
    if kind == "jsonl":
        return "\n".join(
            json.dumps({"url": u, "title": ti, "tags": t, "time_added": int(w.timestamp())}) for u, ti, t, w in records
        ).encode()
    if kind == "csv":
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["url", "title", "tags", "date"])
        writer.writerows([u, ti, ",".join(t), w.isoformat()] for u, ti, t, w in records)
        return out.getvalue().encode()
    if kind == "firefox_json":
        children = [
            {
                "type": "text/x-moz-place",
                "uri": u,
                "title": ti,
                "tags": ",".join(t),
                "dateAdded": int(w.timestamp()) * 10**6,
            }
            for u, ti, t, w in records
        ]
        return json.dumps({"type": "text/x-moz-place-container", "title": "", "children": children}).encode()
    # rss
    items = "".join(
        f"<item><title>{ti}</title><link>{u}</link>{''.join(f'<category>{c}</category>' for c in t)}"
        f"<pubDate>{format_datetime(w, usegmt=True)}</pubDate></item>"
        for u, ti, t, w in records
    )
    return f'<rss version="2.0"><channel><title>T</title>{items}</channel></rss>'.encode()


@settings(max_examples=60, deadline=None)
@given(st.lists(_record, min_size=1, max_size=8), st.sampled_from(["netscape", "jsonl", "csv", "firefox_json", "rss"]))
def test_duplicate_urls_are_kept_by_parsers_and_merged_by_the_caller(records: list, kind: str) -> None:
    result = parse(_render(kind, records))
    assert result.format == kind
    # no parser merges: every record, in document order, with its own title, tags and date
    assert result.entries == [
        Entry(url=u, title=ti or None, tags=list(dict.fromkeys(t)), bookmarked_at=w) for u, ti, t, w in records
    ]
    expected: dict[str, dict] = {}
    for u, ti, t, w in records:
        seed = expected.setdefault(u, {"url": u, "tags": [], "when": w})
        seed["tags"] = list(dict.fromkeys(seed["tags"] + t))
        if ti and "title" not in seed:
            seed["title"] = ti
        seed["when"] = min(seed["when"], w)
    for seed in expected.values():
        seed["bookmarked_at"] = seed.pop("when").isoformat()
    assert _admitted(result) == list(expected.values())
