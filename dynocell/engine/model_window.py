"""A model folder's context window, read from its Hugging Face ``config.json`` (issue 22, shape 8).

The window is ``max_position_embeddings`` (the longest sequence the model was built for; a multimodal
wrapper keeps it under ``text_config``), scaled by ``rope_scaling`` the way each engine derives its default
context length:

- vLLM (``_get_and_verify_max_len``, ``vllm/config.py`` in v0.8.5; ``vllm/config/`` later): ×
  ``rope_scaling["factor"]`` unless the rope type is ``su`` / ``longrope`` / ``llama3``; for ``yarn`` the
  base is ``original_max_position_embeddings``;
- SGLang (``get_context_length``, ``sglang/srt/hf_transformers_utils.py``): × ``factor`` unless the rope
  scaling names ``original_max_position_embeddings`` or is ``llama3``;
- the reference engine: ``max_position_embeddings`` as written (``engine/reference/server.py``).

:func:`draft_head_kind` reads the same file's ``architectures``: which EAGLE head a draft folder holds
(issue 35 item 4). Only a real directory's ``config.json`` of at most :data:`MAX_CONFIG_BYTES` is read; a hub
id, a missing file or a malformed one gives ``(None, why)``, never an error: the caller then says the window is unknown.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

#: Largest config.json read (real ones are a few kB; a multimodal one ~20 kB).
MAX_CONFIG_BYTES = 1 << 20
#: Rope types whose ``max_position_embeddings`` already is the extended length (vLLM's exclusions).
_NO_FACTOR_ROPE = ("su", "longrope", "llama3")


def window_of_config(cfg: dict[str, Any], engine: str | None = None) -> int | None:
    """The context window (tokens) a ``config.json`` dict gives ``engine`` (``vllm`` | ``sglang``; anything
    else: ``max_position_embeddings`` as written), see the module doc; None when it states no
    ``max_position_embeddings``."""
    if not isinstance(cfg.get("max_position_embeddings"), int) and isinstance(cfg.get("text_config"), dict):
        cfg = cfg["text_config"]
    n = cfg.get("max_position_embeddings")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        return None
    rs = cfg.get("rope_scaling")
    if not isinstance(rs, dict) or engine not in ("vllm", "sglang"):
        return n
    kind = str(rs.get("rope_type") or rs.get("type") or "")
    factor = rs.get("factor")
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or factor <= 0:
        return n
    if engine == "vllm":
        if kind in _NO_FACTOR_ROPE:
            return n
        base = rs.get("original_max_position_embeddings") if kind == "yarn" else n
        return int((base if isinstance(base, int) and base > 0 else n) * factor)
    if "original_max_position_embeddings" in rs or kind == "llama3":
        return n
    return int(n * factor)


def read_model_config(path: str | Path | None) -> tuple[dict[str, Any] | None, str]:
    """``(config.json as a dict, its path)`` of a model folder, or ``(None, why not)``: no path, a hub id that
    is not a folder on this host, a file over :data:`MAX_CONFIG_BYTES`, unreadable or not a JSON object."""
    if not path:
        return None, "no model path"
    p = Path(str(path)) / "config.json"
    try:
        if not p.is_file():
            return None, f"{path} has no config.json on this host"
        if p.stat().st_size > MAX_CONFIG_BYTES:
            return None, f"{p} is larger than {MAX_CONFIG_BYTES} bytes"
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        return None, f"{p} cannot be read: {type(e).__name__}"
    if not isinstance(cfg, dict):
        return None, f"{p} is not a JSON object"
    return cfg, str(p)


def draft_head_kind(cfg: dict[str, Any]) -> str | None:
    """``EAGLE3`` | ``EAGLE`` for a draft model's ``config.json``, from its ``architectures`` as the engines name
    them: SGLang ``LlamaForCausalLMEagle3`` / ``LlamaForCausalLMEagle``, vLLM ``Eagle3LlamaForCausalLM`` /
    ``EagleLlamaForCausalLM`` (and ``Eagle3*`` speculators); None when no architecture names EAGLE (a plain
    ``LlamaForCausalLM``, which EAGLE-1 heads and some EAGLE-3 exports also use, says nothing). SGLang's own
    check reads the same field (sgl-project/sglang#21272: "If it contains 'Eagle3' … auto-upgrade to EAGLE3")."""
    archs = cfg.get("architectures")
    names = [str(a).lower() for a in archs] if isinstance(archs, list) else []
    if any("eagle3" in a for a in names):
        return "EAGLE3"
    if any("eagle" in a for a in names):
        return "EAGLE"
    return None


def model_window(path: str | Path | None, engine: str | None = None) -> tuple[int | None, str]:
    """``(window tokens, where it came from)`` for a model folder as ``engine`` reads it
    (:func:`window_of_config`); ``(None, why not)`` when it cannot be read.

    ``path``: the folder as a config names it (an absolute or relative directory; a hub id such as
    ``org/name`` that is not a local folder gives None)."""
    cfg, where = read_model_config(path)
    if cfg is None:
        return None, where
    p = Path(where)
    n = window_of_config(cfg, engine)
    if n is None:
        return None, f"{p} states no max_position_embeddings"
    scaled = n != window_of_config(cfg)
    return n, f"{p} max_position_embeddings" + (" with its rope_scaling" if scaled else "")
