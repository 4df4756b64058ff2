"""The one clock of dynocell's records: the current time as aware UTC, the form every stored timestamp
(``started_at``, ``ended_at``, ``ready_at``, ``measured_at`` …) is written in, and the one reading of a
stored time as aware UTC (SQLite hands back naive datetimes that were written as UTC; PostgreSQL's
``timestamptz`` hands back aware ones)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import overload


def now_utc() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)


@overload
def aware_utc(dt: datetime | str) -> datetime: ...
@overload
def aware_utc(dt: None) -> None: ...
@overload
def aware_utc(dt: datetime | str | None) -> datetime | None: ...
def aware_utc(dt: datetime | str | None) -> datetime | None:
    """``dt`` as a timezone-aware datetime: a naive one (how SQLite returns a stored UTC time) is taken as
    UTC, an aware one is kept (its offset unchanged), an ISO 8601 string is parsed first
    (:meth:`datetime.fromisoformat`; ValueError when it is not one); None stays None."""
    if dt is None:
        return None
    if isinstance(dt, str):
        dt = datetime.fromisoformat(dt)
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def iso_utc(dt: datetime | str | None) -> str | None:
    """:func:`aware_utc` of ``dt`` as ISO 8601 text (``2026-12-01T08:00:00+00:00``), or None."""
    t = aware_utc(dt)
    return t.isoformat() if t else None
