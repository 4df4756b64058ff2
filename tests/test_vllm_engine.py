"""vLLM supervision and health (issue 21 items 2-3): phases from the real vLLM 0.26.0 logs, the
EngineCore child as a rank (dead EngineCore behind a live API server → ``down``), stop discipline
over the process group. The engine process is tests/engines/ranked_engine.py --vllm: a real
subprocess on 127.0.0.1 whose child is titled like vLLM's ``VLLM::EngineCore``."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from dynocell.engine.client import EngineClient
from dynocell.engine.config import parse_config
from dynocell.engine.health import check_health
from dynocell.engine.ranks import expected_ranks, rank_status
from dynocell.engine.rules import PhaseMatcher
from dynocell.engine.supervisor import Supervisor, process_alive
from dynocell.runbooks.boots import rank_status_of
from tests.test_multinode import ranked_spec, read_pids, wait_for

DATA = Path(__file__).parent / "data" / "vllm-0.26.0"


def phases_of(log: Path) -> list[str]:
    m = PhaseMatcher("vllm")
    out = []
    for line in log.read_text(errors="replace").splitlines():
        hit = m.match(line)
        if hit is not None and (not out or out[-1] != hit.name):
            out.append(hit.name)
    return out


def test_phases_of_the_real_draft_graph_boot_in_order():
    """Target and draft are compiled one after the other (two torch.compile spans)."""
    assert phases_of(DATA / "C_draft_graph.server.log") == [
        "config", "engine_init", "weights_begin", "weights_end", "compile_begin", "compile_end",
        "compile_begin", "compile_end", "kv_cache_allocated", "cuda_graph_begin", "cuda_graph_end", "engine_ready",
        "http_listening", "ready"]


def test_failed_boot_stops_before_ready():
    got = phases_of(DATA / "fail3-draft-picks-FLASH_ATTN.C_draft_graph.server.log")
    assert got[:2] == ["config", "engine_init"] and "ready" not in got


def test_expected_engine_cores():
    def cfg(dp: int):
        return parse_config(f'engine = "vllm"\nmodel_path = "Qwen/Qwen3-8B"\n[parallel]\ndp_size = {dp}\n', "t")
    assert expected_ranks(cfg(1)) == 1 and expected_ranks(cfg(4)) == 4


def test_dead_engine_core_behind_live_api_server_is_down_and_stop_leaves_nothing(tmp_path):
    pid_file = tmp_path / "ranks.txt"
    cfg = parse_config('engine = "vllm"\nmodel_path = "Qwen/Qwen3-8B"\n', "t")
    sup = Supervisor("sglang")  # the stand-in prints SGLang's ready line; the process tree is vLLM's
    sup.start(ranked_spec(pid_file, "--ranks", "1", "--vllm"), tmp_path / "boot.log")
    try:
        assert sup.wait_ready(timeout_s=20).ok
        pids = read_pids(pid_file, 1)
        client = EngineClient(f"http://127.0.0.1:{sup.spec.port}", 5.0)
        wait_for(lambda: rank_status(sup.pid, sup.pgid, 1).alive == 1)
        st = rank_status_of(cfg, sup.pid, sup.pgid)
        assert st is not None and st.ok and [r.name for r in st.found] == ["EngineCore"]
        assert check_health(client, process_alive=True, ranks=st).verdict == "healthy"

        os.kill(pids["VLLM::EngineCore"], signal.SIGKILL)
        wait_for(lambda: not process_alive(pids["VLLM::EngineCore"]))
        st = rank_status_of(cfg, sup.pid, sup.pgid)
        v = check_health(client, process_alive=sup.poll().value == "ready", ranks=st)
        assert v.verdict == "down", v.reason
        assert "0/1 ranks alive" in v.reason and "EngineCore" in v.reason
        assert any(c.name == "process" and c.ok for c in v.checks)  # the API server itself lives
    finally:
        res = sup.stop(grace_s=5)
        sup.close()
    assert not res.survivors and not any(process_alive(p) for p in pids.values())


@pytest.mark.parametrize("engine,want", [("sglang", None), ("reference", None)])
def test_one_rank_engines_other_than_vllm_are_not_rank_checked(engine, want):
    cfg = parse_config(f'engine = "{engine}"\nmodel_path = "dynocell:tiny"\n', "t")
    assert rank_status_of(cfg, os.getpid(), os.getpgid(0)) is want


@pytest.mark.parametrize("log,want", [
    ("fail1-no-flash-attn-binaries.A_graph.server.log", "vllm_flash_attn_missing"),
    ("fail3-draft-picks-FLASH_ATTN.C_draft_graph.server.log", "vllm_flash_attn_missing"),
])
def test_real_failed_vllm_boots_name_the_missing_flash_attention(log, want):
    """fail1/fail2: the H200 host's failed boots of docs/h200/VLLM.md's recipe (copied into tests/data/vllm-0.26.0/)."""
    from dynocell.engine.rules import classify_log

    lines = (DATA / log).read_text(errors="replace").splitlines()
    match, _, ready = classify_log(lines, "vllm", exit_code=1)
    assert match.id == want and not ready
    assert "TRITON_ATTN" in match.hint


def test_the_patched_import_warning_is_not_that_failure():
    """fail2 died of flashinfer; its log carries the patched vllm_flash_attn *warning*, not the error."""
    from dynocell.engine.rules import classify_log

    lines = (DATA / "fail2-flashinfer-sampler.A_graph.server.log").read_text(errors="replace").splitlines()
    assert any("vllm_flash_attn requires" in ln for ln in lines)
    assert classify_log(lines, "vllm", exit_code=1)[0].id != "vllm_flash_attn_missing"


# ---------------------------------------------------------------- health oracle, vLLM surface (item 3)

@pytest.fixture(scope="module")
def openai_engine(model_pair, tmp_path_factory):
    """The real reference engine: it serves vLLM's OpenAI routes (/v1/models, /v1/completions)."""
    from dynocell.engine.reference.launch import start_engine

    eng = start_engine(model_pair.target, ["--served-model-name", "m"], tmp_path_factory.mktemp("e") / "s.log")
    yield eng
    eng.stop()


def test_vllm_checks_models_completion_and_canary(openai_engine):
    from dynocell.engine.health import Canary, ExpectedServer

    client = EngineClient(openai_engine.url, 10.0)
    good = ExpectedServer(model_path="/models/target", served_model_name="m")
    v = check_health(client, process_alive=True, expected=good, api="vllm")
    assert v.verdict == "healthy", v.reason
    assert [c.name for c in v.checks] == ["process", "health", "models", "completion", "progress"]
    assert all(c.latency_ms is not None for c in v.checks[1:])

    body = client.completions({"model": "m", "prompt": "def ", "max_tokens": 6, "temperature": 0.0}).body
    golden = body["choices"][0]["text"]
    v = check_health(client, process_alive=True, expected=good, canary=Canary("def ", golden, 6), api="vllm")
    assert v.verdict == "healthy" and any(c.name == "canary" and c.ok for c in v.checks), v.reason
    v = check_health(client, process_alive=True, expected=good, canary=Canary("def ", golden + "x", 6), api="vllm")
    assert v.verdict == "degraded" and v.failed == ["canary"]

    wrong = ExpectedServer(model_path="/models/target", served_model_name="other")
    v = check_health(client, process_alive=True, expected=wrong, api="vllm")
    assert v.verdict == "degraded" and v.failed == ["models"] and "'other' not in ['m']" in v.reason


def test_vllm_progress_from_real_scrape_and_stall_under_load():
    """Counters of the real C_draft_graph scrape; the same counters twice with requests waiting
    (a live API server whose engine makes no progress) → the progress check fails (degraded)."""
    from dynocell.engine.health import judge_progress, progress_from_metrics

    text = (DATA / "C_draft_graph.metrics.txt").read_text()
    s = progress_from_metrics(text, 0.0)
    assert (s.generated, s.prompt, s.running, s.queued) == (6032.0, 402.0, 0.0, 0.0)
    waiting = text.replace('vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
                           'vllm:num_requests_waiting{engine="0",model_name="m"} 5.0')
    a, b = progress_from_metrics(waiting, 0.0), progress_from_metrics(waiting, 45.0)
    cur, ok, why = judge_progress(judge_progress(None, a, 30.0)[0], b, 30.0)
    assert not ok and "5 queued" in why


def test_reference_vllm_surface_dead_engine_core_is_down(settings, model_pair):
    """The real reference engine booted from examples/tiny-vllm.toml by the boot runbook: its
    VLLM::EngineCore child is found as a rank; killed (API server still answering) → ``down``;
    stopping the boot's process group leaves nothing."""
    import signal as sig

    import psutil

    from dynocell.engine.config import load_config
    from dynocell.runbooks import boots
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import store_config

    cell = open_cell(settings)
    cfg = load_config(Path(__file__).resolve().parents[1] / "examples" / "tiny-vllm.toml")
    live = boots.start_boot(cell, cfg, store_config(cell, cfg), timeout_s=180)
    try:
        wait_for(lambda: rank_status(live.supervisor.pid, live.supervisor.pgid, 1).alive == 1)
        assert boots.health(cell, live.boot_id).verdict == "healthy"
        core = next(r for r in rank_status(live.supervisor.pid, live.supervisor.pgid, 1).found)
        assert core.name == "EngineCore"
        os.kill(core.pid, sig.SIGKILL)
        wait_for(lambda: not process_alive(core.pid))
        v = boots.health(cell, live.boot_id)
        ranks = next(c for c in v.checks if c["name"] == "ranks")
        assert v.verdict == "down" and not ranks["ok"] and "0/1 ranks alive" in ranks["reason"], v
        assert EngineClient(live.base_url, 5.0).health().status == 200  # the API server still answers
    finally:
        boots.stop_live(cell, live, 5.0)
    assert not [p for p in psutil.process_iter(["cmdline"]) if "VLLM::EngineCore" in " ".join(p.info["cmdline"] or [])
                and p.ppid() == live.supervisor.pid]
