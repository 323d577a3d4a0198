"""The search index on SQLite FTS5 and Postgres full-text search: one interface, same answers."""

from __future__ import annotations

import pytest

from boxcar.shared import search
from boxcar.shared.clock import utcnow
from boxcar.shared.db.models import Crawl, Snapshot, SnapshotTag, Tag
from boxcar.shared.search import SearchDocument, fts5_query


def _snapshot(s, crawl: Crawl, n: int, url: str) -> str:
    sid = f"{n:032x}"
    s.add(Snapshot(id=sid, crawl_id=crawl.id, url=url, url_hash=f"{n:064x}", output_dir=f"x/{sid}"))
    return sid


@pytest.fixture
def docs(db):
    with db.write() as s:
        crawl = Crawl.new(user="system", first_url="http://a.test/", seed_count=0, now=utcnow())
        s.add(crawl)
        s.flush()
        a = _snapshot(s, crawl, 1, "http://a.test/wrens")
        b = _snapshot(s, crawl, 2, "http://b.test/ships")
        c = _snapshot(s, crawl, 3, "http://c.test/mixed")
        s.flush()
        s.add(Tag(id=1, name="birds"))
        s.flush()
        s.add(SnapshotTag(snapshot_id=a, tag_id=1))
        search.index_documents(
            s,
            [
                SearchDocument(a, "Winter wrens", "http://a.test/wrens", ("birds",), "The winter wren sings loudly."),
                SearchDocument(b, "Container ships", "http://b.test/ships", (), "Ships carry containers <b>&</b>."),
                SearchDocument(c, "Mixed", "http://c.test/mixed", (), "wren ships sings"),
                SearchDocument("f" * 32, "Ghost", "http://gone.test/", (), "no such snapshot"),
            ],
        )
    return db, a, b, c


def test_ranked_matches_with_highlighted_snippets(docs):
    db, a, b, c = docs
    with db.read() as s:
        hits = search.search(s, "winter wren sings")
        assert [h.snapshot_id for h in hits] == [a]
        assert "<mark>" in hits[0].snippet_html
        assert [h.snapshot_id for h in search.search(s, "wren")][0] == a  # title weighs most
        assert {h.snapshot_id for h in search.search(s, "wren or containers")} == {a, b, c}
        assert [h.snapshot_id for h in search.search(s, "wren -winter")] == [c]
        assert [h.snapshot_id for h in search.search(s, '"sings loudly"')] == [a]
        assert [h.snapshot_id for h in search.search(s, "ships", tag="birds")] == []
        assert [h.snapshot_id for h in search.search(s, "sings", tag="birds")] == [a]
        assert search.search(s, "ghost") == []  # a document of no snapshot is never written
        html = search.search(s, "containers")[0].snippet_html
        assert "<" not in html.replace("<mark>", "").replace("</mark>", "")  # only <mark> is markup


def test_delete_removes_from_index(docs):
    db, a, b, c = docs
    with db.write() as s:
        search.remove_documents(s, [a])
    with db.write() as s:
        s.delete(s.get(Snapshot, b))  # the foreign key cascades too
    with db.read() as s:
        assert search.indexed_count(s) == 1
        assert [h.snapshot_id for h in search.search(s, "wren")] == [c]


def test_hostile_queries_are_never_syntax_errors(docs):
    db, *_ = docs
    with db.read() as s:
        for q in ['"', "-", "AND OR NOT", "a:b*", "NEAR(x y)", "'; DROP TABLE x; --", "-only", "(((", "🦜", "a\x00b"]:
            search.search(s, q)


def test_fts5_translation():
    assert fts5_query("winter wren") == '"winter" AND "wren"'
    assert fts5_query('"winter wren" -song') == '("winter wren") NOT "song"'
    assert fts5_query("a or b c") == '("a" OR "b") AND "c"'
    assert fts5_query("-x") == ""
    assert fts5_query('say "hi') == '"say" AND "hi"'


def test_plain_words_standing_together_rank_first(db):
    with db.write() as s:
        crawl = Crawl.new(user="system", first_url="http://a.test/", seed_count=0, now=utcnow())
        s.add(crawl)
        s.flush()
        scattered = _snapshot(s, crawl, 10, "http://a.test/scattered")
        together = _snapshot(s, crawl, 11, "http://a.test/together")
        s.flush()
        noise = " ".join(["this line, simple adding"] * 30)
        search.index_documents(
            s,
            [
                SearchDocument(scattered, "Simple lines", "http://a.test/scattered", (), noise),
                SearchDocument(together, "Other", "http://a.test/together", (), "first adding this simple line here"),
            ],
        )
    with db.read() as s:
        assert [h.snapshot_id for h in search.search(s, "adding this simple line")][0] == together
