"""engine/stats.py pinned on worked values (issue 33): bootstrap with a fixed seed, the ratio estimator of
τ over requests, the log-ratio interval (never below −100 %), the samples-needed formula and percentiles
only where the sample supports them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dynocell.engine import stats


def test_bootstrap_median_is_reproducible_and_shows_n_and_seed():
    x = [10, 11, 12, 13, 14, 15, 30]
    a, b = stats.bootstrap(x), stats.bootstrap(x)
    assert a == b  # fixed seed: the same values give the same interval
    assert (a.value, a.lo, a.hi, a.n) == (13.0, 11.0, 15.0, 7)
    assert (a.seed, a.resamples, a.method) == (stats.BOOTSTRAP_SEED, stats.BOOTSTRAP_RESAMPLES, "bootstrap")
    m = stats.bootstrap(x, np.mean)
    assert m.value == 15.0 and m.lo == pytest.approx(11.5714, abs=1e-4) and m.hi == pytest.approx(20.2857, abs=1e-4)
    assert a.text("{:.1f}", " ms") == "13.0 ms [11.0, 15.0] n=7"


def test_bootstrap_too_small_or_constant():
    assert stats.bootstrap([5.0]) is None
    assert stats.bootstrap([None, 3.0]) is None
    c = stats.bootstrap([2.0, 2.0, 2.0])
    assert (c.value, c.lo, c.hi) == (2.0, 2.0, 2.0)


def test_ratio_of_sums_worked_tau():
    # three requests of 64 tokens in 30, 40 and 35 verify steps: τ = 192/105; residuals ±9.142857 and 0,
    # SE² = 167.18 / (3·2) / 35² → SE 0.15082; ± 1.95996·SE
    iv = stats.ratio_of_sums([64, 64, 64], [30, 40, 35])
    assert iv.value == pytest.approx(1.828571, abs=1e-6)
    assert iv.lo == pytest.approx(1.532974, abs=1e-6) and iv.hi == pytest.approx(2.124169, abs=1e-6)
    assert iv.n == 3
    assert stats.ratio_of_sums([64], [30]) is None
    assert stats.rel_se(iv) == pytest.approx(0.15082 / 1.828571, abs=1e-4)


def test_log_ratio_worked_values():
    # means 10.5 and 12.5, s² = 5/3 each: var ln R = 5/3/(4·10.5²) + 5/3/(4·12.5²) = 0.0064460
    e = stats.log_ratio([10, 11, 12, 9], [12, 13, 14, 11])
    assert e.ratio == pytest.approx(-0.16)
    assert e.se_log == pytest.approx(0.080287, abs=1e-6)
    assert e.lo == pytest.approx(-0.282306, abs=1e-6) and e.hi == pytest.approx(-0.016851, abs=1e-6)
    assert e.verdict == "lower" and e.more_needed == 0


def test_log_ratio_never_below_minus_100_percent():
    # issue 33: "[-222.6 %, +408.3 %]" — the log-ratio interval of a wild sample stays above −100 %
    e = stats.log_ratio([1, 10, 100], [100, 1, 10])
    assert e.verdict == "inconclusive"
    assert -1 < e.lo < -0.9 and e.hi > 9
    assert e.more_needed > 1000
    assert "inconclusive: about" in e.text() and "more requests per side" in e.text()


def test_one_value_per_side_is_too_few():
    e = stats.log_ratio([10], [12, 13])
    assert e.verdict == "too few" and "too few requests" in e.text()


def test_samples_needed_two_sample_normal_approximation():
    # 2 (z_0.975 + z_0.8)² σ²/δ²: σ = δ → 15.70 → 16 (Lehr's 16); σ 20 %, δ 5 % → 251.2 → 252
    assert stats.samples_needed(1, 1) == 16
    assert stats.samples_needed(0.2, 0.05) == 252
    assert stats.samples_needed(0.1, 0.05) == 63
    assert stats.samples_needed(0.0, 0.05) == 1
    assert stats.z_of(0.95) == pytest.approx(1.959964, abs=1e-6)
    assert "Chow, Shao & Wang" in stats.samples_needed.__doc__
    with pytest.raises(ValueError, match="delta must be > 0"):
        stats.samples_needed(0.1, 0)


def test_inconclusive_effect_says_how_many_more():
    # ln ratio 0.02, SE 0.05 with 10 per side: σ = 0.05/√(0.2) = 0.1118 → n = 15.70·0.0125/0.0025 = 78.5 → 79
    e = stats.effect_from_log(0.02, 0.05, 10, 10)
    assert e.verdict == "inconclusive"
    assert e.more_needed == 79 - 10
    assert math.isclose(e.lo, math.expm1(0.02 - 1.959964 * 0.05), abs_tol=1e-6)


def test_percentiles_only_where_the_sample_supports_them():
    assert stats.min_samples_for(0.99) == 100 and stats.min_samples_for(0.9) == 10
    assert stats.min_samples_for(0.5) == 1
    assert stats.percentile(list(range(99)), 0.99) is None  # n too small: p99 of 99 values is the maximum
    assert stats.percentile(list(range(100)), 0.99) == pytest.approx(98.01)
    assert stats.percentile([3.0, 1.0, 2.0], 0.5) == 2.0
    assert stats.percentile([1.0] * 5, 0.9) is None


def test_compare_intervals_combines_on_the_log_scale():
    a = stats.Interval(2.0, 1.8, 2.2, 15)
    b = stats.Interval(2.0, 1.8, 2.2, 15)
    e = stats.compare_intervals(a, b)
    assert e.ratio == 0 and e.verdict == "inconclusive"
    assert e.se_log == pytest.approx(math.hypot(0.4 / (2 * 1.959964 * 2), 0.4 / (2 * 1.959964 * 2)))


def test_tau_and_position_intervals_over_request_records():
    recs = [{"spec_correct_drafts_histogram": [10, 5, 3, 2]},   # 20 steps, 37 tokens
            {"spec_correct_drafts_histogram": [20, 5, 3, 2]},   # 30 steps, 47 tokens
            {"spec_accept_histogram": [5, 5, 3, 2]},            # 15 steps, 32 tokens
            {"spec_correct_drafts_histogram": None}]
    iv = stats.tau_interval(recs)
    assert iv.n == 3 and iv.value == pytest.approx(116 / 65)
    assert iv.lo < iv.value < iv.hi
    assert iv == stats.ratio_of_sums([37, 47, 32], [20, 30, 15])
    p1 = stats.position_interval(recs, 1)
    assert p1.value == pytest.approx((10 + 10 + 10) / 65)
    assert stats.tau_interval(recs[:1]) is None


def test_tau_interval_counts_requests_by_their_own_drafted_and_accepted_counts():
    """An engine kind whose responses carry drafted / accepted counts but no histogram (llama-server's
    timings.draft_n / draft_n_accepted): steps = drafted / mean draft length, tokens = steps + accepted."""
    from dynocell.engine.stats import tau_interval

    recs = [{"spec_drafted": 8, "spec_accepted": 6, "spec_draft_len": 4.0},   # 2 steps, 8 tokens
            {"spec_drafted": 4, "spec_accepted": 1, "spec_draft_len": 4.0},   # 1 step, 2 tokens
            {"spec_drafted": 0, "spec_accepted": 0, "spec_draft_len": 4.0},   # nothing drafted: not counted
            {"output_chars": 10}]                                              # neither: not counted
    iv = tau_interval(recs)
    assert iv is not None and iv.n == 2 and abs(iv.value - 10 / 3) < 1e-12 and iv.lo < iv.value < iv.hi
    assert tau_interval(recs[1:]) is None  # one request is no interval
