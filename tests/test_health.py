"""Health oracle and HTTP client against live test engines, real SGLang /metrics and synthetic lie shapes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from dynocell.engine.adapters import LaunchSpec, pick_free_port
from dynocell.engine.client import EngineClient, EngineUnreachable
from dynocell.engine.health import (
    Canary,
    ExpectedServer,
    ProgressSample,
    check_health,
    judge_progress,
    progress_from_metrics,
)
from dynocell.engine.supervisor import Supervisor

HERE = Path(__file__).parent
FAKE = HERE / "engines" / "fake_engine.py"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"}
SPEC_ARGS = ("--model-path", "/models/tiny", "--speculative-algorithm", "STANDALONE",
             "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4")
EXPECTED = ExpectedServer(model_path="/models/tiny", tp_size=1, speculative_algorithm="STANDALONE",
                          speculative_num_steps=3, speculative_eagle_topk=1, speculative_num_draft_tokens=4)


def metrics_file(name: str) -> Path:
    return HERE / "data" / "sglang-0.5.17" / name


@pytest.fixture
def engine(tmp_path):
    """Start a fake engine in a mode; yields (supervisor, client); stops everything after."""
    started = []

    def start(mode: str, *extra: str):
        port = pick_free_port()
        spec = LaunchSpec([sys.executable, str(FAKE), "--port", str(port), "--mode", mode, *SPEC_ARGS, *extra],
                          dict(ENV), port, "127.0.0.1")
        sup = Supervisor("sglang")
        sup.start(spec, tmp_path / f"{mode}.log")
        assert sup.wait_ready(timeout_s=20, probe_interval_s=0.1).ok
        client = EngineClient(spec.base_url, 5.0)
        started.append((sup, client))
        return sup, client

    yield start
    for sup, client in started:
        client.close()
        sup.stop(grace_s=2)


def test_healthy_engine_all_checks_with_latency(engine):
    sup, client = engine("graceful")
    canary = Canary(prompt="abc", golden=" cba")
    v = check_health(client, process_alive=True, expected=EXPECTED, canary=canary)
    assert v.verdict == "healthy", v.reason
    assert [c.name for c in v.checks] == ["process", "health", "health_generate", "server_info", "canary", "progress"]
    assert all(c.latency_ms is not None and c.latency_ms >= 0 for c in v.checks[1:])
    assert v.progress is not None and not v.progress.loaded
    assert v.as_dict()["checks"][1]["name"] == "health"


def test_wrong_args_and_garbage_output_are_degraded(engine):
    sup, client = engine("graceful", "--garbage")
    wrong = ExpectedServer(model_path="/models/other", tp_size=2, speculative_algorithm="EAGLE3")
    v = check_health(client, process_alive=True, expected=wrong, canary=Canary("abc", " cba"))
    assert v.verdict == "degraded" and set(v.failed) == {"server_info", "canary"}
    info = next(c for c in v.checks if c.name == "server_info")
    assert "model_path" in info.reason and "tp_size" in info.reason and "speculative_algorithm" in info.reason
    assert "server_info" in v.reason and "canary" in v.reason


def test_dead_stopping_or_unreachable_is_down(engine):
    sup, client = engine("graceful")
    assert check_health(client, process_alive=False).verdict == "down"
    v = check_health(client, process_alive=True, stop_requested=True)
    assert v.verdict == "down" and v.failed == ["process"]
    with EngineClient(f"http://127.0.0.1:{pick_free_port()}", 1.0) as nobody:
        v = check_health(nobody, process_alive=True)
        assert v.verdict == "down" and v.failed == ["health"] and "unreachable" in v.reason


def test_health_non_200_after_ready_is_down_not_degraded(engine):
    """/health answers 503 after ready while /health_generate and /metrics still answer 200: down."""
    sup, client = engine("health_503")
    assert sup.poll().value == "ready"
    v = check_health(client, process_alive=True)
    assert v.verdict == "down", v.reason
    assert v.failed == ["health"] and v.reason == "/health answered 503"
    assert [c.name for c in v.checks] == ["process", "health"]  # nothing else is probed once /health fails


def test_health_lie_is_degraded_with_reason(engine):
    """/health and /health_generate answer 200, requests queue, no token ever comes out."""
    sup, client = engine("health_lie")
    prev, verdicts = None, []
    for _ in range(8):  # many probe periods
        v = check_health(client, process_alive=sup.poll().value == "ready", previous_progress=prev,
                         stall_after_s=0.6)
        verdicts.append(v)
        prev = v.progress
        time.sleep(0.15)
    assert verdicts[0].verdict == "healthy"  # a first probe has no baseline yet
    last = verdicts[-1]
    assert last.verdict == "degraded" and last.failed == ["progress"]
    assert "no token progress" in last.reason and "4 queued" in last.reason
    assert next(c for c in last.checks if c.name == "health_generate").ok  # the probe lied


def test_slow_prefill_with_advancing_prompt_counters_is_not_dead(engine):
    sup, client = engine("slow_prefill")
    prev = None
    for _ in range(6):
        v = check_health(client, process_alive=True, previous_progress=prev, stall_after_s=0.3)
        assert v.verdict == "healthy", v.reason
        prev = v.progress
        time.sleep(0.15)
    assert prev.loaded and prev.stalled_since is None


def test_progress_from_real_sglang_metrics():
    text = metrics_file("C.metrics.txt").read_text()
    s = progress_from_metrics(text, 100.0)
    # generation_tokens_total 2632 + realtime_tokens_total{mode="decode"} of C's capture
    decode_rt = sum(float(ln.rsplit(" ", 1)[1]) for ln in text.splitlines()
                    if ln.startswith("sglang:realtime_tokens_total{") and 'mode="decode"' in ln)
    assert s.generated == 2632.0 + decode_rt and s.prompt >= 329.0
    assert s.running == 0 and s.queued == 0 and s.t == 100.0


def _prom(gen: float, prefill: float, running: int, queued: int) -> str:
    return (f"# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs {running}\n"
            f"# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs {queued}\n"
            f"# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total {gen}\n"
            f"# TYPE sglang:realtime_tokens_total counter\n"
            f'sglang:realtime_tokens_total{{mode="prefill_compute"}} {prefill}\n')


def test_synthetic_lie_shapes_over_simulated_time():
    # 1) decode stalls under load for 40 s of 5-s probes → fails once stalled ≥ 30 s
    prev, oks = None, []
    for i in range(9):
        cur = progress_from_metrics(_prom(500, 100, running=8, queued=3), 5.0 * i)
        prev, ok, why = judge_progress(prev, cur, stall_after_s=30.0)
        oks.append(ok)
    assert oks == [True] * 6 + [False] * 3 and "no token progress for 40.0 s" in why
    # 2) a long prefill: no output for 25 s, but the prefill counter advances → never failing
    prev = None
    for i in range(6):
        cur = progress_from_metrics(_prom(500, 100 + 8192 * i, running=1, queued=0), 5.0 * i)
        prev, ok, why = judge_progress(prev, cur, stall_after_s=10.0)
        assert ok, why
    # 3) progress resumes → the stall clock resets
    stalled = ProgressSample(0.0, 1, 1, 1, 0, stalled_since=0.0)
    cur, ok, _ = judge_progress(stalled, ProgressSample(50.0, 2, 1, 1, 0), 30.0)
    assert ok and cur.stalled_since is None
    # 4) idle engine: nothing queued, nothing advancing → fine
    assert judge_progress(ProgressSample(0, 1, 1, 0, 0), ProgressSample(100, 1, 1, 0, 0), 1.0)[1]


def test_client_errors_are_clear(engine):
    port = pick_free_port()
    with EngineClient(f"http://127.0.0.1:{port}", 1.0) as c:
        with pytest.raises(EngineUnreachable) as exc:
            c.health()
        assert exc.value.kind == "connect" and str(port) in exc.value.message and exc.value.hint
    sup, client = engine("graceful", "--health-generate-delay", "1.0")
    with pytest.raises(EngineUnreachable) as exc:
        client.health_generate(timeout_s=0.2)
    assert exc.value.kind == "timeout"
    v = check_health(client, process_alive=True, generate_timeout_s=0.2)
    assert v.verdict == "degraded" and v.failed == ["health_generate"]
    r = client.generate({"text": "hi", "sampling_params": {"max_new_tokens": 2}})
    assert r.ok and r.body["text"] == " ih" and r.latency_ms > 0
    assert client.flush_cache().status == 200 and client.model_info().body["model_path"] == "/models/tiny"
    assert "sglang:num_running_reqs" in client.metrics_text().text
