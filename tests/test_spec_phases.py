"""Issue 24 item 7: a speculative step's phase split (draft forward, draft extend, target verify,
sampling / accept, glue) from a torch-profiler trace's CPU-side ranges — SGLang 0.5.17's range names
(``spec_stage_span("draft")``, ``spec_stage_span("draft_extend")``, ``step[TARGET_VERIFY bs=N]``,
``scheduler.run_batch``), which the reference engine emits too."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import httpx
import pytest

from dynocell.engine.reference.launch import start_engine
from dynocell.engine.reference.nets import PACKAGED_DIR, recipe_id
from dynocell.engine.spec_phases import load_phase_table, split_phases
from dynocell.engine.trace import TraceError

EAGLE = PACKAGED_DIR / recipe_id(0) / "eagle"


def _x(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def test_kernels_go_to_the_innermost_range_of_their_launch(tmp_path):
    """A hand-made GPU trace in the Kineto shape: runtime launches correlate to kernels."""
    ev = [
        _x("scheduler.run_batch", "user_annotation", 0, 1000),
        _x("draft", "user_annotation", 10, 300),
        _x("step[DECODE bs=1]", "user_annotation", 20, 100),
        _x("cudaLaunchKernel", "cuda_runtime", 30, 5, correlation=1),
        _x("step[TARGET_VERIFY bs=1]", "user_annotation", 400, 200),
        _x("cudaLaunchKernel", "cuda_runtime", 410, 5, correlation=2),
        _x("cudaLaunchKernel", "cuda_runtime", 650, 5, correlation=3),
        _x("cudaLaunchKernel", "cuda_runtime", 700, 5, correlation=4),
        _x("draft_extend", "user_annotation", 800, 150),
        _x("cudaLaunchKernel", "cuda_runtime", 810, 5, correlation=5),
        _x("cudaLaunchKernel", "cuda_runtime", 2000, 5, correlation=6),  # outside the step
        _x("gemm_kernel", "kernel", 40, 50, tid=7, correlation=1),
        _x("gemm_kernel", "kernel", 420, 300, tid=7, correlation=2),
        _x("tree_speculative_sampling_target_only", "kernel", 720, 40, tid=7, correlation=3),
        _x("elementwise_kernel", "kernel", 760, 10, tid=7, correlation=4),
        _x("gemm_kernel", "kernel", 820, 100, tid=7, correlation=5),
        _x("gemm_kernel", "kernel", 2010, 999, tid=7, correlation=6),
    ]
    p = tmp_path / "t.trace.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": ev}).encode()))
    s = split_phases(p)
    assert s.source == "gpu"
    assert s.ms == pytest.approx({"draft_forward": 0.05, "target_verify": 0.3, "sampling": 0.04, "glue": 0.01,
                                  "draft_extend": 0.1, "outside": 0.999})
    assert s.total_ms == pytest.approx(0.5)
    assert s.line() == "draft 10 %, draft extend 20 %, verify 60 %, sampling 8 %, glue 2 %"
    assert s.ranges == {"draft_forward": 1, "target_verify": 1, "draft_extend": 1}


def test_not_a_trace_is_refused(tmp_path):
    p = tmp_path / "x.json"
    p.write_text('{"hello": 1}')
    with pytest.raises(TraceError):
        split_phases(p)


def test_the_table_is_data():
    t = load_phase_table()
    names = {ph for ph, _ in t.ranges}
    assert names == {"draft_forward", "draft_extend", "target_verify"}


def test_reference_engine_eagle_trace_splits_into_phases(model_pair, tmp_path):
    eng = start_engine(model_pair.target, ["--speculative-algorithm", "EAGLE", "--speculative-draft-model-path",
                                           str(EAGLE), "--speculative-num-steps", "3",
                                           "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
                                           "--profile-dir", str(tmp_path)], tmp_path / "server.log")
    try:
        r = httpx.post(eng.url + "/start_profile", json={"output_dir": str(tmp_path), "activities": ["CPU"],
                                                         "profile_id": "p"}, timeout=30)
        assert r.status_code == 200, r.text
        g = httpx.post(eng.url + "/generate", json={"text": "def main(argv):\n    ", "sampling_params": {
            "max_new_tokens": 24, "temperature": 0, "ignore_eos": True}}, timeout=60).json()
        assert httpx.post(eng.url + "/stop_profile", timeout=60).status_code == 200
    finally:
        eng.stop()
    s = split_phases(tmp_path / "p-TP-0.trace.json.gz")
    verify = g["meta_info"]["spec_verify_ct"]
    assert s.source == "cpu"
    assert s.ranges["target_verify"] == verify and s.ranges["draft_forward"] == verify
    assert s.ranges["draft_extend"] >= verify - 1
    for phase in ("draft_forward", "draft_extend", "target_verify"):
        assert s.ms[phase] > 0, (phase, s.ms)
    assert 99.0 < sum(s.percent().values()) < 101.0


# ------------------------------------------------------------------ the report a run stores (issue 24 item 3)

def _write(path, events):
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": events}).encode()))
    return path


def _rank_trace(verify_us, draft_us, extend_us, sampling_us, glue_us, base=0):
    """One rank's step: one kernel per phase with the given GPU µs, each launched inside its range."""
    c = base
    return [
        _x("scheduler.run_batch", "user_annotation", 0, 5000),
        _x("draft", "user_annotation", 100, 900),
        _x("cudaLaunchKernel", "cuda_runtime", 200, 5, correlation=c + 1),
        _x("step[TARGET_VERIFY bs=1]", "user_annotation", 1000, 1000),
        _x("cudaLaunchKernel", "cuda_runtime", 1100, 5, correlation=c + 2),
        _x("cudaLaunchKernel", "cuda_runtime", 2100, 5, correlation=c + 3),  # sampling: by kernel name
        _x("cudaLaunchKernel", "cuda_runtime", 2200, 5, correlation=c + 4),  # glue: in the envelope only
        _x("draft_extend", "user_annotation", 3000, 1000),
        _x("cudaLaunchKernel", "cuda_runtime", 3100, 5, correlation=c + 5),
        _x("draft_gemm", "kernel", 210, draft_us, tid=7, correlation=c + 1),
        _x("verify_gemm", "kernel", 1110, verify_us, tid=7, correlation=c + 2),
        _x("verify_tree_greedy_kernel", "kernel", 2110, sampling_us, tid=7, correlation=c + 3),
        _x("elementwise_kernel", "kernel", 2210, glue_us, tid=7, correlation=c + 4),
        _x("extend_gemm", "kernel", 3110, extend_us, tid=7, correlation=c + 5),
    ]


def test_report_pins_the_percentages_and_launches_per_token_exactly(tmp_path):
    """Two ranks of known kernel times: the stored report sums them (as the kernel categories are summed)
    and gives exactly verify 58 %, draft 27 %, draft extend 5 %, sampling 4 %, glue 6 % of 1000 µs."""
    from dynocell.engine.spec_phases import phase_report

    r0 = _write(tmp_path / "w-TP-0.trace.json.gz", _rank_trace(300, 150, 20, 10, 20))
    r1 = _write(tmp_path / "w-TP-1.trace.json.gz", _rank_trace(280, 120, 30, 30, 40))
    rep = phase_report([r0, r1], engine="sglang", speculative=True, output_tokens=4)
    assert rep["state"] == "split" and rep["source"] == "gpu" and rep["reason"] is None
    assert rep["total_ms"] == pytest.approx(1.0)
    by = {p["phase"]: p for p in rep["phases"]}
    assert [p["phase"] for p in rep["phases"]] == ["draft_forward", "draft_extend", "target_verify", "sampling", "glue"]
    assert {k: round(v["pct"], 9) for k, v in by.items()} == {
        "target_verify": 58.0, "draft_forward": 27.0, "draft_extend": 5.0, "sampling": 4.0, "glue": 6.0}
    assert {k: v["launches"] for k, v in by.items()} == dict.fromkeys(by, 2)  # one kernel per phase per rank
    assert {k: v["launches_per_token"] for k, v in by.items()} == dict.fromkeys(by, 0.5)
    assert by["target_verify"]["ranges"] == 2 and by["glue"]["ranges"] == 0
    assert [r["rank"] for r in rep["ranks"]] == [0, 1]
    r0_pct = {p["phase"]: round(p["pct"], 9) for p in rep["ranks"][0]["phases"]}
    assert r0_pct == {"draft_forward": 30.0, "draft_extend": 4.0, "target_verify": 60.0, "sampling": 2.0,
                      "glue": 4.0}


def test_plain_run_gets_no_report_and_a_speculative_one_without_ranges_says_why(tmp_path):
    from dynocell.engine.spec_phases import phase_report

    plain = _write(tmp_path / "p.trace.json.gz", [
        _x("cudaLaunchKernel", "cuda_runtime", 10, 5, correlation=1), _x("gemm", "kernel", 20, 50, correlation=1)])
    assert phase_report([plain], engine="sglang", speculative=False) is None
    assert phase_report([plain], engine=None, speculative=None) is None  # an import of unknown origin
    rep = phase_report([plain], engine="sglang", speculative=True)
    assert rep["state"] == "unavailable" and rep["phases"] == []
    assert "none of the speculative-phase ranges" in rep["reason"] and "TARGET_VERIFY" in rep["reason"]


H200 = Path(__file__).parent / "data" / "sglang-0.5.17" / "dynocell-h200"
VLLM = Path(__file__).parent / "data" / "vllm-0.26.0" / "dynocell-h200"


def _boot_of(data: Path, config: str) -> dict:
    boots = json.loads((data / "boots.json").read_text())
    return [b for b in boots if b["config"] == config and b.get("traces") and b["run_state"] == "completed"][-1]


def test_real_sglang_standalone_trace_has_the_eagle_worker_ranges():
    """SGLang 0.5.17 runs STANDALONE through the EAGLE worker: the H200 trace of h200-standalone-pair
    carries draft / draft_extend / step[TARGET_VERIFY] ranges, one draft and one verify per step."""
    from dynocell.engine.spec_phases import phase_report

    b = _boot_of(H200, "h200-standalone-pair")
    rep = phase_report([H200 / "boots" / b["boot_id"] / b["traces"][0]], engine="sglang", speculative=True,
                       output_tokens=64)
    assert rep["state"] == "split" and rep["source"] == "gpu"
    by = {p["phase"]: p for p in rep["phases"]}
    assert by["target_verify"]["ranges"] == by["draft_forward"]["ranges"] > 20
    assert by["draft_extend"]["ranges"] >= by["target_verify"]["ranges"]
    for ph in ("draft_forward", "draft_extend", "target_verify", "sampling", "glue"):
        assert by[ph]["ms"] > 0 and by[ph]["launches"] > 0, ph
    assert by["target_verify"]["pct"] == max(p["pct"] for p in by.values() if p["pct"] is not None)
    assert sum(p["pct"] for p in by.values() if p["pct"] is not None) == pytest.approx(100.0)
    assert by["outside"]["pct"] is None


def test_real_plain_sglang_trace_has_no_phase_ranges():
    from dynocell.engine.spec_phases import phase_report

    b = _boot_of(H200, "h200-plain-graph")
    assert phase_report([H200 / "boots" / b["boot_id"] / b["traces"][0]], engine="sglang",
                        speculative=False) is None


@pytest.mark.parametrize("config", ["h200-vllm-draft-graph", "h200-vllm-draft-eager", "h200-vllm-ngram"])
def test_real_vllm_traces_carry_no_phase_ranges_and_the_report_says_why(config):
    """vLLM 0.26.0's traces name one range per engine step only: unavailable, with vLLM's reason — also
    for a trace imported without a config (recognised by that range)."""
    from dynocell.engine.spec_phases import phase_report, split_phases

    boots = json.loads((VLLM / "boots.json").read_text())
    trace = next(t for b in boots if b["config"] == config
                 for t in sorted((VLLM / "boots" / b["boot_id"]).glob("rank0.*.pt.trace.json.gz")))
    assert split_phases(trace).ranges == {} and split_phases(trace).engines["vllm"] > 10
    for engine, spec in (("vllm", True), (None, None)):
        rep = phase_report([trace], engine=engine, speculative=spec)
        assert rep["state"] == "unavailable" and rep["phases"] == []
        assert rep["reason"].startswith("vLLM 0.26.0's torch-profiler trace names one range per engine step")
