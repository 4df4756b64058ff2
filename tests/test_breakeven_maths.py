"""Break-even's store-free inputs (``dynocell.engine.breakeven``) on worked values: the speculative step time
from the bench's requests, the engine's own τ (per-position counters, else ``meta_info`` averages), and the
token counts they trust (issue 26: the mutation run found these untested outside the slow main-job test)."""

from __future__ import annotations

import pytest

from dynocell.engine import breakeven as be
from dynocell.engine import metrics as M
from dynocell.engine.bench import RequestResult
from dynocell.engine.meta import GenerationMeta

PER_POSITION = """# TYPE sglang:spec_verify_steps_total counter
sglang:spec_verify_steps_total{{tp_rank="0"}} {steps}
# TYPE sglang:spec_accepted_drafts_at_position_total counter
sglang:spec_accepted_drafts_at_position_total{{position="1",tp_rank="0"}} {p1}
sglang:spec_accepted_drafts_at_position_total{{position="2",tp_rank="0"}} {p2}
sglang:spec_accepted_drafts_at_position_total{{position="3",tp_rank="0"}} {p3}
"""


def _req(ok: bool = True, ttft: float | None = 0.1, e2e: float | None = 1.1, vct=11, meta=None) -> RequestResult:
    return RequestResult(index=0, text_class="chat", level="c1", max_new_tokens=32, ignore_eos=True, ok=ok,
                         ttft_s=ttft, e2e_s=e2e, meta_info={"spec_verify_ct": vct} if meta is None else meta)


def test_verify_step_ms_worked():
    # (e2e − TTFT) / (verify steps − 1), ms: (1.1 − 0.1)/10 = 100, (0.8 − 0.2)/3 = 200, (0.5 − 0.2)/2 = 150,
    # (0.6 − 0.3)/1 = 300 (two verify steps: one after TTFT counts)
    reqs = [_req(), _req(ttft=0.2, e2e=0.8, vct=4), _req(ttft=0.2, e2e=0.5, vct=3)]
    assert be.verify_step_ms(reqs) == pytest.approx(150.0)  # the median of 100, 150, 200
    # an even count takes the upper median (index n // 2 of the sorted values): 200 of 100, 150, 200, 300
    assert be.verify_step_ms([*reqs, _req(ttft=0.3, e2e=0.6, vct=2)]) == pytest.approx(200.0)


def test_verify_step_ms_skips_requests_it_cannot_time():
    good = _req()
    skipped = [
        _req(ok=False, ttft=0.0, e2e=9.0),  # failed
        _req(ttft=None, e2e=9.0),  # no first token time
        _req(ttft=0.0, e2e=None),  # no end time
        _req(ttft=0.0, e2e=9.0, vct=1),  # the only verify step is inside TTFT
        _req(ttft=0.0, e2e=9.0, vct=True),  # a bool is not a count
        _req(ttft=0.0, e2e=9.0, vct="11"),  # nor a string
        _req(ttft=0.0, e2e=9.0, meta={}),  # no spec_verify_ct: not speculative
    ]
    assert be.verify_step_ms([good, *skipped]) == pytest.approx(100.0)
    assert be.verify_step_ms(skipped) is None
    assert be.verify_step_ms([]) is None
    none_meta = _req()
    none_meta.meta_info = None  # type: ignore[assignment] - an engine that sent no meta_info at all
    assert be.verify_step_ms([none_meta]) is None


def test_engine_tau_from_per_position_counters_worked():
    # counter deltas: 159 verify steps, 145 / 139 / 133 accepted at positions 1..3 → τ = 1 + 417/159
    before = M.parse_metrics(PER_POSITION.format(steps=100, p1=90, p2=80, p3=70))
    after = M.parse_metrics(PER_POSITION.format(steps=259, p1=235, p2=219, p3=203))
    metas = [{"completion_tokens": 30, "spec_verify_ct": 10}]
    tau, source = be.engine_tau(M, before, after, metas)
    assert tau == pytest.approx(1 + 417 / 159) and source == "metrics per-position counters"


def test_engine_tau_falls_back_to_meta_info_averages():
    metas = [{"completion_tokens": 30, "spec_verify_ct": 10}, {"completion_tokens": 12, "spec_verify_ct": 8}]
    # the prefill's token (one per request) is left out, as the histogram leaves it out (issue 36)
    want = (pytest.approx(40 / 18), "meta_info (completion_tokens − 1) / spec_verify_ct")
    before = M.parse_metrics(PER_POSITION.format(steps=100, p1=90, p2=80, p3=70))
    assert be.engine_tau(M, None, None, metas) == want
    assert be.engine_tau(M, before, None, metas) == want  # one scrape is no delta
    assert be.engine_tau(M, None, before, metas) == want
    # no verify step between the scrapes: a zero-step curve is no τ
    assert be.engine_tau(M, before, before, metas) == want
    # stock SGLang exports no per-position counters
    stock = M.parse_metrics('# TYPE sglang:spec_verify_steps_total counter\nsglang:spec_verify_steps_total 10\n')
    assert be.engine_tau(M, stock, stock, metas) == want
    # counters that make p_i > 1 (scraped at different times) are not trusted
    bad = M.parse_metrics(PER_POSITION.format(steps=110, p1=190, p2=80, p3=70))
    assert be.engine_tau(M, before, bad, metas) == want
    # meta objects (GenerationMeta) as well as dicts; non-counts are left out of both sums
    objs = [GenerationMeta(completion_tokens=30, spec_verify_ct=10), GenerationMeta(completion_tokens=12,
                                                                                     spec_verify_ct=8)]
    assert be.engine_tau(M, None, None, objs) == want
    odd = [*metas, {"completion_tokens": True, "spec_verify_ct": 5.0}, {"completion_tokens": "7"}, "not a meta"]
    assert be.engine_tau(M, None, None, odd) == want


def test_engine_tau_none_without_verify_steps():
    assert be.engine_tau(M, None, None, []) == (None, None)
    assert be.engine_tau(M, None, None, [{"completion_tokens": 30, "spec_verify_ct": 0}]) == (None, None)
    assert be.engine_tau(M, None, None, [{"completion_tokens": 30}]) == (None, None)


def test_counts_trust_only_whole_numbers():
    assert [be.count(v) for v in (3, 0, True, False, 3.0, "3", None)] == [3, 0, 0, 0, 0, 0, 0]
    metas = [{"completion_tokens": 5}, {"completion_tokens": True}, {"completion_tokens": 2.5},
             GenerationMeta(completion_tokens=7), {}, None]
    assert be.completion_tokens(metas) == 12
    assert be.completion_tokens([]) == 0


def test_margin_worked_on_the_recorded_real_run():
    # τ 1.7597 × plain 5.2648 ms = budget 9.2645 ms < spec 18.5637 ms: margin 9.2645/18.5637 − 1 = −50.1 %
    r = be.margin(1.7597, 18.5637, 5.2648, [], [])
    assert r == {"tau": 1.7597, "spec_step_ms": 18.5637, "plain_step_ms": 5.2648, "budget_ms": 9.2645,
                 "margin": -0.5009, "pays": False, "speedup_estimate": 0.499, "noise_band": 0.05,
                 "verdict": "does NOT pay", "interval": [-0.5253, -0.4753], "interval_n": 0, "decide": None,
                 "between_runs": None}
    # issue 33: the interval is ln(1 + margin) ± z·SE, the SE at least the between-run floor (5 % read as z·SE):
    # exp(ln 0.49906 ± 0.05) − 1
    # a budget over the spec step pays; the band widens to the combined noise of both medians
    r = be.margin(2.0, 9.0, 5.0, [9.0, 10.0, 11.0], [4.0, 5.0, 6.0])
    assert (r["budget_ms"], r["pays"], r["margin"], r["verdict"]) == (10.0, True, 0.1111, "within noise")
    # SE of each median 1.2533·1.4826·MAD 1/√3 = 1.0728, over the medians 10 and 5: √(0.10728² + 0.21455²)
    assert r["noise_band"] == pytest.approx(0.2399, abs=1e-4)


def test_band_and_verdict_edges():
    # two samples are enough for a spread: MAD of 9 and 11 is 1 → 1.2533·1.4826·1/√2 over the median 10
    assert be.median_noise([9.0, 11.0]) == pytest.approx(0.13139, abs=1e-5)
    assert be.median_noise([0.0, 11.0]) == 0.0  # zero samples (no measurement) are left out: one is left
    # a margin exactly on the band is not a verdict yet
    assert be.breakeven_verdict(0.05, 0.05) == "within noise"
    assert be.breakeven_verdict(-0.05, 0.05) == "within noise"
    # a speculative step exactly on the budget does not pay (pays: spec step < budget): τ 2 × 5 ms = 10 ms
    r = be.margin(2.0, 10.0, 5.0, [], [])
    assert (r["budget_ms"], r["margin"], r["pays"], r["verdict"]) == (10.0, 0.0, False, "within noise")


def test_margin_interval_adds_tau_uncertainty_and_says_how_many_more():
    # issue 33: identical configs gave +23.9 %, +14.0 %, "within noise" and −39 %: with τ known over 15
    # requests to ±20 %, a +14 % margin is not a verdict, and the record says about how many more would decide
    from dynocell.engine import stats

    tau = stats.Interval(2.0, 1.6, 2.4, 15)
    r = be.margin(2.0, 8.77, 5.0, [8.7, 8.8, 8.9], [4.9, 5.0, 5.1], tau_interval=tau)
    assert r["margin"] == pytest.approx(0.1403, abs=1e-4)
    lo, hi = r["interval"]
    assert -1 < lo < 0 < hi and r["verdict"] == "within noise"
    assert r["decide"].startswith("inconclusive: about ") and "more requests would decide a 5 % margin" in r["decide"]
    assert r["interval_n"] == 15
    # the same margin from a τ known to ±1 % pays
    r = be.margin(2.0, 8.77, 5.0, [8.7, 8.8, 8.9], [4.9, 5.0, 5.1], tau_interval=stats.Interval(2.0, 1.98, 2.02, 400))
    assert r["verdict"] == "pays" and r["interval"][0] > 0 and r["decide"] is None


def test_margin_between_runs_widens_to_the_repeats_spread():
    """The vLLM draft repeats on one H200 (tests/data/h200-repeats-2026-12-02): margins −41.6 %, −44.4 % and
    −29.9 % of one unchanged config. ln(1 + m) = −0.5384, −0.5866, −0.3547; their SD (ddof 1) is 0.1224, so
    the third run's interval is exp(ln 0.7014 ± 1.96 · 0.1224) − 1 = [−44.8 %, −10.8 %], wider than its
    own ±8 % and still below 0: the verdict holds."""
    from dynocell.engine import stats

    assert stats.between_runs_sd([1 - 0.4163, 1 - 0.4438, 1 - 0.2986]) == pytest.approx(0.1224, abs=1e-4)
    assert stats.between_runs_sd([0.58, 0.56]) is None  # two runs: one degree of freedom is not a spread
    alone = be.margin(1.8, 5.3189, 2.0727, [5.3189, 7.3648, 5.0798, 5.2238, 7.135], [13.301, 2.1011, 2.0727,
                                                                                   2.0092, 1.9234])
    both = be.margin(1.8, 5.3189, 2.0727, [5.3189, 7.3648, 5.0798, 5.2238, 7.135], [13.301, 2.1011, 2.0727,
                                                                                  2.0092, 1.9234],
                     repeats=[-0.4163, -0.4438])
    assert alone["between_runs"] is None
    assert both["between_runs"] == {"runs": 3, "sd_log": pytest.approx(0.1224, abs=1e-4)}
    assert both["interval"] == [pytest.approx(-0.448, abs=2e-3), pytest.approx(-0.108, abs=2e-3)]
    assert both["interval"][1] - both["interval"][0] > alone["interval"][1] - alone["interval"][0]
    assert both["verdict"] == alone["verdict"] == "does NOT pay"
    # a margin whose runs straddle 0 is inconclusive, and says how many more RUNS (not requests) would decide
    r = be.margin(2.0, 9.6, 5.0, [9.6] * 5, [5.0] * 5, repeats=[-0.15, 0.2])
    assert r["verdict"] == "within noise" and "between runs of this experiment (3 runs)" in r["decide"]
    assert "more runs would decide" in r["decide"]
