"""``Seed``: the one shape of a URL entering Boxcar, made once where it enters."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from boxcar.shared.admission import admit
from boxcar.shared.messages import Seed
from boxcar.shared.urls import InvalidURL, UrlFilter


@pytest.mark.parametrize(
    "title",
    [
        "https://example.com/article",
        "https://example.com/article/",
        "example.com/article",
        "HTTPS://EXAMPLE.COM/article",
        "   ",
        "",
        None,
    ],
)
def test_a_title_that_is_just_the_url_is_no_title(title):
    # Pocket and others export <a href="U">U</a>: such a title must never beat the captured one
    assert Seed.parse("https://example.com/article", title=title).title is None


def test_a_real_title_is_kept_cleaned():
    seed = Seed.parse(" https://Example.com/a ", title="  A  page\x00 ", tags=["x", " x ", "y", ""])
    assert (seed.url, seed.title, seed.tags) == ("https://example.com/a", "A page", ("x", "y"))


def test_credentials_are_sealed_or_dropped_never_kept_in_the_url():
    sealed = Seed.parse("http://alice:pw@example.com/p", seal=lambda userinfo: f"sealed<{userinfo[::-1]}>")
    assert sealed.url == "http://example.com/p" and sealed.credentials == "sealed<wp:ecila>"
    assert Seed.parse("http://alice:pw@example.com/p").credentials == ""


def test_invalid_urls_raise_with_a_reason():
    with pytest.raises(InvalidURL, match="unsupported scheme"):
        Seed.parse("ftp://example.com/")


def test_duplicates_merge_first_title_union_of_tags_earliest_date():
    early, late = datetime(2020, 1, 1, tzinfo=UTC), datetime(2024, 1, 1, tzinfo=UTC)
    seeds = [
        Seed.parse("https://example.com/p%c3%bc", title="", tags=["a"], bookmarked_at=late),
        Seed.parse("https://example.com/p%C3%BC", title="Page", tags=["b"], bookmarked_at=early),
        Seed.parse("https://example.com/p%C3%BC", title="Page (toolbar copy)", tags=["toolbar"]),
    ]
    [merged] = admit(seeds, UrlFilter()).seeds
    assert merged.url == "https://example.com/p%c3%bc"  # fetched as first given
    assert (merged.title, merged.tags, merged.bookmarked_at) == ("Page", ("a", "b", "toolbar"), early)


@given(st.lists(st.tuples(st.sampled_from(["a", "b"]), st.text(max_size=5), st.lists(st.sampled_from("xyz")))))
def test_merging_keeps_one_seed_per_page_and_every_tag(records):
    seeds = [Seed.parse(f"https://example.com/{path}", title=title, tags=tags) for path, title, tags in records]
    merged = admit(seeds, UrlFilter()).seeds
    assert len(merged) == len({s.key for s in seeds})
    for seed in merged:
        same = [s for s in seeds if s.key == seed.key]
        assert set(seed.tags) == {t for s in same for t in s.tags}
        assert seed.title == next((s.title for s in same if s.title), None)
