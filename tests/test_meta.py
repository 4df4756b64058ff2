"""Typed meta_info on real SGLang 0.5.17 answers, and lying meta_info detected without crashing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynocell.engine.acceptance import curve_from_meta_infos
from dynocell.engine.meta import GenerationMeta, MetaError

DATA = Path(__file__).parent / "data" / "sglang-0.5.17"


def _metas(run: str) -> list[dict]:
    d = json.loads((DATA / f"{run}.result.json").read_text())
    out = [d["generate_hello"]["json"]["meta_info"], d["generate_repeat"]["json"]["meta_info"],
           d["single_256"]["meta_info"], d["batch16_128"]["meta_info_first"]]
    out += [r["meta_info"] for r in d.get("acceptance_runs", [])]
    return out


def _trained() -> list[dict]:
    d = json.loads((DATA / "trained-pair" / "R.result.json").read_text())
    return d["acceptance_runs"]


@pytest.mark.parametrize("run", ["A", "B", "C", "D", "E"])
def test_real_meta_infos_are_consistent(run):
    for raw in _metas(run):
        m = GenerationMeta.from_meta_info(raw)
        assert m.validate() == [], (run, m.validate())
        assert m.finish_reason == "length" and m.completion_tokens == m.finish_length
        assert m.e2e_latency and m.e2e_latency > 0
        assert m.speculative == (run in "CDE")


def test_standalone_histogram():
    m = GenerationMeta.from_meta_info(_metas("C")[0])
    assert m.spec_correct_drafts_histogram == (0, 0, 0, 8)
    assert m.spec_verify_ct == 8 and m.num_drafts == 3 and m.spec_accept_length == 4.0
    assert curve_from_meta_infos([m]).tau == 4.0


def test_ngram_histogram_has_twelve_buckets():
    m = GenerationMeta.from_meta_info(_metas("D")[0])
    assert len(m.spec_correct_drafts_histogram) == 12 and m.num_drafts == 11
    assert m.spec_num_proposed_drafts == 8 * 11
    c = curve_from_meta_infos([m])
    assert c.num_drafts == 11 and c.steps == 8
    # Histogram τ counts every accepted draft; SGLang's spec_accept_length is
    # completion_tokens / verify steps, lower when max_new_tokens cut the last step.
    assert c.tau == pytest.approx(1 + 34 / 8) and m.spec_accept_length == 4.0


def test_trained_pair_greedy_curve_matches_readme():
    greedy = [r["meta_info"] for r in _trained() if r["temp"] == 0.0]
    for raw in greedy:
        assert GenerationMeta.from_meta_info(raw).validate() == []
    c = curve_from_meta_infos(greedy)
    assert c.histogram == (14, 6, 6, 133)  # docs/h200/README.md "Real weights"
    assert round(c.tau, 3) == 3.623
    sampled = curve_from_meta_infos(r["meta_info"] for r in _trained() if r["temp"] == 0.8)
    assert sampled.histogram == (167, 41, 19, 67) and round(sampled.tau, 3) == 1.952


def test_lying_meta_info_is_detected():
    raw = dict(_metas("C")[0])
    raw.update(spec_verify_ct=9, spec_accept_length=2.5, spec_num_correct_drafts=30, spec_accept_rate=0.5)
    raw["spec_accept_histogram"] = [0, 0, 1, 8]
    m = GenerationMeta.from_meta_info(raw)
    problems = " | ".join(m.validate())
    assert "histogram sums to 8 verify steps but spec_verify_ct is 9" in problems
    assert "spec_accept_length 2.5" in problems
    assert "spec_num_correct_drafts is 30" in problems
    assert "differs from spec_accept_histogram" in problems
    assert "spec_accept_rate 0.5" in problems
    assert "spec_num_proposed_drafts is 24" in problems


def test_wrong_types_and_negatives_do_not_crash():
    m = GenerationMeta.from_meta_info({
        "id": 7, "prompt_tokens": "many", "completion_tokens": -3, "cached_tokens": 4.5,
        "e2e_latency": -0.1, "finish_reason": 42,
        "spec_correct_drafts_histogram": [1, "x"], "spec_verify_ct": -1,
    })
    problems = m.validate()
    text = " | ".join(problems)
    assert m.prompt_tokens is None and "prompt_tokens is not an integer" in text
    assert "completion_tokens is negative" in text and "e2e_latency is negative" in text
    assert "cached_tokens is not an integer" in text and "finish_reason has an unknown shape" in text
    assert "spec_correct_drafts_histogram is not a list of counts" in text
    assert "spec_verify_ct is negative" in text
    assert m.id == "7"


def test_string_finish_reason_and_plain_generation():
    m = GenerationMeta.from_meta_info({"finish_reason": "stop", "prompt_tokens": 3, "completion_tokens": 1})
    assert m.finish_reason == "stop" and not m.speculative and m.validate() == []


def test_not_a_mapping():
    with pytest.raises(MetaError, match="meta_info must be a JSON object"):
        GenerationMeta.from_meta_info(["not", "a", "dict"])  # type: ignore[arg-type]
