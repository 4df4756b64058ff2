"""Issue 22, false alarms: the doctor on every healthy run shipped with the project.

Real stores: ``tests/data/stores/real-run`` (the reference engine: the embedded default and README's
``examples/tiny-ngram.toml``), ``tests/data/sglang-0.5.17/dynocell-h200`` (dynocell on SGLang 0.5.17,
one H200) and ``tests/data/sglang-0.5.17-tp2/dynocell-2xh200`` (TP 2). Real curves: the SGLang 0.5.17
``*.result.json`` probes and the trained pair, vLLM 0.26.0's ``/metrics`` scrapes and
``SpecDecoding metrics`` log lines. Each store is copied to a temp home and diagnosed through
:func:`dynocell.runbooks.doctor.diagnose` (the ``dynocell diagnose`` path); once through the CLI.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynocell.engine.acceptance import Curve, parse_vllm_spec_lines
from dynocell.engine.metrics import parse_metrics, vllm_position_curve
from dynocell.runbooks.doctor import ClassCurve, DoctorInputs, diagnose_inputs, inputs_from_dict

DATA = Path(__file__).parent / "data"
STORES = {
    "real-run": DATA / "stores" / "real-run",
    "h200": DATA / "sglang-0.5.17" / "dynocell-h200",
    "2xh200": DATA / "sglang-0.5.17-tp2" / "dynocell-2xh200",
    "vllm-sglang-h200": DATA / "vllm-0.26.0" / "dynocell-h200",
}
#: The findings that are TRUE on the shipped healthy runs, per run: speculation measured slower than
#: plain decoding (tiny models on an H200 / the CPU reference: the verify step costs more than τ plain
#: steps). Checked below against the numbers, not just listed.
TRUE_FINDINGS = {
    # h200-standalone-pair: 1822 vs 2279 tok/s; 1.11× plain at c=1, 0.80× at c=4
    "2d8a3ffa5459": {"no_net_win", "concurrency_loss"},
    "ee7392c4a055": {"no_net_win"},   # h200-ngram: 948 vs 2279 tok/s
    # h200-standalone-pair-patched (no lossless twin; the plain config of the same model): 1.16× at c=1, 0.79× at c=4
    "716d5c0555aa": {"concurrency_loss"},
    # h200-standalone-self: verify 3.14 vs plain 1.37 ms; 1.24× plain at c=1, 0.78× at c=4
    "628b589d0b94": {"no_net_win", "concurrency_loss"},
    "e74f634ecd56": {"no_net_win"},   # h200-tp2-standalone-pair: verify 5.27 ms vs plain 2.68 ms, τ 1.81
    "0110d9b7f46b": {"no_net_win"},   # reference default: verify 18.56 ms vs plain 5.26 ms, τ 1.76
    # vllm-sglang-h200 (issue 21's session, tiny pair on one H200): speculation measured slower than plain
    # SGLang STANDALONE graph: 0.64× plain, verify 5.28 vs plain 1.98 ms; eager: 0.46× plain, verify 12.97 vs 5.54
    # ms. Both hold issue 22's measured mismatch (1 of 5 greedy prompts diverges from plain at token 17), stored
    # before margins were fetched: "margin unknown" is true there
    "85fbf2903cd6": {"no_net_win", "lossless_margin_unknown"},
    "1df9b0825866": {"no_net_win", "lossless_margin_unknown"},
    "6dc37772c577": {"no_net_win"},   # vLLM draft_model graph: 0.60× plain
    "11cee15fe6e2": {"no_net_win"},   # vLLM draft_model graph, greedy: 0.75× plain
    "1bed080560e5": {"no_net_win"},   # vLLM draft_model eager: 0.70× plain
    # vLLM ngram: 0.60× plain; and its SpecDecoding log lines vs the class window's counters disagree by 2.4 %
    # (repetition) and 4.9 % (chinese), over the 2 % the rule allows — measured, both figures are vLLM's own
    "d5d69a41de8d": {"no_net_win", "definitions_mismatch"},
}
NGRAM_RUN = "fb0e80c99600"  # real-run: examples/tiny-ngram.toml on the reference engine (τ 1.08–1.20, sampled)


def _open(name: str, home: Path):
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    shutil.copy2(STORES[name] / "dynocell.db", home / "dynocell.db")
    return open_cell(load_settings(home=home))


def _run_ids(cell) -> list[str]:
    from dynocell.db import runs as db_runs

    return [r.id for r in db_runs.list_runs(cell.store, states=("completed",), limit=500)]


@pytest.fixture(params=sorted(STORES))
def store(request, tmp_path):
    return _open(request.param, tmp_path)


def test_no_untrue_error_or_warning_on_any_shipped_healthy_run(store):
    from dynocell.runbooks.doctor import diagnose, render_findings

    ids = _run_ids(store)
    assert ids
    for rid in ids:
        fs = [f for f in diagnose(store, rid, store_findings=False) if f.severity in ("warn", "error")]
        assert {f.rule for f in fs} <= TRUE_FINDINGS.get(rid, set()), f"{rid}:\n{render_findings(fs)}"
        for f in fs:  # the true findings: speculation measured slower than plain (at c ≥ 4), outside any noise
            if f.rule == "concurrency_loss":
                assert f.evidence["speedup_c1"] > 1.05 and f.evidence["speedup"] < 0.85, render_findings([f])
            elif f.rule == "definitions_mismatch":
                assert f.evidence["text_class"] in ("repetition", "chinese"), render_findings([f])
            elif f.rule == "lossless_margin_unknown":
                assert f.evidence["first_position"] == 17 and "not fetched" in f.evidence["why"], render_findings([f])
            else:
                assert f.rule == "no_net_win" and f.evidence["speedup"] < 0.85, render_findings([f])


def test_no_untrue_finding_on_any_shipped_boot(store):
    """Boots too (issue 22's runtime rules read their logs): only a real failure's signature is reported."""
    from dynocell.db import boots as db_boots
    from dynocell.runbooks.doctor import _boot_runtime_findings, render_findings
    from dynocell.runbooks.knowledge import bundled_knowledge

    with store.store.session() as s:
        from sqlalchemy import text

        boots = [(b, st) for b, st in s.execute(text("select id, state from boots"))]
    assert boots
    for bid, state in boots:
        fs = _boot_runtime_findings(store, db_boots.get_boot(store.store, bid), bundled_knowledge())
        assert fs == [], f"{bid} ({state}):\n{render_findings(fs)}"


def test_ngram_reference_run_is_not_pinned_near_one(tmp_path):
    """Issue 22: τ 1.08–1.20 from README's NGRAM example is an n-gram proposer on fresh, sampled text."""
    from dynocell.runbooks.doctor import diagnose, inputs_for_run

    cell = _open("real-run", tmp_path)
    inp = inputs_for_run(cell, NGRAM_RUN)
    assert inp.knobs["speculative.algorithm"] == "NGRAM" and max(c.curve.tau for c in inp.curves) < 1.4
    assert [f.rule for f in diagnose(cell, NGRAM_RUN, store_findings=False)] == []


def test_diagnose_cli_on_the_ngram_run_says_no_findings(tmp_path, cli_env):
    _open("real-run", tmp_path)
    env = {**cli_env, "DYNOCELL_HOME": str(tmp_path), "COLUMNS": "200", "NO_COLOR": "1"}
    p = subprocess.run([sys.executable, "-m", "dynocell", "diagnose", NGRAM_RUN], env=env, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "pinned_near_one" not in p.stdout and "no findings" in p.stdout


def test_ngram_pinned_on_greedy_repetition_names_ngram_causes_only():
    rep = {"text_class": "repetition", "histogram": [180, 10, 5, 5]}
    base = {"curves": [{"text_class": "prose", "histogram": [190, 6, 2, 2]}, rep],
            "knobs": {"engine": "reference", "speculative.algorithm": "NGRAM", "speculative.num_draft_tokens": 4}}
    fs = [f for f in diagnose_inputs(inputs_from_dict({**base, "sampling": "greedy"})) if f.rule == "pinned_near_one"]
    assert len(fs) == 1 and fs[0].evidence["algorithm_family"] == "ngram"
    assert "prompt_lookup" in fs[0].message and "hidden state" not in fs[0].message
    # sampled, or no repetition class: nothing to say about an n-gram proposer
    assert "pinned_near_one" not in [f.rule for f in diagnose_inputs(inputs_from_dict({**base, "sampling": "sampled"}))]
    no_rep = {**base, "curves": base["curves"][:1], "sampling": "greedy"}
    assert "pinned_near_one" not in [f.rule for f in diagnose_inputs(inputs_from_dict(no_rep))]


def test_pinned_draft_model_names_no_hidden_state():
    d = {"curves": [{"text_class": c, "histogram": [190, 8, 2, 0]} for c in ("prose", "repetition")],
         "knobs": {"engine": "sglang", "speculative.algorithm": "STANDALONE", "speculative.num_draft_tokens": 4}}
    f = next(f for f in diagnose_inputs(inputs_from_dict(d)) if f.rule == "pinned_near_one")
    assert "hidden state" not in f.message and "draft model's own KV" in f.message
    eagle = {**d, "knobs": {**d["knobs"], "speculative.algorithm": "EAGLE3"}}
    f = next(f for f in diagnose_inputs(inputs_from_dict(eagle)) if f.rule == "pinned_near_one")
    assert "hidden states" in f.message


def test_garbage_output_judges_the_workload_tau_came_from(tmp_path):
    """Issue 22: the H200 runs' τ came from the sampled default workload; the plain twin's greedy goldens
    (a tiny byte model repeating a space) are not that workload's outputs."""
    from dynocell.runbooks.doctor import inputs_for_run

    cell = _open("h200", tmp_path)
    inp = inputs_for_run(cell, "628b589d0b94")
    assert inp.output_ids == [] and inp.output_texts == [] and inp.outputs_of is None
    # the same outputs fed as a greedy run's own are degenerate, and the rule still says so
    degenerate = {"curves": [{"text_class": "prose", "histogram": [0, 0, 0, 60]}], "output_ids": [[35] * 60] * 4,
                  "outputs_of": "plain twin greedy goldens"}
    f = next(f for f in diagnose_inputs(inputs_from_dict(degenerate)) if f.rule == "garbage_output")
    assert f.evidence["outputs_of"] == "plain twin greedy goldens" and "plain twin" in f.message


def test_no_net_win_names_experts_and_offload_only_where_they_exist():
    base = json.loads((DATA / "curves/public/report-004-mtp4-flat-decode.json").read_text())["inputs"]
    dense = {**base, "knobs": {"engine": "sglang", "speculative.algorithm": "STANDALONE", "parallel.tp_size": 1,
                               "parallel.ep_size": 1, "extra_args": []}}
    msg = next(f for f in diagnose_inputs(inputs_from_dict(dense)) if f.rule == "no_net_win").message
    assert "expert" not in msg and "offload" not in msg and "collectives" not in msg
    assert "drafter's own" in msg
    moe = {**base, "knobs": {"engine": "vllm", "speculative.algorithm": "MTP", "parallel.tp_size": 4,
                             "parallel.ep_size": 4, "extra_args": ["--enable-expert-offload"]}}
    msg = next(f for f in diagnose_inputs(inputs_from_dict(moe)) if f.rule == "no_net_win").message
    assert "expert routing and dispatch" in msg and "offload" in msg and "collectives over tp_size 4" in msg
    ngram = {**base, "knobs": {"engine": "sglang", "speculative.algorithm": "NGRAM"}}
    msg = next(f for f in diagnose_inputs(inputs_from_dict(ngram)) if f.rule == "no_net_win").message
    assert "drafter's own" not in msg


def _store_curves() -> list[tuple[str, Curve]]:
    import sqlite3

    out = []
    for name, d in STORES.items():
        con = sqlite3.connect(d / "dynocell.db")
        for rid, cls, h in con.execute("select run_id, text_class, histogram from acceptance_curves"):
            if h and json.loads(h):  # vLLM curves come from counters and carry no histogram to fit
                out.append((f"{name}:{rid}:{cls}", Curve.from_histogram(json.loads(h))))
        con.close()
    return out


def _result_curves() -> list[tuple[str, Curve]]:
    out: list[tuple[str, Curve]] = []

    def walk(o, name):
        if isinstance(o, dict):
            for k, v in o.items():
                if k == "spec_correct_drafts_histogram" and isinstance(v, list) and len(v) >= 3 and sum(v):
                    out.append((name, Curve.from_histogram(v)))
                else:
                    walk(v, f"{name}/{k}")
        elif isinstance(o, list):
            for i, v in enumerate(o):
                walk(v, f"{name}[{i}]")

    for f in sorted(DATA.glob("sglang-0.5.17*/**/*.result.json")):
        walk(json.loads(f.read_text()), f.name)
    return out


def _healthy_curves() -> list[tuple[str, Curve]]:
    """Every healthy per-position curve with D ≥ 2 shipped in tests/data, from every engine."""
    out = _store_curves() + _result_curves()
    for f in sorted((DATA / "vllm-0.26.0").glob("*.metrics.txt")):
        r = vllm_position_curve(parse_metrics(f.read_text()))
        if r:
            out.append((f.name, r[0]))
    for f in sorted((DATA / "vllm-0.26.0").glob("C_draft_graph.server.log")):
        out += [(f.name, s.curve) for s in parse_vllm_spec_lines(f.read_text().splitlines())]
    for f in sorted((DATA / "sglang-0.5.17/trained-pair").glob("reference-*.json")):
        for k, v in json.loads(f.read_text()).items():
            if isinstance(v, dict) and v.get("p"):
                out.append((f"{f.name}:{k}", Curve.from_positions(v["p"])))
    return [(n, c) for n, c in out if c.num_drafts >= 2]


def test_independence_quiet_on_every_engines_healthy_curves():
    curves = _healthy_curves()
    engines = {n.split(":")[0].split("/")[0].split(".")[0] for n, _ in curves}
    assert len(curves) >= 60 and {"real-run", "h200", "2xh200", "C_draft_graph", "E_ngram_graph"} <= engines
    inp = DoctorInputs(curves=[ClassCurve(n, c) for n, c in curves])
    loud = [f for f in diagnose_inputs(inp) if f.rule == "independence"]
    assert loud == [], [f.message for f in loud]


def test_independence_fires_on_a_shape_no_single_p_explains():
    # a_1 0.95, then a step down: p = 0.95 / 0.40 / 0.35 (N = 300) — no one p gives that.
    d = {"curves": [{"text_class": "prose", "p": [0.95, 0.40, 0.35], "steps": 300}]}
    f = next(f for f in diagnose_inputs(inputs_from_dict(d)) if f.rule == "independence")
    assert f.severity == "warn" and f.evidence["position"] == 1 and f.evidence["z"] > 3
    # the same numbers over 20 steps are noise
    d["curves"][0]["steps"] = 20
    assert "independence" not in [f.rule for f in diagnose_inputs(inputs_from_dict(d))]


def _engine_logs() -> list[Path]:
    logs = sorted(DATA.glob("sglang-0.5.17*/*.server.log")) + sorted(DATA.glob("sglang-0.5.17*/**/engine.log"))
    logs += sorted(DATA.glob("vllm-0.26.0/*.server.log")) + sorted(DATA.glob("stores/real-run/boots/*/engine.log"))
    return logs


def test_runtime_rules_quiet_on_every_shipped_engine_log():
    """Every real engine log shipped (SGLang 0.5.17 H200 / 2×H200, vLLM 0.26.0 incl. its failed boots, the
    reference engine): the runtime rules find nothing that did not happen."""
    from dynocell.engine.log_signs import scan_lines
    from dynocell.engine.supervisor import parse_log_line
    from dynocell.runbooks.doctor import load_thresholds, render_findings
    from dynocell.runbooks.doctor_runtime import RUNTIME_RULES

    logs = _engine_logs()
    assert len(logs) >= 20
    th = load_thresholds()
    for log in logs:
        lines = [parse_log_line(x)[1] if log.name == "engine.log" else x for x in log.read_text().splitlines()]
        signs = scan_lines(lines)
        for engine in ("sglang", "vllm"):
            inp = DoctorInputs(knobs={"engine": engine}, log=signs)
            fs = [f for fn in RUNTIME_RULES.values() for f in fn(inp, th)]
            assert {f.rule for f in fs} == TRUE_LOG_FINDINGS.get(log.name, set()), f"{log}:\n{render_findings(fs)}"


#: Run E of SGLang 0.5.17 (STANDALONE + CUDA graphs) started a profile window that wrote no trace
#: (tests/data/sglang-0.5.17/README.md; runbook entry profile-standalone-graph-no-trace): a true finding.
TRUE_LOG_FINDINGS = {"E.server.log": {"profile_no_trace"}}


def test_run_e_profile_window_without_trace_links_its_entry():
    from dynocell.engine.log_signs import scan_lines

    signs = scan_lines((DATA / "sglang-0.5.17/E.server.log").read_text().splitlines())
    knobs = {"engine": "sglang", "speculative.algorithm": "STANDALONE", "cuda_graph.disable": False}
    f = next(f for f in diagnose_inputs(DoctorInputs(knobs=knobs, log=signs)) if f.rule == "profile_no_trace")
    assert f.evidence["traces"] == 0 and f.evidence["windows"] >= 1
    assert "profile-standalone-graph-no-trace" in f.entries


def test_no_net_win_names_experts_for_an_moe_model_by_name():
    base = json.loads((DATA / "curves/public/report-004-mtp4-flat-decode.json").read_text())["inputs"]
    for model, moe in (("Qwen/Qwen3-30B-A3B", True), ("Qwen/Qwen3-8B", False), ("deepseek-ai/DeepSeek-R1", True)):
        d = {**base, "knobs": {"engine": "sglang", "model_path": model, "speculative.algorithm": "EAGLE3"}}
        msg = next(f for f in diagnose_inputs(inputs_from_dict(d)) if f.rule == "no_net_win").message
        assert ("an MoE model" in msg) is moe, (model, msg)


def test_profile_window_cut_by_the_excerpt_is_not_judged():
    """A log that ends right inside a profile window says nothing about the trace (run E's own first lines)."""
    from dynocell.engine.log_signs import scan_lines

    lines = (DATA / "sglang-0.5.17/E.server.log").read_text().splitlines()
    start = next(i for i, x in enumerate(lines) if "Profiling starts" in x)
    signs = scan_lines(lines[:start + 2])
    assert "profile_no_trace" not in [f.rule for f in diagnose_inputs(DoctorInputs(knobs={"engine": "sglang"},
                                                                                   log=signs))]


@pytest.mark.parametrize(("error", "judged"), [
    ("/start_profile answered 400: output_dir '/d/boots/b2/profiles/r' is outside the profile directory "
     "/d/boots/b1/profiles given at launch", False),
    ("no trace file appeared in /d/boots/b1/profiles/r within 60 s", True),
])
def test_a_profile_window_the_engine_refused_owes_no_trace(settings, error, judged):
    """`dynocell run --boot` on an engine attached twice: its /start_profile answered 400 (the profile
    directory of the other boot) and the doctor said "1 profile window(s) started and no trace was
    written" — no window had started (newcomer pass). A window that opened and wrote nothing is still judged.
    Real SQLite store; the error texts are the profile step's own."""
    from dynocell.db import runs as db_runs
    from dynocell.runbooks import hosts
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config
    from dynocell.runbooks.doctor import inputs_for_run

    cell = open_cell(settings)
    config_hash = add_config(cell, Path(__file__).resolve().parents[1] / "examples" / "tiny.toml", None).hash
    db_runs.create_run(cell.store, id="r1", kind="run", config_hash=config_hash, state="failed",
                       host_id=hosts.this_host_id(cell))
    prof = db_runs.create_profile(cell.store, run_id="r1", state="running", host_id=hosts.this_host_id(cell))
    db_runs.finish_profile(cell.store, prof.id, state="failed", error=error)
    rules = [f.rule for f in diagnose_inputs(inputs_for_run(cell, "r1"))]
    assert ("profile_no_trace" in rules) is judged
