"""Trace parser: synthetic edge cases, error paths, a real torch-profiler CPU trace made here."""

from __future__ import annotations

import gzip
import json
import math
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from dynocell.engine.trace import (
    CATEGORIES,
    TraceError,
    analyze_ranks,
    analyze_trace,
    load_rules,
    per_token,
    rank_of,
)
from dynocell.errors import UserError

TRACES = Path(__file__).parent / "data" / "traces"
REAL_A = Path(__file__).parent / "data" / "sglang-0.5.17" / "A.1796009075.4916983-TP-0.trace.json.gz"
CPU_TRACE = TRACES / "torch-cpu.trace.json.gz"


def test_array_form_union_and_warnings():
    s = analyze_trace(TRACES / "array-form.json")
    assert s.source == "kernel"
    assert s.device_ms == pytest.approx(0.030)
    assert s.window_ms == pytest.approx(0.050)
    assert s.busy_pct == pytest.approx(50.0)
    assert s.launches == 4 and s.graph_launches == 1
    assert s.category("gemm").launches == 1 and s.category("attention").launches == 1  # "Kernel" cat, any case
    assert s.category("norm").ms == pytest.approx(0.005)
    assert s.category("memcpy_gather").ms == pytest.approx(0.005)
    assert sum(c.pct for c in s.categories) == pytest.approx(100.0)
    assert [c.category for c in s.categories] == list(CATEGORIES)
    assert any("negative duration" in w for w in s.warnings)
    assert s.top[0].source == "kernel"


def test_nested_intervals_keep_the_outer_one():
    """Kernels that sit inside a longer one on another stream add nothing to the busy union (see traces/README)."""
    s = analyze_trace(TRACES / "nested.json")
    assert s.window_ms == pytest.approx(0.080)
    assert s.device_ms == pytest.approx(0.085)
    assert s.busy_pct == pytest.approx(87.5)
    assert s.category("gemm").ms == pytest.approx(0.060) and s.category("norm").ms == pytest.approx(0.015)


def test_plain_and_gzip_give_the_same_split(tmp_path):
    gz = tmp_path / "x.trace.json.gz"
    with gzip.open(gz, "wb") as f:
        f.write((TRACES / "array-form.json").read_bytes())
    assert analyze_trace(gz).categories == analyze_trace(TRACES / "array-form.json").categories


@pytest.mark.parametrize(
    "name,needle",
    [
        ("truncated.trace.json.gz", "truncated"),
        ("not-json.trace.json.gz", "not valid JSON"),
        ("no-trace-events.json", "no 'traceEvents'"),
    ],
)
def test_bad_traces_raise_trace_error_naming_the_file(name, needle):
    with pytest.raises(TraceError) as exc:
        analyze_trace(TRACES / name)
    assert isinstance(exc.value, UserError)
    assert name in str(exc.value) and needle in str(exc.value)


def test_truncated_plain_json(tmp_path):
    p = tmp_path / "cut.json"
    p.write_bytes(gzip.decompress(REAL_A.read_bytes())[:100_000])
    with pytest.raises(TraceError, match="cut.json.*not complete JSON"):
        analyze_trace(p)


def test_missing_file_and_empty_events(tmp_path):
    with pytest.raises(TraceError, match="cannot open"):
        analyze_trace(tmp_path / "nope.json.gz")
    p = tmp_path / "empty.json"
    p.write_text('{"traceEvents": []}')
    s = analyze_trace(p)
    assert s.device_ms == 0 and s.launches == 0 and "neither GPU kernels nor CPU ops" in s.warnings[0]


def test_rank_of():
    assert rank_of("A.1796009075.4916983-TP-0.trace.json.gz") == 0
    assert rank_of("T.TP-1.trace.json.gz") == 1
    assert rank_of("x-TP-12-DP-0.trace.json.gz") == 12
    assert rank_of("trace.json.gz") is None


def test_analyze_ranks_refuses_duplicates_and_assigns_missing(tmp_path):
    a = tmp_path / "a.json"
    shutil.copy(TRACES / "array-form.json", a)
    r = analyze_ranks([a])
    assert r.ranks[0].rank == 0 and r.rank_skew == 1.0 and "rank 0 assumed" in r.ranks[0].warnings[-1]
    b = tmp_path / "b-TP-0.json"
    c = tmp_path / "c-TP-0.json"
    shutil.copy(a, b)
    shutil.copy(a, c)
    with pytest.raises(TraceError, match="same rank"):
        analyze_ranks([b, c])
    with pytest.raises(TraceError):
        analyze_ranks([])


def test_per_token():
    """array-form.json: device 30 µs, 4 launches, window 50 µs (traces/README.md), over 10 tokens and 1."""
    s = analyze_trace(TRACES / "array-form.json")
    assert per_token(s, 10) == pytest.approx(
        {"ms_per_token": 0.003, "launches_per_token": 0.4, "window_ms_per_token": 0.005})
    assert per_token(s, 1) == pytest.approx({"ms_per_token": 0.030, "launches_per_token": 4.0,
                                             "window_ms_per_token": 0.050})
    with pytest.raises(UserError) as exc:
        per_token(s, 0)
    assert exc.value.message == "output tokens in the profile window must be > 0, got 0"
    assert exc.value.hint == "the profile window saw no decode steps; profile under load"


def test_bad_rules_file(tmp_path):
    p = tmp_path / "r.toml"
    p.write_text('[[rule]]\ncategory = "gpu_magic"\nregex = "x"\n')
    with pytest.raises(TraceError, match="gpu_magic"):
        load_rules(p)
    p.write_text('[[rule]]\ncategory = "gemm"\nregex = "(unclosed"\n')
    with pytest.raises(TraceError, match="bad regex"):
        load_rules(p)


def test_rules_on_real_kernel_and_op_names():
    r = load_rules()
    cases = {
        "nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN": "gemm",
        "void flashinfer::norm::FusedAddRMSNormKernel<8u, __nv_bfloat16>(…)": "norm",
        "_fwd_grouped_kernel_stage1": "attention",
        "_fwd_kernel_stage2": "attention",
        "void (anonymous namespace)::all_reduce_kernel<(anonymous namespace)::AllReducePushImpl<…>": "communication",
        "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)": "communication",
        "void (anonymous namespace)::fused_rope_kernel<true, 64l>": "elementwise",
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(…)": "memcpy_gather",
        "void at::native::vectorized_elementwise_kernel<2, at::native::CUDAFunctorOnSelf_add<long>>": "elementwise",
        "void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::ArgMaxOps<float>>>": "sampling",
        "Memcpy DtoD (Device -> Device)": "memcpy_gather",
        "fused_moe_kernel": "moe",
        "topk_softmax": "router_topk",
        "aten::mm": "gemm",
        "aten::addmm": "gemm",
        "aten::linear": "gemm",
        "aten::scaled_dot_product_attention": "attention",
        "aten::_softmax": "attention",
        "aten::native_layer_norm": "norm",
        "aten::relu": "elementwise",
        "aten::copy_": "memcpy_gather",
        "aten::empty": "other",
    }
    for name, cat in cases.items():
        assert r.category(name) == cat, name


def cpu_reference(path: Path) -> dict[str, Any]:
    """The CPU split computed the plain way: ``json`` loads the whole file; per thread, events sorted by
    start (longest first) on a stack of open ops, each op's self time = its ``dur`` − its direct children's."""
    doc = json.loads(gzip.decompress(path.read_bytes()))
    ops = [e for e in doc["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    per: dict[str, list[Any]] = {}
    by_thread: dict[Any, list[dict[str, Any]]] = {}
    for e in ops:
        by_thread.setdefault((e["pid"], e["tid"]), []).append(e)
    for evs in by_thread.values():
        stack: list[list[Any]] = []  # [end, name, dur, children]

        def close(item: list[Any]) -> None:
            a = per.setdefault(item[1], [0.0, 0])
            a[0] += max(0.0, item[2] - item[3])
            a[1] += 1

        for e in sorted(evs, key=lambda e: (e["ts"], -e["dur"])):
            while stack and stack[-1][0] <= e["ts"]:
                close(stack.pop())
            if stack:
                stack[-1][3] += e["dur"]
            stack.append([e["ts"] + e["dur"], e["name"], e["dur"], 0.0])
        while stack:
            close(stack.pop())
    busy, cur = 0.0, None
    for s_, e_ in sorted((e["ts"], e["ts"] + e["dur"]) for e in ops):
        if cur is not None and s_ <= cur[1]:
            cur[1] = max(cur[1], e_)
            continue
        if cur is not None:
            busy += cur[1] - cur[0]
        cur = [s_, e_]
    busy += cur[1] - cur[0]
    lo, hi = min(e["ts"] for e in ops), max(e["ts"] + e["dur"] for e in ops)
    spans = [e for e in doc["traceEvents"] if e.get("ph") == "X"]
    return {
        "self_ms": {n: (d / 1000.0, k) for n, (d, k) in per.items()},
        "device_ms": sum(d for d, _ in per.values()) / 1000.0, "launches": len(ops),
        "window_ms": (hi - lo) / 1000.0, "busy_pct": 100.0 * busy / (hi - lo),
        "trace_span_ms": (max(e["ts"] + e["dur"] for e in spans) - min(e["ts"] for e in spans)) / 1000.0,
        "events": len(doc["traceEvents"]),
    }


def test_real_torch_cpu_trace():
    """A real torch-profiler CPU trace (traces/README.md): every number of the split against the plain reference."""
    s = analyze_trace(CPU_TRACE, top=10**6)
    ref = cpu_reference(CPU_TRACE)
    assert s.source == "cpu_op" and s.graph_launches == 0 and s.warnings == ()
    assert (s.launches, s.events) == (ref["launches"], ref["events"]) == (840, 851)
    assert (s.device_ms, s.window_ms, s.busy_pct, s.trace_span_ms) == pytest.approx(
        (ref["device_ms"], ref["window_ms"], ref["busy_pct"], ref["trace_span_ms"]), rel=1e-12)
    assert s.busy_pct == pytest.approx(99.746376, abs=1e-5) and s.device_ms == pytest.approx(1808.410289, abs=1e-6)
    assert {k.name: k.ms for k in s.top} == pytest.approx({n: ms for n, (ms, _) in ref["self_ms"].items()}, rel=1e-9)
    assert {k.name: k.launches for k in s.top} == {n: k for n, (_, k) in ref["self_ms"].items()}
    assert all(k.source == "cpu_op" for k in s.top) and len(s.top) == len(ref["self_ms"]) == 20
    assert [k.ms for k in s.top] == sorted((k.ms for k in s.top), reverse=True)
    assert all(k.pct == pytest.approx(100 * k.ms / s.device_ms) for k in s.top)
    want = {"gemm": (1094.33717, 120), "attention": (348.646884, 60), "moe": (0.0, 0), "router_topk": (0.0, 0),
            "elementwise": (0.780445, 60), "norm": (354.712988, 60), "communication": (0.0, 0),
            "memcpy_gather": (0.315334, 30), "sampling": (0.0, 0), "other": (9.617468, 510)}
    assert [c.category for c in s.categories] == list(want)
    assert [c.ms for c in s.categories] == pytest.approx([ms for ms, _ in want.values()], abs=1e-6)
    assert [c.launches for c in s.categories] == [n for _, n in want.values()]
    assert sum(c.pct for c in s.categories) == pytest.approx(100.0)
    # Self time: nested ops are not double counted (aten::linear's addmm, matmul's mm).
    inclusive = sum(e["dur"] for e in json.loads(gzip.decompress(CPU_TRACE.read_bytes()))["traceEvents"]
                    if e.get("cat") == "cpu_op") / 1000
    assert s.device_ms < inclusive and s.device_ms <= s.window_ms
    # Both readers alike, the fast one takes the file.
    from dynocell.engine.trace import _read_fast
    _read_fast(CPU_TRACE)
    assert s.as_dict() == analyze_trace(CPU_TRACE, top=10**6, fast=False).as_dict()


def test_two_ranks_combined(tmp_path):
    """Rank 0 = array-form.json, rank 1 = nested.json (see traces/README.md), given out of order.

    Combined: device 30 + 85 = 115 µs; window and span the longest rank's (80 µs); busy the mean of
    50 % and 87.5 %; launches, events and per-category time summed; the top list merged by kernel
    name (the RMSNorm kernel: 1 + 2 launches); warnings tagged with their rank; skew 85 / 30.
    """
    shutil.copy(TRACES / "nested.json", tmp_path / "n-TP-1.json")
    shutil.copy(TRACES / "array-form.json", tmp_path / "a-TP-0.json")
    r = analyze_ranks([tmp_path / "n-TP-1.json", tmp_path / "a-TP-0.json"], top=3)
    assert [s.rank for s in r.ranks] == [0, 1] and r.rank_skew == pytest.approx(85 / 30)
    c = r.combined.as_dict()
    assert c["path"] == f"{tmp_path / 'a-TP-0.json'}, {tmp_path / 'n-TP-1.json'}"
    assert (c["source"], c["rank"], c["launches"], c["graph_launches"], c["events"]) == ("kernel", None, 8, 1, 10)
    assert (c["device_ms"], c["window_ms"], c["trace_span_ms"], c["busy_pct"]) == pytest.approx(
        (0.115, 0.080, 0.080, 68.75))
    cats = {x["category"]: (x["ms"], x["pct"], x["launches"]) for x in c["categories"]}
    assert [x["category"] for x in c["categories"]] == list(CATEGORIES)
    assert cats["gemm"] == pytest.approx((0.070, 7000 / 115, 2))
    assert cats["attention"] == pytest.approx((0.020, 2000 / 115, 2))
    assert cats["norm"] == pytest.approx((0.020, 2000 / 115, 3))
    assert cats["memcpy_gather"] == pytest.approx((0.005, 500 / 115, 1))
    assert all(cats[k] == (0.0, 0.0, 0) for k in ("moe", "router_topk", "elementwise", "communication",
                                                   "sampling", "other"))
    assert [(k["name"], k["category"], k["launches"], k["source"]) for k in c["top"]] == [
        ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN", "gemm", 2, "kernel"),
        ("_fwd_grouped_kernel_stage1", "attention", 2, "kernel"),
        ("void flashinfer::norm::FusedAddRMSNormKernel<8u>", "norm", 3, "kernel")]
    assert [x for k in c["top"] for x in (k["ms"], k["pct"])] == pytest.approx(
        [0.070, 7000 / 115, 0.020, 2000 / 115, 0.020, 2000 / 115])
    assert c["warnings"] == ["rank 0: 1 event(s) with negative duration skipped"]
    one = analyze_ranks([tmp_path / "n-TP-1.json"])
    assert one.rank_skew == 1.0 and one.combined.busy_pct == pytest.approx(87.5)


TP2 = Path(__file__).parent / "data" / "sglang-0.5.17-tp2"  # real 2× H200 TP-2 traces (see its README)


def test_real_tp2_per_rank_skew_and_combination():
    """Run T (tp2/README.md): rank kernel time 37.7 ms vs 3.6 ms, skew ≈ 10×; 36 kernel names per rank."""
    r = analyze_ranks([TP2 / "T.TP-1.trace.json.gz", TP2 / "T.TP-0.trace.json.gz"])
    assert [(s.rank, Path(s.path).name, s.source) for s in r.ranks] == [
        (0, "T.TP-0.trace.json.gz", "kernel"), (1, "T.TP-1.trace.json.gz", "kernel")]
    assert [(s.device_ms, s.busy_pct, s.window_ms) for s in r.ranks] == [
        pytest.approx((37.704658, 21.732351, 96.873468), abs=1e-6),
        pytest.approx((3.639801, 3.384895, 96.799302), abs=1e-6)]
    assert [len(s.top) for s in r.ranks] == [20, 20]  # of 36 kernel names each (the default top)
    assert r.rank_skew == pytest.approx(37.704658 / 3.639801, rel=1e-9) and round(r.rank_skew, 3) == 10.359
    c = r.combined
    assert len(c.top) == 20 and c.rank is None
    assert (c.device_ms, c.busy_pct, c.window_ms) == pytest.approx(
        (37.704658 + 3.639801, (21.732351 + 3.384895) / 2, 96.873468), abs=1e-6)
    assert c.category("communication").ms == pytest.approx(18.661423 + 0.895549, abs=1e-6)
    assert (c.launches, c.graph_launches) == (1545 * 2, 38)  # 19 cudaGraphLaunch on each rank


def test_analyze_ranks_passes_top_and_rules():
    """``top`` and ``rules`` reach every rank's split."""
    import re

    from dynocell.engine.trace import Rules

    everything_moe = Rules(((re.compile("."), "moe"),))
    r = analyze_ranks([TP2 / "T.TP-0.trace.json.gz"], top=2, rules=everything_moe)
    assert len(r.ranks[0].top) == 2 and len(r.combined.top) == 2
    assert r.ranks[0].category("moe").pct == pytest.approx(100.0)
    assert r.combined.category("moe").ms == pytest.approx(37.704658, abs=1e-6)


def test_ranks_assigned_to_unnamed_files_in_order(tmp_path):
    """Files without -TP-<n> take the next free ranks, skipping the named ones, each with its warning."""
    for name in ("u1.json", "x-TP-0.json", "u2.json"):
        shutil.copy(TRACES / "array-form.json", tmp_path / name)
    r = analyze_ranks([tmp_path / "u1.json", tmp_path / "x-TP-0.json", tmp_path / "u2.json"])
    assert [(s.rank, Path(s.path).name) for s in r.ranks] == [(0, "x-TP-0.json"), (1, "u1.json"), (2, "u2.json")]
    assert [s.warnings[-1] for s in r.ranks[1:]] == ["no -TP-<n> in file name; rank 1 assumed",
                                                     "no -TP-<n> in file name; rank 2 assumed"]
    assert r.ranks[0].warnings == ("1 event(s) with negative duration skipped",)


def test_duplicate_and_missing_ranks_name_the_fix(tmp_path):
    paths = [tmp_path / n for n in ("b-TP-0.json", "c-TP-0.json", "d-TP-1.json")]
    for p in paths:
        shutil.copy(TRACES / "array-form.json", p)
    with pytest.raises(TraceError) as exc:
        analyze_ranks(paths)
    assert exc.value.message == (f"traces of the same rank given twice: rank(s) [0] in "
                                 f"{paths[0]}, {paths[1]}, {paths[2]}")
    assert exc.value.hint == "pass one trace per rank of one profile window"
    with pytest.raises(TraceError) as exc:
        analyze_ranks([])
    assert (exc.value.message, exc.value.hint) == ("no trace files given", "a profile window writes one trace per rank")


def test_ranks_without_device_time(tmp_path):
    """A rank with no counted time: skew 1.0 alone, ∞ beside a busy rank; all-empty ranks give 0 % shares."""
    for name in ("e-TP-0.json", "f-TP-1.json"):
        (tmp_path / name).write_text('{"traceEvents": []}')
    shutil.copy(TRACES / "array-form.json", tmp_path / "a-TP-1.json")
    assert analyze_ranks([tmp_path / "e-TP-0.json"]).rank_skew == 1.0
    assert analyze_ranks([tmp_path / "e-TP-0.json", tmp_path / "a-TP-1.json"]).rank_skew == math.inf
    r = analyze_ranks([tmp_path / "e-TP-0.json", tmp_path / "f-TP-1.json"])
    assert r.rank_skew == math.inf and r.combined.device_ms == 0.0 and r.combined.top == ()
    assert [(c.ms, c.pct, c.launches) for c in r.combined.categories] == [(0.0, 0.0, 0)] * len(CATEGORIES)


def test_ranks_of_different_sources_combine_as_mixed(tmp_path):
    """A CPU-op rank (the stored torch trace) beside a GPU-kernel rank: the combination's source is 'mixed'."""
    shutil.copy(CPU_TRACE, tmp_path / "c-TP-0.trace.json.gz")
    shutil.copy(TRACES / "array-form.json", tmp_path / "a-TP-1.json")
    r = analyze_ranks([tmp_path / "c-TP-0.trace.json.gz", tmp_path / "a-TP-1.json"], top=100)
    assert [s.source for s in r.ranks] == ["cpu_op", "kernel"] and r.combined.source == "mixed"
    assert {(k.name, k.source) for k in r.combined.top} >= {("aten::mm", "cpu_op"),
                                                             ("nvjet_sm90_tst_8x64_64x16_4x1_v_bz_TNN", "kernel")}


def test_odd_cpu_events_read_by_the_ijson_reader():
    """odd-cpu.json (traces/README.md): per-thread self times, skipped and unusable events, their warnings."""
    from dynocell.engine.trace_chunks import NotFast
    from dynocell.engine.trace import _read_fast

    with pytest.raises(NotFast):
        _read_fast(TRACES / "odd-cpu.json")
    s = analyze_trace(TRACES / "odd-cpu.json", top=100)
    assert (s.source, s.launches, s.graph_launches, s.events) == ("cpu_op", 12, 2, 23)
    assert {k.name: (k.ms, k.launches) for k in s.top} == {
        "aten::linear": (0.020, 1), "aten::addmm": (0.080, 1), "aten::copy_": (0.010, 1), "aten::mm": (0.040, 1),
        "aten::relu": (0.005, 1), "aten::clamp_min": (0.004, 1), "aten::empty": (0.0, 1), "aten::view": (0.001, 1),
        "None": (0.002, 1), "3": (0.004, 1), "aten::empty_like": (0.0, 1), "aten::last": (0.005, 1)}
    assert (s.device_ms, s.window_ms, s.trace_span_ms) == pytest.approx((0.171, 0.195, 0.250))
    assert s.busy_pct == pytest.approx(100 * 121 / 195)
    assert s.warnings == ("2 event(s) with negative duration skipped",
                          "3 event(s) with a non-numeric or non-finite ts/dur skipped",
                          "2 CPU op(s) out of time order on their thread; self times approximate")


def write_trace(tmp_path: Path, events: list[dict[str, Any]], name: str = "t.json") -> Path:
    p = tmp_path / name
    p.write_text(json.dumps({"traceEvents": events}))
    return p


def test_sub_microsecond_and_zero_length_kernels(tmp_path):
    """Shares and busy % of a window under 1 µs; a zero-length window gives 0 %, never a division."""
    tiny = analyze_trace(write_trace(tmp_path, [
        {"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 0.25},
        {"ph": "X", "cat": "kernel", "ts": 10.25, "dur": 0.25}]))  # a kernel without a name: "None"
    assert (tiny.device_ms, tiny.window_ms, tiny.busy_pct) == pytest.approx((0.0005, 0.0005, 100.0))
    assert tiny.category("other").pct == pytest.approx(100.0)
    assert [(k.name, k.pct) for k in tiny.top] == [("k", 50.0), ("None", 50.0)]
    zero = analyze_trace(write_trace(tmp_path, [{"ph": "X", "cat": "kernel", "name": "k", "ts": 10, "dur": 0}]))
    assert (zero.launches, zero.device_ms, zero.window_ms, zero.busy_pct, zero.trace_span_ms) == (1, 0.0, 0.0, 0.0, 0.0)
    assert [c.pct for c in zero.categories] == [0.0] * len(CATEGORIES)
    assert analyze_trace(TRACES / "array-form.json", top=0).top == ()


def test_busy_union_far_out_of_order():
    """Past the union's horizon an early interval is clipped to what was already emitted, counted and warned
    about. Horizon 2 here (65536 in a real split): [10, 20) is emitted when a third interval arrives; then
    [10, 25) (same start: in order, extends it), [0, 5) (late, clipped to nothing), [5, 30) (late, clipped
    to [10, 30)), [30, 35) (touching): union [10, 35) + [40, 50) + [60, 70) = 45 µs over [0, 70)."""
    from dynocell.engine.trace import _Split
    from dynocell.engine.trace_chunks import Event

    split = _Split()
    split.dev_union.horizon = 2
    split.feed([Event(name="k", ph="X", cat="kernel", ts=float(s), dur=float(e - s))
                for s, e in ((10, 20), (40, 50), (60, 70), (10, 25), (0, 5), (5, 30), (30, 35))])
    s = split.result(Path("x.json"), 5, load_rules())
    assert split.dev_union.late == 2
    assert s.warnings == ("2 event(s) far out of time order; busy % approximate",)
    assert s.window_ms == pytest.approx(0.070) and s.busy_pct == pytest.approx(100 * 45 / 70)


def test_category_of_an_unknown_name_is_a_key_error():
    s = analyze_trace(TRACES / "array-form.json")
    with pytest.raises(KeyError, match="gpu_magic"):
        s.category("gpu_magic")


def test_rank_of_vllm_profiler_files():
    """vLLM 0.26's --profiler-config torch profiler names (tests/data/vllm-0.26.0)."""
    assert rank_of("A_graph.rank0.1796111742702098289.pt.trace.json.gz") == 0
    assert rank_of("B_eager.rank3.1796111865556176715.pt.trace.json") == 3
    assert rank_of("B_eager.rank3.pt.trace.json.gz") is None


def test_empty_trace_prints_zeros(tmp_path):
    s = analyze_trace(write_trace(tmp_path, []))
    assert (s.device_ms, s.window_ms, s.busy_pct, s.trace_span_ms, s.launches, s.top) == (0.0, 0.0, 0.0, 0.0, 0, ())
    assert [c.pct for c in s.categories] == [0.0] * len(CATEGORIES)
    assert s.warnings == ("trace holds neither GPU kernels nor CPU ops",)


def test_ijson_reader_depth_limit_is_exact(tmp_path):
    """Nesting exactly MAX_DEPTH (64) levels is read; one more is refused (object 1, list 2, event 3, args …)."""
    from dynocell.engine.trace import MAX_DEPTH

    def doc(levels: int) -> Path:
        args = "[" * (levels - 3) + "]" * (levels - 3)
        return write_trace_text(tmp_path, '{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 0, '
                                          f'"dur": 2, "args": {args}}}]}}', f"d{levels}.json")

    assert analyze_trace(doc(MAX_DEPTH), fast=False).device_ms == pytest.approx(0.002)
    with pytest.raises(TraceError) as exc:
        analyze_trace(doc(MAX_DEPTH + 1), fast=False)
    assert exc.value.message == f"{tmp_path / 'd65.json'}: JSON nested more than 64 levels deep; not a Chrome trace"


def write_trace_text(tmp_path: Path, text: str, name: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_ijson_reader_event_size_limit(tmp_path, monkeypatch):
    """The byte budget is per event (from the last one's end), not per file: with the limit set to 1 MiB, 3 MiB
    of small events read, one event over 1 MiB is refused with the limit in MiB and the hint."""
    from dynocell.engine import trace

    monkeypatch.setattr(trace, "MAX_EVENT_BYTES", 1 << 20)
    small = [{"ph": "X", "cat": "kernel", "name": "k", "ts": i, "dur": 1, "args": {"pad": "x" * 300}}
             for i in range(10_000)]
    assert analyze_trace(write_trace(tmp_path, small, "many.json"), fast=False).launches == 10_000
    big = [small[0], {"ph": "X", "cat": "kernel", "name": "k", "ts": 5, "dur": 1, "args": {"pad": "x" * (3 << 19)}}]
    p = write_trace(tmp_path, big, "big.json")
    with pytest.raises(TraceError) as exc:
        analyze_trace(p, fast=False)
    assert exc.value.message == (f"{p}: one trace event (or value) is larger than 1 MiB; "
                                 "refused before it could fill memory")
    assert exc.value.hint == "a real profiler event is under 1 MB: is this file a trace, and is it intact?"


_KINETO = "expected a torch profiler / Kineto trace (*.trace.json[.gz])"


@pytest.mark.parametrize("text,message,hint", [
    ("", "trace file is empty", "re-collect the trace; the profiler may not have written it yet"),
    ('{"traceEvents": 5}', "'traceEvents' is a number, not a list of events", _KINETO),
    ('{"traceEvents": {"ph": "X"}}', "'traceEvents' is an object, not a list of events", _KINETO),
    ('{"traceEvents": true}', "'traceEvents' is a boolean, not a list of events", _KINETO),
    ('{"traceEvents": "x"}', "'traceEvents' is a string, not a list of events", _KINETO),
    ('{"traceEvents": null}', "'traceEvents' is null, not a list of events", _KINETO),
    ('{"a": [1], "b": {"traceEvents": []}}', "not a Chrome trace: no 'traceEvents' list", _KINETO),
    ('{"traceEvents": [{"ph": "X"}, {"ph": ', "trace is not complete JSON (truncated?): parse error: premature EOF",
     "re-collect the trace; a profile window still being written looks like this"),
    ("not json at all", "trace is not valid JSON: lexical error: invalid string in json text.", _KINETO),
])
def test_trace_errors_word_for_word(tmp_path, text, message, hint):
    """Each unreadable trace: the file, what is wrong, and what to do (the ijson reader's wording)."""
    p = write_trace_text(tmp_path, text, "bad.json")
    with pytest.raises(TraceError) as exc:
        analyze_trace(p)
    assert (exc.value.message, exc.value.hint) == (f"{p}: {message}", hint)


def test_truncated_gzip_and_a_directory_word_for_word(tmp_path):
    p = TRACES / "truncated.trace.json.gz"
    with pytest.raises(TraceError) as exc:
        analyze_trace(p)
    assert exc.value.message.startswith(f"{p}: trace is truncated or not valid gzip: ")
    assert exc.value.hint == "the profiler may still be writing it, or the copy was cut short"
    with pytest.raises(TraceError) as exc:
        analyze_trace(tmp_path)
    assert exc.value.message == f"{tmp_path}: cannot open trace: Is a directory"


def read_guarded(data: bytes, sizes: Iterable[int], to_end: bool = True) -> Any:
    """Feed ``data`` through the ijson reader's guard in reads of the given sizes (the last one repeated
    to the end of ``data`` when ``to_end``)."""
    import io

    from dynocell.engine.trace import _Guard

    g = _Guard(io.BytesIO(data), Path("g.json"))
    sizes = list(sizes)
    for n in sizes:
        g.read(n)
    while to_end and g.read(sizes[-1]):
        pass
    return g


def test_guard_tracks_strings_and_escapes_across_any_read_size():
    """Brackets inside strings (escaped quotes and backslashes included) are no nesting, wherever reads split."""
    data = (b'{"traceEvents": [{"name": "a \\"[[[\\" \\\\", "args": {"s": "}}}\\\\\\"]]", "l": [[1, 2], []]}},'
            b' {"name": "\\\\\\\\", "x": ["[", "]", "{"], "e": ["", "\\"[", "]\\""]}]}')
    json.loads(data)  # valid JSON
    for size in (1, 2, 3, 4, 5, 7, 11, len(data)):
        g = read_guarded(data, [size])
        assert (g.depth, g.in_str, g.escaped, g.total) == (0, False, False, len(data)), size
    for cut in range(1, len(data)):  # two reads, split at every byte
        g = read_guarded(data, [cut, len(data)])
        assert (g.depth, g.in_str, g.escaped) == (0, False, False), cut
    g = read_guarded(data, [len(data) - 2], to_end=False)  # stop inside the top-level list's last event
    assert g.depth == 2 and not g.in_str


def test_guard_value_length_limit_is_exact():
    """A string (or number) of exactly MAX_VALUE_BYTES is read; one byte more is refused, as is a number."""
    from dynocell.engine.trace import MAX_VALUE_BYTES

    head = b'{"traceEvents": [{"name": "'
    ok = head + b"x" * MAX_VALUE_BYTES + b'"}]}'
    g = read_guarded(ok, [len(head) + MAX_VALUE_BYTES, 64])  # a read ends just before the closing quote
    assert g.run == 0 and g.depth == 0
    for data, n in ((head + b"x" * (MAX_VALUE_BYTES + 1) + b'"}]}', len(head) + MAX_VALUE_BYTES + 1),
                    (b'{"traceEvents": [{"ts": ' + b"1" * (MAX_VALUE_BYTES + 1) + b"}]}", 24 + MAX_VALUE_BYTES + 1)):
        with pytest.raises(TraceError) as exc:
            read_guarded(data, [7, n - 7, 64])
        assert exc.value.message == "g.json: one JSON string or number is longer than 4 MiB; not a profiler trace"
        assert exc.value.hint == "a real trace's names and values are short: is this file a trace?"


def test_guard_value_length_counts_across_reads():
    """A value's length runs on over reads that hold no delimiter (ijson reads 64 KiB at a time), is measured
    inside a string from its opening quote only (spaces in a string are no delimiter), and counts a string's
    escapes as the characters they stand for. (It is checked at the end of each read, so a value is refused
    once it is still open past the limit.)"""
    from dynocell.engine.trace import MAX_VALUE_BYTES

    head = b'{"traceEvents": [{"name": '
    over = MAX_VALUE_BYTES + (128 << 10)  # still open at the end of some 64 KiB read
    for body in (b"x" * over, b"x " * (over // 2)):
        with pytest.raises(TraceError, match="longer than 4 MiB"):
            read_guarded(head + b'"' + body + b'"}]}', [64 << 10])
    ok = read_guarded(head + b'"' + b"x" * MAX_VALUE_BYTES + b'"}]}', [len(head), MAX_VALUE_BYTES + 1, 64])
    assert ok.depth == 0  # the opening quote first in a read: the value is the rest of that read
    escaped = read_guarded(head + b'"' + b"\\n" * (MAX_VALUE_BYTES // 2) + b'"}]}', [64 << 10])
    assert escaped.depth == 0 and not escaped.in_str


def test_guard_depth_limit_words_the_fix():
    with pytest.raises(TraceError) as exc:
        read_guarded(b"[" * 65 + b"]" * 65, [64, 1])  # 64 levels in the first read, the 65th in the next
    assert exc.value.message == "g.json: JSON nested more than 64 levels deep; not a Chrome trace"
    assert exc.value.hint == "a profiler trace nests about 6 levels: is this file a trace?"


def test_ijson_reader_on_the_array_form_and_odd_lists(tmp_path):
    """The ijson reader reads the bare array form (after leading whitespace) as the fast reader does; an empty
    array is an empty trace, not an error; values in the list that are not objects count as events only."""
    fast = analyze_trace(TRACES / "array-form.json").as_dict()
    assert analyze_trace(TRACES / "array-form.json", fast=False).as_dict() == fast
    text = (TRACES / "array-form.json").read_text()
    assert analyze_trace(write_trace_text(tmp_path, " \n\t" + text, "ws.json"), fast=False).launches == 4
    empty = analyze_trace(write_trace_text(tmp_path, "[]", "empty.json"), fast=False)
    assert (empty.events, empty.warnings) == (0, ("trace holds neither GPU kernels nor CPU ops",))
    odd = analyze_trace(write_trace_text(tmp_path, '{"traceEvents": [7, [1], {"ph": "X", "cat": "kernel", '
                                                   '"name": "k", "ts": 0, "dur": 2}]}', "odd.json"))
    assert (odd.events, odd.launches, odd.device_ms) == (3, 1, 0.002)


def test_default_top_is_twenty(tmp_path):
    evs = [{"ph": "X", "cat": "kernel", "name": f"k{i:02}", "ts": 10 * i, "dur": 1 + i} for i in range(25)]
    s = analyze_trace(write_trace(tmp_path, evs))
    assert [k.name for k in s.top] == [f"k{i:02}" for i in range(24, 4, -1)]


def test_fast_reader_counts_events_over_many_blocks(monkeypatch):
    """Blocks of 64 bytes (a setting of the fast reader): array-form.json's 6 events over many chunks."""
    from dynocell.engine import trace_chunks

    whole = analyze_trace(TRACES / "array-form.json").as_dict()
    monkeypatch.setattr(trace_chunks, "BLOCK_BYTES", 64)
    assert analyze_trace(TRACES / "array-form.json").as_dict() == whole and whole["events"] == 6


def test_ijson_reader_event_budget_of_exactly_one_read(tmp_path, monkeypatch):
    """ijson reads 64 KiB at a time and each event resets the budget: a limit of exactly 64 KiB still reads a
    file of small events (the budget is exceeded only past the limit, never at it)."""
    from dynocell.engine import trace

    monkeypatch.setattr(trace, "MAX_EVENT_BYTES", 64 << 10)
    evs = [{"ph": "X", "cat": "kernel", "name": "k", "ts": i, "dur": 1} for i in range(5000)]
    assert analyze_trace(write_trace(tmp_path, evs), fast=False).launches == 5000


def _kernels(tmp_path: Path, *events: tuple[str, str, float, float]) -> Path:
    """A hand-built trace: ``(category, name, ts µs, dur µs)`` complete events."""
    p = tmp_path / "t.json"
    p.write_text(json.dumps({"traceEvents": [{"ph": "X", "cat": c, "name": n, "ts": ts, "dur": d, "pid": 1, "tid": 1}
                                             for c, n, ts, d in events]}))
    return p


@pytest.mark.parametrize("events", [
    [("kernel", "a", 1, 1.7e308), ("kernel", "b", 2, 1.7e308)],  # kernel time overflows a float
    [("kernel", "a", 0, 6e17), ("kernel", "b", 1, 6e17)],  # kernel time 1.2e18 µs; window and span 6e17
    [("kernel", "a", 0, 5), ("cpu_op", "aten::mm", 2e18, 1)],  # only the span: a CPU op 2e18 µs later
], ids=["overflow", "kernel-time", "span"])
def test_event_times_no_profiler_wrote_are_refused(tmp_path, events):
    """Kernel time, window or span past 1e18 µs (31,700 years) is a corrupt trace (the newcomer/attack pass:
    sums of such durations overflowed to 'busy nan %'): a TraceError naming the file, with what to check."""
    with pytest.raises(TraceError) as exc:
        analyze_trace(_kernels(tmp_path, *events))
    assert exc.value.message.startswith(f"{tmp_path / 't.json'}: event times add up to more than 1e+18 µs "
                                        "(31,700 years); not a profiler trace")
    assert exc.value.hint == "a ts or dur in the file is corrupt: is it the trace the profiler wrote?"


def test_event_times_at_the_limit_are_read(tmp_path):
    """Exactly 1e18 µs is still read (the limit is inclusive)."""
    s = analyze_trace(_kernels(tmp_path, ("kernel", "gemm_k", 0, 1e18)))
    assert s.device_ms == 1e15 and s.window_ms == 1e15
