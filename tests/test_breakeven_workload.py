"""Break-even reuses a stored plain step only from the same workload (a newcomer found a verdict
flipped from −37 % to +217 % by a plain step measured on another workload's lengths)."""

from __future__ import annotations

from dynocell.db import configs as db_configs, runs as db_runs
from dynocell.engine.config import parse_config
from dynocell.runbooks.cell import open_cell
from dynocell.runbooks.run.breakeven_step import _plain_step_from_store


def _plain_run(cell, run_id: str, config_hash: str, workload_sha: str, tpot_ms: float) -> None:
    db_runs.create_run(cell.store, id=run_id, kind="run", config_hash=config_hash, state="completed", step="done")
    db_runs.update_run(cell.store, run_id, workload="w", workload_sha256=workload_sha)
    pct = {"p50": tpot_ms, "p90": tpot_ms, "p99": tpot_ms, "mean": tpot_ms, "n": 3}
    db_runs.add_bench(cell.store, run_id=run_id, concurrency=1, num_requests=3, num_failed=0, duration_s=1.0,
                      prompt_tokens=30, completion_tokens=30, request_throughput=3.0, output_tok_s=30.0,
                      total_tok_s=60.0, ttft_ms=pct, tpot_ms=pct, itl_ms=pct, e2e_ms=pct, extra={})


def test_plain_step_comes_from_the_same_workload(settings):
    cell = open_cell(settings)
    cfg = parse_config('engine = "reference"\nmodel_path = "dynocell:tiny"\n')
    db_configs.insert_config(cell.store, cfg.config_hash, cfg.engine, cfg.model_path, cfg.canonical_json(), "")
    _plain_run(cell, "aaaa00000001", cfg.config_hash, "a" * 64, 5.0)
    _plain_run(cell, "bbbb00000002", cfg.config_hash, "b" * 64, 20.0)
    assert _plain_step_from_store(cell, cfg.config_hash, "a" * 64)["step_ms"] == 5.0
    assert _plain_step_from_store(cell, cfg.config_hash, "b" * 64)["step_ms"] == 20.0
    assert _plain_step_from_store(cell, cfg.config_hash, "c" * 64) is None  # never measured on that workload
