"""Replay of the H200 repeats of 2026-12-02 (issue 33's H200 bullet): the same SGLang EAGLE graph config and
the same vLLM draft-model graph config, three runs each in one lease (tests/data/h200-repeats-2026-12-02, see
its README: real store, real engines, nothing edited). What dynocell says about them now:

- the break-even verdict is the same (or inconclusive) on all three runs of a set, and the report's margin
  intervals — widened by the spread between the runs of the experiment — overlap pairwise (the margins
  moved −44 % → −30 % between identical vLLM runs while each run's own interval was about ±8 %);
- no comparison rule (baseline_regression, tau_up_throughput_down, graph_vs_eager) raises a warning or an
  error between runs of one unchanged config: the cold first SGLang run's c=4 530 tok/s against 1,064 and
  1,117 once made ``tau_up_throughput_down`` fire on a τ that moved inside its interval;
- τ's report intervals overlap across the SGLang repeats, which carry each request's record.
"""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.h200_replay import cli, store_home
from tests.h200_replay import fresh_cli_state  # noqa: F401 - an autouse fixture

DATA = Path(__file__).parent / "data" / "h200-repeats-2026-12-02"
SETS = {"sglang-eagle-graph": ["b9bb8a06012e", "02f3dc2b36d3", "edb8ebac3e9d"],
        "vllm-draft-graph": ["2958b3ce9be0", "81f6ebe6deea", "507284c0fd1b"]}
COMPARING = {"baseline_regression", "tau_up_throughput_down", "graph_vs_eager", "confounded_comparison"}


@pytest.fixture()
def home(tmp_path, monkeypatch):
    return store_home(DATA, tmp_path, monkeypatch)


def _show(run_id: str) -> dict:
    return json.loads(cli("show", run_id, "--json"))


def _overlap(a: list[float], b: list[float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


@pytest.mark.parametrize("name", sorted(SETS))
def test_break_even_verdict_holds_and_intervals_overlap_across_repeats(home, name):
    shown = [_show(r) for r in SETS[name]]
    bes = [s["run"]["breakeven"] for s in shown]
    verdicts = {b["verdict"] for b in bes}
    assert verdicts <= {"does NOT pay", "within noise"} or verdicts <= {"pays", "within noise"}, verdicts
    for b in bes:  # the spread between the three runs is measured and named
        assert b["between_runs"]["runs"] == 3 and b["between_runs"]["sd_log"] > 0.05, b
    for (i, a), (j, b) in itertools.combinations(enumerate(bes), 2):
        assert _overlap(a["interval"], b["interval"]), (SETS[name][i], a["interval"], SETS[name][j], b["interval"])
    text = cli("show", SETS[name][0])
    assert "between 3 runs of this experiment" in text and "± 5.0 % noise" not in text


def test_without_the_repeats_one_run_says_its_spread_is_not_measured(home):
    """The stored interval of a run with no repeats is the within-run one, and the report says so."""
    import sqlite3

    con = sqlite3.connect(home / "dynocell.db")  # keep one vLLM run of the set: the other two and their rows go
    tables = [t for (t,) in con.execute("select name from sqlite_master where type = 'table'")]
    for rid in SETS["vllm-draft-graph"][1:]:
        for table in tables:
            if "run_id" in [c[1] for c in con.execute(f"pragma table_info({table})")]:
                con.execute(f"delete from {table} where run_id = ?", (rid,))
        con.execute("delete from runs where id = ?", (rid,))
    con.commit()
    con.close()
    out = cli("show", SETS["vllm-draft-graph"][0])
    assert "run-to-run spread not measured" in out
    be = _show(SETS["vllm-draft-graph"][0])["run"]["breakeven"]
    assert not be.get("between_runs")


@pytest.mark.parametrize("name", sorted(SETS))
def test_no_comparison_rule_fires_between_runs_of_one_config(home, name):
    for rid in SETS[name]:
        found = json.loads(cli("diagnose", rid, "--json"))
        loud = [f for f in found if f["rule"] in COMPARING and f["severity"] in ("warn", "error")]
        assert not loud, (rid, loud)


def test_tau_intervals_overlap_across_the_sglang_repeats(home):
    taus = [_show(r)["judgment"]["tau"] for r in SETS["sglang-eagle-graph"]]
    assert all(t and t["n"] == 15 for t in taus), taus
    for a, b in itertools.combinations(taus, 2):
        assert _overlap([a["lo"], a["hi"]], [b["lo"], b["hi"]]), (a, b)
