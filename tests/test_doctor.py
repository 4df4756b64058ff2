"""The acceptance doctor: each rule positive and negative, public-report shapes, log parsers, the store path."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dynocell.runbooks.doctor import (
    RULES, THRESHOLDS_PATH, diagnose_inputs, inputs_from_dict, load_thresholds, render_findings,
)
from dynocell.runbooks.knowledge import bundled_knowledge

DATA = Path(__file__).parent / "data"
CURVES = DATA / "curves"
RULE_FILES = sorted(p for p in CURVES.glob("*.json") if p.name != "healthy.json")


def _load(p: Path) -> dict:
    return json.loads(p.read_text())


def _cases(kind: str):
    for f in RULE_FILES:
        d = _load(f)
        for c in d[kind]:
            yield pytest.param(d["rule"], c["inputs"], id=f"{d['rule']}:{c['name']}")


def _positive_cases():
    """(rule, inputs, expected severity, expected evidence) of every positive case."""
    for f in RULE_FILES:
        d = _load(f)
        for c in d["positive"]:
            yield pytest.param(d["rule"], c["inputs"], c["severity"], c["evidence"], id=f"{d['rule']}:{c['name']}")


def test_every_rule_has_positive_and_negative_data():
    rules = {_load(f)["rule"]: _load(f) for f in RULE_FILES}
    assert set(rules) == set(RULES)
    for d in rules.values():
        assert d["positive"] and len(d["negative"]) >= 1


@pytest.mark.parametrize("rule,inputs,severity,evidence", list(_positive_cases()))
def test_rule_fires_on_positive(rule, inputs, severity, evidence):
    findings = [f for f in diagnose_inputs(inputs_from_dict(inputs)) if f.rule == rule]
    assert findings, f"{rule} did not fire"
    f = findings[0]
    assert f.severity == severity
    assert f.message
    # the evidence the case records (see tests/data/curves/README.md), value by value
    got = json.loads(json.dumps(f.evidence))
    assert set(got) == set(evidence), (set(got) ^ set(evidence))
    for key, want in evidence.items():
        if isinstance(want, float):
            assert got[key] == pytest.approx(want, abs=1e-4), key
        else:
            assert got[key] == want, key
    assert f.entries, f"{rule} links no runbook entry"
    assert all(slug in bundled_knowledge().entries for slug in f.entries)


@pytest.mark.parametrize("rule,inputs", list(_cases("negative")))
def test_rule_quiet_on_negative(rule, inputs):
    assert rule not in [f.rule for f in diagnose_inputs(inputs_from_dict(inputs))]


def test_healthy_reference_shaped_run_gives_no_finding():
    findings = diagnose_inputs(inputs_from_dict(_load(CURVES / "healthy.json")["inputs"]))
    assert findings == [], render_findings(findings)
    assert render_findings(findings) == "no findings"


def test_thresholds_each_have_a_comment():
    th = load_thresholds()
    assert set(RULES) <= set(th)
    for line in THRESHOLDS_PATH.read_text().splitlines():
        if re.match(r"^\s*\w+\s*=", line):
            assert "#" in line, f"threshold without a comment: {line}"


def test_high_tau_without_a_win_asks_for_the_step_cost_not_the_counters():
    """Issue 25: τ near D + 1 with no win is not by itself an accounting fault (report 004's case)."""
    fs = diagnose_inputs(inputs_from_dict(_load(CURVES / "public/flat-098-throughput-falls.json")["inputs"]))
    f = next(f for f in fs if f.rule == "no_net_win")
    assert f.evidence["accounting_suspect"] is False
    assert f.evidence["speedup"] < 1 and f.evidence["margin"] < 0
    assert "verify step" in f.message and "plain step" in f.message
    assert "high-acceptance-falling-throughput-accounting" in f.entries


def test_report_004_mtp4_flat_decode_is_step_cost():
    """τ 3.83 with D = 4 and decode 9.64 vs 10.0 tok/s (report 004): engine and curve agree, so no accounting alarm."""
    fs = diagnose_inputs(inputs_from_dict(_load(CURVES / "public/report-004-mtp4-flat-decode.json")["inputs"]))
    f = next(f for f in fs if f.rule == "no_net_win")
    assert f.evidence["accounting_suspect"] is False and f.evidence["num_drafts"] == 4
    assert f.evidence["breakeven_tau"] > f.evidence["tau"]
    assert "definitions_mismatch" not in [x.rule for x in fs]


def test_accounting_suspected_only_when_engine_and_histogram_disagree():
    d = _load(CURVES / "public/flat-098-throughput-falls.json")["inputs"]
    d = {**d, "curves": [{**d["curves"][0], "engine_tau": 4.9, "engine_source": "engine counters"},
                         {"text_class": "measured", "p": [0.6, 0.4, 0.3, 0.2], "steps": 500, "engine_tau": 4.9}]}
    f = next(f for f in diagnose_inputs(inputs_from_dict(d)) if f.rule == "no_net_win")
    assert f.evidence["accounting_suspect"] is True and f.evidence["engine_tau"] == 4.9
    assert "accounting" in f.message
    # Measured step times give the break-even directly.
    d2 = {**_load(CURVES / "public/flat-098-throughput-falls.json")["inputs"], "spec_step_ms": 30.0,
          "plain_step_ms": 6.0}
    f2 = next(f for f in diagnose_inputs(inputs_from_dict(d2)) if f.rule == "no_net_win")
    assert f2.evidence["step_cost_measured"] is True and f2.evidence["breakeven_tau"] == 5.0


def test_public_zero_past_a_length_reports_the_boundary():
    fs = diagnose_inputs(inputs_from_dict(_load(CURVES / "public/zero-past-32k.json")["inputs"]))
    f = next(f for f in fs if f.rule == "zero_past_length")
    assert (f.evidence["last_length_with_acceptance"], f.evidence["first_length_without"]) == (30000, 40000)
    assert "zero-acceptance-past-length" in f.entries
    assert "depth_decay" not in [x.rule for x in fs]  # the sharper finding explains it


def test_public_collapse_only_at_dcp4():
    """Report 001's shape: MTP1 ≈ 0.74 survives, later positions collapse, only at DCP 4 (a vLLM draft-config bug)."""
    fs = diagnose_inputs(inputs_from_dict(_load(CURVES / "public/dcp4-collapse.json")["inputs"]))
    f = next(f for f in fs if f.rule == "scales_with_parallel")
    assert f.evidence["knob"] == "parallel.dcp_size" and f.evidence["sizes"] == [1, 4]
    assert "draft-parallel-config-copies-every-size" in f.entries
    rules = [x.rule for x in fs]
    assert "recursive_collapse" in rules and "pinned_near_one" not in rules


def test_doctor_links_only_entries_for_the_runs_engine_and_config():
    """Issue 25: a vLLM-only entry is not linked for an SGLang run; offload entries not for a dense config."""
    d = _load(CURVES / "public/dcp4-collapse.json")["inputs"]
    sg = {**d, "knobs": {**d["knobs"], "engine": "sglang"},
          "siblings": [{**s, "knobs": {**s["knobs"], "engine": "sglang"}} for s in d["siblings"]]}
    f = next(f for f in diagnose_inputs(inputs_from_dict(sg)) if f.rule == "scales_with_parallel")
    assert "draft-parallel-config-copies-every-size" not in f.entries and f.entries
    nw = _load(CURVES / "public/report-004-mtp4-flat-decode.json")["inputs"]
    dense = {**nw, "knobs": {"engine": "sglang", "speculative.algorithm": "EAGLE", "extra_args": []}}
    f = next(f for f in diagnose_inputs(inputs_from_dict(dense)) if f.rule == "no_net_win")
    assert "speculation-and-expert-offload" not in f.entries
    assert "high-acceptance-falling-throughput-accounting" in f.entries
    offload = {**nw, "knobs": {"engine": "vllm", "speculative.algorithm": "MTP",
                               "extra_args": ["--enable-expert-offload"]}}
    f = next(f for f in diagnose_inputs(inputs_from_dict(offload)) if f.rule == "no_net_win")
    assert "speculation-and-expert-offload" in f.entries


def test_vllm_and_sglang_log_lines_give_the_same_curve_model():
    from dynocell.engine.acceptance import Curve, parse_decode_lines, parse_vllm_spec_lines, relative_diff
    from dynocell.runbooks.doctor import ClassCurve, DoctorInputs

    v = parse_vllm_spec_lines((CURVES / "public/vllm-spec.log").read_text().splitlines())
    s = parse_decode_lines((CURVES / "public/sglang-decode.log").read_text().splitlines())
    assert len(v) == 1 and len(s) == 1
    vc, sc = v[0].curve, s[0].to_curve()
    assert isinstance(vc, Curve) and isinstance(sc, Curve)
    assert vc.num_drafts == 4 and vc.tau == pytest.approx(3.833, abs=1e-3)
    assert relative_diff(vc.tau, v[0].mean_acceptance_length) <= 0.02
    assert sc.num_drafts == 3 and sc.tau == pytest.approx(2.31) and sc.accept_rate == pytest.approx(0.44)
    # Both feed the doctor; the vLLM figure agrees with its own per-position rates.
    inp = DoctorInputs(curves=[ClassCurve("vllm", vc, engine_tau=v[0].mean_acceptance_length),
                               ClassCurve("sglang", sc)])
    assert [f.rule for f in diagnose_inputs(inp)] == []


def test_definitions_mismatch_names_the_convention():
    d = _load(CURVES / "definitions_mismatch.json")["positive"][0]["inputs"]
    f = next(f for f in diagnose_inputs(inputs_from_dict(d)) if f.rule == "definitions_mismatch")
    assert f.evidence["explained_by"] == "skips verify steps with 0 accepted drafts"


def test_sampled_oracle_in_the_wrong_mode_is_no_alarm():
    d = _load(CURVES / "engine_vs_oracle.json")
    wrong = next(c for c in d["negative"] if "not compared" in c["name"])["inputs"]
    assert diagnose_inputs(inputs_from_dict(wrong)) == []
    # The same engine curve judged as if it proposed sampled drafts does alarm (1.95 vs 2.78).
    wrong["proposal_mode"] = "sampled"
    assert "engine_vs_oracle" in [f.rule for f in diagnose_inputs(inputs_from_dict(wrong))]


# ------------------------------------------------------------------ through the store

def _stored_run(cell, cfg_path: Path, histograms: dict[str, list[int]], run_id: str) -> str:
    from dynocell.db import runs as db_runs
    from dynocell.engine.acceptance import Curve
    from dynocell.runbooks.configs import add_config

    h = add_config(cell, cfg_path).hash
    db_runs.create_run(cell.store, id=run_id, kind="run", config_hash=h, state="completed")
    for cls, hist in histograms.items():
        c = Curve.from_histogram(hist)
        db_runs.add_bench(cell.store, run_id=run_id, text_class=cls, concurrency=1, num_requests=3,
                          duration_s=1.0, prompt_tokens=384, completion_tokens=192, request_throughput=3.0,
                          output_tok_s=192.0, total_tok_s=576.0, ttft_ms={}, tpot_ms={}, itl_ms={}, e2e_ms={})
        db_runs.add_curve(cell.store, [(i + 1, c.p[i], c.a[i]) for i in range(c.num_drafts)], run_id=run_id,
                          text_class=cls, num_drafts=c.num_drafts, steps=c.steps, tau=c.tau,
                          accept_rate=c.accept_rate, histogram=list(hist), completion_tokens=192)
    return run_id


def test_diagnose_stored_runs_and_store_findings(settings):
    from dynocell.db import knowledge as dbk
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.doctor import diagnose

    cell = open_cell(settings)
    healthy = {"code": [14, 6, 6, 133], "prose": [40, 20, 15, 80], "repetition": [5, 3, 2, 150]}
    pinned = {k: [190, 8, 2, 0] for k in healthy}
    good = _stored_run(cell, DATA / "configs/bisect-good.toml", healthy, "rungood0001")
    bad = _stored_run(cell, DATA / "configs/bisect-bad-two.toml", pinned, "runbad00001")
    # dcp 1 + eager (good) vs dcp 4 + graph (bad): two knobs differ, so they are not parallel-only siblings.
    assert diagnose(cell, good) == []
    fs = diagnose(cell, "runbad")  # a unique prefix works
    # issue 22: the two-knob comparison is named (both knobs are candidates), not refused
    assert [f.rule for f in fs] == ["pinned_near_one", "confounded_comparison"]
    assert fs[1].evidence["candidates"] == ["cuda_graph.disable", "parallel.dcp_size"]
    stored = dbk.list_findings(cell.store, run_id=bad)
    assert [s.rule for s in stored] == ["pinned_near_one", "confounded_comparison"]
    assert "pinned-near-one-wrong-inputs" in stored[0].entries
    diagnose(cell, bad)  # re-diagnosing replaces, not duplicates
    assert len(dbk.list_findings(cell.store, run_id=bad)) == 2


def test_diagnose_stored_parallel_sibling(settings, tmp_path):
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.doctor import diagnose

    cell = open_cell(settings)
    dcp1 = (DATA / "configs/bisect-bad-two.toml").read_text().replace("dcp_size = 4", "dcp_size = 1")
    (tmp_path / "dcp1.toml").write_text(dcp1)
    healthy = {"code": [14, 6, 6, 133], "repetition": [5, 3, 2, 150]}
    _stored_run(cell, tmp_path / "dcp1.toml", healthy, "rundcp1")
    _stored_run(cell, DATA / "configs/bisect-bad-two.toml", {k: [190, 8, 2, 0] for k in healthy}, "rundcp4")
    rules = {f.rule: f for f in diagnose(cell, "rundcp4")}
    assert set(rules) == {"pinned_near_one", "scales_with_parallel"}
    assert rules["scales_with_parallel"].evidence["sizes"] == [1, 4]
    assert diagnose(cell, "rundcp1") == []


def test_diagnose_unknown_ref(settings):
    from dynocell.errors import NotFound
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.doctor import diagnose

    with pytest.raises(NotFound):
        diagnose(open_cell(settings), "nosuchrun")


def test_diagnose_failed_boot_links_signature_entries(settings, tmp_path):
    from dynocell.db.tables import Boot
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config
    from dynocell.runbooks.doctor import diagnose

    cell = open_cell(settings)
    h = add_config(cell, DATA / "configs/bisect-good.toml").hash
    log = tmp_path / "engine.log"
    log.write_text("loading\nOSError: [Errno 98] error while attempting to bind on address: address already in use\n")
    with cell.store.session() as s:
        s.add(Boot(id="bootfail0001", config_hash=h, engine="sglang", hostname="h", host="127.0.0.1", argv="x",
                   env={}, state="failed", log_path=str(log), failure_signature="port_in_use",
                   failure_detail={"line": "address already in use"}))
    fs = diagnose(cell, "bootfail")
    assert [f.rule for f in fs] == ["boot_failure"]
    assert fs[0].entries == ["port-in-use"] and fs[0].evidence["signature"] == "port_in_use"


def test_every_finding_ends_with_a_next_command():
    """Issue 20, item 9: `diagnose` says what to run next for each finding."""
    from dynocell.runbooks.doctor import Finding, next_command

    with_entry = Finding("no_net_win", "warn", "τ 1.76 but …", {"tau": 1.76},
                         ["speculation-cannot-pay-pointwise-bound"])
    bare = Finding("independence", "info", "τ vs …", {})
    text = render_findings([with_entry, bare], "0110d9b7f46b")
    blocks = text.split("\n[")
    assert len(blocks) == 2 and all(b.splitlines()[-1].startswith("    next: dynocell ") for b in blocks), text
    assert next_command(with_entry) == "dynocell runbook show speculation-cannot-pay-pointwise-bound"
    assert next_command(Finding("garbage_output", "error", "m", {}),
                        "0110d9b7f46b").startswith("dynocell show 0110d9b7f46b")
    assert "{ref}" not in next_command(Finding("garbage_output", "error", "m", {}))


def test_no_net_win_respects_the_breakeven_noise_band():
    """Issue 20, item 3: a margin inside the break-even's noise band is not reported as no net win."""
    # τ = 1 + (20 + 60 + 120) / 100 = 3.0; speedup = τ × plain / spec = 3.0 × 3.23 / 10 = 0.969 (−3.1 %).
    base = {"curves": [{"text_class": "prose", "histogram": [10, 20, 30, 40]}],
            "spec_step_ms": 10.0, "plain_step_ms": 3.23}
    assert [f.rule for f in diagnose_inputs(inputs_from_dict(base)) if f.rule == "no_net_win"] == ["no_net_win"]
    quiet = diagnose_inputs(inputs_from_dict({**base, "breakeven_noise": 0.05}))
    assert "no_net_win" not in [f.rule for f in quiet]
    loud = diagnose_inputs(inputs_from_dict({**base, "plain_step_ms": 2.0, "breakeven_noise": 0.05}))
    assert "no_net_win" in [f.rule for f in loud]


def test_stall_lines_count_in_a_row():
    """`stalled_queue` needs stats lines *in a row* with requests waiting and none running: a healthy
    reference ladder run logged two isolated `#running-req: 0 … #queue-req: 1` lines, each followed by
    prefill and decode, and was flagged before (the newcomer check of the merged tree)."""
    from dynocell.engine.log_signs import scan_lines

    stall = "Decode batch. #running-req: 0, #token: 0, token usage: 0.00, #queue-req: 1, "
    busy = "Decode batch. #running-req: 1, #token: 90, token usage: 0.01, #queue-req: 0, "
    apart = scan_lines([busy, stall, busy, busy, stall, busy])
    assert len(apart["stalls"]) == 2 and apart["stall_run_max"] == 1
    stuck = scan_lines([busy, stall, stall, stall])
    assert stuck["stall_run_max"] == 3
    th = {"stalled_queue": {"min_waiting": 1, "min_stall_lines": 2}}
    from dynocell.runbooks.doctor_runtime import rule_stalled_queue

    assert rule_stalled_queue(inputs_from_dict({"curves": [], "log": apart}), th) == []
    f = rule_stalled_queue(inputs_from_dict({"curves": [], "log": stuck}), th)[0]
    assert f.evidence["stall_lines_in_a_row"] == 3 and "3 stats lines in a row" in f.message


def test_depth_decay_says_when_speculation_pays_at_no_length():
    """When τ is below the break-even already at the shortest prompt, the decay's advice is not "gate by
    length from N tokens" (which reads as "it pays below N"): it says speculation pays at no measured length
    (the newcomer check of the merged tree: the reference ladder run, speed-up 0.51× / 0.44× / 0.26×)."""
    from dynocell.engine.length_curve import with_breakeven

    ladder = [{"text_class": f"{n} tokens", "p": p, "steps": 200, "prompt_tokens": n, "step_ms": ms}
              for n, p, ms in [(96, [0.6, 0.4, 0.25], 10.4), (384, [0.45, 0.25, 0.1], 12.0),
                               (896, [0.3, 0.1, 0.03], 18.6)]]
    f = next(x for x in diagnose_inputs(inputs_from_dict({"ladder": ladder, "plain_step_ms": 2.85}))
             if x.rule == "depth_decay")
    assert "pays at no measured length" in f.message and "gate speculation by length (from" not in f.message
    rows = [{"input_tokens": n, "tau": t, "verify_step_ms": ms} for n, t, ms in [(96, 1.88, 10.4), (384, 1.71, 14.2)]]
    curve = with_breakeven(rows, 2.85)
    assert curve["pays_at_no_length"] is True and curve["crossover_tokens"] == 96
    assert with_breakeven(rows, 20.0)["pays_at_no_length"] is False


def test_store_inputs_read_the_headline_throughput_not_only_its_deprecated_alias(settings):
    """``summary.decode_tok_s`` is the deprecated alias of ``best_output_tok_s`` (runbooks/run/summary_step.py).
    The doctor read only the alias: a run whose summary carries only the current field (written once the alias
    is gone, or by another writer) gave no speed-up to no_net_win and no throughput to its baselines. Old rows
    (alias only) still count."""
    from datetime import datetime, timedelta, timezone

    from dynocell.db import runs as db_runs
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config
    from dynocell.runbooks.doctor import inputs_for_run

    cell = open_cell(settings)
    repo = Path(__file__).resolve().parents[1]
    spec = add_config(cell, repo / "examples" / "tiny.toml", None).hash
    plain = add_config(cell, repo / "examples" / "tiny-plain.toml", None).hash
    t0 = datetime.now(timezone.utc) - timedelta(hours=1)
    common = {"kind": "run", "state": "completed", "workload_sha256": "w" * 64}
    db_runs.create_run(cell.store, id="plain-old", config_hash=plain, started_at=t0,
                       summary={"decode_tok_s": 1000.0}, **common)  # a row stored before best_output_tok_s
    db_runs.create_run(cell.store, id="spec-base", config_hash=spec, started_at=t0 + timedelta(minutes=1),
                       summary={"best_output_tok_s": 850.0, "best_output_concurrency": 8}, **common)
    db_runs.add_curve(cell.store, [(1, 0.9, 0.9)], run_id="spec-base", text_class="code", num_drafts=3, steps=10,
                      tau=1.9, accept_rate=0.3, histogram=[1, 9, 0, 0], completion_tokens=19)
    db_runs.create_run(cell.store, id="spec-now", config_hash=spec, started_at=t0 + timedelta(minutes=2),
                       summary={"best_output_tok_s": 900.0, "best_output_concurrency": 8},
                       lossless_detail={"plain_config_hash": plain}, **common)
    inp = inputs_for_run(cell, "spec-now")
    assert inp.spec_decode_tok_s == 900.0 and inp.plain_decode_tok_s == 1000.0
    assert [(b.label, b.decode_tok_s) for b in inp.baselines] == [("spec-base", 850.0)]


def _cut_last_step(requests: int, full_steps: int, last_accepted: int, k: int = 3) -> dict:
    """Inputs of one class whose every request ran ``full_steps`` verify steps accepting all ``k`` drafts
    and a last step cut by max_tokens to ``last_accepted`` drafts; the engine counted that step in full."""
    hist = [0] * (k + 1)
    hist[k] += requests * full_steps
    hist[last_accepted] += requests
    records = [{"histogram": [0] * last_accepted + [1] + [0] * (k - last_accepted - 1) + [full_steps]}
               for _ in range(requests)]
    return {"curves": [{"text_class": "code", "histogram": hist, "engine_tau": float(k + 1),
                        "engine_source": "vLLM log SpecDecoding lines", "requests": records}]}


def test_a_last_step_cut_by_max_tokens_is_no_definitions_mismatch():
    """6 requests × (7 full steps + 1 step cut to 2 of 3 drafts): client τ 3.875, engine τ 4.000, 3.1 %
    apart. vLLM 0.26.0 counts the cut step's drafts before trimming at the stop, which adds ≤ k tokens
    per request: the finding says so at info, and the accounting is not suspect (no warn)."""
    inp = inputs_from_dict(_cut_last_step(6, 7, 2))
    assert abs(inp.curves[0].curve.tau - 3.875) < 1e-9
    fs = [f for f in diagnose_inputs(inp) if f.rule == "definitions_mismatch"]
    assert [f.severity for f in fs] == ["info"], fs
    assert fs[0].evidence["explained_by"] == "counts the last step's drafts before the stop cuts them"


def test_an_excess_beyond_k_per_request_is_still_a_definitions_mismatch():
    """The same 3.1 % gap over 48 steps claimed by 1 request: 6 extra tokens cannot come from one cut step
    of k = 3, so the mismatch stays a warning."""
    d = _cut_last_step(6, 7, 2)
    d["curves"][0]["requests"] = d["curves"][0]["requests"][:1]
    fs = [f for f in diagnose_inputs(inputs_from_dict(d)) if f.rule == "definitions_mismatch"]
    assert [f.severity for f in fs] == ["warn"], fs


def test_random_weights_silence_the_rules_that_judge_the_model():
    """A pinned-at-1 curve is an error on real weights and no finding at all on ``--load-format dummy``:
    only the dummy_weights note remains, naming the rules left out (issue 40: acceptance is meaningless
    with dummy weights, the report must say so and skip τ-based verdicts)."""
    pinned = {"curves": [{"text_class": "prose", "histogram": [500, 2, 0, 0]}],
              "knobs": {"engine": "vllm", "speculative.algorithm": "EAGLE", "speculative.num_steps": 3}}
    real = [f.rule for f in diagnose_inputs(inputs_from_dict(pinned))]
    assert "pinned_near_one" in real
    pinned["knobs"]["extra_args"] = ["--load-format=dummy"]
    fs = diagnose_inputs(inputs_from_dict(pinned))
    assert [(f.rule, f.severity) for f in fs] == [("dummy_weights", "info")], render_findings(fs)
    assert "pinned_near_one" in fs[0].evidence["rules_not_run"]
