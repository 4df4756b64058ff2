"""Break-even's noise band and verdict (issue 20, item 3): a margin inside the band is "within noise"."""

from __future__ import annotations

import pytest

from dynocell.runbooks.run import BREAKEVEN_MIN_BAND, breakeven_verdict, relative_spread


def test_flip_seen_on_one_config_reads_within_noise():
    # One unchanged config gave +3.1 % and -3.0 % (issue 20): both inside the minimum band.
    assert breakeven_verdict(0.031, BREAKEVEN_MIN_BAND) == "within noise"
    assert breakeven_verdict(-0.030, BREAKEVEN_MIN_BAND) == "within noise"


def test_clear_margins_keep_their_verdict():
    assert breakeven_verdict(0.20, BREAKEVEN_MIN_BAND) == "pays"
    assert breakeven_verdict(-0.501, BREAKEVEN_MIN_BAND) == "does NOT pay"
    assert breakeven_verdict(0.08, 0.10) == "within noise"


def test_relative_spread_is_half_range_over_median():
    assert relative_spread([10.0]) == 0.0
    assert relative_spread([9.0, 10.0, 11.0]) == pytest.approx(0.1)
    assert relative_spread([]) == 0.0
