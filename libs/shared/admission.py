"""Admission of candidate URLs into a crawl: the URL policy applied the same way everywhere.

Used by ingest (seeds of ``POST /api/v1/crawls`` and imports) and by the crawl-runner (feed items
and URLs discovered by hooks): canonicalize, check ``URL_ALLOWLIST``/``URL_DENYLIST``, merge
duplicates on the canonical form, and with ``ONLY_NEW`` skip URLs already archived by any crawl.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime

import msgspec
from sqlalchemy import select
from sqlalchemy.orm import Session

from boxcar.shared.db.models import Snapshot, url_hash
from boxcar.shared.urls import InvalidURL, UrlFilter, canonicalize


class Candidate(msgspec.Struct, kw_only=True):
    """A URL offered for archiving, with what its source said about it."""

    url: str
    title: str | None = None
    tags: list[str] = []
    bookmarked_at: datetime | None = None


class Rejection(msgspec.Struct):
    """An entry that was not queued: where it was, its value, and why."""

    where: str
    value: str
    reason: str


class Admission(msgspec.Struct):
    """What the URL policy made of the candidates.

    ``seeds`` are dicts as stored on ``Crawl.seeds``: ``{"url", "tags", "title"?, "bookmarked_at"?}``
    with a canonical URL and an ISO-8601 UTC date.
    """

    seeds: list[dict]
    entries: int = 0
    duplicates: int = 0
    rejected: list[Rejection] = []
    skipped_existing: int = 0


class PolicyError(ValueError):
    """A candidate broke the policy in strict mode; ``where`` names it."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


def clean_tags(tags: Iterable[str] | str) -> list[str]:
    """Trimmed, de-duplicated tag names (order kept, at most 100 characters each).

    A bare string is one tag: a tag is never split into letters.
    """
    if isinstance(tags, str):
        tags = [tags]
    return list(dict.fromkeys(c[:100] for t in tags if isinstance(t, str) and (c := clean_text(t))))


def clean_text(value: str | None) -> str:
    """Trimmed text without NUL or other C0 control characters (Postgres refuses NUL in text)."""
    if not value:
        return ""
    return "".join(ch for ch in value if ch >= " " or ch in "\t\n").strip()


def existing_urls(session: Session, urls: list[str]) -> set[str]:
    """The canonical URLs among ``urls`` that some crawl already has a snapshot of."""
    by_hash = {url_hash(u): u for u in urls}
    hashes = list(by_hash)
    found: set[str] = set()
    for i in range(0, len(hashes), 500):
        chunk = hashes[i : i + 500]
        found.update(by_hash[h] for h in session.scalars(select(Snapshot.url_hash).where(Snapshot.url_hash.in_(chunk))))
    return found


def admit(
    session: Session,
    items: Iterable[tuple[str, Candidate]],
    *,
    url_filter: UrlFilter,
    only_new: bool,
    strict: bool = False,
) -> Admission:
    """Apply the URL policy to ``(where, candidate)`` pairs.

    Duplicates (same canonical URL) merge: tags are united, the first title and the earliest
    date are kept.

    Raises:
        PolicyError: ``strict`` and a URL is invalid or filtered out.
    """
    seeds: dict[str, dict] = {}
    entries = duplicates = 0
    rejected: list[Rejection] = []
    for where, item in items:
        entries += 1
        try:
            url = canonicalize(item.url)
            reason = url_filter.reason(url)
        except InvalidURL as exc:
            url, reason = "", exc.reason
        if reason:
            if strict:
                raise PolicyError(where, f"{reason}: {item.url[:300]}")
            rejected.append(Rejection(where, item.url[:300], reason))
            continue
        tags = clean_tags(item.tags)
        when = item.bookmarked_at.astimezone(UTC).isoformat() if item.bookmarked_at else None
        title = clean_text(item.title)[:512] or None
        known = seeds.get(url)
        if known is not None:
            duplicates += 1
            known["tags"] = list(dict.fromkeys(known["tags"] + tags))
            if title and "title" not in known:
                known["title"] = title
            if when and ("bookmarked_at" not in known or when < known["bookmarked_at"]):
                known["bookmarked_at"] = when
            continue
        seeds[url] = {"url": url, "tags": tags}
        if title:
            seeds[url]["title"] = title
        if when:
            seeds[url]["bookmarked_at"] = when
    skipped = 0
    if only_new and seeds:
        for url in existing_urls(session, list(seeds)):
            del seeds[url]
            skipped += 1
    return Admission(
        seeds=list(seeds.values()), entries=entries, duplicates=duplicates, rejected=rejected, skipped_existing=skipped
    )


def config_flag(config: dict, key: str, default: bool) -> bool:
    """A boolean crawl-config override (``"True"``/``"false"``/``"1"``…), else ``default``."""
    value = str(config.get(key, "")).strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    return default
