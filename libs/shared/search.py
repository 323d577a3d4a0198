"""Full-text search over snapshots: one interface, SQLite FTS5 or Postgres full-text search.

A snapshot's *search document* is its title, URL (and final URL), tag names and readable text
(``htmltotext`` / ``trafilatura`` / a PDF's text, at most ``MAX_BODY_CHARS``). The result-projector
writes documents as results arrive (``index_documents``); ingest removes them when it deletes a
snapshot (``remove_documents``; the foreign key cascades too); ``search`` ranks matches and
returns highlighted snippets.

Storage (created by migration 0005 with raw DDL, outside the ORM models):

- both: ``search_document(snapshot_id PK → snapshot ON DELETE CASCADE, title, url, tags, body,
  updated_at)``;
- Postgres: plus ``document tsvector GENERATED ALWAYS AS (…) STORED`` (title weight A, URL and tags
  B, text C) with a GIN index; queries use ``websearch_to_tsquery``, ranking ``ts_rank_cd``
  (phrases close together rank high), snippets ``ts_headline``;
- SQLite: ``search_fts``, an external-content FTS5 table (``porter unicode61`` tokenizer) kept in
  step with ``search_document`` by triggers; queries are translated from the same web-search
  syntax (``fts5_query``), ranking ``bm25`` with the same column weights, snippets ``snippet()``.

Query syntax (both): words are ANDed, ``"a phrase"`` matches words in order, ``-word`` excludes,
``or`` between terms means either. A query of plain words ranks the documents where they stand
together, in that order, first (someone pasting a phrase of a page expects that page on top),
then by relevance.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

import msgspec
from sqlalchemy import select, text
from sqlalchemy.orm import Session

from boxcar.shared.messages import clean_text

MAX_BODY_CHARS = 100_000
#: characters of a search query looked at (the rest is dropped)
MAX_QUERY = 1000
#: tables of the search index (migration 0005), not ORM models: schema comparisons skip them
TABLES = ("search_document", "search_fts")
_MARK_START, _MARK_END = "\x02", "\x03"


class SearchDocument(msgspec.Struct, frozen=True):
    """What is indexed for one snapshot."""

    snapshot_id: str
    title: str = ""
    url: str = ""
    tags: tuple[str, ...] = ()
    body: str = ""


class SearchHit(msgspec.Struct, frozen=True):
    """One match: ``rank`` (higher is better, comparable within one result list only) and a
    snippet of the text around the matched words, as safe HTML with ``<mark>`` around them."""

    snapshot_id: str
    rank: float
    snippet_html: str

    @property
    def snippet(self) -> str:
        """The snippet as plain text."""
        return html.unescape(self.snippet_html.replace("<mark>", "").replace("</mark>", ""))


def is_search_table(name: str | None) -> bool:
    """True for the search index's own tables (FTS5 adds shadow tables ``search_fts_*``)."""
    return name is not None and any(name == t or name.startswith(t + "_") for t in TABLES)


def _compiled(s: Session, condition: Any) -> str:
    """``SELECT id FROM snapshot WHERE condition`` as SQL text for this database. Values are
    rendered as literals by SQLAlchemy's own quoting (they are user names, which ``USERNAME``
    limits to ``[A-Za-z0-9_.@-]``, ids and booleans), and colons are escaped for ``text()``."""
    from boxcar.shared.db.models import Snapshot

    bind = s.get_bind()
    sql = str(
        select(Snapshot.id).where(condition).compile(dialect=bind.dialect, compile_kwargs={"literal_binds": True})
    )
    return sql.replace(":", "\\:")


def _dialect(s: Session) -> str:
    return s.get_bind().dialect.name


def _clean(value: str, limit: int) -> str:
    return value.replace("\x00", "")[:limit]


def index_documents(s: Session, docs: Iterable[SearchDocument]) -> int:
    """Insert or replace the documents of snapshots that exist (a deleted snapshot's late
    document is dropped); returns how many were written."""
    written = 0
    upsert = text(
        """
        INSERT INTO search_document (snapshot_id, title, url, tags, body, updated_at)
        SELECT id, :title, :url, :tags, :body, CURRENT_TIMESTAMP FROM snapshot WHERE id = :sid
        ON CONFLICT (snapshot_id) DO UPDATE SET
            title = excluded.title, url = excluded.url, tags = excluded.tags, body = excluded.body,
            updated_at = excluded.updated_at
        """
    )
    for doc in docs:
        result = s.execute(
            upsert,
            {
                "sid": doc.snapshot_id,
                "title": _clean(doc.title, 2000),
                "url": _clean(doc.url, 8000),
                "tags": _clean(" ".join(doc.tags), 4000),
                "body": _clean(doc.body, MAX_BODY_CHARS),
            },
        )
        written += getattr(result, "rowcount", 0) or 0  # a CursorResult: DML
    return written


def remove_documents(s: Session, snapshot_ids: Iterable[str]) -> None:
    """Remove snapshots' documents from the index (idempotent)."""
    ids = list(snapshot_ids)
    for start in range(0, len(ids), 500):
        chunk = ids[start : start + 500]
        params = {f"i{n}": sid for n, sid in enumerate(chunk)}
        placeholders = ", ".join(f":{k}" for k in params)
        s.execute(text(f"DELETE FROM search_document WHERE snapshot_id IN ({placeholders})"), params)


def drop_orphans(s: Session) -> None:
    """Drop documents of snapshots that are gone and, on SQLite, rebuild the FTS5 index from the
    documents (``boxcar reindex``)."""
    s.execute(text("DELETE FROM search_document WHERE snapshot_id NOT IN (SELECT id FROM snapshot)"))
    if _dialect(s) == "sqlite":
        s.execute(text("INSERT INTO search_fts(search_fts) VALUES ('rebuild')"))


def indexed_count(s: Session) -> int:
    """Documents in the index."""
    return int(s.scalar(text("SELECT count(*) FROM search_document")) or 0)


def search(
    s: Session, query: str, *, tag: str | None = None, limit: int = 20, offset: int = 0, only: Any = None
) -> list[SearchHit]:
    """Snapshots matching ``query`` (web-search syntax), best first, optionally only those tagged
    ``tag`` and only those ``only`` (a condition on ``Snapshot``: who may read what,
    ``ingest.access.readable_snapshots``) admits, so a page of hits is a page the caller may see.
    An empty query, or one with nothing to look for, matches nothing. The query is cleaned
    here as ``SnapshotFilter`` cleans it where it enters (``clean_text``, ``MAX_QUERY``), so a
    caller passing raw text gets the same answer."""
    query = clean_text(query)[:MAX_QUERY]
    if not query:
        return []
    params = {"limit": max(1, min(limit, 1000)), "offset": max(0, offset), "tag": tag}
    words = _plain_words(query)
    tag_filter = (
        """ AND EXISTS (SELECT 1 FROM snapshot_tag st JOIN tag t ON t.id = st.tag_id
                       WHERE st.snapshot_id = d.snapshot_id AND t.name = CAST(:tag AS VARCHAR))"""
        if tag
        else ""
    )
    if only is not None:
        tag_filter += f" AND d.snapshot_id IN ({_compiled(s, only)})"
    if _dialect(s) == "postgresql":
        rows = s.execute(
            text(
                f"""
                WITH q AS (SELECT websearch_to_tsquery('english', :q) AS query,
                                  phraseto_tsquery('english', :words) AS phrase),
                top AS (
                    SELECT d.snapshot_id, d.body, ts_rank_cd(d.document, q.query) AS rank,
                           (:words <> '' AND d.document @@ q.phrase) AS together
                    FROM search_document d JOIN snapshot s ON s.id = d.snapshot_id, q
                    WHERE d.document @@ q.query {tag_filter}
                    ORDER BY together DESC, rank DESC, d.snapshot_id DESC
                    LIMIT :limit OFFSET :offset
                )
                SELECT top.snapshot_id, top.rank,
                       ts_headline('english', top.body, q.query,
                                   'StartSel=' || chr(2) || ', StopSel=' || chr(3) ||
                                   ', MaxWords=35, MinWords=15, MaxFragments=2, FragmentDelimiter=" … "')
                FROM top, q ORDER BY top.together DESC, top.rank DESC, top.snapshot_id DESC
                """
            ),
            {**params, "q": query, "words": " ".join(words)},
        ).all()
        return [SearchHit(sid, float(rank), _snippet_html(snip)) for sid, rank, snip in rows]
    match = fts5_query(query)
    if not match:
        return []
    together = "(search_fts.rowid IN (SELECT rowid FROM search_fts WHERE search_fts MATCH :phrase))" if words else "0"
    rows = s.execute(
        text(
            f"""
            SELECT d.snapshot_id, bm25(search_fts, 10.0, 4.0, 4.0, 1.0) AS score,
                   snippet(search_fts, 3, char(2), char(3), ' … ', 24),
                   {together} AS together
            FROM search_fts
            JOIN search_document d ON d.rowid = search_fts.rowid
            JOIN snapshot s ON s.id = d.snapshot_id
            WHERE search_fts MATCH :match {tag_filter}
            ORDER BY together DESC, score, d.snapshot_id DESC
            LIMIT :limit OFFSET :offset
            """
        ),
        {**params, "match": match, "phrase": '"' + " ".join(words) + '"'},
    ).all()
    return [SearchHit(sid, -float(score), _snippet_html(snip)) for sid, score, snip, _ in rows]


def _plain_words(query: str) -> list[str]:
    """The words of a query made only of plain words (no quotes, exclusions or ``or``), else []."""
    if '"' in query or any(t.startswith("-") or t.lower() == "or" for t in query.split()):
        return []
    words = re.findall(r"\w+", query)
    return words if len(words) > 1 else []


def _snippet_html(raw: str | None) -> str:
    escaped = html.escape(" ".join((raw or "").split()), quote=False)
    return escaped.replace(_MARK_START, "<mark>").replace(_MARK_END, "</mark>")


_TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')


def fts5_query(query: str) -> str:
    """Translate web-search syntax (as Postgres' ``websearch_to_tsquery`` reads it) into an FTS5
    MATCH expression; every term is quoted, so no input is an FTS5 syntax error. Returns "" when
    nothing is left to look for (only exclusions, or only punctuation)."""
    positive: list[str] = []
    negative: list[str] = []
    pending_or = False
    for m in _TOKEN.finditer(query):
        negate, phrase, word = m.group(1), m.group(2), m.group(3)
        if word is not None:
            if word.lower() == "or" and positive:
                pending_or = True
                continue
            negate, phrase = ("-", word[1:]) if word.startswith("-") and len(word) > 1 else ("", word)
        terms = re.findall(r"\w+", phrase or "")
        if not terms:
            continue
        quoted = '"' + " ".join(terms) + '"'
        if negate:
            negative.append(quoted)
        elif pending_or and positive:
            positive[-1] = f"({positive[-1]} OR {quoted})"
        else:
            positive.append(quoted)
        pending_or = False
    if not positive:
        return ""
    expr = " AND ".join(positive)
    for term in negative:
        expr = f"({expr}) NOT {term}"
    return expr
