"""vLLM profiling (issue 21 item 6): ``--profiler-config`` fixes the trace directory at launch,
``POST /start_profile`` / ``/stop_profile`` take no directory, traces are ``rank<N>.<id>.pt.trace.json.gz``;
the trace split and launches per token on the real vLLM 0.26.0 H200 traces (graph and eager)."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from dynocell.engine.adapters import vllm_profiler_config
from dynocell.engine.trace import analyze_ranks, per_token, rank_of
from dynocell.runbooks.boots import engine_profile_dir
from dynocell.runbooks.profiles import _wait_for_traces

DATA = Path(__file__).parent / "data" / "vllm-0.26.0"
GRAPH = next(DATA.glob("A_graph.rank0.*.pt.trace.json.gz"))
EAGER = next(DATA.glob("B_eager.rank0.*.pt.trace.json.gz"))


def test_rank_from_vllm_trace_names():
    assert rank_of(GRAPH) == 0 and rank_of("rank3.1796111742702098289.pt.trace.json.gz") == 3
    assert rank_of("x-TP-1.trace.json.gz") == 1 and rank_of("profiler_out_0.txt") is None


def test_split_and_launches_per_token_on_the_real_graph_and_eager_traces():
    graph, eager = analyze_ranks([GRAPH]).combined, analyze_ranks([EAGER]).combined
    assert (graph.source, eager.source) == ("kernel", "kernel")
    assert graph.graph_launches == 106 and eager.graph_launches == 0  # VLLM.md "Traces"
    for split in (graph, eager):
        cats = {c.category: c for c in split.categories}
        assert cats["gemm"].ms > 0 and cats["attention"].ms > 0
        assert abs(sum(c.pct for c in split.categories) - 100.0) < 0.5
    names = " ".join(k.name for k in eager.top)
    assert "kernel_unified_attention" in " ".join(k.name for k in graph.top + eager.top)
    assert "rotary_embedding_kernel" in names or "act_and_mul_kernel" in names  # vLLM's own eager kernels
    costs = per_token(graph, 256)
    assert costs["launches_per_token"] == pytest.approx(graph.launches / 256)


def test_vllm_boots_get_a_fixed_profile_dir(tmp_path):
    from dynocell.engine.config import parse_config

    v = parse_config('engine = "vllm"\nmodel_path = "Qwen/Qwen3-8B"\n', "t")
    s = parse_config('engine = "sglang"\nmodel_path = "Qwen/Qwen3-8B"\n', "t")
    assert engine_profile_dir(v, tmp_path) == tmp_path / "profiles" / "vllm"
    assert engine_profile_dir(s, tmp_path) is None


def test_reference_engine_writes_vllm_trace_layout_and_windows_are_told_apart(model_pair, tmp_path):
    """The real reference engine with vLLM's --profiler-config: two windows, two files; the second
    window sees only its own (earlier files excluded), named and split like vLLM's."""
    from dynocell.engine.reference.launch import start_engine

    prof = tmp_path / "profiles" / "vllm"
    eng = start_engine(model_pair.target, ["--served-model-name", "m", "--profiler-config",
                                           json.dumps(vllm_profiler_config(str(prof)))], tmp_path / "s.log")
    try:
        seen: frozenset[Path] = frozenset()
        for _ in range(2):
            assert httpx.post(eng.url + "/start_profile", timeout=60).status_code == 200
            r = httpx.post(eng.url + "/v1/completions", json={"model": "m", "prompt": "def ", "max_tokens": 8,
                                                               "temperature": 0}, timeout=60)
            assert r.status_code == 200
            assert httpx.post(eng.url + "/stop_profile", timeout=60).status_code == 200
            new = _wait_for_traces(prof, 30.0, seen)
            assert len(new) == 1 and rank_of(new[0]) == 0 and new[0].name.endswith(".pt.trace.json.gz")
            assert analyze_ranks(new).ranks[0].rank == 0
            seen = seen | set(new)
        assert len(list(prof.glob("rank0.*.pt.trace.json.gz"))) == 2
    finally:
        eng.stop()
