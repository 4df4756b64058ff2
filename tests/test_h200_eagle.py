"""Replay of the issue-24 session on one H200 (2026-12-01): SGLang 0.5.17 running the EAGLE, EAGLE-3 and
MiMo-MTP (NEXTN) heads that ship with dynocell, CUDA graphs and eager, a tree (top-k 4, 8 draft tokens),
greedy twins, and a per-component graph-vs-eager bisect over a planted verify-graph fault, plus the CPU
reference twins of the same configs (tests/data/sglang-0.5.17-eagle/dynocell-h200, see its README).
Everything reads that real store, its traces and its logs through the CLI."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests.h200_replay import cli as _cli, store_home, taus as _taus
from tests.h200_replay import fresh_cli_state  # noqa: F401 - an autouse fixture

DATA = Path(__file__).parent / "data" / "sglang-0.5.17-eagle" / "dynocell-h200"
BOOTS = json.loads((DATA / "boots.json").read_text())
GREEDY = "gpu/workloads/greedy.toml"
HEALTHY = ["h200-eagle-graph", "h200-eagle-eager", "h200-eagle3-graph", "h200-eagle3-eager", "h200-mtp-graph",
           "h200-mtp-eager", "h200-eagle-tree"]


def _run(config: str, workload: str = "default") -> str:
    return next(b["run_id"] for b in BOOTS if b["config"] == config and b["workload"] == workload)


@pytest.fixture()
def home(tmp_path, monkeypatch):
    return store_home(DATA, tmp_path, monkeypatch)


def _show(run_id: str) -> dict:
    return json.loads(_cli("show", run_id, "--json"))



def test_every_head_ran_graph_and_eager_on_sglang(home):
    """Each algorithm × graph/eager completed on SGLang with a curve for all five classes at num_steps = 3
    (D 3 on every class, the tree included: histograms padded to the config's depth), near-tie lossless
    against its plain twin, a break-even that says speculation does not pay on this tiny pair, and the
    phase split of its speculative step; CUDA graphs launched only where they were on."""
    for cfg in HEALTHY:
        s = _show(_run(cfg))
        assert s["run"]["state"] == "completed" and s["boot"]["boot"]["engine"] == "sglang"
        assert {c["text_class"] for c in s["curves"]} == {"arithmetic", "chinese", "code", "prose", "repetition"}
        assert all(c["num_drafts"] == 3 for c in s["curves"]), cfg
        assert s["run"]["lossless"] == "near-tie"
        assert s["run"]["breakeven"]["margin"] < 0
        graphs = s["profile"]["graph_launches"]
        assert (graphs > 0) == cfg.endswith(("graph", "tree")), (cfg, graphs)
        ph = s["profile"]["phases"]
        assert ph["state"] == "split" and ph["source"] == "gpu"
        pct = {p["phase"]: p["pct"] for p in ph["phases"] if p["pct"] is not None}
        assert set(pct) == {"draft_forward", "draft_extend", "target_verify", "sampling", "glue"}, pct
        assert sum(pct.values()) == pytest.approx(100.0, abs=0.5)
        assert all(p["launches_per_token"] > 0 for p in ph["phases"] if p["phase"] in pct)


def test_greedy_engine_equals_the_cpu_oracle_for_each_head(home):
    """The engine-vs-oracle yardstick holds for EAGLE, EAGLE-3 and MTP as it does for STANDALONE: SGLang
    fp16 on the H200 and the reference engine (CPU, fp32) give the same greedy τ per class within 1.5 %
    (their overall τ: 1.963 / 1.967, 1.761 / 1.764, 2.108 / 2.108), and the doctor raises no
    engine_vs_oracle finding."""
    for cfg in ("eagle-graph", "eagle3-graph", "mtp-graph"):
        gpu, cpu = _taus(_run(f"h200-{cfg}", GREEDY)), _taus(_run(f"cpu-oracle-{cfg}", GREEDY))
        assert set(gpu) == set(cpu)
        assert max(abs(gpu[c] - cpu[c]) / cpu[c] for c in cpu) < 0.015, (cfg, gpu, cpu)
        rules = {f["rule"] for f in json.loads(_cli("diagnose", _run(f"h200-{cfg}", GREEDY), "--json"))}
        assert "engine_vs_oracle" not in rules


def test_the_healthy_runs_raise_no_false_alarm(home):
    """Issue 22 on the EAGLE family: the heads decay with depth (EAGLE-3 was trained for its first step only;
    the tree spends few of its 8 draft tokens at depth 3), and the reference engine shows the same shape, so
    recursive_collapse and independence are info, not error/warn. The one warning left is true: on this tiny
    pair speculation does not pay (no_net_win)."""
    greedy = [(f"h200-{c}-graph", GREEDY) for c in ("eagle", "eagle3", "mtp")]
    for cfg, wl in [(c, "default") for c in HEALTHY] + greedy:
        fs = json.loads(_cli("diagnose", _run(cfg, wl), "--json"))
        loud = {f["rule"] for f in fs if f["severity"] in ("error", "warn")}
        assert loud <= {"no_net_win"}, (cfg, wl, loud)
    fs = json.loads(_cli("diagnose", _run("h200-eagle3-graph", GREEDY), "--json"))
    head = [f for f in fs if f["rule"] == "recursive_collapse"]
    assert head and all(f["severity"] == "info" and f["evidence"]["cause"] == "head" for f in head)


def test_the_per_component_bisect_names_the_verify_graph(home):
    """`dynocell bisect run` (gpu/configs/h200-eagle-bisect-{good,bad}.toml, patches spec-graph-switches +
    planted-verify-graph-fault): GOOD has the three component graphs off, BAD on; one step per component,
    and only the step that turns the target-verify graph back on loses τ — the planted fault's component."""
    res = json.loads((DATA / "runs" / "bisect-h200-eagle-bisect-good.json").read_text())
    assert res["plan"]["strategy"] == "one-at-a-time"
    assert res["result"]["responsible"] == ["env.DYNOCELL_DISABLE_TARGET_VERIFY_CUDA_GRAPH"]
    taus = {r["label"]: r["tau"] for r in res["runs"]}
    assert taus["bad"] < 0.9 * taus["good"] and taus["step 2"] < 0.9 * taus["good"]
    assert taus["step 1"] > 0.9 * taus["good"] and taus["step 3"] > 0.9 * taus["good"]
    steps = {s["index"]: s["tests"] for s in res["plan"]["steps"]}
    assert steps[2] == ["env.DYNOCELL_DISABLE_TARGET_VERIFY_CUDA_GRAPH"]
    # the runs are in the store, and the doctor names the fault's shape on BAD: position 2 never accepted
    for r in res["runs"]:
        assert _show(r["run_id"])["run"]["state"] == "completed"
    fs = json.loads(_cli("diagnose", res["bad_run"]["run_id"], "--json"))
    cliff = next(f for f in fs if f["rule"] == "position_cliff")
    assert cliff["severity"] == "error" and cliff["evidence"]["position"] == 2
    assert sum(cliff["evidence"]["accepted"].values()) <= 1 and sum(cliff["evidence"]["tries"].values()) > 200
    fs = json.loads(_cli("diagnose", res["good_run"]["run_id"], "--json"))
    assert "position_cliff" not in {f["rule"] for f in fs}


def test_phase_split_recomputed_from_the_real_traces(home):
    """The stored split (dynocell reanalyze, from the traces the session brought back) is what the trace
    reader gives now, and the target's verify is the largest phase of a chain step on the H200."""
    from dynocell.engine.spec_phases import split_phases

    for cfg in ("h200-eagle-graph", "h200-eagle-eager", "h200-mtp-graph"):
        b = next(x for x in BOOTS if x["config"] == cfg and x["workload"] == "default")
        trace = next((DATA / "boots" / b["boot_id"]).glob("*.trace.json*"))
        ms = split_phases(trace).ms
        spec = sum(v for k, v in ms.items() if k != "outside")
        assert max((k for k in ms if k != "outside"), key=ms.get) == "target_verify"
        stored = {p["phase"]: p["pct"] for p in _show(b["run_id"])["profile"]["phases"]["phases"] if p["pct"]}
        assert stored["target_verify"] == pytest.approx(100 * ms["target_verify"] / spec, abs=1.0)


def test_compare_prints_the_closing_table(home):
    """The closing note's table is `dynocell compare` over the seven runs: boot, c=1 / c=4 tok/s, τ and
    p1..p3 per class, lossless, break-even and the phase split, one column per run."""
    ids = [_run(c) for c in HEALTHY]
    data = json.loads(_cli("compare", *ids, "--json"))
    assert [t["config"] for t in data["table"]] == HEALTHY
    text = _cli("compare", *ids[:2])
    for row in ("boot ready s", "c=1 out tok/s", "c=4 out tok/s", "τ prose", "p1/p2/p3", "lossless", "break-even",
                "spec step phases", "verify %", "draft extend %"):
        assert row in text, row


EAGER = Path(__file__).parent / "data" / "sglang-0.5.17-eagle" / "dynocell-h200-eager"


def _taus_in(store: Path, run_id: str, monkeypatch, tmp_path) -> dict[str, float]:
    from dynocell.cli.common import state

    home = tmp_path / store.name
    home.mkdir(exist_ok=True)
    shutil.copy(store / "dynocell.db", home / "dynocell.db")
    monkeypatch.setenv("DYNOCELL_HOME", str(home))
    state.settings = state.cell = None
    return _taus(run_id)


def test_greedy_eager_equals_greedy_graph_bit_for_bit(tmp_path, monkeypatch):
    """The second lease (../dynocell-h200-eager): each head's greedy eager curve equals its greedy CUDA-graph
    curve from the first lease class by class, exactly — no graph-only divergence in any component."""
    eager = {"h200-eagle-eager": "0c91d2b7038b", "h200-mtp-eager": "e6c83de6bff7", "h200-eagle3-eager": "5340e7fda5b6"}
    for cfg, rid in eager.items():
        graph = _taus_in(DATA, _run(cfg.replace("eager", "graph"), GREEDY), monkeypatch, tmp_path)
        assert _taus_in(EAGER, rid, monkeypatch, tmp_path) == graph, cfg


def test_tree_eager_stored_its_phase_split_during_the_run(tmp_path, monkeypatch):
    """The profile step itself (not reanalyze) stored the tree's phase split on the H200, eager: 0 graph
    launches, draft the largest phase of a tree step (38 draft-forward launches per output token)."""
    from dynocell.cli.common import state

    shutil.copy(EAGER / "dynocell.db", tmp_path / "dynocell.db")
    monkeypatch.setenv("DYNOCELL_HOME", str(tmp_path))
    state.settings = state.cell = None
    s = _show("2c2b06f2ebe4")
    assert s["profile"]["graph_launches"] == 0 and s["run"]["lossless"] == "near-tie"
    pct = {p["phase"]: p["pct"] for p in s["profile"]["phases"]["phases"] if p["pct"]}
    assert max(pct, key=pct.get) == "draft_forward" and round(pct["draft_forward"]) == 36
    assert all(c["num_drafts"] == 3 for c in s["curves"])


def test_the_eager_store_raises_no_false_alarm(tmp_path, monkeypatch):
    """The eager twins have reference twins too (the twin of the graph config: CUDA-graph knobs mean nothing
    to the reference engine), so the heads' decay reads as the head's (info) and the only warning left is
    the true no_net_win of the tree run."""
    from dynocell.cli.common import state

    shutil.copy(EAGER / "dynocell.db", tmp_path / "dynocell.db")
    monkeypatch.setenv("DYNOCELL_HOME", str(tmp_path))
    state.settings = state.cell = None
    for rid in ("2c2b06f2ebe4", "0c91d2b7038b", "e6c83de6bff7", "5340e7fda5b6"):
        fs = json.loads(_cli("diagnose", rid, "--json"))
        assert {f["rule"] for f in fs if f["severity"] in ("error", "warn")} <= {"no_net_win"}, rid
        assert "engine_vs_oracle" not in {f["rule"] for f in fs}
    fs = json.loads(_cli("diagnose", "5340e7fda5b6", "--json"))
    assert [f["evidence"]["cause"] for f in fs if f["rule"] == "recursive_collapse"] == ["head"] * 3


def test_the_faulted_run_names_the_patch_and_env_as_candidates(home):
    """Against the EAGLE eager run, the planted-fault run differs in CUDA graphs and also in its build
    (patches) and env (the armed fault): the comparison names those as candidates, not only the graph knobs."""
    fs = json.loads(_cli("diagnose", "870590aed7db", "--json"))
    conf = [f for f in fs if f["rule"] == "confounded_comparison"]
    assert conf and all("patches" in f["evidence"]["build_env"] for f in conf)
    assert all("env.DYNOCELL_PLANT_VERIFY_GRAPH_FAULT" in f["evidence"]["candidates"] for f in conf)
