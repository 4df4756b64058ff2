"""Top-2 log-probability margins at one output position, from the engines' own response shapes (issue 22,
shape 3: a greedy mismatch is a numerical near-tie or a real divergence).

Request and response shapes, read from the engines' source:

- SGLang ``POST /generate`` (``GenerateReqInput`` in ``sglang/srt/managers/io_struct.py``): ``return_logprob``,
  ``top_logprobs_num`` (the k best per position), ``logprob_start_len`` (-1, the default: output tokens
  only), ``return_text_in_logprobs`` (False: the text slot is null). The response's
  ``meta_info.output_top_logprobs`` has one entry per output token: a list of ``[logprob, token_id, text]``
  (``TokenizerManager.detokenize_top_logprobs_tokens``: tuples, JSON lists) or ``null`` where the engine
  computed none. :data:`SGLANG_BODY` builds the request.
- vLLM ``POST /v1/completions`` (``CompletionRequest`` in ``vllm/entrypoints/openai/completion/protocol.py``):
  ``logprobs`` = k, ``return_tokens_as_token_ids`` (keys ``"token_id:N"``, so two tokens that decode to the
  same text stay two keys). ``choices[0].logprobs`` is ``{tokens, token_logprobs, top_logprobs, text_offset}``
  with ``top_logprobs[i]`` a dict key → logprob holding the sampled token and the k best
  (``OpenAIServingCompletion._create_completion_logprobs``; ``-inf`` is written as ``-9999.0``), or
  ``"logprobs": null`` when the server computed none. :data:`VLLM_BODY` builds the request.

Log-probabilities are natural logs; the margin is top-1 − top-2 in nats. Each parser returns
``(margin, None)`` or ``(None, why)`` — a sentence for the operator, never an exception.
"""

from __future__ import annotations

from typing import Any

#: Extra keys of SGLang's ``/generate`` body that ask for the top-2 log-probabilities of every output token.
SGLANG_BODY = {"return_logprob": True, "top_logprobs_num": 2, "logprob_start_len": -1,
               "return_text_in_logprobs": False}
#: Extra keys of vLLM's ``/v1/completions`` body for the same (token-id keys: no collisions between tokens).
VLLM_BODY = {"logprobs": 2, "return_tokens_as_token_ids": True}


def _margin(tops: Any, idx: int, name: str, values: Any) -> tuple[float | None, str | None]:
    """top-1 − top-2 of ``values(tops[idx])`` (the log-probabilities at one position), or why not."""
    if not isinstance(tops, list):
        return None, f"the response has no {name}"
    if idx >= len(tops):
        return None, f"{name} covers {len(tops)} tokens, not token {idx}"
    if not tops[idx]:
        return None, f"{name} has no entry at token {idx}"
    try:
        vals = sorted((float(v) for v in values(tops[idx])), reverse=True)
    except (TypeError, ValueError, IndexError, AttributeError):
        return None, f"{name}[{idx}] is not in the engine's documented shape"
    if len(vals) < 2:
        return None, f"{name} holds {len(vals)} log-probability at token {idx}, two are needed"
    return round(vals[0] - vals[1], 6), None


def sglang_margin(body: Any, idx: int) -> tuple[float | None, str | None]:
    """Top-2 margin at output token ``idx`` of an SGLang ``/generate`` response body (a dict, or the
    one-element list a batch of one returns)."""
    if isinstance(body, list):
        body = body[0] if body else None
    meta = (body or {}).get("meta_info") if isinstance(body, dict) else None
    if not isinstance(meta, dict):
        return None, "the response has no meta_info"
    if "output_top_logprobs" not in meta:
        return None, "meta_info has no output_top_logprobs (the engine ignored return_logprob)"
    return _margin(meta["output_top_logprobs"], idx, "output_top_logprobs", lambda step: [x[0] for x in step])


def openai_margin(body: Any, idx: int) -> tuple[float | None, str | None]:
    """Top-2 margin at output token ``idx`` of a vLLM (OpenAI) ``/v1/completions`` response body."""
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return None, "the response has no choices"
    lp = choices[0].get("logprobs")
    if not isinstance(lp, dict):
        return None, "choices[0].logprobs is null (the engine computed no log-probabilities)"
    return _margin(lp.get("top_logprobs"), idx, "top_logprobs", lambda step: step.values())


def refusal(status: int, text: str) -> str:
    """Why an engine refused a log-probability request: its HTTP status and the start of its message
    (SGLang and vLLM answer ``{"object": "error", "message": …}`` or ``{"error": {"message": …}}``)."""
    import json

    msg = text
    try:
        data = json.loads(text)
        if isinstance(data, dict):
            err = data.get("error")
            msg = (err.get("message") if isinstance(err, dict) else None) or data.get("message") or \
                (err if isinstance(err, str) else None) or data.get("detail") or text
    except ValueError:
        pass
    return f"the engine refused the log-probability request (HTTP {status}: {' '.join(str(msg).split())[:160]})"
