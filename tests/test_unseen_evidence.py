"""Diagnosis on evidence dynocell has never seen (issue 35, the cases that waited for a capability).

Each test feeds a real public excerpt (its source URL beside it), or the thread's numbers in the
shape the tool writes, through the real import procedures into a real SQLite store, then asks the
doctor. No config is written by hand: the evidence alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


def _diagnose(cell, ref: str) -> dict[str, dict]:
    from dynocell.runbooks.doctor import diagnose

    return {f.rule: f.evidence for f in diagnose(cell, ref, store_findings=False)}


def _bench_file(tmp_path: Path, accept_length: float, name: str = "bench.jsonl") -> Path:
    """One sglang.bench_serving result line (the keys it writes; a plain server writes accept_length null)."""
    p = tmp_path / name
    p.write_text(json.dumps({"backend": "sglang", "max_concurrency": 1, "request_rate": "inf",
                             "dataset_name": "sharegpt", "completed": 80, "output_throughput": 95.0,
                             "mean_ttft_ms": 41.0, "mean_e2e_latency_ms": 2650.0,
                             "accept_length": accept_length}) + "\n")
    return p


# ---------------------------------------------------------------- τ near one, the draft count unknown

@pytest.mark.parametrize("tau, source", [
    (1.00, "https://github.com/sgl-project/sglang/pull/21272"),  # EAGLE algorithm, EAGLE-3 head: accept_length 1.00
    (1.02, "https://github.com/sgl-project/SpecForge/issues/455"),  # a trained DFlash draft served at 1.02
])
def test_bench_accept_length_near_one_is_pinned_whatever_k(cell, tmp_path, tau, source):
    """A bench file of a server dynocell never saw says τ but not k: τ − 1 is the drafts accepted per
    verify step at any k, so ~0 is the drafter contributing nothing."""
    from dynocell.runbooks.evidence import import_bench

    res = import_bench(cell, _bench_file(tmp_path, tau))
    found = _diagnose(cell, res["run_id"])
    assert source.startswith("https://")
    assert "pinned_near_one" in found
    ev = found["pinned_near_one"]
    assert ev["num_drafts"] is None and ev["max_tau"] == tau and ev["source"] == "sglang-bench-serving accept_length"


def test_bench_accept_length_well_above_one_with_k_unknown_is_not_judged(cell, tmp_path):
    """τ 1.30 with k unknown could be a fair drafter at k = 1 (30 % accepted): no verdict without k.
    The number is the SGLang 0.5.17 NGRAM run's sampled fresh-text τ band (doctor_thresholds.toml)."""
    from dynocell.runbooks.evidence import import_bench

    res = import_bench(cell, _bench_file(tmp_path, 1.30))
    assert "pinned_near_one" not in _diagnose(cell, res["run_id"])
