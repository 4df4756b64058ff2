"""Issue 33: two imports of one config that measured different workloads (short vs long prompts) are not "the
same config, the build changed": the doctor gives no build-regression finding and names what differs."""

from __future__ import annotations

import json
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
EXAMPLE = str(REPO / "examples" / "tiny.toml")


def _bench_file(path: Path, input_per_request: int, accept_length: float) -> Path:
    """An SGLang bench_serving result line (the tool's own field names) of 20 requests."""
    n = 20
    path.write_text(json.dumps({
        "backend": "sglang", "dataset_name": "random", "request_rate": "inf", "max_concurrency": 4,
        "duration": 10.0, "completed": n, "total_input_tokens": n * input_per_request, "total_output_tokens": n * 64,
        "request_throughput": 2.0, "input_throughput": 2.0 * input_per_request, "output_throughput": 128.0,
        "mean_e2e_latency_ms": 2000.0, "median_e2e_latency_ms": 2000.0, "mean_ttft_ms": 100.0,
        "median_ttft_ms": 100.0, "p99_ttft_ms": 150.0, "mean_itl_ms": 30.0, "median_itl_ms": 30.0,
        "p99_itl_ms": 40.0, "accept_length": accept_length}) + "\n")
    return path


def test_imports_of_two_workloads_name_the_difference(settings, tmp_path):
    from dynocell.runbooks import doctor
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.evidence import import_bench

    cell = open_cell(settings)
    short = import_bench(cell, _bench_file(tmp_path / "short.jsonl", 128, 2.6), config_ref=EXAMPLE)
    long = import_bench(cell, _bench_file(tmp_path / "long.jsonl", 4096, 1.8), config_ref=EXAMPLE)
    assert short["config_hash"] == long["config_hash"]
    findings = doctor.diagnose(cell, long["run_id"], store_findings=False)
    base = [f for f in findings if f.rule == "baseline_regression"]
    assert base and all(f.severity == "info" for f in base), findings
    assert "input length 4096 vs 128 tokens per request" in base[0].message, base[0].message
    assert "no build change is inferred" in base[0].message and "bisect the builds" not in base[0].message
