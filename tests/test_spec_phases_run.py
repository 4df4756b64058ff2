"""Issue 24 item 3 on the real reference engine: a tiny EAGLE chain (the packaged head, 3 steps / top-k 1 /
4 draft tokens), the STANDALONE default and NGRAM, booted by `dynocell boot` and profiled by `dynocell
profile` — the same profile window the main job's profile step opens — store the speculative step's phase
split with the profile; the engine emits SGLang 0.5.17's range names (dynocell/engine/reference/
decoding.py, eagle_decoding.py), on CPU a CPU-op split."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dynocell.engine.reference.nets import PACKAGED_DIR, recipe_id

EAGLE = PACKAGED_DIR / recipe_id(0) / "eagle"

CONFIG = """engine = "reference"
model_path = "dynocell:tiny"
host = "127.0.0.1"
port = 0

[speculative]
algorithm = "EAGLE"
draft_model_path = "{head}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4
"""


def dynocell(env, *args, timeout=600):
    proc = subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    assert proc.returncode == 0, f"dynocell {' '.join(args)} → {proc.returncode}\n{proc.stdout[-2000:]}\n" \
                                 f"{proc.stderr[-2000:]}"
    return proc.stdout


REPO = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(not (EAGLE / "model.safetensors").is_file(), reason="no packaged EAGLE head")
@pytest.mark.parametrize("algorithm", ["EAGLE", "STANDALONE", "NGRAM"])
def test_profile_of_a_speculative_boot_stores_the_phase_split(algorithm, cli_env, tmp_path: Path):
    """EAGLE: draft, draft extend and verify ranges; STANDALONE (examples/tiny.toml, the embedded default):
    draft and verify (the draft's catch-up sits in its first draft forward); NGRAM (examples/tiny-ngram.toml):
    verify only — proposals are made on the CPU without a model."""
    if algorithm == "EAGLE":
        cfg = tmp_path / "tiny-eagle.toml"
        cfg.write_text(CONFIG.format(head=EAGLE))
    else:
        cfg = REPO / "examples" / ("tiny.toml" if algorithm == "STANDALONE" else "tiny-ngram.toml")
    env = dict(cli_env, COLUMNS="80")
    dynocell(env, "boot", str(cfg), "--detach")
    boot = next(b for b in json.loads(dynocell(env, "ps", "--json")) if b["state"] == "ready")
    try:
        report = dynocell(env, "profile", boot["id"])
    finally:
        dynocell(env, "stop", boot["id"])
    assert len([x for x in report.splitlines() if x.startswith("phases: ")]) == 1  # in the report
    run = next(r for r in json.loads(dynocell(env, "runs", "--json")) if r.get("boot_id") == boot["id"])
    prof = json.loads(dynocell(env, "show", run["id"], "--json"))["profile"]
    ph = prof["phases"]
    assert ph["state"] == "split" and ph["source"] == "cpu" and ph["reason"] is None
    by = {p["phase"]: p for p in ph["phases"]}
    steps = by["target_verify"]["ranges"]
    assert steps > 0
    expected = {"EAGLE": ("draft_forward", "draft_extend", "target_verify"),
                "STANDALONE": ("draft_forward", "target_verify"), "NGRAM": ("target_verify",)}[algorithm]
    for phase in expected:
        assert by[phase]["ms"] > 0 and by[phase]["launches"] > 0, phase
        assert by[phase]["launches_per_token"] == pytest.approx(by[phase]["launches"] / prof["output_tokens"])
    if algorithm != "NGRAM":
        assert by["draft_forward"]["ranges"] == steps
    else:
        assert "draft_forward" not in by
    if algorithm == "EAGLE":
        assert by["draft_extend"]["ranges"] >= steps - 2  # two requests in the window
    else:
        assert "draft_extend" not in by
    assert sum(p["pct"] for p in ph["phases"] if p["pct"] is not None) == pytest.approx(100.0)
