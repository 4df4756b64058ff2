"""The reference engine as a real subprocess on free ports: losslessness, meta_info math, streaming,
sampling distribution, metrics, profiling, bad input, concurrency, shutdown.

Engines are started once per module (plain, STANDALONE, NGRAM, draft = target).
"""

from __future__ import annotations

import asyncio
import gzip
import json
import time
from pathlib import Path

import httpx
import pytest
import torch

from dynocell.engine.reference.launch import start_engine

PROMPTS = [
    "def __init__(self, ",
    "import os\nimport sys\n\n",
    "The quick brown fox jumps over the lazy dog. It was",
    "abc abc abc abc abc abc ",
    "1 + 1 = 2\n2 + 2 = 4\n3 + 3 = ",
    "你好，世界。今天",
]
SPEC = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
D = 3


def _engine(model_pair, tmp_path_factory, name, extra):
    log = tmp_path_factory.mktemp(f"engine-{name}") / "server.log"
    root = tmp_path_factory.mktemp(f"profiles-{name}")
    eng = start_engine(model_pair.target, ["--enable-metrics", "--decode-log-interval", "5",
                                           "--profile-dir", str(root), *extra], log)
    eng.profile_root = root
    yield eng
    eng.stop()


@pytest.fixture(scope="module")
def plain(model_pair, tmp_path_factory):
    yield from _engine(model_pair, tmp_path_factory, "plain", [])


@pytest.fixture(scope="module")
def standalone(model_pair, tmp_path_factory):
    yield from _engine(model_pair, tmp_path_factory, "standalone",
                       ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
                        str(model_pair.draft), *SPEC])


@pytest.fixture(scope="module")
def ngram(model_pair, tmp_path_factory):
    yield from _engine(model_pair, tmp_path_factory, "ngram",
                       ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"])


@pytest.fixture(scope="module")
def selfdraft(model_pair, tmp_path_factory):
    yield from _engine(model_pair, tmp_path_factory, "selfdraft",
                       ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path",
                        str(model_pair.target), *SPEC])


def gen(eng, text, max_new_tokens=48, temperature=0.0, **kw):
    body = {"text": text, "sampling_params": {"max_new_tokens": max_new_tokens, "temperature": temperature, **kw}}
    r = httpx.post(eng.url + "/generate", json=body, timeout=120)
    assert r.status_code == 200, r.text
    return r.json()


def test_lossless_draft_equals_target(plain, selfdraft):
    for p in PROMPTS[:4]:
        ref = gen(plain, p, 32)
        out = gen(selfdraft, p, 32)  # 1 prefill token + 8 verify steps of 4, truncated at 32
        assert out["output_ids"] == ref["output_ids"]
        assert out["text"] == ref["text"]
        m = out["meta_info"]
        assert m["spec_correct_drafts_histogram"] == [0, 0, 0, m["spec_verify_ct"]]
        assert m["spec_verify_ct"] == 8
        assert m["spec_accept_length"] == pytest.approx(D + 1)
        assert m["spec_accept_rate"] == pytest.approx(1.0)


@pytest.mark.parametrize("which", ["standalone", "ngram"])
def test_greedy_speculative_equals_plain(plain, standalone, ngram, which):
    eng = {"standalone": standalone, "ngram": ngram}[which]
    for p in PROMPTS:
        ref = gen(plain, p, 40)
        out = gen(eng, p, 40)
        assert out["output_ids"] == ref["output_ids"], p
        assert out["text"] == ref["text"]
        m = out["meta_info"]
        h = m["spec_correct_drafts_histogram"]
        assert len(h) == D + 1
        assert sum(h) == m["spec_verify_ct"] > 0
        assert m["spec_accept_length"] == pytest.approx(m["completion_tokens"] / m["spec_verify_ct"])
        assert m["spec_num_correct_drafts"] == sum(k * c for k, c in enumerate(h))
        assert m["spec_num_proposed_drafts"] == D * m["spec_verify_ct"]
        assert m["spec_accept_rate"] == pytest.approx(m["spec_num_correct_drafts"] / m["spec_num_proposed_drafts"])
        for key in ("id", "prompt_tokens", "completion_tokens", "cached_tokens", "finish_reason", "e2e_latency"):
            assert key in m
        assert m["finish_reason"] == {"type": "length", "length": 40}


def test_streaming_equals_non_streaming(standalone):
    body = {"text": PROMPTS[0], "sampling_params": {"max_new_tokens": 40, "temperature": 0.8, "seed": 7},
            "stream": True}
    chunks = []
    with httpx.stream("POST", standalone.url + "/generate", json=body, timeout=60) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                chunks.append(line[6:])
    assert chunks[-1] == "[DONE]"
    objs = [json.loads(c) for c in chunks[:-1]]
    assert len(objs) > 2
    texts = [o["text"] for o in objs]
    assert all(b.startswith(a) for a, b in zip(texts, texts[1:]))  # cumulative text
    last = objs[-1]
    ref = gen(standalone, PROMPTS[0], 40, 0.8, seed=7)
    assert last["text"] == ref["text"]
    assert last["meta_info"]["finish_reason"] == {"type": "length", "length": 40}
    assert last["meta_info"]["spec_verify_ct"] == ref["meta_info"]["spec_verify_ct"]


def test_seed_reproducible(standalone):
    a = gen(standalone, PROMPTS[2], 24, 0.8, seed=3)
    b = gen(standalone, PROMPTS[2], 24, 0.8, seed=3)
    assert a["output_ids"] == b["output_ids"]


def _chi2_p(table: list[list[int]]) -> tuple[float, int]:
    """Two-sample chi-square homogeneity test; returns (p-value, dof)."""
    rows = [sum(r) for r in table]
    cols = [sum(c) for c in zip(*table)]
    tot = sum(rows)
    stat = 0.0
    for i, r in enumerate(table):
        for j, o in enumerate(r):
            e = rows[i] * cols[j] / tot
            stat += (o - e) ** 2 / e
    dof = len(cols) - 1
    p = float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                      torch.tensor(stat / 2, dtype=torch.float64)))
    return p, dof


def _samples(eng, prompt, n, base_seed):
    body = {"text": [prompt] * n,
            "sampling_params": [{"max_new_tokens": 2, "temperature": 1.0, "seed": base_seed + i} for i in range(n)]}
    r = httpx.post(eng.url + "/generate", json=body, timeout=900)
    assert r.status_code == 200, r.text
    return [tuple(o["output_ids"][:2]) for o in r.json()]


def test_sampling_distribution_matches_plain(plain, standalone):
    """Chi-square over the joint (token 1, token 2) frequencies: token 2 comes from a verify step."""
    n = 2000
    prompt = "    def close(self):\n        "
    a = _samples(plain, prompt, n, 10_000)
    b = _samples(standalone, prompt, n, 50_000)
    for pos in (1,):
        ca, cb = {}, {}
        for s in a:
            ca[s[pos]] = ca.get(s[pos], 0) + 1
        for s in b:
            cb[s[pos]] = cb.get(s[pos], 0) + 1
        keys = sorted(set(ca) | set(cb), key=lambda k: -(ca.get(k, 0) + cb.get(k, 0)))
        big = [k for k in keys if ca.get(k, 0) + cb.get(k, 0) >= 20]
        table = [[c.get(k, 0) for k in big] + [sum(v for kk, v in c.items() if kk not in big)] for c in (ca, cb)]
        if table[0][-1] + table[1][-1] == 0:
            table = [r[:-1] for r in table]
        p, dof = _chi2_p(table)
        assert dof >= 3, "the test prompt must give a spread distribution"
        assert p > 0.001, (p, table)


def test_metrics_parse(standalone):
    from prometheus_client.parser import text_string_to_metric_families

    gen(standalone, PROMPTS[0], 20)
    text = httpx.get(standalone.url + "/metrics", timeout=10).text
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("sglang:spec_accept_length", "sglang:spec_accept_rate", "sglang:num_running_reqs",
                 "sglang:num_queue_reqs", "sglang:gen_throughput", "sglang:prompt_tokens",
                 "sglang:generation_tokens", "sglang:spec_verify_steps", "sglang:spec_accepted_drafts_at_position"):
        assert name in fams, name
    samples = {(s.name, s.labels.get("position")): s.value for f in fams.values() for s in f.samples}
    steps = samples[("sglang:spec_verify_steps_total", None)]
    assert steps > 0
    p = [samples[("sglang:spec_accepted_drafts_at_position_total", str(i))] / steps for i in range(1, D + 1)]
    assert p[0] >= p[1] >= p[2]
    tau = samples[("sglang:spec_accept_length", None)]
    assert tau == pytest.approx(1 + sum(p), rel=1e-6)
    assert samples[("sglang:generation_tokens_total", None)] > 0


def test_server_info_and_models(standalone, model_pair):
    info = httpx.get(standalone.url + "/get_server_info", timeout=10).json()
    assert info["model_path"] == str(model_pair.target)
    assert info["speculative_algorithm"] == "STANDALONE"
    assert info["speculative_num_steps"] == 3 and info["speculative_eagle_topk"] == 1
    assert info["speculative_num_draft_tokens"] == 4
    assert info["speculative_draft_model_path"] == str(model_pair.draft)
    assert info["tp_size"] == 1 and "served_model_name" in info and "context_length" in info
    assert info["internal_states"][0]["avg_spec_accept_length"] >= 1.0
    assert httpx.get(standalone.url + "/get_model_info", timeout=10).json()["is_generation"] is True
    assert httpx.get(standalone.url + "/v1/models", timeout=10).json()["data"][0]["id"]
    assert httpx.get(standalone.url + "/health_generate", timeout=30).status_code == 200
    assert httpx.post(standalone.url + "/flush_cache", timeout=10).status_code == 200


def test_openai_endpoints(plain):
    r = httpx.post(plain.url + "/v1/completions", json={"prompt": "def f(", "max_tokens": 8, "temperature": 0},
                   timeout=30).json()
    assert r["object"] == "text_completion" and r["usage"]["completion_tokens"] == 8
    assert r["choices"][0]["text"] == gen(plain, "def f(", 8)["text"]
    r = httpx.post(plain.url + "/v1/chat/completions",
                   json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 6}, timeout=30).json()
    assert r["object"] == "chat.completion" and r["usage"]["completion_tokens"] == 6
    text = ""
    with httpx.stream("POST", plain.url + "/v1/completions",
                      json={"prompt": "def f(", "max_tokens": 8, "temperature": 0, "stream": True}, timeout=30) as s:
        lines = [ln[6:] for ln in s.iter_lines() if ln.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    for ln in lines[:-1]:
        text += json.loads(ln)["choices"][0]["text"]
    assert text == gen(plain, "def f(", 8)["text"]


def test_profile_writes_trace(standalone):
    tmp_path = standalone.profile_root / "t"
    r = httpx.post(standalone.url + "/start_profile",
                   json={"output_dir": str(tmp_path), "activities": ["CPU"], "profile_id": "t1"}, timeout=30)
    assert r.status_code == 200, r.text
    gen(standalone, PROMPTS[0], 16)
    assert httpx.post(standalone.url + "/stop_profile", timeout=60).status_code == 200
    f = tmp_path / "t1-TP-0.trace.json.gz"
    assert f.is_file()
    trace = json.loads(gzip.decompress(f.read_bytes()))
    assert trace["traceEvents"]
    # num_steps: stops by itself after that many forward steps
    r = httpx.post(standalone.url + "/start_profile",
                   json={"output_dir": str(tmp_path), "num_steps": 3, "profile_id": "t2"}, timeout=30)
    assert r.status_code == 200
    gen(standalone, PROMPTS[1], 24)
    for _ in range(100):
        if (tmp_path / "t2-TP-0.trace.json.gz").is_file():
            break
        time.sleep(0.05)
    assert json.loads(gzip.decompress((tmp_path / "t2-TP-0.trace.json.gz").read_bytes()))["traceEvents"]


def _glob_quiet(base: Path, pattern: str) -> set[Path]:
    """``base.rglob(pattern)`` that tolerates folders vanishing while it walks: other pytest sessions on
    the same machine delete their folders under /tmp/pytest-of-<user> concurrently (a FileNotFoundError
    from rglob failed this test in a clean-clone CI run). Symlinks are not followed."""
    import fnmatch
    import os

    found: set[Path] = set()
    for dirpath, dirnames, filenames in os.walk(base, onerror=lambda _e: None):
        found.update(Path(dirpath) / n for n in dirnames + filenames if fnmatch.fnmatch(n, pattern))
    return found


@pytest.mark.parametrize("body, why", [
    ({"output_dir": "{outside}"}, "outside the profile directory"),
    ({"output_dir": "../escaped"}, "outside the profile directory"),
    ({"output_dir": "{root}/../escaped"}, "outside the profile directory"),
    ({"output_dir": "{link}"}, "outside the profile directory"),  # a symlink inside pointing out
    ({"profile_id": "../../escaped"}, "profile_id"),
    ({"profile_id": "/tmp/escaped"}, "profile_id"),
    ({"profile_id": ".."}, "profile_id"),
    ({"profile_prefix": "../x"}, "profile_prefix"),
    ({"output_dir": "{root}", "profile_id": "a/b"}, "profile_id"),
])
def test_profile_output_is_confined_to_the_launch_directory(standalone, tmp_path, body, why):
    """Issue 16 item 6: /start_profile writes only under --profile-dir; anything else is a 400."""
    root = standalone.profile_root
    outside = tmp_path / "outside"
    link = root / "link-out"
    if not link.exists():
        link.symlink_to(tmp_path.parent, target_is_directory=True)
    fill = {"{outside}": str(outside), "{root}": str(root), "{link}": str(link)}
    req = {k: next((v.replace(m, r) for m, r in fill.items() if m in v), v) for k, v in body.items()}
    before = _glob_quiet(tmp_path.parent, "*") | _glob_quiet(root.parent, "*escaped*")
    r = httpx.post(standalone.url + "/start_profile", json={"activities": ["CPU"], **req}, timeout=30)
    assert r.status_code == 400, r.text
    assert why in r.text
    assert not outside.exists()
    assert not _glob_quiet(root.parent.parent, "*escaped*") or _glob_quiet(root.parent, "*escaped*") <= before
    # the engine keeps serving, and a profile inside the directory still works
    assert httpx.post(standalone.url + "/start_profile", json={"activities": ["CPU"], "profile_id": "ok"},
                      timeout=30).status_code == 200
    assert httpx.post(standalone.url + "/stop_profile", timeout=60).status_code == 200
    assert (root / "ok-TP-0.trace.json.gz").is_file()


@pytest.mark.parametrize("body,status", [
    (b"{not json", 400),
    (b'{"sampling_params": {"max_new_tokens": 4}}', 400),
    (b'{"text": "x", "sampling_params": {"max_new_tokens": 0}}', 400),
    (b'{"text": "x", "sampling_params": {"max_new_tokens": -3}}', 400),
    (b'{"text": "x", "sampling_params": {"temperature": -1}}', 400),
    (b'{"text": "' + b"a" * 5000 + b'"}', 400),
    (b'{"input_ids": [1, 99999]}', 400),
])
def test_bad_input_4xx_and_keeps_serving(plain, body, status):
    r = httpx.post(plain.url + "/generate", content=body, headers={"content-type": "application/json"}, timeout=30)
    assert r.status_code == status, r.text
    assert r.json()["message"]
    assert httpx.get(plain.url + "/no_such_endpoint", timeout=10).status_code == 404
    assert gen(plain, "ok", 2)["meta_info"]["completion_tokens"] == 2


def test_concurrent_requests_and_queue(standalone):
    async def go():
        async with httpx.AsyncClient(timeout=120) as c:
            async def one(i):
                r = await c.post(standalone.url + "/generate",
                                 json={"text": PROMPTS[i % len(PROMPTS)],
                                       "sampling_params": {"max_new_tokens": 24, "temperature": 0.8, "seed": i}})
                return r.json()["meta_info"]["completion_tokens"]
            return await asyncio.gather(*(one(i) for i in range(20)))
    assert asyncio.run(go()) == [24] * 20
    log = standalone.log_text()
    assert "Decode batch, #running-req:" in log and "accept len:" in log


def test_log_lines_in_sglang_shapes(standalone):
    import re

    # Decode lines come every 5 decode steps: make some here instead of relying on an earlier test's requests.
    assert gen(standalone, PROMPTS[0], 40, ignore_eos=True)["meta_info"]["completion_tokens"] == 40
    log = standalone.log_text()
    for _ in range(100):  # the engine's stdout reaches the log file a moment after the response
        if "Decode batch, #running-req:" in log:
            break
        time.sleep(0.1)
        log = standalone.log_text()
    ts = r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] "
    for pat in (r"Load weight begin\. avail mem=[\d.]+ GB$",
                r"Load weight end\. elapsed=[\d.]+ s, type=LlamaForCausalLM, "
                r"avail mem=[\d.]+ GB, mem usage=[\d.]+ GB\.$",
                r"KV Cache is allocated\. dtype: torch\.float32, #tokens: \d+, K size: [\d.]+ GB, V size: [\d.]+ GB$",
                r"Memory pool end\. avail mem=[\d.]+ GB$",
                r"INFO:     Uvicorn running on http://127\.0\.0\.1:\d+ \(Press CTRL\+C to quit\)$",
                r"The server is fired up and ready to roll!$",
                r"Decode batch, #running-req: \d+, #token: \d+, token usage: [\d.]+, accept len: [\d.]+, "
                r"accept rate: [\d.]+, cuda graph: False, gen throughput \(token/s\): [\d.]+, #queue-req: \d+$"):
        assert re.search(ts + pat, log, re.M), pat
    assert len(re.findall(ts + "Load weight end", log, re.M)) == 2


def test_return_logprob_top2_as_sglang(plain, standalone):
    """Issue 22, shape 3: SGLang's ``return_logprob`` + ``top_logprobs_num`` request shape (output_token_logprobs
    / output_top_logprobs as [logprob, token_id, text]); the chosen greedy token is the top-1, and plain and
    speculative engines give the same numbers (the same target, one teacher-forced pass)."""
    import math

    def lp(eng, k):
        body = {"text": PROMPTS[2], "sampling_params": {"max_new_tokens": 12, "temperature": 0},
                "return_logprob": True, "top_logprobs_num": k}
        r = httpx.post(eng.url + "/generate", json=body, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()

    a, b = lp(plain, 2), lp(standalone, 2)
    m = a["meta_info"]
    assert len(m["output_token_logprobs"]) == len(m["output_top_logprobs"]) == len(a["output_ids"]) == 12
    for tok, chosen, top in zip(a["output_ids"], m["output_token_logprobs"], m["output_top_logprobs"]):
        assert chosen[1] == tok == top[0][1] and len(top) == 2
        assert top[0][0] >= top[1][0] and chosen[0] <= 0 and math.isclose(chosen[0], top[0][0], abs_tol=1e-6)
    assert a["output_ids"] == b["output_ids"]
    for x, y in zip(m["output_top_logprobs"], b["meta_info"]["output_top_logprobs"]):
        assert [t[1] for t in x] == [t[1] for t in y] and abs(x[0][0] - y[0][0]) < 1e-4
    bad = httpx.post(plain.url + "/generate", json={"text": "x", "return_logprob": True, "top_logprobs_num": 99},
                     timeout=30)
    assert bad.status_code == 400 and "top_logprobs_num" in bad.json()["message"]
