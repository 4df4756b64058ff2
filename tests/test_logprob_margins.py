"""Near-tie log-probability requests (issue 22, shape 3): the request and response shapes of SGLang and vLLM,
checked against their source, through real HTTP; the reference engine's vLLM surface end to end; and the
clear "margin unknown: <why>" when an engine refuses or ignores the request.

Response bodies below are written in the engines' documented shapes (no GPU logprob artifact ships):

- SGLang 0.5.x ``/generate``: ``meta_info.output_top_logprobs`` = one list per output token of
  ``[logprob, token_id, text]`` (``TokenizerManager.detokenize_top_logprobs_tokens`` in
  sglang/srt/managers/tokenizer_manager.py; text null without ``return_text_in_logprobs``), ``null`` where none;
  a refused request is HTTP 400 ``{"error": {"message": …}}`` (``http_server.generate_request``).
- vLLM 0.2x ``/v1/completions``: ``choices[0].logprobs`` = ``{text_offset, token_logprobs, tokens,
  top_logprobs}``, ``top_logprobs[i]`` a dict of the sampled token and the k best, keys ``"token_id:N"`` with
  ``return_tokens_as_token_ids`` (``OpenAIServingCompletion._create_completion_logprobs`` in
  vllm/entrypoints/openai/completion/serving.py); a server started with ``--max-logprobs 0`` refuses with
  ``Requested sample logprobs of 2, which is greater than max allowed: 0`` (``VLLMValidationError``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from dynocell.engine import logprobs as lp
from dynocell.engine.client import EngineClient
from dynocell.runbooks.run.lossless_step import _divergence_margin

SGLANG_OK = {"text": " the cat", "output_ids": [311, 2415, 279],
             "meta_info": {"id": "a1", "finish_reason": {"type": "length", "length": 3}, "prompt_tokens": 9,
                           "completion_tokens": 3, "output_token_logprobs": [[-0.02, 311, None], [-0.7, 2415, None],
                                                                             [-0.69, 279, None]],
                           "output_top_logprobs": [[[-0.02, 311, None], [-4.1, 264, None]],
                                                   [[-0.7, 2415, None], [-1.9, 5679, None]],
                                                   [[-0.69, 279, None], [-0.71, 264, None]]]}}
VLLM_OK = {"id": "cmpl-1", "object": "text_completion", "created": 1, "model": "m",
           "choices": [{"index": 0, "text": " the cat", "finish_reason": "length", "stop_reason": None,
                        "logprobs": {"text_offset": [0, 14, 29],
                                     "token_logprobs": [-0.02, -0.7, -0.69],
                                     "tokens": ["token_id:311", "token_id:2415", "token_id:279"],
                                     "top_logprobs": [{"token_id:311": -0.02, "token_id:264": -4.1},
                                                      {"token_id:2415": -0.7, "token_id:5679": -1.9},
                                                      {"token_id:279": -0.69, "token_id:264": -0.71}]}}],
           "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}
VLLM_REFUSED = {"error": {"message": "Requested sample logprobs of 2, which is greater than max allowed: 0 "
                                     "(parameter=logprobs, value=2)", "type": "BadRequestError", "param": "logprobs",
                          "code": 400}}
VLLM_NULL = {**VLLM_OK, "choices": [{**VLLM_OK["choices"][0], "logprobs": None}]}


class _Canned:
    """A real HTTP server on 127.0.0.1 answering every POST with one status and JSON body; records requests."""

    def __init__(self, status: int, body: dict):
        seen = self.requests = []

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                seen.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.srv.shutdown()
        self.srv.server_close()


VLLM_CFG = SimpleNamespace(api="vllm", served_model_name="m", model_path="/models/m")


def test_parsers_read_the_documented_shapes():
    assert lp.sglang_margin(SGLANG_OK, 2) == (pytest.approx(0.02), None)
    assert lp.sglang_margin([SGLANG_OK], 0) == (pytest.approx(4.08), None)  # a batch of one is a list
    assert lp.openai_margin(VLLM_OK, 2) == (pytest.approx(0.02), None)
    assert lp.openai_margin(VLLM_OK, 1) == (pytest.approx(1.2), None)


@pytest.mark.parametrize("body,idx,why", [
    ({"text": "x", "meta_info": {"completion_tokens": 3}}, 0, "no output_top_logprobs"),
    ({"meta_info": {"output_top_logprobs": [None, None]}}, 1, "no entry at token 1"),
    ({"meta_info": {"output_top_logprobs": [[[-0.1, 5, None]]]}}, 0, "holds 1 log-probability"),
    ({"meta_info": {"output_top_logprobs": [[[-0.1, 5, None]]]}}, 4, "covers 1 tokens, not token 4"),
])
def test_sglang_bodies_without_a_margin_say_why(body, idx, why):
    margin, reason = lp.sglang_margin(body, idx)
    assert margin is None and why in reason


def test_vllm_request_shape_and_margin_over_http():
    with _Canned(200, VLLM_OK) as srv:
        got = _divergence_margin(EngineClient(srv.url), "p", [311, 2415, 279], [311, 2415, 264], 2, 10.0, VLLM_CFG)
    path, sent = srv.requests[0]
    assert path == "/v1/completions" and sent["logprobs"] == 2 and sent["return_tokens_as_token_ids"] is True
    assert sent["max_tokens"] == 3 and sent["temperature"] == 0 and sent["model"] == "m"
    assert got == {"spec_token": 279, "plain_token": 264, "margin": pytest.approx(0.02), "margin_unknown": None}


def test_sglang_request_shape_and_margin_over_http():
    with _Canned(200, SGLANG_OK) as srv:
        got = _divergence_margin(EngineClient(srv.url), "p", [311, 2415, 279], [311, 2415, 264], 2, 10.0, None)
    path, sent = srv.requests[0]
    assert path == "/generate" and sent["return_logprob"] is True and sent["top_logprobs_num"] == 2
    assert sent["logprob_start_len"] == -1 and sent["sampling_params"]["max_new_tokens"] == 3
    assert got["margin"] == pytest.approx(0.02) and got["margin_unknown"] is None


@pytest.mark.parametrize("status,body,cfg,why", [
    (400, VLLM_REFUSED, VLLM_CFG, "refused the log-probability request (HTTP 400: Requested sample logprobs of 2, "
                                  "which is greater than max allowed: 0"),
    (200, VLLM_NULL, VLLM_CFG, "choices[0].logprobs is null"),
    (400, {"error": {"message": "return_logprob is not supported here"}}, None,
     "(HTTP 400: return_logprob is not supported here)"),
    (200, {"text": " the cat", "meta_info": {"completion_tokens": 3}}, None, "ignored return_logprob"),
])
def test_a_refusing_engine_gives_margin_unknown_with_the_reason(status, body, cfg, why):
    with _Canned(status, body) as srv:
        got = _divergence_margin(EngineClient(srv.url), "p", [1, 2, 3], [1, 2, 4], 2, 10.0, cfg)
    assert got["margin"] is None and why in got["margin_unknown"], got


def test_unreachable_engine_gives_margin_unknown():
    got = _divergence_margin(EngineClient("http://127.0.0.1:9"), "p", [1, 2], [1, 3], 1, 2.0, VLLM_CFG)
    assert got["margin"] is None and got["margin_unknown"].startswith("the log-probability request failed")


def test_reference_vllm_surface_answers_vllms_shape(model_pair, tmp_path):
    """The real reference engine on vLLM's surface: `return_token_ids` gives the ids the lossless check compares,
    `logprobs` + `return_tokens_as_token_ids` the top-2 per token in vLLM's shape, and the margin equals the one
    its SGLang-shaped `/generate` gives for the same greedy tokens."""
    import httpx

    from dynocell.engine.reference.launch import start_engine
    from dynocell.runbooks.run.greedy import greedy_generate

    eng = start_engine(model_pair.target, ["--surface", "vllm"], tmp_path / "server.log")
    try:
        name = httpx.get(eng.url + "/v1/models", timeout=60).json()["data"][0]["id"]
        cfg = SimpleNamespace(api="vllm", served_model_name=name, model_path=str(model_pair.target))
        prompt = "The quick brown fox jumps over the lazy dog. It was"
        body = greedy_generate(EngineClient(eng.url), prompt, 8, 120.0, cfg)
        ids = body["output_ids"]
        assert len(ids) == 8 and all(isinstance(i, int) for i in ids)
        raw = httpx.post(eng.url + "/v1/completions", json={"model": name, "prompt": prompt, "max_tokens": 8,
                                                            "temperature": 0, "ignore_eos": True, **lp.VLLM_BODY},
                         timeout=120).json()
        logprobs = raw["choices"][0]["logprobs"]
        assert logprobs["tokens"] == [f"token_id:{i}" for i in ids]
        assert all(f"token_id:{i}" in top for i, top in zip(ids, logprobs["top_logprobs"]))
        got = _divergence_margin(EngineClient(eng.url), prompt, ids, [i + 1 for i in ids], 5, 120.0, cfg)
        vals = sorted(logprobs["top_logprobs"][5].values(), reverse=True)
        # two requests (8 tokens, then idx + 1): CPU float sums may differ in the last bits between them, and the
        # margin is rounded to 6 places, so agreement is to 1e-5 nats (far below one bf16 step, 2**-8 at 1..2)
        assert got["margin"] == pytest.approx(vals[0] - vals[1], abs=1e-5) and got["margin"] >= 0
        assert got["margin_unknown"] is None
    finally:
        eng.stop()


def test_the_report_and_the_doctor_say_margin_unknown_and_why():
    """`dynocell show`, the web page and the doctor carry the reason, never a bare `lossless: no`."""
    from rich.console import Console

    from dynocell.cli.render import lossless_text
    from dynocell.runbooks.doctor import diagnose_inputs, inputs_from_dict
    from dynocell.web.filters import lossless_sentence

    why = lp.refusal(400, json.dumps(VLLM_REFUSED))
    run = {"lossless": "no", "lossless_detail": {"prompts": 5, "max_new_tokens": 48, "mismatches": [
        {"prompt": "def f", "first_diverging_index": 17, "unit": "token", "speculative": "a", "plain": "b",
         "spec_token": 311, "plain_token": 279, "margin": None, "margin_unknown": why}]}}
    console = Console(width=200, record=True)
    console.print(lossless_text(run))
    assert f"(margin unknown: {why})" in console.export_text().replace("\n", "")
    assert f"margin unknown: {why}" in lossless_sentence(run)
    fs = diagnose_inputs(inputs_from_dict({"mismatches": [{"prompt": 0, "position": 17, "margin_unknown": why}]}))
    f = next(f for f in fs if f.rule == "lossless_margin_unknown")
    assert f.message.startswith(f"lossless: no — margin unknown: {why}") and f.severity == "warn"
    assert not {"lossless_near_tie", "corrupt_output"} & {x.rule for x in fs}
    near = dict(run, lossless="near-tie", lossless_detail={**run["lossless_detail"], "max_margin": 0.031})
    assert lossless_sentence(near).startswith("lossless: near-tie (margin 0.031)")
