"""Greedy generations against a boot (the canary, goldens, the lossless comparison) and text digests.
"""

from __future__ import annotations

import hashlib
from typing import Any

from dynocell.engine import kinds
from dynocell.engine.client import EngineClient
from dynocell.errors import EngineError


def text_sha256(text: str) -> str:
    """sha256 hex digest of ``text`` (UTF-8): how goldens and canaries key their prompts."""
    return hashlib.sha256(text.encode()).hexdigest()


def api_kw(cfg: Any) -> dict[str, Any]:
    """``run_level`` keywords for the engine's HTTP surface: vLLM's is OpenAI ``/v1/completions``
    with the served name (vLLM's default name: the model path given); a registered engine kind says its own."""
    kind = kinds.get(getattr(cfg, "engine", None))
    if kind is not None:
        return kind.completion_kw(cfg)
    if getattr(cfg, "api", "sglang") != "vllm":
        return {}
    return {"api": "openai", "model": cfg.served_model_name or cfg.model_path}


def greedy_generate(client: EngineClient, prompt: str, n: int, timeout_s: float = 600.0,
                    cfg: Any = None) -> dict[str, Any]:
    """One greedy, non-streaming generation of ``n`` tokens; returns SGLang's body shape
    (``text``, ``meta_info.completion_tokens``; ``output_ids`` when the engine gives them).
    vLLM's surface (``cfg.api == "vllm"``): ``/v1/completions`` with ``ignore_eos`` and ``return_token_ids``
    (vLLM's ``CompletionRequest``: the choice then carries ``token_ids``, kept as ``output_ids`` so a lossless
    mismatch is located in tokens), normalised; an engine that ignores the key gives text only."""
    kw = api_kw(cfg)
    if kw:
        resp = client.completions({"model": kw["model"], "prompt": prompt, "max_tokens": n, "temperature": 0,
                                   "ignore_eos": True, "return_token_ids": True}, timeout_s=timeout_s)
        if not resp.ok or not isinstance(resp.body, dict) or not resp.body.get("choices"):
            raise EngineError(f"/v1/completions answered {resp.status}: {resp.text[:200]}", None)
        usage = resp.body.get("usage") or {}
        choice = resp.body["choices"][0]
        out: dict[str, Any] = {"text": choice.get("text", ""),
                               "meta_info": {"completion_tokens": usage.get("completion_tokens")}}
        ids = choice.get("token_ids")
        if isinstance(ids, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            out["output_ids"] = ids  # vLLM's return_token_ids (CompletionResponseChoice.token_ids)
        return out
    resp = client.generate({"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": n,
                                                                 "ignore_eos": True}}, timeout_s=timeout_s)
    if not resp.ok:
        raise EngineError(f"/generate answered {resp.status}: {resp.text[:200]}", None)
    body = resp.body
    if isinstance(body, list):
        body = body[0]
    return body
