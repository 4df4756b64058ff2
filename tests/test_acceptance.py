"""Acceptance math (docs/DESIGN.md "Acceptance math"): worked examples, properties, log-line parsers."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dynocell.engine.acceptance import (
    AcceptanceError,
    Curve,
    curve_from_meta_infos,
    expected_tau_independent,
    merge,
    parse_decode_line,
    parse_decode_lines,
    parse_vllm_spec_line,
    relative_diff,
)
from dynocell.errors import EngineError


def test_worked_example_four_positions():
    c = Curve.from_positions([0.917, 0.833, 0.583, 0.500])
    assert c.tau == pytest.approx(3.833, abs=1e-9)
    assert c.num_drafts == 4
    assert c.accept_rate == pytest.approx(2.833 / 4)
    assert c.a[0] == pytest.approx(0.917)
    assert c.a[1] == pytest.approx(0.833 / 0.917)
    assert c.histogram is None and c.steps is None


def test_worked_example_three_positions():
    assert Curve.from_positions([0.90, 0.79, 0.67]).tau == pytest.approx(3.36)


def test_histogram_definitions():
    # SGLang greedy on the trained pair (docs/h200/README.md): 14, 6, 6, 133 → τ 3.623
    c = Curve.from_histogram([14, 6, 6, 133])
    assert c.steps == 159 and c.num_drafts == 3
    assert c.tau == pytest.approx(1 + (6 + 12 + 399) / 159)
    assert round(c.tau, 3) == 3.623
    assert [round(x, 3) for x in c.p] == [0.912, 0.874, 0.836]
    assert c.accept_rate == pytest.approx((6 + 12 + 399) / (159 * 3))
    assert c.a[1] == pytest.approx(c.p[1] / c.p[0])


def test_standalone_all_accepted():
    c = Curve.from_histogram([0, 0, 0, 8])
    assert c.tau == 4.0 and c.accept_rate == 1.0 and c.p == (1.0, 1.0, 1.0) and c.a == (1.0, 1.0, 1.0)


def test_conditional_zero_after_zero():
    c = Curve.from_histogram([5, 0, 0])
    assert c.p == (0.0, 0.0) and c.a == (0.0, 0.0) and c.tau == 1.0


def test_zero_steps_is_neutral():
    c = Curve.from_histogram([0, 0, 0, 0])
    assert c.steps == 0 and c.tau == 1.0 and c.accept_rate == 0.0 and c.p == (0.0,) * 3


@pytest.mark.parametrize("bad", [[3], [], [1, -1], [1.5, 2], "1,2", [True, 1]])
def test_bad_histograms_raise(bad):
    with pytest.raises(AcceptanceError) as exc:
        Curve.from_histogram(bad)
    assert isinstance(exc.value, EngineError)


@given(st.lists(st.integers(min_value=0, max_value=10_000), min_size=2, max_size=16))
def test_properties(h):
    c = Curve.from_histogram(h)
    assert c.steps == sum(h)
    if c.steps:
        assert c.tau == pytest.approx(1 + sum(c.p), rel=1e-12)
        assert c.accept_rate == pytest.approx(sum(c.p) / c.num_drafts, rel=1e-12)
        assert all(x >= y - 1e-15 for x, y in zip(c.p, c.p[1:]))  # unconditional p is non-increasing
        assert 1.0 <= c.tau <= c.num_drafts + 1
        prod = 1.0
        for pi, ai in zip(c.p, c.a):
            prod *= ai
            assert prod == pytest.approx(pi, abs=1e-12)


@given(st.lists(st.lists(st.integers(min_value=0, max_value=500), min_size=4, max_size=4), min_size=1, max_size=6))
def test_merge_sums_histograms(hs):
    merged = merge(Curve.from_histogram(h) for h in hs)
    assert merged.histogram == tuple(sum(col) for col in zip(*hs))
    assert merged.steps == sum(map(sum, hs))


def test_merge_positions_weighted_and_errors():
    a = Curve.from_positions([1.0, 0.5], steps=10)
    b = Curve.from_positions([0.0, 0.0], steps=30)
    m = merge([a, b])
    assert m.p == pytest.approx((0.25, 0.125)) and m.steps == 40
    assert merge([]) is None
    with pytest.raises(AcceptanceError):
        merge([Curve.from_histogram([1, 1]), Curve.from_histogram([1, 1, 1])])
    with pytest.raises(AcceptanceError):
        merge([Curve.from_positions([0.5]), Curve.from_positions([0.5])])


def test_from_positions_rejects_out_of_range():
    with pytest.raises(AcceptanceError):
        Curve.from_positions([1.2, 0.3])
    with pytest.raises(AcceptanceError):
        Curve.from_positions([])


def test_curve_from_meta_infos():
    metas = [
        {"spec_correct_drafts_histogram": [0, 0, 0, 8]},
        {"completion_tokens": 5},  # no speculation: skipped
        {"spec_accept_histogram": [2, 0, 0, 0]},  # 0.5.17 alias
    ]
    c = curve_from_meta_infos(metas)
    assert c.histogram == (2, 0, 0, 8) and c.steps == 10
    assert curve_from_meta_infos([{"completion_tokens": 3}]) is None
    assert curve_from_meta_infos([]) is None
    # SGLang 0.5.17 grows a request's histogram only to the largest k it saw: shorter ones are padded.
    assert curve_from_meta_infos([{"spec_correct_drafts_histogram": [1, 1]},
                                  {"spec_correct_drafts_histogram": [1, 1, 1]}]).histogram == (2, 2, 1)
    with pytest.raises(AcceptanceError):  # longer than the known D + 1
        curve_from_meta_infos([{"spec_correct_drafts_histogram": [1, 1, 1]}], num_drafts=1)


def _h(hist, proposed=None, verify=None):
    m = {"spec_correct_drafts_histogram": hist}
    if proposed is not None:
        m["spec_num_proposed_drafts"] = proposed
    if verify is not None:
        m["spec_verify_ct"] = verify
    return m


def test_tree_accept_rate_is_over_the_proposed_drafts_worked():
    # An EAGLE tree (eagle_topk > 1) proposes more drafts per verify step than it can accept in depth:
    # SGLang's accept rate is correct / (N · proposed per step) (tokenizer_manager.py). Worked by hand:
    # histograms [1, 2, 3, 4] + [3, 1] → [4, 3, 3, 4], N = 14, D = 3, accepted 0·4 + 1·3 + 2·3 + 3·4 = 21,
    # τ = 1 + 21/14 = 2.5; proposed (50 + 20) / verify steps (10 + 4) = 5 per step > D → rate 21 / (14 · 5) = 0.3.
    c = curve_from_meta_infos([_h([1, 2, 3, 4], 50, 10), _h([3, 1], 20, 4)])
    assert (c.histogram, c.num_drafts, c.steps) == ((4, 3, 3, 4), 3, 14)
    assert c.tau == pytest.approx(2.5) and c.accept_rate == pytest.approx(0.3)
    # D + 1 proposed per step is already a tree (rate over 4, not 3): 21 / (14 · 4) = 0.375
    assert curve_from_meta_infos([_h([4, 3, 3, 4], 56, 14)]).accept_rate == pytest.approx(0.375)
    # proposed not a whole multiple of the verify steps: no per-step count, the rate stays over D (21 / 42)
    assert curve_from_meta_infos([_h([4, 3, 3, 4], 71, 14)]).accept_rate == pytest.approx(0.5)
    # D or fewer proposed per step (a chain, or counts that describe no tree): the rate stays over D
    assert curve_from_meta_infos([_h([4, 3, 3, 4], 42, 14)]).accept_rate == pytest.approx(0.5)
    assert curve_from_meta_infos([_h([4, 3, 3, 4], 28, 14)]).accept_rate == pytest.approx(0.5)
    # one verify step per request still counts: 5 proposed over 1 step on a D = 1 histogram → 1 / (1 · 5)
    assert curve_from_meta_infos([_h([0, 1], 5, 1)]).accept_rate == pytest.approx(0.2)


def test_tree_counts_must_be_known_for_every_generation():
    # one generation without spec_verify_ct (or with 0 steps, or a bool) → no per-step count: rate over D
    for other in (_h([3, 1], 20), _h([3, 1], 20, 0), _h([3, 1], True, 4), _h([3, 1])):
        c = curve_from_meta_infos([_h([1, 2, 3, 4], 50, 10), other])
        assert c.histogram == (4, 3, 3, 4) and c.accept_rate == pytest.approx(0.5), other
    # 0 proposed over 0 steps next to a tree's counts is still "not known"
    c = curve_from_meta_infos([_h([0, 0, 0, 4], 28, 4), _h([0, 0, 0, 4], 0, 0)])
    assert c.accept_rate == pytest.approx(1.0)


def test_meta_info_histograms_padded_and_single_bucket():
    # SGLang's histogram of a request that accepted no draft at all is [verify steps]: k = 0 only
    c = curve_from_meta_infos([{"spec_correct_drafts_histogram": [5]}])
    assert (c.histogram, c.tau, c.steps) == ((5, 0), 1.0, 5)
    # a shorter histogram after a longer one is padded with zero buckets (either order)
    assert curve_from_meta_infos([_h([1, 1, 1]), _h([1, 1])]).histogram == (2, 2, 1)
    assert curve_from_meta_infos([_h([2, 3]), _h([1, 1, 1])]).histogram == (3, 4, 1)
    # with D known the curve has D + 1 buckets even when no request reached D; D + 1 buckets are allowed
    assert curve_from_meta_infos([_h([2, 1])], num_drafts=3).histogram == (2, 1, 0, 0)
    assert curve_from_meta_infos([_h([1, 1, 1, 1])], num_drafts=3).histogram == (1, 1, 1, 1)
    with pytest.raises(AcceptanceError, match="reports 3 histogram buckets but D = 1 allows 2"):
        curve_from_meta_infos([_h([1, 1, 1])], num_drafts=1)
    # D known but no generation had a histogram: no speculation, no curve
    assert curve_from_meta_infos([{"completion_tokens": 3}], num_drafts=3) is None


def test_proposed_per_step_below_depth_refused_word_for_word():
    # D proposed per step is a chain: the same curve as without the count
    assert Curve.from_histogram([1, 1, 1, 1], 3) == Curve.from_histogram([1, 1, 1, 1])
    with pytest.raises(AcceptanceError) as e:
        Curve.from_histogram([1, 1, 1, 1], 2)
    assert str(e.value).startswith("2 drafts proposed per verify step cannot be accepted 3 deep "
                                   "(histogram of 4 buckets)")


def test_expected_tau_independent():
    assert expected_tau_independent(1.0, 3) == 4.0
    assert expected_tau_independent(0.0, 3) == 1.0
    assert expected_tau_independent(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)
    # A curve made by independent positions matches the model exactly.
    p = 0.7
    c = Curve.from_positions([p, p**2, p**3])
    assert c.tau == pytest.approx(expected_tau_independent(p, 3))
    with pytest.raises(AcceptanceError):
        expected_tau_independent(1.5, 3)


def test_relative_diff():
    assert relative_diff(0, 0) == 0.0
    assert relative_diff(3.0, 3.06) == pytest.approx(0.06 / 3.06)
    assert relative_diff(1.0, 1.03) > 0.02 > relative_diff(1.0, 1.01)
    assert relative_diff(-1, 1) == 2.0


VLLM_LINE = (
    "INFO 05-01 12:00:00 [metrics.py:100] SpecDecoding metrics: Mean acceptance length: 3.83, "
    "Accepted throughput: 120.50 tokens/s, Drafted throughput: 160.00 tokens/s, Accepted: 2833 tokens, "
    "Drafted: 4000 tokens, Per-position acceptance rate: 0.917, 0.833, 0.583, 0.500, "
    "Avg Draft acceptance rate: 70.8%"
)


def test_vllm_line():
    s = parse_vllm_spec_line(VLLM_LINE)
    assert s is not None
    assert s.curve.p == (0.917, 0.833, 0.583, 0.5)
    assert s.curve.tau == pytest.approx(3.833)
    assert s.mean_acceptance_length == 3.83
    assert s.accepted == 2833 and s.drafted == 4000
    assert relative_diff(s.curve.tau, s.mean_acceptance_length) < 0.02
    assert parse_vllm_spec_line("Mean acceptance length: 3.83, nothing else") is None
    # Per-position list at the end of the line, no trailing field.
    t = parse_vllm_spec_line("Per-position acceptance rate: 0.90, 0.79, 0.67")
    assert t.curve.tau == pytest.approx(3.36)


def test_sglang_decode_line_and_summary_curve():
    line = (
        "[2026-11-30 03:25:43] Decode batch, #running-req: 3, #token: 20, token usage: 0.00, "
        "accept len: 2.31, accept rate: 0.44, cuda graph: True, gen throughput (token/s): 589.77, #queue-req: 2"
    )
    s = parse_decode_line(line)
    assert s.accept_len == 2.31 and s.accept_rate == 0.44 and s.gen_throughput == 589.77
    assert s.running_req == 3 and s.queue_req == 2 and s.tokens == 20 and s.cuda_graph is True
    assert s.timestamp == "2026-11-30 03:25:43"
    c = s.to_curve()
    assert c.num_drafts == 3 and c.tau == 2.31 and c.p == () and c.histogram is None
    plain = parse_decode_line(
        "[2026-11-30 03:25:43] Decode batch, #running-req: 1, #token: 5, token usage: 0.00, "
        "cuda graph: False, gen throughput (token/s): 12.5, #queue-req: 0"
    )
    assert plain.accept_len is None and plain.to_curve() is None and plain.cuda_graph is False
    assert parse_decode_line("Prefill batch, #new-seq: 1") is None
    assert len(parse_decode_lines([line, "noise", line])) == 2
    with pytest.raises(AcceptanceError):
        Curve.from_summary(0.5, 0.1)
    assert math.isclose(Curve.from_summary(3.0, num_drafts=4).accept_rate, 0.5)


# ---------------------------------------------------------------- every field and message, pinned

def _same(got: dict, want: dict) -> bool:
    """Dict equality with float tolerance, lists compared element-wise."""
    assert set(got) == set(want), (got, want)
    for k, w in want.items():
        if isinstance(w, list):
            assert got[k] == pytest.approx(w), k
        else:
            assert got[k] == pytest.approx(w) if isinstance(w, float) else got[k] == w, k
    return True


def test_curve_fields_pinned_for_each_constructor():
    # 10 steps, D = 3: h = 4/3/2/1 → accepted 3 + 4 + 3 = 10, τ = 2, rate 10/30; p = 6/10, 3/10, 1/10
    assert _same(Curve.from_histogram([4, 3, 2, 1]).as_dict(), {
        "histogram": [4, 3, 2, 1], "num_drafts": 3, "steps": 10, "tau": 2.0, "accept_rate": 1 / 3,
        "p": [0.6, 0.3, 0.1], "a": [0.6, 0.5, 1 / 3]})
    assert Curve.from_histogram([0, 0, 0]).as_dict() == {"histogram": [0, 0, 0], "num_drafts": 2, "steps": 0,
                                                         "tau": 1.0, "accept_rate": 0.0, "p": [0.0, 0.0],
                                                         "a": [0.0, 0.0]}
    assert Curve.from_histogram((2.0, 1.0)).histogram == (2, 1)  # whole floats are counts
    assert _same(Curve.from_positions([0.8, 0.4, 0.0], steps=7).as_dict(), {
        "histogram": None, "num_drafts": 3, "steps": 7, "tau": 2.2, "accept_rate": 0.4, "p": [0.8, 0.4, 0.0],
        "a": [0.8, 0.5, 0.0]})
    assert Curve.from_positions([1.0, 0.0]).steps is None
    assert Curve.from_summary(2.5, 0.5).as_dict() == {"histogram": None, "num_drafts": 3, "steps": None,
                                                      "tau": 2.5, "accept_rate": 0.5, "p": [], "a": []}
    assert Curve.from_summary(2.5, num_drafts=5).accept_rate == pytest.approx(0.3)
    assert Curve.from_summary(1.2, 0.9).num_drafts == 1  # round(0.22) = 0 → at least 1
    assert Curve.from_summary(1.0, num_drafts=1).tau == 1.0


@pytest.mark.parametrize("call, message", [
    (lambda: Curve.from_histogram("4321"), "acceptance histogram must be a list of counts, got str"),
    (lambda: Curve.from_histogram([5]), "acceptance histogram needs buckets k = 0..D with D ≥ 1, got 1 bucket(s): [5] "
                                        "(a speculative engine reports num_draft_tokens buckets)"),
    (lambda: Curve.from_histogram([1, True]), "acceptance histogram bucket 1 is not a count: True"),
    (lambda: Curve.from_histogram([1, 1.5]), "acceptance histogram bucket 1 is not a count: 1.5"),
    (lambda: Curve.from_histogram([1, "2"]), "acceptance histogram bucket 1 is not a count: '2'"),
    (lambda: Curve.from_histogram([1, -2]), "acceptance histogram bucket 1 is negative: -2"),
    (lambda: Curve.from_positions([]), "per-position acceptance needs at least one position"),
    (lambda: Curve.from_positions([0.5, 1.5]), "per-position acceptance p_2 = 1.5 is outside [0, 1]"),
    (lambda: Curve.from_positions([-0.1]), "per-position acceptance p_1 = -0.1 is outside [0, 1]"),
    (lambda: Curve.from_positions([0.5], steps=-1), "verify steps cannot be negative: -1"),
    (lambda: Curve.from_summary(0.9, 0.5), "accept length τ = 0.9 is below 1 (the bonus token alone gives 1)"),
    (lambda: Curve.from_summary(2.0), "cannot derive the draft count from τ = 2.0 and accept rate = None "
                                      "(pass num_drafts)"),
    (lambda: Curve.from_summary(2.0, 0.0), "cannot derive the draft count from τ = 2.0 and accept rate = 0.0 "
                                           "(pass num_drafts)"),
    (lambda: Curve.from_summary(2.0, num_drafts=0), "num_drafts must be ≥ 1, got 0"),
    (lambda: merge([Curve.from_histogram([1, 1]), Curve.from_histogram([1, 1, 1])]),
     "cannot merge acceptance curves with different draft counts D: [1, 2] "
     "(merge curves of one engine configuration only)"),
    (lambda: merge([Curve.from_histogram([1, 1]), Curve.from_summary(1.5, 0.5)]),
     "cannot merge acceptance curves without histograms unless each has per-position rates and a step count"),
])
def test_acceptance_errors_name_the_problem(call, message):
    with pytest.raises(AcceptanceError) as err:
        call()
    assert str(err.value) == message


def test_merge_pinned():
    assert merge([]) is None
    m = merge([Curve.from_histogram([4, 3, 2, 1]), Curve.from_histogram([0, 0, 0, 10])])
    assert m.histogram == (4, 3, 2, 11) and m.steps == 20 and m.tau == pytest.approx(3.0)  # 1 + (10 + 30) / 20
    m = merge([Curve.from_positions([0.8, 0.4], steps=3), Curve.from_positions([0.4, 0.0], steps=1)])
    assert (m.steps, m.histogram) == (4, None) and list(m.p) == pytest.approx([0.7, 0.3])
    m = merge([Curve.from_positions([0.8, 0.4], steps=0), Curve.from_positions([0.4, 0.0], steps=0)])
    assert (m.steps, list(m.p), m.tau) == (0, [0.0, 0.0], 1.0)
    one = merge([Curve.from_positions([0.5, 0.25], steps=4)])  # one curve: itself
    assert (one.steps, one.p) == (4, (0.5, 0.25))
    assert merge([Curve.from_positions([0.5], steps=0)]).p == (0.0,)
    with pytest.raises(AcceptanceError):
        merge([Curve.from_positions([0.8], steps=None), Curve.from_positions([0.4], steps=1)])


# Real vLLM 0.26.0 lines (tests/data/vllm-0.26.0/*.server.log, EAGLE draft, D = 3): vLLM 0.26
# prints no "Drafts:" count, so steps stay unknown.
REAL_VLLM = [
    "(APIServer pid=2034) INFO 12-01 08:00:02 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 3.07, "
    "Accepted throughput: 83.32 tokens/s, Drafted throughput: 120.83 tokens/s, Accepted: 391 tokens, Drafted: 567 "
    "tokens, Per-position acceptance rate: 0.825, 0.651, 0.593, Avg Draft acceptance rate: 69.0%",
    "(APIServer pid=2034) INFO 12-01 08:00:03 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s",
    "(APIServer pid=2034) INFO 12-01 08:00:04 [metrics.py:120] SpecDecoding metrics: Mean acceptance length: 1.87, "
    "Accepted throughput: 135.45 tokens/s, Drafted throughput: 469.34 tokens/s, Accepted: 271 tokens, Drafted: 939 "
    "tokens, Per-position acceptance rate: 0.511, 0.233, 0.121, Avg Draft acceptance rate: 28.9%",
]


def test_real_vllm_lines_every_field():
    from dynocell.engine.acceptance import parse_vllm_spec_lines

    got = parse_vllm_spec_lines(REAL_VLLM)
    assert [(s.mean_acceptance_length, s.accepted, s.drafted, s.drafts, s.curve.steps) for s in got] == [
        (3.07, 391, 567, None, None), (1.87, 271, 939, None, None)]
    assert [s.curve.p for s in got] == [(0.825, 0.651, 0.593), (0.511, 0.233, 0.121)]
    assert [s.curve.tau for s in got] == pytest.approx([3.069, 1.865])  # 1 + Σ p: the printed mean, rounded
    assert parse_vllm_spec_lines([]) == [] and parse_vllm_spec_lines(REAL_VLLM[1:2]) == []
    with_drafts = parse_vllm_spec_line(REAL_VLLM[0].replace("Accepted: 391", "Drafts: 189, Accepted: 391"))
    assert (with_drafts.drafts, with_drafts.curve.steps) == (189, 189)


def test_real_sglang_decode_lines_types_and_curve():
    """Real SGLang 0.5.17 lines (tests/data/sglang-0.5.17/A.server.log): counts are ints, the
    curve of a line takes the engine's D when given."""
    lines = ["[2026-11-30 03:25:43] Decode batch, #running-req: 1, #token: 20, token usage: 0.00, accept len: 4.00, "
             "accept rate: 1.00, cuda graph: True, gen throughput (token/s): 1.54, #queue-req: 0",
             "[2026-11-30 03:25:43] Prefill batch, #new-seq: 1, #new-token: 7",
             "[2026-11-30 03:25:43] Decode batch, #running-req: 1, #token: 0, token usage: 0.00, accept len: 4.00, "
             "accept rate: 1.00, cuda graph: True, gen throughput (token/s): 589.77, #queue-req: 0"]
    got = parse_decode_lines(lines)
    assert [(s.running_req, s.tokens, s.queue_req, s.gen_throughput) for s in got] == [(1, 20, 0, 1.54),
                                                                                        (1, 0, 0, 589.77)]
    assert all(type(v) is int for s in got for v in (s.running_req, s.tokens, s.queue_req))
    assert all(type(v) is float for s in got for v in (s.accept_len, s.accept_rate, s.gen_throughput))
    c = got[0].to_curve(num_drafts=3)
    assert (c.num_drafts, c.tau, c.accept_rate) == (3, 4.0, 1.0)
    assert got[0].to_curve(num_drafts=6).num_drafts == 6 and got[0].to_curve().num_drafts == 3
    assert got[0].to_curve(num_drafts=6).accept_rate == 1.0  # the engine's printed rate is kept, not (τ − 1) / D
    assert parse_decode_lines([]) == []
    bare = parse_decode_line(lines[0].split("] ", 1)[1])  # no timestamp prefix (a log shipped without it)
    assert bare.timestamp is None and bare.accept_len == 4.0


def test_meta_info_objects_and_errors_word_for_word():
    from dynocell.engine.meta import GenerationMeta

    c = curve_from_meta_infos([GenerationMeta(spec_correct_drafts_histogram=(1, 0, 3)), GenerationMeta(),
                               object()])
    assert c.histogram == (1, 0, 3) and c.steps == 4
    # SGLang grows each request's histogram only up to the largest k it saw: shorter ones are padded
    c = curve_from_meta_infos([{"spec_accept_histogram": [1, 1]}, {"spec_correct_drafts_histogram": [1, 1, 1]}])
    assert c.histogram == (2, 2, 1)
    with pytest.raises(AcceptanceError) as err:
        curve_from_meta_infos([{"spec_correct_drafts_histogram": [1, 1, 1]}], num_drafts=1)
    assert str(err.value) == ("a generation reports 3 histogram buckets but D = 1 allows 2 "
                              "(one engine configuration has one draft count)")
    with pytest.raises(AcceptanceError) as err:
        expected_tau_independent(-0.1, 3)
    assert str(err.value) == "acceptance probability p = -0.1 is outside [0, 1]"
    with pytest.raises(AcceptanceError) as err:
        expected_tau_independent(0.5, -1)
    assert str(err.value) == "num_drafts must be ≥ 0, got -1"
    assert expected_tau_independent(0.5, 0) == 1.0


def test_eagle_histograms_are_read_to_the_configs_depth():
    """Issue 24, measured on the H200: an EAGLE tree class (3 steps, top-k 4, 8 draft tokens) whose requests
    never accepted 3 drafts came back with 3-bucket histograms and was stored as D 2. The depth comes from
    the config (num_steps for the EAGLE family, chain or tree), so that class is D 3 with p_3 = 0."""
    from dynocell.engine.acceptance import curve_from_meta_infos
    from dynocell.engine.config import EngineConfig

    def spec(**kw):
        return EngineConfig.model_validate({"engine": "sglang", "model_path": "/m", "speculative": kw}).speculative

    tree = spec(algorithm="EAGLE", draft_model_path="/d", num_steps=3, eagle_topk=4, num_draft_tokens=8)
    assert tree.accept_depth == 3 and tree.num_drafts == 7
    chain = spec(algorithm="EAGLE3", draft_model_path="/d", num_steps=3, eagle_topk=1, num_draft_tokens=4)
    assert chain.accept_depth == 3
    assert spec(algorithm="NGRAM", num_draft_tokens=4).accept_depth is None
    metas = [{"spec_correct_drafts_histogram": [20, 25, 12]}, {"spec_correct_drafts_histogram": [15, 18, 12]}]
    short = curve_from_meta_infos(metas)
    assert short is not None and short.num_drafts == 2
    deep = curve_from_meta_infos(metas, num_drafts=tree.accept_depth)
    assert deep is not None and deep.num_drafts == 3 and deep.histogram == (35, 43, 24, 0)
    assert deep.p[2] == 0 and deep.tau == pytest.approx(short.tau)
