"""``dynocell import log`` of a log with a year-0001 or far-future timestamp (left-over defects, item 4).

The log is the real SGLang 0.5.17 server log ``tests/data/sglang-0.5.17/A.server.log`` (copied from
tests/data/sglang-0.5.17, see that folder's README) with one or two timestamps
rewritten. Before: a ``[0001-…]`` first line made every phase offset and ``ready_s`` 63,902,822,459 s
(a ``[9999-…]`` one, a negative offset). Now a timestamp before 2000 or more than a day in the
future counts for nothing: the other lines' times give the timeline, a ready line whose own time is
nonsense gives no ready time, and the import's warnings say so.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from tests.test_bad_inputs import cli

REAL_LOG = Path(__file__).parent / "data" / "sglang-0.5.17" / "A.server.log"


def _rewrite(tmp_path: Path, first_year: str, ready_year: str | None = None) -> Path:
    lines = REAL_LOG.read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if line.startswith("[2026-"))
    lines[first] = f"[{first_year}-" + lines[first][6:]
    if ready_year:
        ready = next(i for i, line in enumerate(lines) if "fired up and ready to roll" in line)
        lines[ready] = f"[{ready_year}-" + lines[ready][6:]
    out = tmp_path / f"y{first_year}.log"
    out.write_text("".join(lines))
    return out


def _import(path: Path) -> dict:
    code, out, err = cli("import", "log", str(path), "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_real_log_is_ready_after_59_s(isolated_home):
    res = _import(REAL_LOG)
    assert res["ready_s"] == pytest.approx(59, abs=1) and res["warnings"] == []


@pytest.mark.parametrize("year", ["0001", "1970", "9999"])
def test_a_nonsense_first_timestamp_does_not_make_the_ready_time(isolated_home, tmp_path, year):
    res = _import(_rewrite(tmp_path, year))
    assert res["ready_s"] == pytest.approx(59, abs=1)  # from the other lines' times
    assert all(0 <= off < 120 for off in res["nodes"]["0"].values()), res["nodes"]
    (warning,) = res["warnings"]
    assert f"y{year}.log: 1 line(s) carry a timestamp outside 2000-01-01" in warning and "line 5" in warning


def test_a_far_future_ready_line_gives_no_ready_time_and_says_so(isolated_home, tmp_path):
    from dynocell.db import boots as db_boots
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    path = _rewrite(tmp_path, "9999", ready_year="9999")
    res = _import(path)
    assert res["ready_s"] is None and "ready" not in res["nodes"]["0"]
    assert res["warnings"][0].endswith("not used for phase times; ready time unknown")
    cell = open_cell(load_settings())
    boot = db_boots.get_boot(cell.store, res["boot_id"])
    assert boot.ready_s is None and boot.started_at.year == 2026
    cell.store.engine.dispose()
    code, out, _ = cli("import", "log", str(path))  # the same record again, as the human output
    assert code == 0 and "ready time unknown" in out and "never ready" not in out


def test_a_timestamp_more_than_a_day_ahead_is_not_sane():
    from dynocell.engine.logfile import sane_timestamp

    now = datetime(2026, 12, 1, 12, 0)
    assert sane_timestamp(datetime(2026, 12, 2, 11, 0), now) and sane_timestamp(datetime(2000, 1, 1), now)
    assert not sane_timestamp(datetime(2026, 12, 2, 13, 0), now) and not sane_timestamp(datetime(1999, 12, 31), now)
