"""Admission of seeds into a crawl: the URL policy, applied the same way everywhere.

``admit`` is a pure function: it filters ``Seed``s by ``URL_ALLOWLIST``/``URL_DENYLIST`` and
merges duplicates (same ``Seed.key``). Whether a URL was archived before (``ONLY_NEW``) is a
database question, so callers compose it: ``admission.without(archived_keys(session, ...))``.

Used by ingest (``POST /api/v1/crawls`` and imports) and by the crawl-runner (feed items and URLs
discovered by hooks). URLs were canonicalized once already, when their ``Seed`` was made.
"""

from __future__ import annotations

from collections.abc import Iterable

import msgspec
from sqlalchemy import exists, select
from sqlalchemy.orm import Session

from boxcar.shared.db.models import ArchiveResult, Crawl, Snapshot, url_hash
from boxcar.shared.importers import Rejected
from boxcar.shared.messages import ResultStatus, Seed
from boxcar.shared.urls import UrlFilter

#: Lookups of this many keys at a time (Postgres caps a statement at 65,535 parameters).
LOOKUP_BATCH = 1000


class Admission(msgspec.Struct):
    """What the URL policy made of the seeds.

    ``seeds`` are merged (one per ``Seed.key``) in first-seen order; ``entries`` counts what was
    offered, ``duplicates`` what merged into an earlier seed, ``skipped_existing`` what
    ``without`` removed as archived before.
    """

    seeds: list[Seed]
    entries: int = 0
    duplicates: int = 0
    rejected: list[Rejected] = []
    skipped_existing: int = 0

    def without(self, keys: set[str]) -> Admission:
        """This admission minus the seeds whose ``url_hash`` is in ``keys`` (archived before)."""
        kept = [s for s in self.seeds if url_hash(s.url) not in keys]
        return msgspec.structs.replace(
            self, seeds=kept, skipped_existing=self.skipped_existing + len(self.seeds) - len(kept)
        )


class PolicyError(ValueError):
    """A seed broke the policy in strict mode; ``where`` names it."""

    def __init__(self, where: str, message: str) -> None:
        super().__init__(f"{where}: {message}")
        self.where = where


def admit(seeds: Iterable[Seed], url_filter: UrlFilter, *, strict: bool = False) -> Admission:
    """Apply the URL policy to seeds (``Seed.source`` names each in rejections).

    Duplicates (same ``Seed.key``) merge by ``Seed.merge``: the first non-empty title, the union
    of tags, the earliest bookmark date.

    Raises:
        PolicyError: ``strict`` and a URL is filtered out.
    """
    merged: dict[str, Seed] = {}
    entries = duplicates = 0
    rejected: list[Rejected] = []
    for seed in seeds:
        entries += 1
        reason = url_filter.reason(seed.url)
        if reason:
            if strict:
                raise PolicyError(seed.source or "url", f"{reason}: {seed.url[:300]}")
            rejected.append(Rejected(where=seed.source, value=seed.url[:300], reason=reason))
            continue
        key = seed.key
        known = merged.get(key)
        if known is None:
            merged[key] = seed
        else:
            duplicates += 1
            merged[key] = known.merge(seed)
    return Admission(seeds=list(merged.values()), entries=entries, duplicates=duplicates, rejected=rejected)


def archived_keys(session: Session, seeds: Iterable[Seed], owner: str) -> set[str]:
    """The ``url_hash`` of each seed a crawl of ``owner`` (a user name: ``ONLY_NEW`` is per user,
    issue 28) has already archived: a snapshot of that URL with at least one succeeded result (a
    cancelled or failed one does not count, so a re-import archives what was never archived)."""
    hashes = list({url_hash(s.url) for s in seeds})
    found: set[str] = set()
    for i in range(0, len(hashes), LOOKUP_BATCH):
        chunk = hashes[i : i + LOOKUP_BATCH]
        succeeded = exists().where(
            ArchiveResult.snapshot_id == Snapshot.id, ArchiveResult.status == ResultStatus.SUCCEEDED
        )
        mine = Snapshot.crawl_id.in_(select(Crawl.id).where(Crawl.created_by == owner))
        found.update(session.scalars(select(Snapshot.url_hash).where(Snapshot.url_hash.in_(chunk), succeeded, mine)))
    return found
