"""Acceptance by context length (issue 22, shape 5): the per-length buckets, the break-even per bucket and
the doctor's reading of them (a drafter's decay → gate speculation by length; a cliff or zero → a bug).

The histograms are SGLang ``meta_info`` shapes (``spec_correct_drafts_histogram``, index k = verify steps
that accepted k drafts; docs/DESIGN.md "Acceptance math"); the end-to-end run on the reference engine is in
tests/test_main_job_ladder.py.
"""

from __future__ import annotations

import pytest

from dynocell.engine.bench import RequestResult
from dynocell.engine.length_curve import buckets, with_breakeven
from dynocell.runbooks.doctor import diagnose_inputs, inputs_from_dict


def _res(i: int, hist: list[int], prompt: int, ttft_s: float = 0.1, e2e_s: float | None = None,
         ok: bool = True) -> RequestResult:
    steps = sum(hist)
    completion = steps + sum(k * h for k, h in enumerate(hist))
    return RequestResult(index=i, text_class="code", level="acceptance", max_new_tokens=completion, ignore_eos=True,
                         ok=ok, ttft_s=ttft_s, e2e_s=e2e_s if e2e_s is not None else ttft_s + 0.01 * (steps - 1),
                         prompt_tokens=prompt, completion_tokens=completion,
                         meta_info={"spec_correct_drafts_histogram": hist, "spec_verify_ct": steps,
                                    "completion_tokens": completion, "prompt_tokens": prompt})


def test_buckets_pool_classes_per_length_and_pad_to_the_runs_width():
    pairs = [(32, _res(0, [2, 3, 5, 10], 30)), (32, _res(1, [4, 4, 4, 8], 34)),
             (768, _res(2, [10, 6, 4], 700)),  # SGLang trims: this request never accepted 3 drafts
             (768, _res(3, [0, 0, 0, 0], 710, ok=False))]  # a failed request counts nowhere
    got = buckets(pairs)
    assert [b.input_tokens for b in got] == [32, 768]
    short, long = got
    assert short.curve.histogram == (6, 7, 9, 18) and short.requests == 2 and short.prompt_tokens == 32
    assert long.curve.num_drafts == 3 and long.curve.histogram == (10, 6, 4, 0) and long.requests == 1
    assert long.curve.tau == pytest.approx(1 + (6 + 8) / 20)
    assert short.verify_step_ms == pytest.approx(10.0)
    row = long.as_dict()
    assert row["p"] == [0.5, 0.2, 0.0] and row["input_tokens"] == 768 and row["prompt_tokens"] == 700.0


def test_one_length_is_no_ladder():
    assert buckets([(128, _res(0, [2, 3, 5, 10], 120)), (128, _res(1, [2, 3, 5, 10], 125))]) == []


def test_breakeven_per_bucket_and_the_crossover():
    rows = [{"input_tokens": L, "tau": tau, "verify_step_ms": v} for L, tau, v in
            [(32, 2.6, 1.2), (256, 2.4, 1.6), (768, 2.2, 2.5)]]
    got = with_breakeven(rows, plain_step_ms=1.0)
    assert [b["speedup"] for b in got["buckets"]] == [pytest.approx(2.6 / 1.2, abs=1e-4),
                                                      pytest.approx(1.5, abs=1e-4), pytest.approx(0.88, abs=1e-4)]
    assert [b["breakeven_tau"] for b in got["buckets"]] == [1.2, 1.6, 2.5]
    assert got["crossover_tokens"] == 768
    # pays everywhere: no crossover; no plain step: speed-up unknown, said so
    assert with_breakeven(rows[:2], 1.0)["crossover_tokens"] is None
    unknown = with_breakeven(rows, None)
    assert unknown["crossover_tokens"] is None and unknown["buckets"][0]["speedup"] is None
    assert "speed-up unknown" in unknown["note"]
    # a loss at one middle length only is not where speculation stops paying
    bumpy = with_breakeven([dict(rows[0]), {**rows[1], "verify_step_ms": 3.0}, dict(rows[2], verify_step_ms=1.0)], 1.0)
    assert bumpy["crossover_tokens"] is None


def _ladder(taus_steps: list[tuple[int, list[float], float]]) -> dict:
    return {"ladder": [{"text_class": f"{L} tokens", "p": p, "steps": 200, "prompt_tokens": L, "step_ms": ms}
                       for L, p, ms in taus_steps], "plain_step_ms": 1.0}


def test_doctor_says_where_speculation_stops_paying_while_tau_holds():
    """Positive: τ 2.5 → 2.2 (no depth_decay, no cliff) while the verify step grows 1.3 → 2.6 ms: from 8192
    tokens τ is below that bucket's break-even — gate speculation by length, with its runbook entry."""
    d = _ladder([(128, [0.6, 0.5, 0.4], 1.3), (2048, [0.55, 0.45, 0.35], 1.8), (8192, [0.5, 0.4, 0.3], 2.6)])
    fs = {f.rule: f for f in diagnose_inputs(inputs_from_dict(d))}
    assert "depth_decay" not in fs and "length_cliff" not in fs and "zero_past_length" not in fs
    f = fs["length_breakeven"]
    assert f.severity == "warn" and f.evidence["crossover_length"] == 8192.0
    assert f.evidence["breakeven_tau"] == [1.3, 1.8, 2.6] and f.evidence["crossover_breakeven_tau"] == 2.6
    assert "gate speculation by length (off from 8192 prompt tokens)" in f.message
    assert "speculation-gated-by-context-length" in f.entries


def test_doctor_is_quiet_when_every_length_pays():
    """Negative: the same τ with a flat verify step pays at every length — nothing to gate."""
    d = _ladder([(128, [0.6, 0.5, 0.4], 1.3), (2048, [0.55, 0.45, 0.35], 1.35), (8192, [0.5, 0.4, 0.3], 1.4)])
    rules = [f.rule for f in diagnose_inputs(inputs_from_dict(d))]
    assert not {"length_breakeven", "depth_decay", "length_cliff", "zero_past_length"} & set(rules)


def test_decay_uses_each_buckets_own_break_even():
    """A drafter's decay (depth_decay) names the crossover against each bucket's own verify step: τ 2.8 → 1.5
    with the step 1.2 → 1.9 ms — at 4096 τ 1.85 still beats its break-even 1.7, at 8192 τ 1.5 is below 1.9.
    One run-wide step (the shortest bucket's 1.2 ms) would have said it pays at every length."""
    d = _ladder([(512, [0.8, 0.6, 0.4], 1.2), (1024, [0.7, 0.5, 0.35], 1.3), (2048, [0.6, 0.4, 0.25], 1.5),
                 (4096, [0.5, 0.25, 0.1], 1.7), (8192, [0.35, 0.1, 0.05], 1.9)])
    fs = {f.rule: f for f in diagnose_inputs(inputs_from_dict(d))}
    assert "length_breakeven" not in fs and "length_cliff" not in fs
    f = fs["depth_decay"]
    assert f.evidence["crossover_length"] == 8192.0 and f.evidence["crossover_breakeven_tau"] == 1.9
    assert "gate speculation by length (from 8192 tokens on τ is below the break-even 1.90)" in f.message


def test_a_cliff_is_a_bug_not_a_gate():
    """Negative for the policy: one step carrying the whole fall is length_cliff (a boundary in the drafter)."""
    d = _ladder([(128, [0.7, 0.6, 0.5], 1.3), (2048, [0.7, 0.6, 0.5], 1.4), (8192, [0.1, 0.02, 0.0], 1.5)])
    rules = {f.rule for f in diagnose_inputs(inputs_from_dict(d))}
    assert "length_cliff" in rules and not {"length_breakeven", "depth_decay"} & rules
