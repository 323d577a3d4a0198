"""Schedules: cron expressions and ArchiveBox's aliases (``hourly``, ``daily``, …), via croniter."""

from __future__ import annotations

from datetime import datetime, timedelta

from croniter import croniter

MAX_BACKOFF = timedelta(hours=6)
SCHEDULE_ALIASES = {
    "minute": "* * * * *",
    "minutely": "* * * * *",
    "hour": "@hourly",
    "hourly": "@hourly",
    "day": "@daily",
    "daily": "@daily",
    "week": "@weekly",
    "weekly": "@weekly",
    "month": "@monthly",
    "monthly": "@monthly",
    "year": "@yearly",
    "yearly": "@yearly",
}


def cron_expression(schedule: str) -> str:
    """A cron expression for a schedule string: an alias (``hourly``, ``daily``, …) or cron itself.

    Raises:
        ValueError: neither an alias nor a valid cron expression.
    """
    expr = SCHEDULE_ALIASES.get(schedule.strip().lower(), schedule.strip())
    if not croniter.is_valid(expr):
        raise ValueError(
            f"invalid schedule {schedule!r}: use hourly, daily, weekly, monthly, yearly or a cron "
            "expression like '*/30 * * * *'"
        )
    return expr


def next_run(schedule: str, after: datetime) -> datetime:
    """The first time strictly after ``after`` the schedule fires (UTC)."""
    fires: datetime = croniter(cron_expression(schedule), after).get_next(datetime)
    return fires


def backoff(failures: int) -> timedelta:
    """Wait before retrying after ``failures`` consecutive failed polls."""
    return min(timedelta(minutes=2 ** max(0, failures - 1)), MAX_BACKOFF)
