"""Issue 24 item 7: a speculative step's phase split (draft forward, draft extend, target verify,
sampling / accept, glue) from a torch-profiler trace's CPU-side ranges — SGLang 0.5.17's range names
(``spec_stage_span("draft")``, ``spec_stage_span("draft_extend")``, ``step[TARGET_VERIFY bs=N]``,
``scheduler.run_batch``), which the reference engine emits too."""

from __future__ import annotations

import gzip
import json

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
