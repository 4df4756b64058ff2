"""The health oracle's decision logic, check by check, against a scripted engine surface (in process, fast).

``ScriptedEngine`` answers the five endpoints the oracle calls with whatever the
test scripts (an :class:`HttpResult`, or :class:`EngineUnreachable` for no
answer), the way ``tests/engines/fake_engine.py`` does over real HTTP in
``test_health.py``; the code under test, :func:`check_health`, is the real one.
These are the fast tests the mutation run (benchmarks/mutation.py) maps
``engine/health.py`` to.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from dynocell.engine.client import EngineUnreachable, HttpResult
from dynocell.engine.health import (
    Canary,
    ExpectedServer,
    ProgressSample,
    check_health,
    judge_progress,
    progress_from_metrics,
)

INFO = {"model_path": "/models/tiny/", "tp_size": "2", "speculative_algorithm": "standalone",
        "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
EXPECTED = ExpectedServer(model_path="/models/tiny", tp_size=2, speculative_algorithm="STANDALONE",
                          speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)


def metrics(gen=1000.0, prompt=500.0, running=0.0, queued=0.0) -> str:
    return "\n".join([
        "# TYPE sglang:num_running_reqs gauge", f'sglang:num_running_reqs{{tp_rank="0"}} {running}',
        "# TYPE sglang:num_queue_reqs gauge", f'sglang:num_queue_reqs{{tp_rank="0"}} {queued}',
        "# TYPE sglang:generation_tokens_total counter", f'sglang:generation_tokens_total{{tp_rank="0"}} {gen}',
        "# TYPE sglang:prompt_tokens_total counter", f'sglang:prompt_tokens_total{{tp_rank="0"}} {prompt}', ""])


def ok(body=None, text="", status=200, ms=1.5) -> HttpResult:
    return HttpResult(status, ms, body, text)


class ScriptedEngine:
    """Answers /health, /health_generate, /get_server_info, /generate, /metrics as scripted; records calls."""

    def __init__(self, **answers):
        self.answers = {"health": ok({}), "health_generate": ok({}), "server_info": ok(INFO),
                        "generate": ok({"text": " cba"}), "metrics_text": ok(text=metrics()), **answers}
        self.calls: list[tuple[str, tuple, dict]] = []

    def _answer(self, name, *a, **kw):
        self.calls.append((name, a, kw))
        r = self.answers[name]
        if isinstance(r, Exception):
            raise r
        return r

    def health(self, *a, **kw):
        return self._answer("health", *a, **kw)

    def health_generate(self, *a, **kw):
        return self._answer("health_generate", *a, **kw)

    def server_info(self, *a, **kw):
        return self._answer("server_info", *a, **kw)

    def generate(self, *a, **kw):
        return self._answer("generate", *a, **kw)

    def metrics_text(self, *a, **kw):
        return self._answer("metrics_text", *a, **kw)

    def models(self, *a, **kw):  # vLLM's OpenAI surface
        return self._answer("models", *a, **kw)

    def completions(self, *a, **kw):
        return self._answer("completions", *a, **kw)


def gone(kind="connect"):
    return EngineUnreachable("http://127.0.0.1:1", kind, "refused")


GONE_MSG = "engine at http://127.0.0.1:1 unreachable (connect): refused"


def checks(v):
    return [(c.name, c.ok, c.latency_ms, c.reason) for c in v.checks]


def test_all_checks_pass_in_order_with_reasons_and_latencies():
    eng = ScriptedEngine()
    v = check_health(eng, process_alive=True, expected=EXPECTED, canary=Canary("abc", " cba", 7),
                     generate_timeout_s=12.0, now=100.0)
    assert (v.verdict, v.reason) == ("healthy", "all checks passed")
    assert checks(v) == [("process", True, None, "alive"), ("health", True, 1.5, "200"),
                         ("health_generate", True, 1.5, "200"),
                         ("server_info", True, 1.5, "model and key args match"),
                         ("canary", True, 1.5, "golden continuation reproduced"),
                         ("progress", True, 1.5, "baseline: 0 running, 0 queued")]
    assert v.progress == ProgressSample(100.0, 1000.0, 500.0, 0.0, 0.0)
    by_name = {n: (a, kw) for n, a, kw in eng.calls}
    assert by_name["health_generate"] == ((), {"timeout_s": 12.0})
    assert by_name["generate"] == (({"text": "abc", "sampling_params": {"temperature": 0.0, "max_new_tokens": 7}},),
                                   {"timeout_s": 12.0})
    d = v.as_dict()
    assert d["verdict"] == "healthy" and d["reason"] == "all checks passed" and d["at"] == v.at.isoformat()
    assert d["checks"][1] == {"name": "health", "ok": True, "latency_ms": 1.5, "reason": "200"}


def test_without_expectations_only_health_generate_and_progress_are_probed():
    eng = ScriptedEngine()
    v = check_health(eng, process_alive=True)
    assert [c.name for c in v.checks] == ["process", "health", "health_generate", "progress"]
    assert [n for n, _, _ in eng.calls] == ["health", "health_generate", "metrics_text"]
    assert eng.calls[1][2] == {"timeout_s": 30.0}  # the default generate timeout


@pytest.mark.parametrize("alive, stopping, reason", [(False, False, "engine process is dead"),
                                                      (True, True, "stop requested: the engine is stopping"),
                                                      (False, True, "stop requested: the engine is stopping")])
def test_dead_or_stopping_is_down_without_a_request(alive, stopping, reason):
    eng = ScriptedEngine()
    v = check_health(eng, process_alive=alive, stop_requested=stopping)
    assert (v.verdict, v.reason, checks(v)) == ("down", reason, [("process", False, None, reason)])
    assert eng.calls == [] and v.progress is None


def test_health_unreachable_or_not_200_is_down():
    v = check_health(ScriptedEngine(health=gone()), process_alive=True)
    assert (v.verdict, v.reason, v.failed) == ("down", f"/health unreachable: {GONE_MSG}", ["health"])
    assert v.checks[1].latency_ms is not None and v.checks[1].latency_ms >= 0
    v = check_health(ScriptedEngine(health=ok({}, status=503, ms=2.0)), process_alive=True)
    assert (v.verdict, v.reason, checks(v)[1]) == ("down", "/health answered 503",
                                                   ("health", False, 2.0, "/health answered 503"))


def test_ranks():
    dead = SimpleNamespace(ok=False, reason="0 of 2 ranks alive", none_alive=True)
    eng = ScriptedEngine()
    v = check_health(eng, process_alive=True, ranks=dead)
    assert (v.verdict, v.reason) == ("down", "no rank process alive: 0 of 2 ranks alive") and eng.calls == []
    assert checks(v) == [("process", True, None, "alive"), ("ranks", False, None, "0 of 2 ranks alive")]
    one = SimpleNamespace(ok=False, reason="rank 1 dead", none_alive=False)
    v = check_health(ScriptedEngine(), process_alive=True, ranks=one)
    assert (v.verdict, v.reason) == ("degraded", "degraded: ranks (rank 1 dead)")
    fine = SimpleNamespace(ok=True, reason="2 of 2 ranks alive", none_alive=False)
    assert check_health(ScriptedEngine(), process_alive=True, ranks=fine).verdict == "healthy"


def test_health_generate_failures_are_degraded():
    v = check_health(ScriptedEngine(health_generate=gone("timeout")), process_alive=True, generate_timeout_s=2.5)
    assert v.verdict == "degraded"
    assert checks(v)[2][0:2] == ("health_generate", False)
    assert checks(v)[2][3] == ("no answer within 2.5 s: engine at http://127.0.0.1:1 unreachable (timeout): "
                               "refused")
    v = check_health(ScriptedEngine(health_generate=ok({}, status=500)), process_alive=True)
    assert (checks(v)[2], v.reason) == (("health_generate", False, 1.5, "500"), "degraded: health_generate (500)")


def test_server_info_answers_and_mismatches():
    def info_check(answer, expected=EXPECTED):
        v = check_health(ScriptedEngine(server_info=answer), process_alive=True, expected=expected)
        c = next(c for c in v.checks if c.name == "server_info")
        return c.ok, c.reason, v.verdict

    assert info_check(gone()) == (False, GONE_MSG, "degraded")
    assert info_check(ok(INFO, status=404)) == (False, "/get_server_info answered 404", "degraded")
    assert info_check(ok(["not", "a", "dict"])) == (False, "answer is not a JSON object", "degraded")
    assert info_check(ok({"server_args": INFO, "version": "0.5.17"}))[0] is True  # newer SGLang nests them
    assert info_check(ok({**INFO, "server_args": "n/a"}))[0] is True  # a non-object server_args is ignored
    assert info_check(ok({**INFO, "model_path": "/models/tinyX"}))[1] == (
        "model_path: expected '/models/tiny', engine reports '/models/tinyX'")
    wrong = {**INFO, "model_path": "/models/other", "tp_size": 1, "speculative_algorithm": "EAGLE3",
             "speculative_num_steps": 5, "speculative_eagle_topk": 2, "speculative_num_draft_tokens": 6}
    assert info_check(ok(wrong))[1] == (
        "model_path: expected '/models/tiny', engine reports '/models/other'; "
        "tp_size: expected 2, engine reports 1; "
        "speculative_algorithm: expected 'STANDALONE', engine reports 'EAGLE3'; "
        "speculative_num_steps: expected 3, engine reports 5; "
        "speculative_eagle_topk: expected 1, engine reports 2; "
        "speculative_num_draft_tokens: expected 4, engine reports 6")
    plain = ExpectedServer(model_path="/models/tiny", tp_size=2)
    assert info_check(ok({**INFO, "speculative_algorithm": None}), plain)[0] is True
    assert info_check(ok({**INFO, "speculative_algorithm": "NONE"}), plain)[0] is True
    assert info_check(ok({**INFO, "speculative_algorithm": ""}), plain)[0] is True
    assert info_check(ok({**INFO, "speculative_algorithm": "none"}), plain)[0] is True
    assert info_check(ok(INFO), plain)[1] == ("speculative_algorithm: expected None, engine reports 'standalone'")
    # without a speculative check, only model and tp are compared; missing fields are reported as None
    no_spec = ExpectedServer(model_path="/models/tiny", tp_size=2, check_speculative=False)
    assert info_check(ok({**INFO, "speculative_algorithm": "EAGLE"}), no_spec)[0] is True
    assert info_check(ok({"tp_size": 2}), no_spec)[1] == "model_path: expected '/models/tiny', engine reports None"
    assert info_check(ok({"model_path": "/models/tiny"}), no_spec)[1] == "tp_size: expected 2, engine reports None"
    # an algorithm-less expectation does not compare the per-algorithm widths
    assert info_check(ok({**INFO, "speculative_algorithm": None, "speculative_num_steps": 9}), plain)[0] is True


def test_canary():
    def canary_check(answer):
        v = check_health(ScriptedEngine(generate=answer), process_alive=True, canary=Canary("abc", " cba"))
        c = next(c for c in v.checks if c.name == "canary")
        return c.ok, c.reason

    assert canary_check(ok({"text": " cba"})) == (True, "golden continuation reproduced")
    assert canary_check(ok({"text": " xyz"})) == (False, "expected ' cba', got ' xyz'")
    assert canary_check(ok("not a dict")) == (False, "expected ' cba', got None")
    assert canary_check(ok({"text": " cba"}, status=500)) == (False, "/generate answered 500")
    assert canary_check(gone()) == (False, GONE_MSG)


def test_progress_checks():
    def progress(answer, prev=None, now=10.0, stall_after_s=30.0):
        v = check_health(ScriptedEngine(metrics_text=answer), process_alive=True, previous_progress=prev, now=now,
                         stall_after_s=stall_after_s)
        c = next(c for c in v.checks if c.name == "progress")
        return c.ok, c.reason, v.verdict, v.progress

    hint = "; start the engine with --enable-metrics"
    assert progress(gone())[:3] == (True, f"skipped: /metrics unavailable ({GONE_MSG}){hint}", "healthy")
    assert progress(ok(text="", status=404))[:3] == (True, f"skipped: /metrics unavailable (404){hint}", "healthy")
    bad = progress(ok(text="<html>\x1bnot prometheus {"))
    assert bad[0] is False and bad[2] == "degraded"
    assert bad[1] == ("/metrics unparsable: not Prometheus text (could not convert string to float: '{'); "
                      "it starts with '<html>\\x1bnot prometheus {'")
    # the parser's message is cut at 120 characters, the text's first line at 60
    long = progress(ok(text="a " + "b" * 200 + "\n"))[1]
    assert long == ("/metrics unparsable: not Prometheus text (could not convert string to float: '"
                    + "b" * 84 + "); it starts with 'a " + "b" * 58 + "'")
    prev = ProgressSample(0.0, 1000.0, 500.0, 2.0, 4.0)
    # loaded, nothing advanced for 10 s: still within the 30 s allowance, then past it
    stalled = progress(ok(text=metrics(running=2.0, queued=4.0)), prev)
    assert stalled[:3] == (True, "no token progress for 10.0 s with 2 running and 4 queued (generated stays 1000)",
                           "healthy")
    assert stalled[3].stalled_since == 0.0
    late = progress(ok(text=metrics(running=2.0, queued=4.0)), stalled[3], now=31.0)
    assert late[:3] == (False, "no token progress for 31.0 s with 2 running and 4 queued (generated stays 1000)",
                        "degraded")
    assert progress(ok(text=metrics(running=2.0, queued=4.0)), prev, now=30.0)[0] is False  # 30 s is too long
    # the previous sample is kept when /metrics is not available
    assert progress(gone(), prev)[3] is prev
    # the default allowance is 30 s
    v = check_health(ScriptedEngine(metrics_text=ok(text=metrics(running=2.0, queued=4.0))), process_alive=True,
                     previous_progress=prev, now=30.5)
    assert v.failed == ["progress"] and v.progress.stalled_since == 0.0  # the degraded verdict keeps the sample
    # without ``now`` the sample is stamped with the monotonic clock
    assert isinstance(check_health(ScriptedEngine(), process_alive=True).progress.t, float)


def test_failed_checks_keep_their_latency():
    """A check that made a request reports its latency even when it fails (unreachable: the time spent)."""
    v = check_health(ScriptedEngine(health_generate=gone(), server_info=gone(), generate=gone(), metrics_text=gone()),
                     process_alive=True, expected=EXPECTED, canary=Canary("abc", " cba"))
    for c in v.checks[2:]:
        assert c.latency_ms is not None and 0.0 <= c.latency_ms < 60_000.0, c  # a duration in ms, not a clock
    v = check_health(ScriptedEngine(server_info=ok(INFO, status=500, ms=3.0), generate=ok({}, status=500, ms=4.0),
                                    metrics_text=ok(text="{", ms=5.0)), process_alive=True, expected=EXPECTED,
                     canary=Canary("abc", " cba"))
    assert [c.latency_ms for c in v.checks[3:]] == [3.0, 4.0, 5.0]
    v = check_health(ScriptedEngine(metrics_text=ok(text="", status=404, ms=6.0)), process_alive=True)
    assert v.checks[-1].latency_ms == 6.0


def test_expected_server_from_config():
    from pathlib import Path

    from dynocell.engine.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[1] / "examples" / "tiny.toml")
    assert ExpectedServer.from_config(cfg) == ExpectedServer(
        model_path="dynocell:tiny", tp_size=1, speculative_algorithm="STANDALONE", speculative_num_steps=3,
        speculative_eagle_topk=1, speculative_num_draft_tokens=4, check_speculative=True)
    assert ExpectedServer.from_config(cfg, model_path="/cache/tiny").model_path == "/cache/tiny"
    vllm = load_config(Path(__file__).resolve().parents[1] / "examples" / "tiny-vllm.toml")
    assert ExpectedServer.from_config(vllm).served_model_name == "m"  # what /v1/models must list


def test_degraded_reason_lists_each_failed_check():
    eng = ScriptedEngine(health_generate=ok({}, status=500), generate=ok({"text": "x"}))
    v = check_health(eng, process_alive=True, canary=Canary("abc", " cba"))
    assert v.reason == "degraded: health_generate (500); canary (expected ' cba', got 'x')"
    assert v.failed == ["health_generate", "canary"]


def test_progress_from_metrics_sums_ranks_and_realtime_modes():
    text = "\n".join([
        "# TYPE sglang:num_running_reqs gauge",
        'sglang:num_running_reqs{tp_rank="0"} 1', 'sglang:num_running_reqs{tp_rank="1"} 2',
        "# TYPE sglang:num_queue_reqs gauge", 'sglang:num_queue_reqs{tp_rank="0"} 3',
        'sglang:num_queue_reqs{tp_rank="1"} 4',
        "# TYPE sglang:generation_tokens_total counter", 'sglang:generation_tokens_total{tp_rank="0"} 10',
        'sglang:generation_tokens_total{tp_rank="1"} 1',
        "# TYPE sglang:prompt_tokens_total counter", 'sglang:prompt_tokens_total{tp_rank="0"} 20',
        'sglang:prompt_tokens_total{tp_rank="1"} 2',
        "# TYPE sglang:realtime_tokens_total counter",
        'sglang:realtime_tokens_total{mode="decode"} 100', 'sglang:realtime_tokens_total{mode="prefill_compute"} 200',
        'sglang:realtime_tokens_total{mode="prefill_cache"} 300', 'sglang:realtime_tokens_total{mode="other"} 999',
        'sglang:realtime_tokens_total 7', "# TYPE other_total counter", "other_total 5", ""])
    s = progress_from_metrics(text, 4.5)
    assert (s.t, s.generated, s.prompt, s.running, s.queued, s.stalled_since) == (4.5, 111.0, 522.0, 3.0, 7.0, None)
    assert s.loaded and not ProgressSample(0, 0, 0, 0, 0).loaded
    assert ProgressSample(0, 0, 0, 0, 1).loaded and ProgressSample(0, 0, 0, 1, 0).loaded


def test_judge_progress_reasons():
    a = ProgressSample(0.0, 100.0, 50.0, 1.0, 0.0)
    assert judge_progress(None, a, 5.0) == (a, True, "baseline: 1 running, 0 queued")
    gen = ProgressSample(1.0, 110.0, 50.0, 1.0, 0.0)
    assert judge_progress(a, gen, 5.0) == (gen, True, "progress: generated tokens (+10 gen, +0 prompt)")
    pre = ProgressSample(1.0, 100.0, 80.0, 1.0, 0.0)
    assert judge_progress(a, pre, 5.0) == (pre, True, "progress: prompt tokens (+0 gen, +30 prompt)")
    idle = ProgressSample(1.0, 100.0, 50.0, 0.0, 0.0)
    assert judge_progress(a, idle, 5.0) == (idle, True, "progress: no load (+0 gen, +0 prompt)")
    # load now but none before (a new request just arrived): not a stall either
    assert judge_progress(idle, ProgressSample(2.0, 100.0, 50.0, 1.0, 0.0), 5.0)[1] is True
    a1 = ProgressSample(1.0, 100.0, 50.0, 1.0, 0.0)
    cur, ok_, why = judge_progress(a1, ProgressSample(4.0, 100.0, 50.0, 1.0, 2.0), 5.0)
    assert (ok_, why, cur.t, cur.stalled_since) == (True, "no token progress for 3.0 s with 1 running and 2 queued "
                                                          "(generated stays 100)", 4.0, 1.0)
    cur2, ok2, why2 = judge_progress(cur, ProgressSample(9.0, 100.0, 50.0, 1.0, 2.0), 5.0)
    assert (ok2, cur2.stalled_since, why2.startswith("no token progress for 8.0 s")) == (False, 1.0, True)


# ---------------------------------------------------------------- vLLM's OpenAI surface (api="vllm")

MODELS = ok({"object": "list", "data": [{"id": "m", "object": "model"}, "junk", {"id": "m-lora"}]})


def vllm_engine(**answers):
    return ScriptedEngine(**{"models": MODELS, "completions": ok({"choices": [{"text": " cba"}]}), **answers})


def test_vllm_checks_in_order_with_payloads():
    """Checks 3'-5': /v1/models serves the expected name, a 1-token completion, the canary (greedy)."""
    eng = vllm_engine()
    want = ExpectedServer(model_path="/models/tiny", served_model_name="m")
    v = check_health(eng, process_alive=True, expected=want, canary=Canary("abc", " cba", 7), api="vllm",
                     generate_timeout_s=12.0, now=5.0)
    assert (v.verdict, v.reason) == ("healthy", "all checks passed")
    assert checks(v) == [("process", True, None, "alive"), ("health", True, 1.5, "200"),
                         ("models", True, 1.5, "serves ['m', 'm-lora']"), ("completion", True, 1.5, "1 token"),
                         ("canary", True, 1.5, "golden continuation reproduced"),
                         ("progress", True, 1.5, "baseline: 0 running, 0 queued")]
    sent = [(a, kw) for n, a, kw in eng.calls if n == "completions"]
    assert sent == [(({"prompt": "Hello", "max_tokens": 1, "temperature": 0.0, "model": "m"},), {"timeout_s": 12.0}),
                    (({"prompt": "abc", "max_tokens": 7, "temperature": 0.0, "model": "m"},), {"timeout_s": 12.0})]
    # No expectation: the first served name is the model asked for; no canary: one completion only.
    eng = vllm_engine()
    v = check_health(eng, process_alive=True, api="vllm")
    assert [c.name for c in v.checks] == ["process", "health", "models", "completion", "progress"]
    assert [a[0]["model"] for n, a, kw in eng.calls if n == "completions"] == ["m"]
    assert [kw for n, a, kw in eng.calls if n == "completions"] == [{"timeout_s": 30.0}]
    # Nothing served: no model field at all.
    eng = vllm_engine(models=ok({"data": []}))
    check_health(eng, process_alive=True, api="vllm")
    assert [a[0] for n, a, kw in eng.calls if n == "completions"] == [
        {"prompt": "Hello", "max_tokens": 1, "temperature": 0.0}]


def test_vllm_check_failures_word_for_word():
    def failed(**answers):
        kw = answers.pop("kw", {})
        v = check_health(vllm_engine(**answers), process_alive=True, api="vllm", **kw)
        return v.verdict, [(c.name, c.ok, c.reason) for c in v.checks if not c.ok], v.reason

    want = ExpectedServer(model_path="/models/tiny", served_model_name="other")
    assert failed(kw={"expected": want}) == (
        "degraded", [("models", False, "'other' not in ['m', 'm-lora']")],
        "degraded: models ('other' not in ['m', 'm-lora'])")
    assert failed(models=ok({"data": []}, status=503))[1] == [("models", False, "/v1/models answered 503")]
    assert failed(models=ok("not json"))[1] == [("models", False, "/v1/models answered 200")]
    assert failed(models=gone())[1][0] == ("models", False, GONE_MSG)
    v = check_health(vllm_engine(models=ok({"object": "list"})), process_alive=True, api="vllm")  # no "data"
    assert checks(v)[2] == ("models", True, 1.5, "serves []")
    v = check_health(vllm_engine(models=ok({}, status=503), completions=gone()), process_alive=True, api="vllm")
    assert checks(v)[2] == ("models", False, 1.5, "/v1/models answered 503")  # a failed check keeps its latency
    assert v.checks[3].latency_ms is not None and v.checks[3].latency_ms >= 0
    assert failed(completions=ok({"choices": []}))[1] == [("completion", False, "/v1/completions answered 200")]
    assert failed(completions=ok({"choices": [{"text": "x"}]}, status=500))[1] == [
        ("completion", False, "/v1/completions answered 500")]
    assert failed(completions=ok("text"))[1] == [("completion", False, "/v1/completions answered 200")]
    assert failed(completions=gone(), kw={"generate_timeout_s": 2.5})[1] == [
        ("completion", False, f"no answer within 2.5 s: {GONE_MSG}")]
    canary = Canary("abc", " xyz", 3)
    assert failed(kw={"canary": canary})[1] == [("canary", False, "expected ' xyz', got ' cba'")]
    eng = vllm_engine()
    check_health(eng, process_alive=True, api="vllm", canary=Canary("abc", " cba", 2))  # 2 tokens: still the canary
    assert [a[0]["prompt"] for n, a, kw in eng.calls if n == "completions"] == ["Hello", "abc"]
    assert failed(completions=ok({"choices": []}), kw={"canary": canary})[1][1] == (
        "canary", False, "expected ' xyz', got None")
    assert failed(completions=ok({"choices": [{"text": " xyz"}]}, status=500), kw={"canary": canary})[1][1] == (
        "canary", False, "expected ' xyz', got None")
    assert failed(completions=ok("text"), kw={"canary": canary})[1][1] == ("canary", False,
                                                                          "expected ' xyz', got None")
    assert failed(completions=gone(), kw={"canary": canary})[1][1] == ("canary", False, GONE_MSG)


def test_api_of_configs_and_engine_names():
    from dynocell.engine.health import api_of

    assert [api_of(x) for x in ("vllm", "sglang", "reference", "VLLM")] == ["vllm", "sglang", "sglang", "sglang"]
    assert api_of(SimpleNamespace(api="vllm")) == "vllm" and api_of(SimpleNamespace()) == "sglang"


def test_progress_from_a_real_vllm_scrape_summed_over_engines():
    """vLLM 0.26's counters (tests/data/vllm-0.26.0/C_draft_graph.metrics.txt: 6032 generated, 402 prompt
    tokens, 0 running, 0 waiting), plus a second engine core's lines: each counter sums over engines."""
    from pathlib import Path

    text = (Path(__file__).parent / "data" / "vllm-0.26.0" / "C_draft_graph.metrics.txt").read_text()
    s = progress_from_metrics(text, 3.0)
    assert (s.t, s.generated, s.prompt, s.running, s.queued) == (3.0, 6032.0, 402.0, 0.0, 0.0)
    two = text.replace('vllm:generation_tokens_total{engine="0",model_name="m"} 6032.0',
                       'vllm:generation_tokens_total{engine="0",model_name="m"} 6032.0\n'
                       'vllm:generation_tokens_total{engine="1",model_name="m"} 100.0')
    two = two.replace('vllm:prompt_tokens_total{engine="0",model_name="m"} 402.0',
                      'vllm:prompt_tokens_total{engine="0",model_name="m"} 402.0\n'
                      'vllm:prompt_tokens_total{engine="1",model_name="m"} 8.0')
    two = two.replace('vllm:num_requests_running{engine="0",model_name="m"} 0.0',
                      'vllm:num_requests_running{engine="0",model_name="m"} 2.0\n'
                      'vllm:num_requests_running{engine="1",model_name="m"} 1.0')
    two = two.replace('vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
                      'vllm:num_requests_waiting{engine="0",model_name="m"} 4.0\n'
                      'vllm:num_requests_waiting{engine="1",model_name="m"} 1.0')
    s = progress_from_metrics(two, 3.0)
    assert (s.generated, s.prompt, s.running, s.queued) == (6132.0, 410.0, 3.0, 5.0)


def test_server_info_nextn_is_eagle():
    """SGLang 0.5.17 stores NEXTN as EAGLE (arg_groups/speculative_hook.py): a NEXTN config matches an engine that
    reports EAGLE, in any case; another algorithm still mismatches."""
    def info_check(reported, want):
        exp = ExpectedServer(model_path="/models/tiny", tp_size=2, speculative_algorithm=want,
                             speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)
        v = check_health(ScriptedEngine(server_info=ok({**INFO, "speculative_algorithm": reported})),
                         process_alive=True, expected=exp)
        c = next(c for c in v.checks if c.name == "server_info")
        return c.ok, c.reason

    for reported, want in (("EAGLE", "NEXTN"), ("EAGLE", "nextn"), ("eagle", "NEXTN"), ("NEXTN", "EAGLE"),
                           ("nextn", "eagle"), ("Eagle", "Eagle")):
        assert info_check(reported, want) == (True, "model and key args match"), (reported, want)
    assert info_check("EAGLE3", "NEXTN") == (
        False, "speculative_algorithm: expected 'NEXTN', engine reports 'EAGLE3'")
