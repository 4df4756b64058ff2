"""Trace split of a torch-profiler CPU trace made here and now (the installed torch's export format).

Kept out of the mutation run's test map (benchmarks/mutation.py): profiling in a process that
mutmut forks after torch started its thread pools can hang; the stored real trace
(tests/data/traces/torch-cpu.trace.json.gz) pins the numbers there."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from dynocell.engine.trace import _read_fast, analyze_trace


@pytest.fixture(scope="session")
def cpu_profile_trace(tmp_path_factory) -> Path:
    """A real torch-profiler CPU trace of a tiny matmul loop, exported and gzipped."""
    torch = pytest.importorskip("torch")
    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    lin = torch.nn.Linear(64, 64)
    x = torch.randn(8, 64)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(30):
            y = torch.relu(lin(x))
            y = torch.nn.functional.layer_norm(y, (64,))
            y = torch.softmax(y @ y.T, dim=-1)
    d = tmp_path_factory.mktemp("torch-trace")
    raw = d / "cpu.trace.json"
    prof.export_chrome_trace(str(raw))
    gz = d / "cpu.trace.json.gz"
    gz.write_bytes(gzip.compress(raw.read_bytes()))
    return gz


def test_fresh_torch_cpu_trace(cpu_profile_trace):
    s = analyze_trace(cpu_profile_trace)
    assert s.source == "cpu_op"
    assert s.category("gemm").ms > 0 and s.category("gemm").launches >= 60  # linear/addmm/matmul/mm
    assert s.category("norm").ms > 0 and s.category("attention").ms > 0 and s.category("elementwise").ms > 0
    assert s.graph_launches == 0
    assert all(k.source == "cpu_op" for k in s.top)
    # Self time: the categories sum to the CPU self time, never more than the busy window allows.
    assert s.device_ms <= s.window_ms * 1.0001 + 1e-6
    raw = json.loads(gzip.decompress(cpu_profile_trace.read_bytes()))
    inclusive = sum(e["dur"] for e in raw["traceEvents"] if e.get("cat") == "cpu_op") / 1000
    assert s.device_ms < inclusive  # nested ops are not double counted
    # CPU mode (self times over per-thread stacks) alike from both readers; the fast one takes it.
    _read_fast(cpu_profile_trace)
    assert analyze_trace(cpu_profile_trace, top=10**6).as_dict() == \
        analyze_trace(cpu_profile_trace, top=10**6, fast=False).as_dict()
