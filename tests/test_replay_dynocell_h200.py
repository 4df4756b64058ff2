"""Replay of dynocell's own runs on SGLang 0.5.17 / H200 (tests/data/sglang-0.5.17/dynocell-h200).

CPU-only: the real engine logs, traces and stored numbers brought back from
the GPU host drive the same parsers the main job uses.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynocell.engine.acceptance import Curve
from dynocell.engine.rules import phase_timeline
from dynocell.engine.supervisor import parse_log_line
from dynocell.engine.trace import analyze_trace

DATA = Path(__file__).parent / "data" / "sglang-0.5.17" / "dynocell-h200"
BOOTS = json.loads((DATA / "boots.json").read_text())


def boot(config: str, workload: str = "default") -> dict:
    return [b for b in BOOTS
            if b["config"] == config and b["workload"] == workload and b["run_state"] == "completed"][-1]


def run_json(name: str) -> dict:
    return json.loads((DATA / "runs" / f"{name}.run.json").read_text())


def engine_lines(boot_id: str) -> list[str]:
    return [parse_log_line(line)[1] for line in (DATA / "boots" / boot_id / "engine.log").read_text().splitlines()]


@pytest.mark.parametrize("config", ["h200-plain-eager", "h200-plain-graph", "h200-standalone-pair", "h200-ngram"])
def test_phases_and_ready_time_from_real_logs(config):
    b = boot(config)
    names = [p.name for p in phase_timeline(engine_lines(b["boot_id"]), "sglang")]
    assert names[0] == "weights_begin" and names[-1] == "ready"
    assert "kv_cache_allocated" in names
    assert ("cuda_graph_begin" in names) == (config != "h200-plain-eager")
    assert 10 < b["ready_s"] < 120


def test_trace_split_eager_vs_graph():
    eager = analyze_trace(DATA / "boots" / boot("h200-plain-eager")["boot_id"] / boot("h200-plain-eager")["traces"][0])
    graph = analyze_trace(DATA / "boots" / boot("h200-plain-graph")["boot_id"] / boot("h200-plain-graph")["traces"][0])
    assert eager.source == graph.source == "kernel"
    assert eager.graph_launches == 0 and graph.graph_launches > 0
    for split in (eager, graph):
        for cat in ("gemm", "attention", "norm", "elementwise"):
            assert split.category(cat).ms > 0, cat


def test_stored_curves_follow_the_acceptance_math():
    for name in ("h200-standalone-pair", "h200-standalone-self", "h200-ngram", "h200-standalone-pair-patched",
                 "h200-standalone-self-greedy", "h200-standalone-pair-greedy"):
        for c in run_json(name)["curves"]:
            curve = Curve.from_histogram(c["histogram"])
            assert curve.tau == pytest.approx(c["tau"]) and curve.steps == c["steps"]
            assert [round(x, 9) for x in curve.p] == [round(p["p"], 9) for p in c["points"]]


def test_draft_equal_target_is_lossless_and_greedy_accepts_every_draft():
    rj = run_json("h200-standalone-self-greedy")
    hist = [sum(col) for col in zip(*(c["histogram"] for c in rj["curves"]))]
    assert hist[-1] / sum(hist) > 0.97  # all 3 drafts accepted on > 97 % of verify steps
    assert run_json("h200-standalone-self")["run"]["lossless"] == "yes"


def test_patched_build_counters_agree_with_client_histograms():
    rj = run_json("h200-standalone-pair-patched")
    assert rj["run"]["build_hash"].startswith("sha256:")
    for c in rj["curves"]:
        assert c["engine_source"] == "metrics per-position counters"
        assert c["engine_tau"] == pytest.approx(c["tau"], rel=1e-6)


def test_reports_name_every_section():
    text = (DATA / "runs" / "h200-standalone-pair.report.txt").read_text()
    for heading in ("boot phases", "throughput and latency", "acceptance per text class", "lossless: yes",
                    "profile split", "top kernels"):
        assert heading in text
