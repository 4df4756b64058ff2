"""Replay of the real SGLang 0.5.17 artifacts (H200 and 2× H200 TP=2): traces, curves, metrics, logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynocell.engine import metrics as M
from dynocell.engine.acceptance import curve_from_meta_infos, parse_decode_lines, relative_diff
from dynocell.engine.meta import GenerationMeta
from dynocell.engine.trace import analyze_ranks, analyze_trace, per_token

DATA = Path(__file__).parent / "data" / "sglang-0.5.17"
TP2 = Path(__file__).parent / "data" / "sglang-0.5.17-tp2"


@pytest.fixture(scope="module")
def eager():
    return analyze_trace(next(DATA.glob("A.*-TP-0.trace.json.gz")))


@pytest.fixture(scope="module")
def graph():
    return analyze_trace(next(DATA.glob("B.*-TP-0.trace.json.gz")))


@pytest.fixture(scope="module")
def tp2_graph():
    return analyze_ranks(sorted(TP2.glob("T.TP-*.trace.json.gz")))


@pytest.fixture(scope="module")
def tp2_eager():
    return analyze_ranks(sorted(TP2.glob("T0.TP-*.trace.json.gz")))


def test_eager_trace_has_no_graph_launches(eager):
    assert eager.source == "kernel" and eager.rank == 0
    assert eager.graph_launches == 0
    assert eager.launches == 1345  # 1,290 kernels + 55 memcpy
    assert not eager.warnings


def test_graph_trace_has_19_graph_launches(graph):
    assert graph.graph_launches == 19
    assert graph.launches == 1345


@pytest.mark.parametrize("which", ["eager", "graph"])
def test_split_has_gpu_categories(which, request):
    s = request.getfixturevalue(which)
    for cat in ("gemm", "attention", "norm", "elementwise", "memcpy_gather"):
        assert s.category(cat).ms > 0, cat
    assert s.category("communication").ms == 0 and s.category("moe").ms == 0
    # docs/h200/README.md: GEMM (nvjet_sm90_*) ~36 %, RMSNorm ~11 %, Triton attention ~12 %
    assert 30 < s.category("gemm").pct < 42
    assert 9 < s.category("norm").pct < 15
    assert 10 < s.category("attention").pct < 18
    assert s.category("other").pct < 5
    assert s.top[0].name.startswith("nvjet_sm90") and s.top[0].category == "gemm"
    assert len(s.top) == 20 and s.top[0].source == "kernel"
    assert 0 < s.busy_pct < 100 and s.window_ms < s.trace_span_ms


def test_graph_trace_is_busier_than_eager(eager, graph):
    # Same kernels; captured graphs remove launch gaps, so the device window shrinks.
    assert graph.window_ms < eager.window_ms / 2
    assert graph.busy_pct > 2 * eager.busy_pct


def test_per_token_on_real_trace(graph):
    pt = per_token(graph, 20)  # the profile window held 19 decode steps + 1 extend of one stream
    assert pt["launches_per_token"] == pytest.approx(1345 / 20)
    assert pt["ms_per_token"] == pytest.approx(graph.device_ms / 20)


def test_tp2_graph_ranks_and_skew(tp2_graph):
    r = tp2_graph
    assert [s.rank for s in r.ranks] == [0, 1]
    d0, d1 = (s.device_ms for s in r.ranks)
    assert d0 == pytest.approx(37.7, abs=0.5) and d1 == pytest.approx(3.6, abs=0.2)
    assert 9 < r.rank_skew < 12  # README: ranks differ ~10×
    comm = [s.category("communication").pct for s in r.ranks]
    assert 45 < comm[0] < 55 and 20 < comm[1] < 30  # README: 50 % vs 26 %
    assert all(s.graph_launches == 19 for s in r.ranks)
    assert r.combined.device_ms == pytest.approx(d0 + d1)
    assert r.combined.graph_launches == 38
    per_rank = sum(s.category("communication").ms for s in r.ranks)
    assert r.combined.category("communication").ms == pytest.approx(per_rank)
    names = {k.name for k in r.combined.top}
    assert any("all_reduce_kernel" in n for n in names) and any(n.startswith("ncclDevKernel_AllGather") for n in names)


def test_tp2_eager_ranks(tp2_eager):
    r = tp2_eager
    assert [s.rank for s in r.ranks] == [0, 1]
    assert all(s.graph_launches == 0 for s in r.ranks)
    assert all(s.category("communication").ms > 0 for s in r.ranks)
    assert 1.0 <= r.rank_skew < 1.5


def _result(path: Path) -> dict:
    return json.loads(path.read_text())


def test_meta_info_curves_of_runs_c_and_d():
    c = _result(DATA / "C.result.json")
    metas = [c["generate_hello"]["json"]["meta_info"], c["single_256"]["meta_info"]]
    curve = curve_from_meta_infos(metas)
    assert curve.histogram == (0, 0, 0, 8 + 64) and curve.tau == 4.0 and curve.p == (1.0, 1.0, 1.0)
    d = _result(DATA / "D.result.json")
    dm = d["generate_hello"]["json"]["meta_info"]
    dcurve = curve_from_meta_infos([dm])
    assert len(dcurve.histogram) == 12 and dcurve.num_drafts == 11
    assert dcurve.accept_rate == pytest.approx(dm["spec_accept_rate"])  # 34 / 88
    assert GenerationMeta.from_meta_info(dm).validate() == []


def test_metrics_cross_check_run_c():
    s = M.parse_metrics((DATA / "C.metrics.txt").read_text())
    assert M.spec_accept_length(s) == 4.0
    # Engine counters vs the client curve (all drafts accepted with draft = target).
    assert relative_diff(M.tokens_per_verify(s), 4.0) < 0.02


def test_decode_log_lines_of_run_c():
    samples = parse_decode_lines((DATA / "C.server.log").read_text().splitlines())
    assert len(samples) > 100
    spec = [s for s in samples if s.accept_len is not None]
    assert len(spec) == len(samples)
    assert all(s.accept_len == 4.0 and s.accept_rate == 1.0 for s in spec)
    # --cuda-graph-max-bs 4: batches of 16 run eagerly, single streams replay the graph.
    assert all(s.cuda_graph == (s.running_req <= 4) for s in spec)
    assert {s.running_req for s in spec} == {1, 16}
    assert max(s.gen_throughput for s in spec) > 500
    assert spec[0].to_curve().num_drafts == 3


def test_decode_log_lines_of_plain_and_trained_runs():
    plain = parse_decode_lines((DATA / "B.server.log").read_text().splitlines())
    assert all(s.accept_len is None for s in plain)
    trained = parse_decode_lines((DATA / "trained-pair" / "R.server.log").read_text().splitlines())
    lens = {s.accept_len for s in trained}
    assert min(lens) == 1.0 and max(lens) == 4.0 and len(lens) > 3
