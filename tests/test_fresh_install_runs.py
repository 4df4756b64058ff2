"""Issue 33, the fresh-install false regression: two runs of `tiny` minutes apart on one unchanged config must
give no warn/error finding that compares the two (on a fresh install the doctor said `baseline_regression`
[error] "… bisect the builds", twice), and each report must show the temperature and the sample size.

Real parts: the `dynocell` console script, the reference engine, a private store. `no_net_win` compares one run
with its own plain twin, not the two runs: on the reference engine (CPU) a verify step can really cost several
plain steps; it may only fire when the break-even's interval excludes 0 (a decided "does NOT pay")."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

#: rules that compare this run with another measurement (doctor_compare): none may warn on an unchanged config
COMPARING = {"baseline_regression", "confounded_comparison", "tau_up_throughput_down", "concurrency_loss"}


def _dynocell(env, *args):
    proc = subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, (args, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc


def test_two_runs_of_tiny_give_no_false_regression(cli_env, model_pair):
    env = dict(cli_env, COLUMNS="200")
    for _ in range(2):
        _dynocell(env, "run", "examples/tiny.toml", "--no-profile")
    runs = [r for r in json.loads(_dynocell(env, "runs", "--json").stdout) if r["kind"] == "run"]
    assert len(runs) == 2
    for r in runs:
        shown = json.loads(_dynocell(env, "show", r["id"], "--json").stdout)
        findings = shown.get("findings") or []
        loud = [f for f in findings if f["severity"] in ("warn", "error")]
        assert not [f for f in loud if f["rule"] in COMPARING], loud
        be = shown["run"].get("breakeven") or {}
        for f in loud:
            assert f["rule"] == "no_net_win", loud
            assert be.get("verdict") == "does NOT pay" and be["interval"][1] < 0, (f, be)
        ctx = shown["run"]["options"]["context"]
        assert ctx["workload"]["temperature"] is not None and ctx["workload"]["requests_per_class"] >= 1
        assert ctx["contention"]["load_per_core"] is not None
        j = shown["judgment"]
        assert j["tau"]["n"] >= 2 and j["tau"]["lo"] <= j["tau"]["value"] <= j["tau"]["hi"]
        report = _dynocell(env, "show", r["id"]).stdout
        assert "temperature" in report and "requests per class" in report and "n=" in report
