"""Break-even of speculative decoding on worked values: the run's break-even step and the doctor's ``no_net_win``.

Speculation pays while a speculative (verify) step costs less than τ plain
steps: ``budget = τ × plain step``, ``pays = spec step < budget``,
``speedup ≈ budget / spec step`` (DESIGN.md). The worked case is the recorded
real run in ``tests/data/stores/real-run`` (reference engine, STANDALONE, 3
steps): τ 1.7597, speculative step 18.5637 ms, plain step 5.2648 ms →
budget 1.7597 × 5.2648 = 9.2646 ms < 18.5637 ms: it does not pay
(speedup 9.2646 / 18.5637 = 0.499, margin −50.1 %).

If the break-even step grows inputs (a noise band, the plain step's source),
keep these numbers: they are the arithmetic, not the plumbing.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from dynocell.runbooks.doctor import diagnose_inputs, inputs_from_dict

REAL_RUN = Path(__file__).parent / "data" / "stores" / "real-run"
RUN_ID = "0110d9b7f46b"  # the default `dynocell run` of the recorded store


@pytest.fixture
def real_run_job(tmp_path, monkeypatch):
    """A run job over a private copy of the recorded real-run store (the copy's rows may change)."""
    from dynocell.runbooks import run as run_mod
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    spec = importlib.util.spec_from_file_location("store_record", REAL_RUN.parent / "record.py")
    rec = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rec)
    rec.install(REAL_RUN, tmp_path)
    monkeypatch.setenv("DYNOCELL_HOME", str(tmp_path))
    cell = open_cell(load_settings())
    return run_mod, run_mod._Job(cell, RUN_ID, lambda *a: None)


def test_breakeven_step_on_the_recorded_real_run(real_run_job):
    run_mod, job = real_run_job
    d: dict = {}
    run_mod._breakeven(job, 5.2648, d)
    assert d["tau"] == pytest.approx(1.7597, abs=1e-4)
    assert d["spec_step_ms"] == pytest.approx(18.5637, abs=1e-4)
    assert d["plain_step_ms"] == 5.2648
    assert d["budget_ms"] == pytest.approx(9.2646, abs=2e-4)  # τ × plain, not plain / τ (2.99)
    assert d["pays"] is False
    assert d["margin"] == pytest.approx(-0.5009, abs=1e-4)
    assert d["speedup_estimate"] == pytest.approx(0.499, abs=1e-3)
    from dynocell.db import runs as db_runs

    assert db_runs.get_run(job.cell.store, RUN_ID)["breakeven"] == d  # written to the run row as computed


def test_breakeven_pays_when_the_budget_exceeds_the_spec_step(real_run_job):
    """Same τ and speculative step, a slower plain step of 12 ms: budget 21.1164 ms > 18.5637 ms pays."""
    run_mod, job = real_run_job
    d: dict = {}
    run_mod._breakeven(job, 12.0, d)
    assert d["budget_ms"] == pytest.approx(21.1164, abs=2e-4)
    assert d["pays"] is True
    assert d["margin"] == pytest.approx(0.1375, abs=1e-4)
    assert d["speedup_estimate"] == pytest.approx(1.138, abs=1e-3)


def test_doctor_no_net_win_worked_values():
    """τ = 1.76 (histogram 50/30/14/6 of 0..3 accepted drafts) with the real run's step times.

    speedup = τ × plain / spec = 1.76 × 5.2648 / 18.5637 = 0.49915; a verify step costs
    τ / speedup = 18.5637 / 5.2648 = 3.5260 plain steps, so τ must exceed 3.5260 to pay.
    """
    inputs = {"curves": [{"text_class": "code", "histogram": [50, 30, 14, 6], "prompt_tokens": 128}],
              "spec_step_ms": 18.5637, "plain_step_ms": 5.2648}
    f = next(f for f in diagnose_inputs(inputs_from_dict(inputs)) if f.rule == "no_net_win")
    ev = f.evidence
    assert ev["tau"] == pytest.approx(1.76, abs=1e-4)
    assert ev["speedup"] == pytest.approx(0.49915, abs=1e-4)
    assert ev["step_cost_ratio"] == pytest.approx(3.5260, abs=1e-4)
    assert ev["breakeven_tau"] == pytest.approx(3.5260, abs=1e-4)
    assert ev["margin"] == pytest.approx(-0.50085, abs=1e-4)
    assert "a verify step costs 3.53 plain steps" in f.message
    # measured throughput wins over the step-time estimate: 900 vs 1000 tok/s → speedup 0.9, cost τ / 0.9
    inputs.update(spec_decode_tok_s=900.0, plain_decode_tok_s=1000.0)
    ev = next(f for f in diagnose_inputs(inputs_from_dict(inputs)) if f.rule == "no_net_win").evidence
    assert ev["speedup"] == pytest.approx(0.9) and ev["step_cost_ratio"] == pytest.approx(1.76 / 0.9, abs=1e-4)
    # a speculative step that costs less than τ plain steps is a net win: no finding
    inputs.update(spec_decode_tok_s=None, plain_decode_tok_s=None, spec_step_ms=8.0)
    assert "no_net_win" not in [f.rule for f in diagnose_inputs(inputs_from_dict(inputs))]
