"""The main job on vLLM's surface, on CPU (issue 21 item 5): `dynocell run examples/tiny-vllm.toml`
through the real console script — the reference engine speaking vLLM 0.26's routes, /metrics names,
SpecDecoding log lines and profiler layout. Acceptance comes from /metrics counter deltas (no
speculative counts in any response) and agrees with the engine's own log lines."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.test_main_job import dynocell

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def vllm_run(model_pair, tmp_path_factory):
    home = tmp_path_factory.mktemp("main-job-vllm")
    env = dict(os.environ, DYNOCELL_HOME=str(home), DYNOCELL_MODEL_CACHE=str(REPO / ".cache" / "models"),
               PYTHONUNBUFFERED="1")
    proc = dynocell(env, "run", str(REPO / "examples" / "tiny-vllm.toml"), check=False)
    runs = json.loads(dynocell(env, "runs", "--json").stdout)
    main = next(r for r in runs if r["kind"] == "run")
    return json.loads(dynocell(env, "show", main["id"], "--json").stdout), proc, env


def test_every_step_completes_on_the_vllm_surface(vllm_run):
    shown, proc, _ = vllm_run
    states = {s["name"]: s["state"] for s in shown["steps"]}
    assert shown["run"]["state"] == "completed", (states, shown["run"].get("error"), proc.stdout[-2000:])
    for step in ("config", "boot", "health", "bench", "acceptance", "lossless", "profile", "breakeven", "stop",
                 "diagnose"):
        assert states.get(step) == "completed", (step, states)
    phases = [e["name"] for e in shown["boot"]["events"] if e["kind"] == "phase"]
    assert phases[:3] == ["config", "engine_init", "weights_begin"] and phases[-3:] == [
        "engine_ready", "http_listening", "ready"], phases  # vLLM's shapes, rules/vllm.toml
    assert "kv_cache_allocated" in phases and "weights_end" in phases
    checks = [c["name"] for c in shown["boot"]["health"][0]["checks"]]
    assert "models" in checks and "completion" in checks and "health_generate" not in checks


def test_acceptance_from_counter_deltas_equals_the_log_lines(vllm_run):
    shown, _, _ = vllm_run
    curves = shown["curves"]
    assert {c["text_class"] for c in curves} == {"code", "prose", "repetition", "arithmetic", "chinese"}
    for c in curves:
        p = [pt["p"] for pt in c["points"]]
        assert c["num_drafts"] == 3 and c["tau"] == pytest.approx(1 + sum(p), abs=1e-9)
        assert p == sorted(p, reverse=True)  # vLLM's rate is unconditional
        assert c["engine_source"] == "vLLM log SpecDecoding lines"
        assert c["engine_tau"] == pytest.approx(c["tau"], abs=1e-9) and not c["warning"]


def test_each_class_keeps_its_two_scrapes_and_import_metrics_gives_the_same_curve(vllm_run, tmp_path):
    """The acceptance step keeps the /metrics scrapes each class was differenced from
    (boots/<id>/scrapes/<class>.{before,after}.prom); `dynocell import metrics` of the pair, into
    another store, gives the stored curve: two real scrapes of one engine → the per-position curve."""
    shown, _, env = vllm_run
    scrapes = Path(env["DYNOCELL_HOME"]) / "boots" / shown["run"]["boot_id"] / "scrapes"
    curves = {c["text_class"]: c for c in shown["curves"]}
    assert sorted(p.name for p in scrapes.iterdir()) == sorted(
        f"{k}.{w}.prom" for k in curves for w in ("before", "after"))
    other = dict(env, DYNOCELL_HOME=str(tmp_path))
    for name in ("code", "repetition"):
        out = json.loads(dynocell(other, "import", "metrics", str(scrapes / f"{name}.before.prom"),
                                  str(scrapes / f"{name}.after.prom"), "--json").stdout)
        want, got = curves[name], out["acceptance"]
        assert out["scrapes"] == 2 and got["source"] == "vllm per-position counters"
        assert got["tau"] == pytest.approx(want["tau"], abs=1e-4)
        assert got["p"] == pytest.approx([pt["p"] for pt in want["points"]], abs=1e-4)


def test_report_says_the_vllm_rate_is_unconditional(vllm_run):
    _, proc, _ = vllm_run
    assert "vLLM's per-position acceptance rate is unconditional" in proc.stdout


def test_profile_uses_vllms_trace_layout(vllm_run):
    shown, _, _ = vllm_run
    prof = shown["profile"]
    assert prof["state"] == "completed" and prof["output_tokens"] > 0 and prof["launches_per_token"] > 0
    assert all(Path(t["path"]).name.startswith("rank0.") and t["path"].endswith(".pt.trace.json.gz")
               for t in prof["traces"]) and prof["traces"]
