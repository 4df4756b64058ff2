"""The statistical core of experiments (dynocell.engine.verdicts) on synthetic samples."""

from __future__ import annotations

import random

import pytest

from dynocell.engine import verdicts as V


@pytest.fixture(autouse=True)
def _fresh_t_quantile_cache():
    """Each test computes its t quantiles: a cache filled by an earlier test (or a forked parent) would hide the
    math."""
    V._t_quantile.cache_clear()
    yield


def _normal(mean: float, cv: float, n: int, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [rng.gauss(mean, mean * cv) for _ in range(n)]


# ---------------------------------------------------------------- t quantile

@pytest.mark.parametrize("df, expected", [(1, 12.7062), (2, 4.3027), (5, 2.5706), (10, 2.2281), (30, 2.0423)])
def test_t_quantile_matches_tables(df, expected):
    assert V.t_quantile(0.975, df) == pytest.approx(expected, abs=2e-4)


def test_t_quantile_symmetric_and_normal_limit():
    assert V.t_quantile(0.025, 7) == pytest.approx(-V.t_quantile(0.975, 7))
    assert V.t_quantile(0.975, float("inf")) == pytest.approx(1.95996, abs=1e-4)


# ---------------------------------------------------------------- compare

def test_equal_distributions_are_neutral_with_many_runs():
    inc = _normal(100.0, 0.05, 150, 1)
    arm = _normal(100.0, 0.05, 150, 2)
    c = V.compare("decode_tok_s", "c=1", inc, arm)
    assert c.verdict == "neutral", c
    assert c.ci_low >= -c.noise_floor and c.ci_high <= c.noise_floor
    assert c.noise_floor == pytest.approx(max(V.MIN_FLOOR, _cv(inc)))


def test_equal_distributions_few_runs_rarely_call_a_difference():
    """Equal distributions, 3 runs a side: neutral/inconclusive, with false calls under the 5 % the CI allows."""
    verdicts = [V.compare("decode_tok_s", "c=1", _normal(100.0, 0.05, 3, seed), _normal(100.0, 0.05, 3,
                                                                                        10_000 + seed)).verdict
                for seed in range(200)]
    false_calls = sum(v in ("better", "worse") for v in verdicts)
    assert false_calls / len(verdicts) <= 0.05
    assert verdicts.count("inconclusive") > len(verdicts) / 2


def test_hand_worked_welch_example():
    """Welch + delta method worked by hand: inc 98/100/102 (m 100, s² 4), arm 105/110/115/110 (m 110, s² 50/3).

    v_a = (s_a²/n_a)/m_i² = (50/3/4)/100² = 4.1667e-4;
    v_i = m_a²·(s_i²/n_i)/m_i⁴ = 110²·(4/3)/100⁴ = 1.6133e-4  (the m_a²/m_i² factor is 1.21 here);
    se = √(v_a + v_i) = 0.024042; df = (v_a+v_i)² / (v_a²/3 + v_i²/2) = 4.7131 (not n_a + n_i − 2 = 5);
    t(0.975, 4.7131) = 2.6184 (between the table's 2.7764 at 4 df and 2.5706 at 5 df);
    CI = 0.1 ± 2.6184 · 0.024042 = [0.03705, 0.16295].
    """
    c = V.compare("decode_tok_s", "c=1", [98.0, 100.0, 102.0], [105.0, 110.0, 115.0, 110.0])
    assert c.rel_diff == pytest.approx(0.1)
    assert c.df == pytest.approx(4.7131, abs=1e-4)
    assert V.t_quantile(0.975, 4.7131) == pytest.approx(2.6184, abs=1e-4)
    assert c.ci_low == pytest.approx(0.03705, abs=1e-5)
    assert c.ci_high == pytest.approx(0.16295, abs=1e-5)
    assert c.noise_floor == pytest.approx(0.02)  # CV of the incumbent = 2/100
    assert c.verdict == "better" and c.more_repeats is None


def test_hand_worked_more_repeats_counts_the_runs_already_done():
    """inc 100/112, arm 118/130: d = 124/106 − 1 = +16.98 %, floor = CV_inc = 8.485/106 = 8.00 %.

    The margin |d| − f = 8.98 %; with the observed CVs (arm 6.84 %, inc 8.00 %) the
    95 % half-width falls below it first at n = 9 runs per side (df ≈ 15.6,
    t ≈ 2.124, half ≈ 8.72 %; at n = 8: 9.36 %). Two runs a side are done: 7 more.
    """
    c = V.compare("decode_tok_s", "c=1", [100.0, 112.0], [118.0, 130.0])
    assert c.verdict == "inconclusive"
    assert c.rel_diff == pytest.approx(0.169811, abs=1e-6)
    assert c.noise_floor == pytest.approx(0.080050, abs=1e-6)
    assert c.ci_low == pytest.approx(-0.21378, abs=1e-5) and c.ci_high == pytest.approx(0.55340, abs=1e-5)
    need = V.repeats_to_decide(c.rel_diff, c.noise_floor, 6 * 2 ** 0.5 / 124, 6 * 2 ** 0.5 / 106, 124 / 106)
    assert need == 9
    assert c.more_repeats == 7
    assert "about 7 more run(s) per side" in c.reason


def test_false_positive_rate_of_the_95_interval():
    """Equal distributions: the 95 % CI of the relative difference misses 0 in ≈ 5 % of comparisons.

    2,000 seeded comparisons of 30 vs 30 runs (CV 5 %): the miss rate must lie in
    [3.5 %, 6.5 %] — a 90 % interval (t at 0.95) misses ≈ 10 %, a 98 % one ≈ 2 %;
    the binomial sd at 2,000 trials is 0.5 %. Deterministic (fixed seed).
    """
    rng = random.Random(2026)
    trials, misses = 2000, 0
    for _ in range(trials):
        inc = [rng.gauss(100.0, 5.0) for _ in range(30)]
        arm = [rng.gauss(100.0, 5.0) for _ in range(30)]
        c = V.compare("decode_tok_s", "c=1", inc, arm)
        misses += not (c.ci_low <= 0.0 <= c.ci_high)
    assert 0.035 <= misses / trials <= 0.065, misses / trials


def test_clear_shift_higher_is_better():
    inc = [100.0, 101.0, 99.0, 100.5]
    arm = [140.0, 141.0, 139.0, 140.5]
    c = V.compare("decode_tok_s", "c=4", inc, arm)
    assert c.verdict == "better"
    assert c.rel_diff == pytest.approx(0.40, abs=0.01)
    assert c.ci_low > c.noise_floor
    # the same shift on a lower-is-better metric (latency) is worse
    assert V.compare("ttft_p50_ms", "c=4", inc, arm).verdict == "worse"
    assert V.compare("ttft_p50_ms", "c=4", arm, inc).verdict == "better"
    assert V.compare("decode_tok_s", "c=4", arm, inc).verdict == "worse"


def test_few_noisy_samples_are_inconclusive_with_a_repeat_count():
    inc = [100.0, 112.0]
    arm = [118.0, 130.0]
    c = V.compare("decode_tok_s", "c=1", inc, arm)
    assert c.verdict == "inconclusive"
    assert c.more_repeats is not None and c.more_repeats >= 1
    assert "more run" in c.reason
    # following the advice decides: the same spread with the suggested number of runs per side
    n = 2 + c.more_repeats
    inc_more = _spread(106.0, 6.0, n)
    arm_more = _spread(124.0, 6.0, n)
    assert V.compare("decode_tok_s", "c=1", inc_more, arm_more).verdict == "better"


def test_single_run_per_side_is_inconclusive():
    c = V.compare("tpot_ms", "c=1", [10.0], [5.0])
    assert c.verdict == "inconclusive"
    assert c.more_repeats == 1
    assert c.ci_low is None


def test_noise_floor_comes_from_incumbent_spread():
    # incumbent swings ±10 %: a 5 % gain is within its own noise even with a very precise arm
    inc = _spread(100.0, 10.0, 30)
    arm = [105.0] * 30
    c = V.compare("decode_tok_s", "c=1", inc, arm)
    assert c.noise_floor > 0.09
    assert c.verdict in ("neutral", "inconclusive")
    assert c.verdict != "better"


def test_deterministic_metrics_use_the_minimum_floor():
    c = V.compare("tau", "acceptance", [1.0, 1.0], [1.01, 1.01])
    assert c.noise_floor == V.MIN_FLOOR and c.verdict == "neutral"
    c = V.compare("tau", "acceptance", [1.0, 1.0, 1.0], [2.5, 2.5, 2.5])
    assert c.verdict == "better" and c.rel_diff == pytest.approx(1.5)
    # issue 33: two runs per side never give better/worse (a "worse" verdict on 2 runs per arm)
    c = V.compare("tau", "acceptance", [1.0, 1.0], [2.5, 2.5])
    assert c.verdict == "inconclusive" and c.more_repeats == 1


def test_missing_samples_are_inconclusive():
    c = V.compare("prefill_tok_s", "c=1", [], [1.0, 2.0])
    assert c.verdict == "inconclusive" and "incumbent" in c.reason
    c = V.compare("prefill_tok_s", "c=1", [1.0, None, float("nan")], [1.0])
    assert c.n_incumbent == 1


# ---------------------------------------------------------------- arm verdict

def _samples(**kv):
    return {tuple(k.split("__")): v for k, v in kv.items()}


INC = _samples(decode_tok_s__c1=[100.0, 100.5, 99.5, 100.2], ttft_p50_ms__c1=[20.0, 20.1, 19.9, 20.0],
               tau__acceptance=[1.0] * 4)


def test_arm_better_names_drivers():
    arm = _samples(decode_tok_s__c1=[150.0, 151.0, 149.0], ttft_p50_ms__c1=[20.1, 20.4, 19.6],
                   tau__acceptance=[2.4, 2.5, 2.45])
    v = V.judge_arm("spec", INC, arm)
    assert v.verdict == "better" and v.verdict_label == "better"
    assert {(d["metric"], d["level"]) for d in v.drivers} == {("decode_tok_s", "c1"), ("tau", "acceptance")}
    assert "decode tok/s @c1 +49.9%" in v.summary


def test_arm_regression_anywhere_is_worse_with_tradeoffs():
    arm = _samples(decode_tok_s__c1=[150.0, 151.0, 149.0], ttft_p50_ms__c1=[30.0, 30.5, 29.5],
                   tau__acceptance=[1.0] * 3)
    v = V.judge_arm("spec", INC, arm)
    assert v.verdict == "worse"
    assert [(d["metric"], d["level"]) for d in v.drivers] == [("ttft_p50_ms", "c1")]
    assert [(d["metric"], d["level"]) for d in v.tradeoffs] == [("decode_tok_s", "c1")]
    assert "though better" in v.summary


def test_arm_all_within_noise_is_neutral():
    v = V.judge_arm("same", INC, {k: list(x) for k, x in INC.items()})
    assert v.verdict == "neutral"


def test_arm_inconclusive_carries_more_repeats():
    inc = _samples(decode_tok_s__c1=[100.0, 112.0])
    arm = _samples(decode_tok_s__c1=[118.0, 130.0])
    v = V.judge_arm("noisy", inc, arm)
    assert v.verdict == "inconclusive" and v.more_repeats and v.more_repeats >= 1


def test_correctness_failure_rejects_even_a_faster_arm():
    arm = _samples(decode_tok_s__c1=[300.0, 301.0, 299.0])
    v = V.judge_arm("fast-but-wrong", INC, arm,
                    rejections=["lossless check failed (2 mismatching prompt(s)) in run r1"])
    assert v.verdict == "rejected"
    assert v.verdict_label.startswith("rejected: lossless check failed")
    assert v.drivers == []
    # the comparisons are still there for the record
    assert any(c.verdict == "better" for c in v.comparisons)
    d = v.as_dict()
    assert d["comparisons"][0]["metric"] == "decode_tok_s"


def test_levels_ordered_numerically():
    inc = {("decode_tok_s", "c=16"): [1.0, 1.0], ("decode_tok_s", "c=4"): [1.0, 1.0], ("tau", "acceptance"): [1.0, 1.0]}
    v = V.judge_arm("a", inc, inc)
    assert [(c.metric, c.level) for c in v.comparisons] == [("decode_tok_s", "c=4"), ("decode_tok_s", "c=16"),
                                                            ("tau", "acceptance")]


# ---------------------------------------------------------------- schedule

def test_interleaved_schedule_is_abba():
    assert V.interleaved_schedule("I", ["A"], 4) == [("I", 0), ("A", 0), ("A", 1), ("I", 1),
                                                     ("I", 2), ("A", 2), ("A", 3), ("I", 3)]
    s = V.interleaved_schedule("I", ["A1", "A2"], 2)
    assert [c for c, _ in s] == ["I", "A1", "A2", "A2", "A1", "I"]


def test_interleaved_schedule_balances_positions():
    s = V.interleaved_schedule("I", ["A", "B"], 4)
    block = 3
    for cfg in ("I", "A", "B"):
        positions = [i % block for i, (c, _) in enumerate(s) if c == cfg]
        # every config's mean position within its block is the same: no side gets the early slots
        assert sum(positions) / len(positions) == pytest.approx(1.0)
    assert all(sum(1 for c, _ in s if c == x) == 4 for x in ("I", "A", "B"))


def test_interleaved_schedule_rejects_bad_input():
    with pytest.raises(ValueError):
        V.interleaved_schedule("I", [], 2)
    with pytest.raises(ValueError):
        V.interleaved_schedule("I", ["A"], 0)


# ---------------------------------------------------------------- helpers

def _cv(xs):
    m = sum(xs) / len(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5 / m


def _spread(mean: float, half: float, n: int) -> list[float]:
    """n values alternating mean ± half (sample sd ≈ half)."""
    return [mean + (half if i % 2 else -half) for i in range(n)]


# ---------------------------------------------------------------- every field of a comparison, pinned

def _cmp(n_i, n_a, m_i, m_a, d, lo, hi, floor, df, more, reason, verdict="inconclusive"):
    return {"metric": "decode_tok_s", "level": "c=1", "direction": "higher-better", "verdict": verdict,
            "n_incumbent": n_i, "n_arm": n_a, "incumbent_mean": m_i, "arm_mean": m_a, "rel_diff": d, "ci_low": lo,
            "ci_high": hi, "noise_floor": floor, "df": df, "more_repeats": more, "reason": reason}


COMPARISONS = {
    "no incumbent samples": ([], [1.0, 2.0], _cmp(0, 2, None, 1.5, None, None, None, 0.02, None, None,
                                                   "no samples from the incumbent")),
    "no arm samples": ([1.0, 2.0], [None], _cmp(2, 0, 1.5, None, None, None, None, 0.02, None, None,
                                                "no samples from the arm")),
    "incumbent mean 0": ([0.0, 0.0], [1.0, 2.0], _cmp(2, 2, 0.0, 1.5, None, None, None, 0.02, None, None,
                                                      "the incumbent's mean is 0: no relative difference")),
    # one arm run: d = 5/11 − 1; floor = CV of 10/11/12 = 1/11; one more run on the short side
    "one arm run": ([10.0, 11.0, 12.0], [5.0], _cmp(3, 1, 11.0, 5.0, 5 / 11 - 1, None, None, 1 / 11, None, 1,
                                                    "fewer than 2 runs on a side: no spread to judge against")),
    # worked in test_hand_worked_more_repeats_counts_the_runs_already_done
    "noisy": ([100.0, 112.0], [118.0, 130.0], _cmp(
        2, 2, 106.0, 124.0, 0.16981132075471694, -0.21377956803562292, 0.5534022095450568, 0.08004982428526952,
        1.9527403869718452, 7, "the 95% interval [-21.4%, +55.3%] straddles the noise floor ±8.0%; "
                               "about 7 more run(s) per side would decide")),
    # no spread at all: se = 0, the interval is the point, df infinite (stored as None)
    # issue 33: two runs per side are too few for better/worse (was "better")
    "no spread": ([1.0, 1.0], [2.5, 2.5], _cmp(2, 2, 1.0, 2.5, 1.5, 1.5, 1.5, 0.02, None, 1,
                                               "2 run(s) on a side: a better verdict needs at least 3 per side; "
                                               "about 1 more run(s) per side would decide")),
    # an arm mean of 0: the incumbent's term vanishes (v_i = m_a² · … = 0), v_a = (s_a²/n_a)/m_i² = (2/2)/100²
    # = 1e-4, se = 0.01, Welch df from the arm's term alone = n_a − 1 = 1, t(0.975, 1) = 12.706: d = −1 ± 0.12706,
    # whose low end (−112.7 %) is cut at −100 % (issue 33: a ratio never falls below −100 %); two arm runs are
    # too few for "worse" (was "worse" on [−112.7 %, −87.3 %])
    "arm mean 0": ([100.0, 101.0, 99.0], [1.0, -1.0], _cmp(
        3, 2, 100.0, 0.0, -1.0, -1.0, -0.8729379526386037, 0.02, 1.0, 1,
        "2 run(s) on a side: a worse verdict needs at least 3 per side; about 1 more run(s) per side would decide")),
}


@pytest.mark.parametrize("case", list(COMPARISONS))
def test_comparison_fields_pinned(case):
    inc, arm, want = COMPARISONS[case]
    assert V.compare("decode_tok_s", "c=1", inc, arm).as_dict() == pytest.approx(want, rel=1e-9, abs=1e-12)


INC3 = {("decode_tok_s", "c=1"): [100.0, 101.0, 99.0], ("ttft_p50_ms", "c=1"): [20.0, 20.5, 19.5],
        ("tau", "acceptance"): [1.0, 1.0]}


def _arm(decode, ttft):
    return {("decode_tok_s", "c=1"): decode, ("ttft_p50_ms", "c=1"): ttft, ("tau", "acceptance"): [1.0, 1.0]}


def test_arm_verdict_fields_pinned():
    v = V.judge_arm("spec", INC3, {**_arm([150.0, 151.0, 149.0], [30.0, 30.5, 29.5]), ("bogus", "c=1"): [1.0]})
    d = v.as_dict()
    assert [c["metric"] for c in d["comparisons"]] == ["decode_tok_s", "ttft_p50_ms", "tau"]  # unknown metric left out
    del d["comparisons"]
    assert d == pytest.approx({
        "arm": "spec", "verdict": "worse", "verdict_label": "worse",
        "summary": "worse: TTFT p50 @c=1 +50.0% (though better: decode tok/s @c=1 +50.0%)", "rejections": [],
        "drivers": [{"metric": "ttft_p50_ms", "level": "c=1", "verdict": "worse", "rel_diff": 0.5,
                     "ci_low": 0.4233429369854371, "ci_high": 0.5766570630145629}],
        "tradeoffs": [{"metric": "decode_tok_s", "level": "c=1", "verdict": "better", "rel_diff": 0.5,
                       "ci_low": 0.46933717479417486, "ci_high": 0.5306628252058252}],
        "more_repeats": None}, rel=1e-9)


@pytest.mark.parametrize("arm, verdict, summary, more", [
    (_arm([150.0, 151.0, 149.0], [18.0, 23.0]), "better",
     "better: decode tok/s @c=1 +50.0%; 1 comparison(s) inconclusive", None),
    (_arm([100.0, 112.0], [20.0, 20.5, 19.5]), "inconclusive",
     "inconclusive: decode tok/s @c=1 +6.0%, TTFT p50 @c=1 +0.0%; about 18 more run(s) per side would decide", 18),
    # the incumbent's own numbers, 3 runs a side: not enough to call them the same yet
    (_arm([100.0, 101.0, 99.0], [20.0, 20.5, 19.5]), "inconclusive",
     "inconclusive: decode tok/s @c=1 +0.0%, TTFT p50 @c=1 +0.0%; about 6 more run(s) per side would decide", 6),
])
def test_arm_summaries_pinned(arm, verdict, summary, more):
    v = V.judge_arm("a", INC3, arm)
    assert (v.verdict, v.verdict_label, v.summary, v.more_repeats) == (verdict, verdict, summary, more)


def test_rejected_and_empty_arm_summaries():
    v = V.judge_arm("rej", INC3, _arm([100.0, 101.0, 99.0], [20.0, 20.5, 19.5]), rejections=["a", "b"])
    assert (v.verdict, v.verdict_label, v.rejections, v.drivers, v.tradeoffs, v.more_repeats) == (
        "rejected", "rejected: a; b", ["a", "b"], [], [], None)
    assert v.summary == ("rejected by correctness gate(s); the metrics alone say inconclusive: decode tok/s @c=1 "
                         "+0.0%, TTFT p50 @c=1 +0.0%; about 6 more run(s) per side would decide")
    v = V.judge_arm("none", {}, {})
    assert (v.verdict, v.summary, v.comparisons) == ("neutral", "neutral: nothing to compare", [])


def test_repeats_to_decide_pinned():
    """Runs per side for a decision at the observed spreads (ratio 2: CVs 40 % / 5 %, floor 2 %)."""
    assert [V.repeats_to_decide(d, 0.02, 0.4, 0.05, 2.0) for d in (0.2, 0.25, 0.3, 0.31, 0.32)] == [None, 50, 35, 33,
                                                                                                    31]
    assert V.repeats_to_decide(0.3, 0.02, 0.05, 0.4, 2.0) == 35
    # equal CVs: both Welch terms weigh in the df (2 (n − 1) when equal), which moves n across the threshold
    assert V.repeats_to_decide(0.3, 0.02, 0.2, 0.2, 2.0) == 17 and V.repeats_to_decide(0.8, 0.02, 0.3, 0.3, 2.0) == 6
    assert V.repeats_to_decide(0.5, 0.02, 0.01, 0.01, 1.5) == 2  # decided at the smallest n
    assert V.repeats_to_decide(0.1, 0.02, 0.0, 0.0, 1.0) == 2  # no spread at all
    assert V.repeats_to_decide(0.02, 0.02, 0.1, 0.1, 1.0) is None  # the point sits on the floor


def test_judge_arm_passes_floor_and_confidence_and_compares_one_sided_keys():
    inc = {("decode_tok_s", "c=1"): [100.0, 101.0, 99.0]}
    arm3 = {("decode_tok_s", "c=1"): [103.0, 104.0, 102.0]}
    assert V.judge_arm("a", inc, arm3).summary == ("inconclusive: decode tok/s @c=1 +3.0%; "
                                                   "about 7 more run(s) per side would decide")
    assert V.judge_arm("a", inc, arm3, min_floor=0.05).summary == (
        "inconclusive: decode tok/s @c=1 +3.0%; about 1 more run(s) per side would decide")
    wide_inc = {("decode_tok_s", "c=1"): [100.0, 104.0, 96.0]}
    wide_arm = {("decode_tok_s", "c=1"): [110.0, 114.0, 106.0]}
    assert V.judge_arm("a", wide_inc, wide_arm).verdict == "inconclusive"
    assert V.judge_arm("a", wide_inc, wide_arm, conf=0.5).summary == "better: decode tok/s @c=1 +10.0%"
    # a key only the arm has is still compared (inconclusive: no incumbent samples)
    v = V.judge_arm("a", inc, {("decode_tok_s", "c=1"): [110.0, 111.0, 109.0], ("tau", "acceptance"): [2.0, 2.0]})
    assert [(c.metric, c.reason) for c in v.comparisons] == [("decode_tok_s", None),
                                                            ("tau", "no samples from the incumbent")]
    assert (v.verdict, v.summary, v.tradeoffs) == ("better", "better: decode tok/s @c=1 +10.0%; "
                                                             "1 comparison(s) inconclusive", [])
    v = V.judge_arm("a", {}, {("tau", "acceptance"): [2.0, 2.0]})
    assert (v.verdict, v.summary, v.more_repeats) == ("inconclusive", "inconclusive: τ @acceptance", None)
    v = V.judge_arm("a", inc, {("decode_tok_s", "c=1"): [80.0, 81.0, 79.0]})
    assert (v.verdict, v.summary, v.tradeoffs) == ("worse", "worse: decode tok/s @c=1 -20.0%", [])


def test_judge_arm_neutral_with_enough_runs():
    inc = [100.0 + (1 if i % 2 else -1) for i in range(30)]
    v = V.judge_arm("same", {("decode_tok_s", "c=1"): inc}, {("decode_tok_s", "c=1"): list(inc)})
    assert (v.verdict, v.verdict_label, v.summary, v.drivers, v.tradeoffs, v.more_repeats) == (
        "neutral", "neutral", "neutral: every metric within the incumbent's noise", [], [], None)


def test_levels_order_numbers_then_names():
    inc = {("decode_tok_s", lv): [1.0, 1.0] for lv in ("acceptance", "c=x", "c=16", "c=4")}
    assert [c.level for c in V.judge_arm("a", inc, inc).comparisons] == ["c=4", "c=16", "c=x", "acceptance"]
    inc = {("decode_tok_s", lv): [1.0, 1.0] for lv in ("c=b", "b", "c=a", "a")}
    assert [c.level for c in V.judge_arm("a", inc, inc).comparisons] == ["c=a", "c=b", "a", "b"]


def test_schedule_single_repeat_and_errors():
    assert V.interleaved_schedule("I", ["A"], 1) == [("I", 0), ("A", 0)]
    with pytest.raises(ValueError, match="^repeats must be at least 1$"):
        V.interleaved_schedule("I", ["A"], 0)
    with pytest.raises(ValueError, match="^an experiment needs at least one arm$"):
        V.interleaved_schedule("I", [], 1)


def test_compare_edges_pinned():
    # a Metric object works as well as its key
    assert V.compare(V.METRICS[0], "c=1", [100.0, 101.0, 99.0], [110.0, 111.0, 109.0]).verdict == "better"
    # one incumbent run: no CV to take, the floor stays at the minimum
    c = V.compare("decode_tok_s", "c=1", [10.0], [5.0, 6.0])
    assert (c.noise_floor, c.more_repeats, c.verdict) == (0.02, 1, "inconclusive")
    # the point on the floor (d = +2 %, floor = CV 2 %): no number of runs decides
    c = V.compare("decode_tok_s", "c=1", [100.0, 102.0, 98.0], [102.0, 104.0, 100.0])
    assert c.more_repeats is None and c.reason == (
        "the 95% interval [-2.6%, +6.6%] straddles the noise floor ±2.0%; "
        "more than 50 runs per side would be needed at this spread")
    # the interval starts inside the floor but ends above it: not neutral, inconclusive
    c = V.compare("decode_tok_s", "c=1", [99.3, 100.7, 100.5], [100.0, 101.5, 101.2])
    assert -c.noise_floor <= c.ci_low <= c.noise_floor < c.ci_high and c.verdict == "inconclusive"
    # the confidence level reaches the advice and the wording: 99.5 % needs 16 more runs (95 %: 7)
    c = V.compare("decode_tok_s", "c=1", [100.0, 112.0], [118.0, 130.0], conf=0.995)
    # issue 33: the linear interval [-111.9%, +145.8%] went below −100 %; on the log scale it does not
    assert c.more_repeats == 16 and c.reason.startswith("the 99% interval [-61.1%, +251.9%]")


def test_t_cdf_and_quantile_against_closed_forms():
    """df = 1 (Cauchy): F(t) = 1/2 + atan(t)/π; df = 2: F(t) = 1/2 + t / (2 √(t² + 2)); both tails, both branches."""
    import math

    for t in (-3.0, -1.0, -0.2, 0.0, 0.3, 1.0, 4.0):
        assert V.t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-9), t
        assert V.t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(t * t + 2)), abs=1e-9), t
    assert V.t_cdf(0.5, 5) == pytest.approx(0.68085, abs=1e-5) and V.t_cdf(-1.0, 10) == pytest.approx(0.17045, abs=1e-5)
    # df = 2 inverted: t = (2p − 1) √(2 / (1 − (2p − 1)²)); p = 0.6 → 0.288675
    for p in (0.6, 0.75, 0.9):
        q = 2 * p - 1
        assert V.t_quantile(p, 2) == pytest.approx(q * math.sqrt(2 / (1 - q * q)), abs=1e-6), p
    for bad in (0.0, 1.0, -0.1):
        with pytest.raises(ValueError, match=rf"^p must be in \(0, 1\), got {bad}$"):
            V.t_quantile(bad, 5)
