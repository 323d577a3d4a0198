"""Identifiers: UUIDv7 as 32 hex characters, as ArchiveBox 0.9 prints them in paths and URLs."""

from __future__ import annotations

import uuid6


def new_id() -> str:
    """Return a new time-ordered id (UUIDv7, 32 lowercase hex characters, no hyphens)."""
    return uuid6.uuid7().hex
