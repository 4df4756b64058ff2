"""Break-even's noise band and verdict (issue 20, item 3): a margin inside the band is "within noise"."""

from __future__ import annotations

import pytest

from dynocell.engine.breakeven import BREAKEVEN_MIN_BAND, breakeven_verdict, median_noise


def test_flip_seen_on_one_config_reads_within_noise():
    # One unchanged config gave +3.1 % and -3.0 % (issue 20): both inside the minimum band.
    assert breakeven_verdict(0.031, BREAKEVEN_MIN_BAND) == "within noise"
    assert breakeven_verdict(-0.030, BREAKEVEN_MIN_BAND) == "within noise"


def test_clear_margins_keep_their_verdict():
    assert breakeven_verdict(0.20, BREAKEVEN_MIN_BAND) == "pays"
    assert breakeven_verdict(-0.501, BREAKEVEN_MIN_BAND) == "does NOT pay"
    assert breakeven_verdict(0.08, 0.10) == "within noise"


def test_median_noise_is_the_medians_relative_standard_error():
    assert median_noise([10.0]) == 0.0 and median_noise([]) == 0.0
    # MAD 1 → σ 1.4826 → SE of the median 1.2533·σ/√3 = 1.0728, over the median 10.
    assert median_noise([9.0, 10.0, 11.0]) == pytest.approx(0.10728, rel=1e-3)
    # One slow outlier on a loaded host barely widens it.
    assert median_noise([10.0, 10.1, 9.9, 10.0, 30.0]) < 0.02
