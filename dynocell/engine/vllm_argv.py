"""vLLM command lines as vLLM's own argument names:
``vllm serve M -tp 2`` → ``{'model_tag': 'M', 'tensor_parallel_size': 2}``.

A log an operator hands over often starts with the command that launched the engine
(``$ vllm serve …``, a shell trace ``+ vllm serve …``, or ``python -m
vllm.entrypoints.openai.api_server --model …``). vLLM's argparse takes short spellings for
some flags; they are the same argument as the long ones and must map the same way.
From ``vllm/engine/arg_utils.py`` (``EngineArgs.add_cli_args``; checked on the newest stored
upstream revision, 99d7eb5; dynocell's adapter names the same for 0.26 in
:data:`dynocell.engine.adapters.VLLM_ALIASES`): ``--pipeline-parallel-size -pp``,
``--tensor-parallel-size -tp``, ``--decode-context-parallel-size -dcp``,
``--data-parallel-size -dp``, ``--data-parallel-rank -dpn``, ``--data-parallel-start-rank -dpr``,
``--data-parallel-size-local -dpl``, ``--data-parallel-address -dpa``,
``--data-parallel-rpc-port -dpp``, ``--data-parallel-backend -dpb``, ``--compilation-config -O``.
Every long flag's argument name is the flag without ``--`` and with ``-`` → ``_`` (argparse's
``dest``). The result has the shape of vLLM's ``non-default args`` dict, for
:func:`dynocell.engine.observed.from_vllm_args`.

Pure functions; no I/O; nothing is run (``shlex`` only splits the text).
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

__all__ = ["VLLM_SHORT_FLAGS", "dest_of", "parse_vllm_command", "vllm_command_args"]

#: vLLM's short spellings → the argument name of the long flag (source: module docstring).
VLLM_SHORT_FLAGS: dict[str, str] = {
    "-pp": "pipeline_parallel_size",
    "-tp": "tensor_parallel_size",
    "-dcp": "decode_context_parallel_size",
    "-dp": "data_parallel_size",
    "-dpn": "data_parallel_rank",
    "-dpr": "data_parallel_start_rank",
    "-dpl": "data_parallel_size_local",
    "-dpa": "data_parallel_address",
    "-dpp": "data_parallel_rpc_port",
    "-dpb": "data_parallel_backend",
    "-O": "compilation_config",
}

_LAUNCHERS = (("vllm", "serve"), ("-m", "vllm.entrypoints.openai.api_server"))
#: A line that starts a launch: optional prompt (``… $ ``, ``# ``) or shell trace (``+ ``), optional
#: ``VAR=value`` assignments, then ``vllm serve`` or ``python -m vllm.entrypoints.openai.api_server``.
_COMMAND = re.compile(r"^(?:.*?[$#>]\s+|\+\s+)?(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?:\S*/)?"
                      r"(?:vllm\s+serve|python[\d.]*\s+-m\s+vllm\.entrypoints\.openai\.api_server)(?:\s|$)")


def dest_of(key: str) -> str:
    """vLLM's argument name for ``key``: a short flag (``-tp``) by :data:`VLLM_SHORT_FLAGS`, a long
    flag (``--tensor-parallel-size``) without dashes, anything else (already a name) unchanged."""
    if key in VLLM_SHORT_FLAGS:
        return VLLM_SHORT_FLAGS[key]
    if key.startswith("--"):
        return key[2:].replace("-", "_")
    return key


def _value(text: str) -> Any:
    try:
        return json.loads(text)  # 2 → 2, 0.9 → 0.9, {"method": …} → dict, true → True
    except ValueError:
        return text


def vllm_command_args(argv: list[str]) -> dict[str, Any]:
    """The arguments of a vLLM launch ``argv`` (words after ``vllm serve`` / ``-m
    vllm.entrypoints.openai.api_server``) by vLLM's argument names.

    A first bare word is ``model_tag`` (``vllm serve MODEL``); ``--flag value``, ``--flag=value``,
    ``-tp 2``, ``-tp=2``, ``-O3`` (``compilation_config`` ``3``) and bare switches (``--enforce-eager``
    → True) are read; values that are JSON literals become numbers / dicts. Words that are none of
    these are skipped (never guessed at).
    """
    out: dict[str, Any] = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if not word.startswith("-"):
            if i == 0:
                out["model_tag"] = word
            i += 1
            continue
        flag, eq, inline = word.partition("=")
        if flag.startswith("-O") and not flag.startswith("--") and len(flag) > 2:  # -O3, -O.mode=…
            out["compilation_config"] = _value(word[2:]) if not word.startswith("-O.") else word[2:]
            i += 1
            continue
        if not flag.startswith("--") and flag not in VLLM_SHORT_FLAGS:
            i += 1  # a short flag vLLM does not define here: skipped
            continue
        name = dest_of(flag)
        if eq:
            out[name] = _value(inline)
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("-"):
            out[name] = _value(argv[i + 1])
            i += 2
        else:
            out[name] = True
            i += 1
    if "model" not in out and "model_tag" in out:
        out["model"] = out["model_tag"]  # vLLM sets both from the positional model
    return out


def parse_vllm_command(line: str) -> dict[str, Any] | None:
    """The arguments of a vLLM launch command found in ``line`` (``$ vllm serve M -tp 2``,
    ``+ CUDA_VISIBLE_DEVICES=0,1 vllm serve …``, ``python3 -m vllm.entrypoints.openai.api_server …``),
    or None for any other line (a ``usage: vllm serve`` help text, a line that does not split)."""
    if "vllm" not in line or not _COMMAND.match(line.strip()):
        return None
    try:
        words = shlex.split(line, comments=False)
    except ValueError:
        return None
    for a, b in _LAUNCHERS:
        for k in range(len(words) - 1):
            if words[k].rsplit("/", 1)[-1] == a and words[k + 1] == b:
                return vllm_command_args(words[k + 2:])
    return None
