"""Acceptance from vLLM counter deltas (issue 21 item 4) on the real vLLM 0.26.0 H200 artifacts:
the C_draft_graph scrape's label sets and the greedy class's recorded deltas, cross-checked against
the same run's SpecDecoding log lines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dynocell.engine.acceptance import parse_vllm_spec_lines
from dynocell.engine.metrics import MetricsError, parse_metrics
from dynocell.engine.bench import RequestResult
from dynocell.engine.vllm_acceptance import UNCONDITIONAL_NOTE, class_curve, cross_check, log_tau, verify_step_ms

DATA = Path(__file__).parent / "data" / "vllm-0.26.0"
SCRAPE = (DATA / "C_draft_graph.metrics.txt").read_text()
RESULT = json.loads((DATA / "C_draft_graph.result.json").read_text())
LOG = (DATA / "C_draft_graph.server.log").read_text().splitlines()


def advanced(text: str, spec: dict) -> str:
    """The real scrape with one class's recorded counter deltas added (what the scrape after it shows)."""
    adds = {"vllm:spec_decode_num_drafts_total": spec["num_drafts"],
            "vllm:spec_decode_num_draft_tokens_total": spec["num_draft_tokens"],
            "vllm:spec_decode_num_accepted_tokens_total": spec["num_accepted_tokens"]}
    for i, v in enumerate(spec["accepted_per_pos"]):
        adds[f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",position="{i}"}}'] = v
    out = []
    for line in text.splitlines():
        for key, add in adds.items():
            name = key.split("{")[0]
            if line.startswith(key if "{" in key else name + "{") and ("position" in line) == ("{" in key):
                head, value = line.rsplit(" ", 1)
                line = f"{head} {float(value) + add}"
                break
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("i", [0, 1])
def test_counter_deltas_give_the_recorded_curve(i):
    spec = RESULT["acceptance"][i]["spec"]
    cc = class_curve(parse_metrics(SCRAPE), parse_metrics(advanced(SCRAPE, spec)))
    assert cc is not None and cc.k == 3 and cc.curve.steps == spec["num_drafts"]
    assert cc.curve.tau == pytest.approx(spec["tau_mean_acceptance_length"], abs=1e-9)
    assert list(cc.curve.p) == pytest.approx(spec["per_pos_rate"], abs=1e-9)
    assert cc.figures["engine_tau"] == pytest.approx(cc.curve.tau)
    assert list(cc.curve.p) == sorted(cc.curve.p, reverse=True)  # unconditional: non-increasing


def test_cross_check_against_the_engines_own_log_lines():
    samples = parse_vllm_spec_lines(LOG)
    assert len(samples) == 4
    greedy = RESULT["acceptance"][0]["spec"]
    lt, dis, warn = cross_check(greedy["tau_mean_acceptance_length"], samples[:1], k=3)
    assert lt == pytest.approx(1 + 391 / 189) and dis < 0.02 and warn is None
    # The greedy class against the sampled class's log line: the disagreement is named.
    lt, dis, warn = cross_check(greedy["tau_mean_acceptance_length"], samples[1:2], k=3)
    assert dis > 0.02 and "SpecDecoding τ" in warn
    assert log_tau([], 3) is None


def test_no_drafts_and_a_restart():
    snap = parse_metrics(SCRAPE)
    assert class_curve(snap, snap) is None
    restarted = re.sub(r"(vllm:spec_decode_num_drafts_created\{[^}]*\}) \S+", r"\1 1.9e+09", SCRAPE)
    with pytest.raises(MetricsError, match="reset"):
        class_curve(snap, parse_metrics(restarted))


def test_report_states_the_rate_is_unconditional():
    assert "unconditional" in UNCONDITIONAL_NOTE


# ---------------------------------------------------------------- the reference engine's vLLM surface (CPU)

def _wait_for(pred, timeout_s: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_counter_delta_acceptance_equals_the_engines_own_log_lines(model_pair, tmp_path):
    """Real reference engine, --surface vllm, draft k = 3: one class at a time, the /metrics deltas
    around it give the curve; the engine's SpecDecoding lines of the same window give the same τ."""
    import httpx

    from dynocell.engine.reference.launch import start_engine

    eng = start_engine(model_pair.target, ["--served-model-name", "m", "--surface", "vllm",
                                           "--speculative-algorithm", "STANDALONE",
                                           "--speculative-draft-model-path", str(model_pair.draft),
                                           "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                           "--speculative-num-draft-tokens", "4", "--decode-log-interval", "7"],
                       tmp_path / "s.log")
    try:
        scrape = lambda: parse_metrics(httpx.get(eng.url + "/metrics", timeout=30).text)  # noqa: E731
        text = scrape()
        assert text.sum("vllm:spec_decode_num_drafts_total") is not None  # (the warm-up already drafted)
        assert not [n for n in text.names() if n.startswith("sglang:")]
        curves = []
        for prompts in (["def fib(n):", "import os\n"], ["The cat sat on the", "Once upon a time"]):
            before, offset = scrape(), eng.log_path.stat().st_size
            for p in prompts:
                r = httpx.post(eng.url + "/v1/completions", json={"model": "m", "prompt": p, "max_tokens": 24,
                                                                   "temperature": 0}, timeout=120)
                assert r.status_code == 200
            after = scrape()
            cc = class_curve(before, after)
            assert cc is not None and cc.k == 3 and cc.curve.steps > 0
            def window(offset: int = offset) -> list:
                return parse_vllm_spec_lines(eng.log_path.read_bytes()[offset:].decode(errors="replace").splitlines())

            want = cc.figures["draft_tokens"]
            _wait_for(lambda w=window, want=want: sum(s.drafted or 0 for s in w()) == want)
            lt, dis, warn = cross_check(cc.curve.tau, window(), cc.k)
            assert lt == pytest.approx(cc.curve.tau, abs=1e-9) and warn is None
            assert sum(s.accepted for s in window()) == cc.figures["accepted_tokens"]
            curves.append(cc.curve)
        assert all(list(c.p) == sorted(c.p, reverse=True) for c in curves)  # unconditional
    finally:
        eng.stop()


def _req(i: int, ttft_s: float, e2e_s: float, ok: bool = True) -> RequestResult:
    return RequestResult(index=i, text_class="code", level="acc-code", max_new_tokens=96, ignore_eos=True,
                         ok=ok, ttft_s=ttft_s, e2e_s=e2e_s)


def test_verify_step_time_from_the_window_counters():
    """Worked example: 3 requests at c=1 decode for 0.30 + 0.25 + 0.35 s after their first token;
    the window made 93 drafts, 3 of them inside the TTFTs → 90 steps → 10 ms per verify step."""
    reqs = [_req(0, 0.05, 0.35), _req(1, 0.04, 0.29), _req(2, 0.06, 0.41), _req(3, 0.05, 9.0, ok=False)]
    assert verify_step_ms(reqs, drafts=93, concurrency=1) == pytest.approx(10.0)
    assert verify_step_ms(reqs, drafts=93, concurrency=4) is None  # steps shared by requests
    assert verify_step_ms(reqs, drafts=3, concurrency=1) is None  # no step after the first tokens
    assert verify_step_ms([], drafts=93, concurrency=1) is None
