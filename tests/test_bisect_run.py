"""`dynocell bisect run` for real: the reference engine (CPU) on GOOD, BAD and each step, with the run
options passed to every run (issue 24: the per-component bisect ran this way on the H200 — its
result is replayed in tests/test_h200_eagle.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dynocell.cli.app import build_app

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "tests" / "data" / "experiments" / "tiny-workload.toml"


@pytest.fixture()
def home(tmp_path, monkeypatch):
    from dynocell.cli.common import state

    monkeypatch.setenv("DYNOCELL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DYNOCELL_DATABASE_URL", raising=False)
    state.settings = state.cell = None
    yield tmp_path
    state.settings = state.cell = None


def _config(path: Path, steps: int, env: str = "") -> Path:
    text = (REPO / "examples" / "tiny.toml").read_text()
    text = text.replace("num_steps = 3", f"num_steps = {steps}").replace(
        "num_draft_tokens = 4                  # chain: 3 drafts + 1 bonus per verify step",
        f"num_draft_tokens = {steps + 1}")
    text = text.replace('[meta]\nname = "tiny"', f'{env}[meta]\nname = "{path.stem}"')
    path.write_text(text)
    return path


def test_bisect_run_finds_the_knob_on_the_reference_engine(home):
    """GOOD drafts 3 tokens, BAD 1 and sets an unrelated env variable: greedy τ drops with the draft
    depth alone, so the bisect (one-at-a-time, the workload and --no-lossless-check passed to every run,
    no profiler window) names the speculative knobs and not the env one, and records the experiment."""
    wl = home / "greedy-tiny.toml"
    wl.write_text(WORKLOAD.read_text().replace('seed = 7\n', 'seed = 7\ntemperature = 0.0\n'))
    good = _config(home / "good.toml", 3)
    bad = _config(home / "bad.toml", 1, env='[env]\nDYNOCELL_UNRELATED_KNOB = "1"\n\n')
    res = CliRunner().invoke(build_app(), ["bisect", "run", str(good), str(bad), "-w", str(wl),
                                           "--no-lossless-check", "--json"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout[res.stdout.index("{"):])
    runs = out["runs"]
    assert [r["label"] for r in runs[:2]] == ["good", "bad"] and all(r["state"] == "completed" for r in runs)
    assert runs[0]["tau"] > runs[1]["tau"] * 1.1
    assert out["plan"]["strategy"] == "one-at-a-time"
    resp = out["result"]["responsible"]
    assert resp and all(k.startswith("speculative.") for k in resp), resp
    assert not out["result"]["interaction"]
    # every run used the options given: the workload, no lossless check, no profiler window
    from dynocell.cli.common import state
    from dynocell.db import runs as db_runs

    for r in runs:
        row = db_runs.get_run(state.cell.store, r["run_id"])
        assert row.options["workload"] == str(wl)
        assert row.options["lossless"] is False and row.options["profile"] is False
