"""Every failure-signature and phase rule against the engines' real lines (issue 25).

The lines, each with its source (engine file @ version, public URL, field report,
measured artifact), are in ``tests/data/engine_lines/lines.toml``. Each rule has a
positive line it must name and a negative line it must not; the real vLLM 0.26.0
failure logs are classified whole.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from dynocell.engine.rules import classify, classify_log, load_signatures, match_phase

DATA = Path(__file__).parent / "data" / "engine_lines"
LINES = tomllib.loads((DATA / "lines.toml").read_text(encoding="utf-8"))
VLLM_LOGS = DATA / "vllm-0.26.0"  # copied from the H200 host's artifacts, vllm-0.26.0-h200 (one H200, 2026-12-01)


def _classify(case: dict):
    tail = list(case.get("before", [])) + [case["text"]]
    return classify(tail, last_phase=case.get("last_phase"), was_ready=case.get("ready", False))


@pytest.mark.parametrize("case", LINES["line"], ids=[f"{c['expect']}:{i}" for i, c in enumerate(LINES["line"])])
def test_real_line_is_named_by_its_rule(case):
    assert case["source"].strip()
    m = _classify(case)
    assert m.id == case["expect"], (case["text"], m.id, m.line)
    assert m.id not in case.get("not", [])
    for k, v in case.get("groups", {}).items():
        assert m.groups.get(k) == v, (k, m.groups)


def test_every_signature_has_a_positive_and_a_negative_real_line():
    ids = {s.id for s in load_signatures()}
    positive = {c["expect"] for c in LINES["line"]}
    negative = {i for c in LINES["line"] for i in c.get("not", [])}
    assert ids - positive == set(), f"rules without a real positive line: {sorted(ids - positive)}"
    assert ids - negative == set(), f"rules without a real negative line: {sorted(ids - negative)}"
    assert (positive | negative) - ids <= {"unknown"}, "lines name a rule that does not exist"


@pytest.mark.parametrize("case", LINES["phase"], ids=[f"{c['expect']}:{i}" for i, c in enumerate(LINES["phase"])])
def test_real_phase_line(case):
    hit = match_phase(case["text"], case.get("engine", "sglang"))
    assert (hit.name if hit else "none") == case["expect"], case["text"]
    for k, v in case.get("detail", {}).items():
        assert hit.detail.get(k) == v, (k, hit.detail)


def test_benign_port_lines_do_not_outrank_oom_or_nccl():
    """vLLM's port retry and NCCL's bind warning are benign; a real port clash ranks below OOM and NCCL."""
    retry = ("(APIServer pid=2034) INFO 12-01 07:59:58 [network_utils.py:120] Port 26050 is already in use, "
             "trying port 26051")
    nccl_bind = "gpu-node-1:2270:2291 [0] misc/socket.cc:484 NCCL WARN Call to bind failed : Address already in use"
    uvicorn = ("ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30003): "
               "address already in use")
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 662.00 MiB."
    nccl = ("[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE) "
            "ran for 600087 milliseconds before timing out.")
    assert classify([retry, nccl_bind], last_phase=None, was_ready=False).id == "unknown"
    assert classify([oom, uvicorn], last_phase="ready", was_ready=True).id == "cuda_oom_serving"
    assert classify([uvicorn, nccl], last_phase="ready", was_ready=True).id == "nccl_timeout_serving"
    assert classify([retry, uvicorn], last_phase=None, was_ready=False).id == "port_in_use"


@pytest.mark.parametrize("name,expect", [
    ("fail1-no-flash-attn-binaries.A_graph.server.log", "vllm_flash_attn_missing"),  # issue 21's rule
    ("fail2-flashinfer-sampler.A_graph.server.log", "python_import_error"),
    ("fail3-draft-picks-FLASH_ATTN.C_draft_graph.server.log", "vllm_flash_attn_missing"),
    ("A_graph.server.log", "unknown"),
    ("C_draft_graph.server.log", "unknown"),
])
def test_real_vllm_logs_classified(name, expect):
    lines = (VLLM_LOGS / name).read_text(errors="replace").splitlines()
    assert classify_log(lines)[0].id == expect


def test_knowledge_examples_are_real_lines_the_rules_name():
    """Each entry that names failure signatures carries examples that one of them matches (lint enforces it)."""
    from dynocell.runbooks.knowledge import bundled_knowledge, example_problems

    kn = bundled_knowledge()
    with_ids = [e for e in kn.entries.values() if e.signatures.get("ids")]
    assert with_ids and all(e.examples for e in with_ids)
    assert [p for e in with_ids for p in example_problems(e)] == []


# ---------------------------------------------------------------- issue 35: the phase a failure came in

@pytest.mark.parametrize("tail,last_phase,ready,want", [
    # vllm #19186: the OOM's frames are the graph capture's, whatever phase line the excerpt lacks
    (['  File "/usr/local/lib/python3.10/site-packages/torch/cuda/graphs.py", line 186, in __exit__',
      "    self.cuda_graph.capture_end()", "RuntimeError: CUDA error: out of memory"], None, False,
     ("cuda_oom_graph_capture", "cuda_graph_capture")),
    # a config refusal is the config check's, by its signature
    (["NotImplementedError: Pipeline parallelism is not supported for this model."], None, False,
     ("speculative_combo_unsupported", "config_check")),
    # an exception no signature names, after the KV cache was sized: not a weights failure, never unknown
    (["RuntimeError: the frobnicator broke"], "kv_cache_allocated", False,
     ("unhandled_exception", "cuda_graph_capture")),
    # vllm #32591: frames only (the exception line cut off), no phase anywhere: named, phase unknown
    (['(EngineCore_DP0 pid=1081641) ERROR 01-19 11:58:38 [core.py:937]   File '
      '"/home/tomasruiz/code/vllm/vllm/compilation/piecewise_backend.py", line 186, in __call__'], None, False,
     ("unhandled_exception", None)),
    # after ready every failure is a serving one
    (["torch.AcceleratorError: CUDA error: an illegal memory access was encountered"], "ready", True,
     ("cuda_illegal_address", "serving")),
])
def test_a_failure_is_classified_by_the_phase_it_came_in(tail, last_phase, ready, want):
    m = classify(tail, last_phase=last_phase, was_ready=ready)
    assert (m.id, m.phase) == want
