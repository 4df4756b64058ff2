"""dynocell.clock: the one reading of a stored time (SQLite hands back naive UTC, PostgreSQL aware)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from dynocell.clock import aware_utc, iso_utc, now_utc


def test_naive_is_read_as_utc_and_aware_is_kept():
    naive = datetime(2026, 12, 1, 8, 0, 0)
    assert aware_utc(naive) == datetime(2026, 12, 1, 8, tzinfo=timezone.utc)
    plus2 = datetime(2026, 12, 1, 10, tzinfo=timezone(timedelta(hours=2)))
    assert aware_utc(plus2) is plus2 and aware_utc(plus2) == aware_utc(naive)
    assert aware_utc(None) is None and iso_utc(None) is None


def test_iso_strings_are_parsed_and_written_with_their_offset():
    assert aware_utc("2026-12-01T08:00:00") == datetime(2026, 12, 1, 8, tzinfo=timezone.utc)
    assert iso_utc("2026-12-01T08:00:00") == "2026-12-01T08:00:00+00:00"
    assert iso_utc(datetime(2026, 12, 1, 8)) == "2026-12-01T08:00:00+00:00"
    with pytest.raises(ValueError):
        aware_utc("yesterday")


def test_now_is_aware_utc():
    t = now_utc()
    assert t.tzinfo is not None and t.utcoffset() == timedelta(0)
