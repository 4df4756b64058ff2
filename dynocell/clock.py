"""The one clock of dynocell's records: the current time as aware UTC, the form every stored timestamp
(``started_at``, ``ended_at``, ``ready_at``, ``measured_at`` …) is written in."""

from __future__ import annotations

from datetime import datetime, timezone


def now_utc() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(timezone.utc)
