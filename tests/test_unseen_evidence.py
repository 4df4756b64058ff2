"""Diagnosis on evidence dynocell has never seen (issue 35, the cases that waited for a capability).

Each test feeds a real public excerpt (its source URL beside it), or the thread's numbers in the
shape the tool writes, through the real import procedures into a real SQLite store, then asks the
doctor. No config is written by hand: the evidence alone.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


def _diagnose(cell, ref: str) -> dict[str, dict]:
    from dynocell.runbooks.doctor import diagnose

    return {f.rule: f.evidence for f in diagnose(cell, ref, store_findings=False)}


def _bench_file(tmp_path: Path, accept_length: float, name: str = "bench.jsonl") -> Path:
    """One sglang.bench_serving result line (the keys it writes; a plain server writes accept_length null)."""
    p = tmp_path / name
    p.write_text(json.dumps({"backend": "sglang", "max_concurrency": 1, "request_rate": "inf",
                             "dataset_name": "sharegpt", "completed": 80, "output_throughput": 95.0,
                             "mean_ttft_ms": 41.0, "mean_e2e_latency_ms": 2650.0,
                             "accept_length": accept_length}) + "\n")
    return p


# ---------------------------------------------------------------- τ near one, the draft count unknown

@pytest.mark.parametrize("tau, source", [
    (1.00, "https://github.com/sgl-project/sglang/pull/21272"),  # EAGLE algorithm, EAGLE-3 head: accept_length 1.00
    (1.02, "https://github.com/sgl-project/SpecForge/issues/455"),  # a trained DFlash draft served at 1.02
])
def test_bench_accept_length_near_one_is_pinned_whatever_k(cell, tmp_path, tau, source):
    """A bench file of a server dynocell never saw says τ but not k: τ − 1 is the drafts accepted per
    verify step at any k, so ~0 is the drafter contributing nothing."""
    from dynocell.runbooks.evidence import import_bench

    res = import_bench(cell, _bench_file(tmp_path, tau))
    found = _diagnose(cell, res["run_id"])
    assert source.startswith("https://")
    assert "pinned_near_one" in found
    ev = found["pinned_near_one"]
    assert ev["num_drafts"] is None and ev["max_tau"] == tau and ev["source"] == "sglang-bench-serving accept_length"


def test_bench_accept_length_well_above_one_with_k_unknown_is_not_judged(cell, tmp_path):
    """τ 1.30 with k unknown could be a fair drafter at k = 1 (30 % accepted): no verdict without k.
    The number is the SGLang 0.5.17 NGRAM run's sampled fresh-text τ band (doctor_thresholds.toml)."""
    from dynocell.runbooks.evidence import import_bench

    res = import_bench(cell, _bench_file(tmp_path, 1.30))
    assert "pinned_near_one" not in _diagnose(cell, res["run_id"])


# ---------------------------------------------------------------- OpenAI responses without usage

#: TensorRT-LLM Eagle3 one-engine on Hopper before the fix, NVIDIA/TensorRT-LLM#5146 ("before"): the spec-dec
#: parameters missing from the attention op, NaN logits, every token after the first word is '!'.
NAN_BANG = "https://github.com/NVIDIA/TensorRT-LLM/pull/5146"
BANG_TEXTS = [("Hello, my name is", " Emily and" + "!" * 60), ("The capital of France is", " a" + "!" * 61)]


def _completions(tmp_path: Path, pairs: list[tuple[str, str]], obj: str = "text_completion") -> Path:
    """OpenAI completions as a client saves them, without ``usage``: ``choices[0].text`` for
    ``text_completion``, ``choices[0].message.content`` for ``chat.completion``."""
    def choice(text: str) -> dict:
        body = {"message": {"role": "assistant", "content": text}} if obj == "chat.completion" else {"text": text}
        return {"index": 0, **body, "finish_reason": "length"}

    p = tmp_path / "responses.jsonl"
    p.write_text("".join(json.dumps({"object": obj, "model": "llama-3.1-8b", "prompt": prompt,
                                     "choices": [choice(text)]}) + "\n" for prompt, text in pairs))
    return p


def test_openai_completions_without_usage_are_read_and_their_text_judged(cell, tmp_path):
    """The texts a client saved carry no ``usage``: the import keeps them (counts unknown) and the output
    rules read them (source: NAN_BANG)."""
    from dynocell.runbooks.evidence import import_requests

    assert NAN_BANG.startswith("https://")
    res = import_requests(cell, _completions(tmp_path, BANG_TEXTS))
    assert res["format"] == "openai-no-usage" and res["requests"] == 2
    assert "corrupt_output" in _diagnose(cell, res["run_id"])


def test_openai_completions_without_usage_and_healthy_text_stay_quiet(cell, tmp_path):
    """A control: ordinary continuations of the same prompts, saved as chat completions without usage, read
    the same way and raise nothing (the output rules judge the text, not the missing counts)."""
    from dynocell.runbooks.evidence import import_requests

    after = [("Hello, my name is", " Emily and I am a student at the University of California, Berkeley."),
             ("The capital of France is", " Paris, which is also the largest city in the country.")]
    res = import_requests(cell, _completions(tmp_path, after, obj="chat.completion"))
    assert "corrupt_output" not in _diagnose(cell, res["run_id"])


def test_a_json_object_that_is_no_completion_is_still_refused(cell, tmp_path):
    from dynocell.errors import UserError
    from dynocell.runbooks.evidence import import_requests

    with pytest.raises(UserError, match="neither an SGLang response"):
        import_requests(cell, _completions(tmp_path, BANG_TEXTS, obj="embedding"))


# ---------------------------------------------------------------- acceptance windows of one log, over time

DATA = Path(__file__).parent / "data"
#: vllm-project/vllm#40624, a commenter's line verbatim (vLLM 0.19.1, qwen3_next_mtp with 2 tokens), cut after
#: "Per-position acceptance rate:" as the thread shows it.
MTP_LINE = ("(APIServer pid=1) INFO 04-22 23:19:40 [metrics.py:101] SpecDecoding metrics: Mean acceptance length: "
            "2.52, Accepted throughput: 36.30 tokens/s, Drafted throughput: 47.79 tokens/s, Accepted: 363 tokens, "
            "Drafted: 478 tokens, Per-position acceptance rate:")
#: vllm-project/vllm#41838: AL ~3.07 falling smoothly to ~2.8 over hours (Eagle, 4 draft tokens), as vLLM 0.17's lines
DECAY_LOG = DATA / "cases" / "59-vllm-eagle-acceptance-falls-over-hours" / "server.log"
#: the H200 runs (vLLM 0.26.0, one H200, 2026-12-01): five text classes served in turn within ~90 s
H200_BOOTS = DATA / "vllm-0.26.0" / "dynocell-h200" / "boots"


def test_a_spec_decoding_line_without_rates_is_a_window_whose_k_the_counts_give():
    from dynocell.engine.acceptance import parse_vllm_spec_line, parse_vllm_spec_window

    assert parse_vllm_spec_line(MTP_LINE) is None  # no per-position rates: no curve of its own
    w = parse_vllm_spec_window(MTP_LINE)
    assert (w.tau, w.accepted, w.drafted) == (2.52, 363, 478)
    assert w.num_drafts == 2  # 478 drafted · 1.52 / 363 accepted: the thread's "2 tokens"


def test_windows_of_one_log_are_kept_apart_and_a_slow_fall_is_named(cell):
    from dynocell.runbooks.imports import import_log

    assert DECAY_LOG.read_text().startswith("# source: https://github.com/vllm-project/vllm/issues/41838")
    res = import_log(cell, [DECAY_LOG], engine="vllm")
    acc = res["acceptance"]
    assert acc["format"] == "vllm-v1-summary" and acc["num_drafts"] == 4
    assert [w["tau"] for w in acc["windows"]][:3] == [3.07, 3.05, 3.02] and len(acc["windows"]) == 10
    found = _diagnose(cell, res["boot_id"])
    assert found["acceptance_decay"]["span_s"] == 9 * 3600 and found["acceptance_decay"]["spearman"] == -1.0


@pytest.mark.parametrize("boot", ["538cd7c8806c", "9d59f9b6086b", "a8b7a7a14359", "cbe7764493f2", "dd4f31340195"])
def test_healthy_h200_logs_keep_their_windows_and_no_decay_is_named(cell, boot):
    """Real vLLM 0.26.0 logs with 11–20 windows each (τ moves as the bench's classes change): every window
    kept, and no decay named (minutes of one bench, not hours of one server)."""
    from dynocell.runbooks.imports import import_log

    log = H200_BOOTS / boot / "engine.log"
    res = import_log(cell, [log])
    lines = sum("SpecDecoding metrics" in ln for ln in log.read_text().splitlines())
    assert len(res["acceptance"]["windows"]) == lines >= 11
    assert "acceptance_decay" not in _diagnose(cell, res["boot_id"])


# ---------------------------------------------------------------- a TensorRT-LLM log

#: triton-inference-server/tensorrtllm_backend#473: the reporter's container line, verbatim
TRTLLM_LOG = DATA / "cases" / "50-trtllm-draft-tokens-exceed-engine-max" / "server.log"


@pytest.mark.parametrize("engine", ["trtllm", None])
def test_a_tensorrt_llm_log_is_read_and_its_assertion_named(cell, engine):
    """The batch manager's assertion (56 draft tokens against an engine built for 0) is read with
    ``--engine trtllm`` or detected from TensorRT-LLM's own ``[TensorRT-LLM]`` tag, and named."""
    from dynocell.runbooks.imports import import_log

    assert TRTLLM_LOG.read_text().startswith("# source: https://github.com/triton-inference-server/")
    res = import_log(cell, [TRTLLM_LOG], engine=engine)
    assert res["engine"] == "trtllm"
    assert res["signature"]["id"] == "draft_len_exceeds_engine_max"
    assert res["signature"]["groups"] == {"draft_tokens": "56", "max_draft_tokens": "0"}
    from dynocell.runbooks.doctor import diagnose

    (f,) = [f for f in diagnose(cell, res["boot_id"], store_findings=False) if f.evidence.get("signature")]
    assert f.evidence["signature"] == "draft_len_exceeds_engine_max"
    assert f.entries == ["trtllm-draft-longer-than-engine-max"]


def test_the_tensorrt_llm_version_line_gives_the_engine_version(tmp_path):
    """``[TensorRT-LLM] TensorRT-LLM version: 0.17.0`` (trtllm-bench's output in NVIDIA/TensorRT-LLM's docs)
    before the assertion: the version is a phase detail of a trtllm log."""
    from dynocell.engine.logfile import read_log

    log = tmp_path / "server.log"
    log.write_text("[TensorRT-LLM] TensorRT-LLM version: 0.17.0\n" + TRTLLM_LOG.read_text().splitlines()[1] + "\n")
    rep = read_log(log)
    assert rep.engine == "trtllm" and rep.phases[0]["detail"] == {"version": "0.17.0"}
    assert rep.signature["id"] == "draft_len_exceeds_engine_max"


# ---------------------------------------------------------------- prefix-cache hits lost to a drafter

#: vllm-project/vllm#40624, the same commenter's stats line printed beside MTP_LINE
MTP_STATS = ("(APIServer pid=1) INFO 04-22 23:19:40 [loggers.py:259] Engine 000: Avg prompt throughput: 67.8 tokens/s, "
             "Avg generation throughput: 60.2 tokens/s, Running: 1 reqs, Waiting: 0 reqs, GPU KV cache usage: 1.9%, "
             "Prefix cache hit rate: 0.0%")


def test_zero_prefix_hits_while_drafting_is_named(cell, tmp_path):
    from dynocell.runbooks.imports import import_log

    log = tmp_path / "server.log"
    log.write_text(MTP_STATS + "\n" + MTP_LINE + "\n")
    res = import_log(cell, [log], engine="vllm")
    from dynocell.runbooks.doctor import diagnose

    (f,) = [f for f in diagnose(cell, res["boot_id"], store_findings=False) if f.rule == "prefix_cache_lost_to_spec"]
    assert f.severity == "info"  # from the log alone 0 % may be a workload without shared prefixes
    assert f.evidence == {"stats_lines": 1, "hit_pct_max": 0.0, "spec_windows": 1, "prefix_caching_asked": False}
    assert f.entries == ["prefix-cache-hits-lost-to-drafter"]


@pytest.mark.parametrize("log", [DATA / "vllm-0.26.0" / "C_draft_graph.server.log",
                                 H200_BOOTS / "dd4f31340195" / "engine.log"])
def test_real_logs_whose_cache_hits_while_drafting_stay_quiet(cell, log):
    """vLLM 0.26.0 on one H200 with a draft model: hit rates of 8–18 % between the 0.0 % lines."""
    from dynocell.runbooks.imports import import_log

    res = import_log(cell, [log])
    assert "prefix_cache_lost_to_spec" not in _diagnose(cell, res["boot_id"])


# ---------------------------------------------------------------- the draft's head against the algorithm

#: A real SGLang 0.5.17 EAGLE boot on one H200 (the eager store's boot 8b3add05820f, 2026-12-01): its server
#: args name the reference pair's EAGLE head; the pair ships an EAGLE-3 head beside it (config.json
#: architectures LlamaForCausalLMEagle / LlamaForCausalLMEagle3, the names SGLang loads).
EAGLE_BOOT = DATA / "sglang-0.5.17-eagle" / "dynocell-h200-eager" / "boots" / "8b3add05820f" / "engine.log"
PAIR = Path(__file__).resolve().parents[1] / "dynocell" / "engine" / "reference" / "pair" / "tiny-llama-bpe512-r2-s0"


def _eagle_log(tmp_path: Path, head: str) -> Path:
    text = EAGLE_BOOT.read_text()
    old = re.search(r"speculative_draft_model_path='([^']*)'", text).group(1)
    log = tmp_path / f"{head}.log"
    log.write_text(text.replace(old, str(PAIR / head)))
    return log


@pytest.mark.parametrize("head, fires", [("eagle3", True), ("eagle", False)])
def test_an_eagle3_head_under_eagle_is_named_before_any_acceptance(cell, tmp_path, head, fires):
    """sgl-project/sglang#21272: an EAGLE-3 head under --speculative-algorithm EAGLE accepts nothing and says
    nothing. The imported boot's config names the draft folder; its config.json names the head."""
    from dynocell.runbooks.imports import import_log

    res = import_log(cell, [_eagle_log(tmp_path, head)])
    found = _diagnose(cell, res["boot_id"])
    assert ("draft_head_mismatch" in found) is fires
    if fires:
        assert found["draft_head_mismatch"]["architectures"] == ["LlamaForCausalLMEagle3"]
        assert found["draft_head_mismatch"]["algorithm"] == "EAGLE"


def test_draft_head_kind_reads_the_architectures_the_engines_name():
    from dynocell.engine.model_window import draft_head_kind

    assert draft_head_kind({"architectures": ["LlamaForCausalLMEagle3"]}) == "EAGLE3"  # SGLang (sglang#21272)
    assert draft_head_kind({"architectures": ["Eagle3LlamaForCausalLM"]}) == "EAGLE3"  # vLLM's class name
    assert draft_head_kind({"architectures": ["LlamaForCausalLMEagle"]}) == "EAGLE"
    # a plain architecture says nothing (EAGLE-1 heads and some EAGLE-3 exports use it: TensorRT-LLM#6158)
    assert draft_head_kind({"architectures": ["LlamaForCausalLM"], "draft_vocab_size": 32000}) is None


@pytest.mark.parametrize("algorithm, head, refused", [("EAGLE", "eagle3", True), ("EAGLE3", "eagle", True),
                                                      ("EAGLE", "eagle", False), ("EAGLE3", "eagle3", False)])
def test_boot_refuses_a_head_its_algorithm_cannot_serve_before_spawning(cell, tmp_path, algorithm, head, refused):
    """Before a boot: the draft folder's config.json against the algorithm (the reference pair's EAGLE and
    EAGLE-3 heads, in SGLang's layouts). A refused boot spawns nothing and writes no boot row; config add warns."""
    from dynocell.db import boots as db_boots
    from dynocell.engine.config import parse_config, require_draft_head
    from dynocell.errors import ConfigError
    from dynocell.runbooks.configs import model_path_warnings

    cfg = parse_config(f'engine = "reference"\nmodel_path = "{PAIR / "target"}"\n[speculative]\n'
                       f'algorithm = "{algorithm}"\ndraft_model_path = "{PAIR / head}"\nnum_steps = 3\n'
                       'eagle_topk = 1\nnum_draft_tokens = 4\n')
    warned = [w for w in model_path_warnings(cfg) if w.startswith("speculative.algorithm")]
    if not refused:
        require_draft_head(cfg, "cfg")
        assert not warned
        return
    from dynocell.runbooks.boots.start import start_boot

    with pytest.raises(ConfigError, match="speculative.algorithm") as e:
        start_boot(cell, cfg, "sha256:" + "0" * 64, timeout_s=60)
    want = "EAGLE3" if algorithm == "EAGLE" else "EAGLE"
    assert f'algorithm = "{want}"' in str(e.value.hint) and warned
    assert db_boots.list_boots(cell.store) == []


# ---------------------------------------------------------------- runbook applies_to per concept

@pytest.mark.parametrize("engine, args, applies", [
    ("llamacpp", ["--n-cpu-moe", "30"], True),          # llama.cpp: the first 30 layers' experts on the CPU
    ("llamacpp", ["--cpu-moe"], True),
    ("vllm", ["--cpu-offload-gb", "8"], True),
    ("vllm", ["--cpu-offload-gb=0"], False),           # 0 GiB offloaded is no offload
    ("vllm", ["--enable-expert-offload"], True),       # the vLLM fork of field report 004
    ("vllm", ["--enable-prefix-caching"], False),
])
def test_expert_offload_entry_applies_to_every_spelling_of_the_concept(engine, args, applies):
    """``applies_to: {expert_offload: true}``: one concept, each engine's own flag (issue 35 item 8)."""
    from dynocell.engine.config import parse_config
    from dynocell.runbooks.knowledge import bundled_knowledge

    model = "org/model.gguf" if engine == "llamacpp" else "org/model"
    cfg = parse_config(f'engine = "{engine}"\nmodel_path = "{model}"\nextra_args = {json.dumps(args)}\n'
                       '[speculative]\nalgorithm = "NGRAM"\nnum_steps = 3\n')
    slugs = [e.slug for e in bundled_knowledge().for_config(cfg)]
    assert ("speculation-and-expert-offload" in slugs) is applies


def test_an_imported_config_with_offload_as_an_observed_extra_fits_the_entry():
    """vLLM's non-default args line keeps ``cpu_offload_gb`` as ``extra.cpu_offload_gb`` (an observed
    setting): the doctor links the entry to a finding on that config as on a written one."""
    from dynocell.runbooks.doctor import _entry_fits
    from dynocell.runbooks.knowledge import bundled_knowledge

    entry = bundled_knowledge().entries["speculation-and-expert-offload"]
    knobs = {"engine": "vllm", "speculative.algorithm": "MTP", "extra.cpu_offload_gb": 16}
    assert _entry_fits(entry, knobs)
    assert not _entry_fits(entry, {**knobs, "extra.cpu_offload_gb": 0})
