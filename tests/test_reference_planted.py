"""The reference engine's planted-effect instruments (benchmarks/reproducibility.py, issue 33): a real
subprocess with ``--draft-corrupt 0.3`` accepts fewer drafts than the same engine without it, greedy, on the
same prompts; ``--step-slowdown`` is accepted and leaves the output unchanged (it only sleeps)."""

from __future__ import annotations

import httpx

from dynocell.engine.reference.launch import start_engine

SPEC = ["--speculative-algorithm", "STANDALONE", "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
        "--speculative-num-draft-tokens", "4"]
PROMPTS = ["import os\nimport sys\n\n", "The quick brown fox jumps over the lazy dog. It was", "abc abc abc abc "]


def _accepted(eng) -> tuple[int, int, list[str]]:
    correct, proposed, texts = 0, 0, []
    for p in PROMPTS:
        body = {"text": p, "sampling_params": {"max_new_tokens": 32, "temperature": 0.0, "ignore_eos": True}}
        r = httpx.post(eng.url + "/generate", json=body, timeout=120)
        assert r.status_code == 200, r.text
        m = r.json()["meta_info"]
        correct, proposed = correct + m["spec_num_correct_drafts"], proposed + m["spec_num_proposed_drafts"]
        texts.append(r.json()["text"])
    return correct, proposed, texts


def _measure(model_pair, log, planted):
    eng = start_engine(model_pair.target, [*SPEC, "--speculative-draft-model-path", str(model_pair.draft), *planted],
                       log)
    try:
        return _accepted(eng)
    finally:
        eng.stop()


def test_planted_flags_lower_acceptance_and_keep_the_text(model_pair, tmp_path):
    clean = _measure(model_pair, tmp_path / "clean.log", [])
    got = _measure(model_pair, tmp_path / "planted.log", ["--draft-corrupt", "0.5", "--step-slowdown", "1.5"])
    assert clean[0] > 0
    assert got[2] == clean[2]  # greedy: speculation and sleeping never change the text
    assert got[0] / got[1] < 0.8 * clean[0] / clean[1], (got[:2], clean[:2])
