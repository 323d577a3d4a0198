"""Time, as every service reads it: timezone-aware UTC."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    """Now, timezone-aware UTC."""
    return datetime.now(UTC)
