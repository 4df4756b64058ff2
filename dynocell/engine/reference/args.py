"""Command-line arguments of the reference engine, named as SGLang 0.5.17's ``ServerArgs``.

Unknown arguments: one clear message on stderr and exit code 2 (argparse's
convention). ``--speculative-eagle-topk`` other than 1 is refused (exit 2) except for EAGLE and
EAGLE3, whose tree drafting the reference models (:mod:`.eagle_decoding`). Reference-only extras are
marked as such.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import dataclass
from typing import NoReturn


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # noqa: D401 - argparse hook
        self.print_usage(sys.stderr)
        sys.stderr.write(f"{self.prog}: error: {message}\n"
                         f"hint: run `python -m dynocell.engine.reference --help` for the accepted "
                         f"(SGLang-named) arguments\n")
        sys.exit(2)


def _bool_flag(p, name: str, help_: str) -> None:
    p.add_argument(name, action="store_true", default=False, help=help_)


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser (SGLang argument names)."""
    p = _Parser(prog="python -m dynocell.engine.reference",
                description="dynocell reference engine: SGLang's HTTP surface with real speculative "
                            "decoding on a small local model (CPU fp32, CUDA when present).",
                allow_abbrev=False)
    p.add_argument("--model-path", required=True, help="Target model folder (Hugging Face layout).")
    p.add_argument("--tokenizer-path", default=None, help="Tokenizer folder (default: --model-path).")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--served-model-name", default=None, help="Name in /v1/models (default: --model-path).")
    p.add_argument("--context-length", type=int, default=None,
                   help="Max tokens of prompt + output (default: the model's max_position_embeddings).")
    p.add_argument("--speculative-algorithm", default=None,
                   type=lambda s: None if s.lower() in ("none", "") else s.upper(),
                   help="none | STANDALONE | NGRAM | EAGLE | EAGLE3 | NEXTN (EAGLE over an MTP layer).")
    p.add_argument("--speculative-draft-model-path", default=None)
    p.add_argument("--speculative-num-steps", type=int, default=None, help="Draft steps per verify (D).")
    p.add_argument("--speculative-eagle-topk", type=int, default=None,
                   help="Branches per draft step: 1 = chain; > 1 = tree (EAGLE, EAGLE3 only).")
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None,
                   help="Tokens per verify forward (D + 1 for a chain).")
    p.add_argument("--speculative-draft-mode", choices=["top1", "sampled"], default="top1",
                   help="(reference only) how the draft proposes under sampling: top1 = SGLang eagle_topk 1 "
                        "semantics (default); sampled = textbook speculative sampling.")
    _bool_flag(p, "--enable-metrics", "Serve Prometheus /metrics.")
    _bool_flag(p, "--disable-cuda-graph", "Accepted for compatibility (no CUDA graphs here).")
    _bool_flag(p, "--disable-radix-cache", "Accepted for compatibility.")
    _bool_flag(p, "--trust-remote-code", "Accepted for compatibility.")
    _bool_flag(p, "--skip-server-warmup", "Do not run the warmup generation before reporting ready.")
    p.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error", "critical"])
    p.add_argument("--log-level-http", default=None)
    p.add_argument("--decode-log-interval", type=int, default=40,
                   help="Print a `Decode batch` line every N decode steps (SGLang default 40).")
    p.add_argument("--max-running-requests", type=int, default=16)
    p.add_argument("--random-seed", type=int, default=None)
    p.add_argument("--tp-size", "--tp", type=int, default=1, help="Only 1.")
    p.add_argument("--dtype", default="auto", help="auto | float32 (the reference computes in fp32).")
    p.add_argument("--device", default=None, help="cpu | cuda (default: cuda when available).")
    p.add_argument("--mem-fraction-static", type=float, default=None, help="Accepted for compatibility.")
    p.add_argument("--load-format", default="auto", help="Accepted for compatibility (auto only).")
    p.add_argument("--attention-backend", default=None, help="Accepted for compatibility.")
    p.add_argument("--sampling-backend", default=None, help="Accepted for compatibility.")
    p.add_argument("--cuda-graph-max-bs", type=int, default=None, help="Accepted for compatibility.")
    p.add_argument("--chunked-prefill-size", type=int, default=None, help="Accepted for compatibility.")
    p.add_argument("--kv-cache-dtype", default="auto", help="Accepted for compatibility.")
    p.add_argument("--num-threads", type=int, default=1,
                   help="(reference only) torch CPU threads; 1 is fastest for the tiny model on a shared CPU.")
    p.add_argument("--profile-dir", default=None,
                   help="(reference only) /start_profile writes only inside this directory (default: "
                        "$SGLANG_TORCH_PROFILER_DIR as SGLang, else <tmp>/dynocell-reference-profiles); an "
                        "output_dir outside it, or a profile_id with '/' or '..', is refused with 400.")
    p.add_argument("--surface", choices=["sglang", "vllm"], default="sglang",
                   help="(reference only) vllm: /metrics with vLLM 0.26's names (vllm:num_requests_*, "
                        "vllm:spec_decode_*) and vLLM's 'SpecDecoding metrics' / 'Engine 000' log lines, "
                        "flushed when the engine goes idle.")
    p.add_argument("--profiler-config", default=None,
                   help="vLLM's flag: JSON {\"profiler\": \"torch\", \"torch_profiler_dir\": DIR, …}; /start_profile "
                        "then ignores output_dir and writes DIR/rank0.<id>.pt.trace.json.gz as vLLM 0.26 does.")
    p.add_argument("--startup-delay", type=float, default=0.0,
                   help="(reference only) seconds to stay 'starting' (/health 503) after the HTTP server is up.")
    # Planted effects for benchmarks/reproducibility.py (issue 33): a real, known-size change to detect.
    p.add_argument("--step-slowdown", type=float, default=1.0,
                   help="(reference only) stretch every decode step to this many times its own duration "
                        "(1.25 → 20 %% fewer tokens per second), sleeping after the step.")
    p.add_argument("--draft-corrupt", type=float, default=0.0,
                   help="(reference only) probability 0–1 that a STANDALONE draft token is replaced by the next "
                        "token id (seeded per request): the draft's acceptance falls by about that share.")
    return p


@dataclass
class ResolvedSpec:
    """Speculative settings after SGLang-like defaulting: ``algorithm`` None|STANDALONE|NGRAM|EAGLE, D drafts."""

    algorithm: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None

    @property
    def num_drafts(self) -> int:
        """D, the deepest accepted path (histogram buckets k = 0..D): num_draft_tokens − 1 for a chain,
        num_steps for an EAGLE tree (eagle_topk > 1)."""
        if not self.algorithm:
            return 0
        if (self.eagle_topk or 1) > 1:
            return self.num_steps or 1
        return (self.num_draft_tokens or 1) - 1

    @property
    def proposed_per_step(self) -> int:
        """Draft tokens proposed per verify step: num_draft_tokens − 1 (the tree's size for a tree)."""
        return (self.num_draft_tokens or 1) - 1 if self.algorithm else 0


def parse(argv: list[str] | None = None) -> tuple[argparse.Namespace, ResolvedSpec]:
    """Parse argv; exits 2 with a message on unknown or invalid arguments."""
    p = build_parser()
    a = p.parse_args(argv)
    _builtin_model_paths(p, a)
    if a.profile_dir is None:  # SGLang's own default for profile output (read at launch, as SGLang does)
        a.profile_dir = (os.environ.get("SGLANG_TORCH_PROFILER_DIR")
                         or os.path.join(tempfile.gettempdir(), "dynocell-reference-profiles"))
    alg = a.speculative_algorithm
    if alg not in (None, "STANDALONE", "NGRAM", "EAGLE", "EAGLE3", "NEXTN"):
        p.error(f"--speculative-algorithm {alg!r} is not supported by the reference engine "
                f"(supported: none, STANDALONE, NGRAM, EAGLE, EAGLE3, NEXTN)")
    if a.tp_size != 1:
        p.error("--tp-size must be 1 for the reference engine")
    if alg is None:
        return a, ResolvedSpec(None, None, None, None)
    topk = 1 if a.speculative_eagle_topk is None else a.speculative_eagle_topk
    if alg in ("EAGLE", "EAGLE3", "NEXTN"):  # NEXTN: SGLang's alias of EAGLE for MTP layers
        return a, _resolve_eagle(p, a, alg, topk)
    if topk != 1:
        p.error(f"--speculative-eagle-topk {topk} is not supported: the reference engine drafts a chain "
                f"(use --speculative-eagle-topk 1)")
    if alg == "STANDALONE":
        if not a.speculative_draft_model_path:
            p.error("--speculative-algorithm STANDALONE needs --speculative-draft-model-path")
        steps = (a.speculative_num_steps if a.speculative_num_steps is not None
                 else (a.speculative_num_draft_tokens or 4) - 1)
        if steps < 1:
            p.error("--speculative-num-steps must be ≥ 1")
        # SGLang: with topk 1 the draft token count is num_steps + 1.
        ndt = steps + 1
    else:
        ndt = a.speculative_num_draft_tokens or 4
        if ndt < 2:
            p.error("--speculative-num-draft-tokens must be ≥ 2 for NGRAM")
        steps = a.speculative_num_steps if a.speculative_num_steps is not None else ndt - 1
        if steps < 1:
            p.error("--speculative-num-steps must be ≥ 1")
    return a, ResolvedSpec(alg, steps, topk, ndt)


def _builtin_model_paths(p: argparse.ArgumentParser, a: argparse.Namespace) -> None:
    """``dynocell:tiny`` / ``dynocell:tiny-draft`` (the model names of dynocell's configs,
    :data:`dynocell.engine.config.BUILTIN_MODELS`) given to ``--model-path``, ``--tokenizer-path`` or
    ``--speculative-draft-model-path`` become the folders of the model pair shipped with the package, as
    ``dynocell boot`` resolves them; an engine started by hand with a config's names then loads (it said
    "cannot load the model from 'dynocell:tiny': No such file or directory"). Exits 2 for another
    ``dynocell:`` name, or when this install ships no pair."""
    from dynocell.engine.config import BUILTIN_MODEL_PREFIX, BUILTIN_MODELS

    flags = {"model_path": "--model-path", "tokenizer_path": "--tokenizer-path",
             "speculative_draft_model_path": "--speculative-draft-model-path"}
    given = {k: getattr(a, k) for k in flags if (getattr(a, k) or "").startswith(BUILTIN_MODEL_PREFIX)}
    if not given:
        return
    from .nets import packaged_pair

    pair = packaged_pair()
    folders = {"dynocell:tiny": pair.target, "dynocell:tiny-draft": pair.draft} if pair else {}
    for key, name in given.items():
        if name not in BUILTIN_MODELS:
            p.error(f"{flags[key]} {name!r} is no built-in model: use {' or '.join(BUILTIN_MODELS)}, or a model folder")
        if not folders:
            p.error(f"{flags[key]} {name}: this install ships no model pair; make one with "
                    f"`dynocell model make-tiny DIR` and give DIR/target and DIR/draft")
        setattr(a, key, str(folders[name]))


def _resolve_eagle(p: argparse.ArgumentParser, a: argparse.Namespace, alg: str, topk: int) -> ResolvedSpec:
    """EAGLE's settings: a head folder, num_steps ≥ 1 (default 3), eagle_topk ≥ 1; with topk 1
    num_draft_tokens is num_steps + 1 (SGLang forces it), with topk > 1 it must be given and fit the
    tree: 2 ≤ num_draft_tokens − 1 ≤ topk + (num_steps − 1) · topk² (the candidates SGLang scores)."""
    if not a.speculative_draft_model_path:
        p.error(f"--speculative-algorithm {alg} needs --speculative-draft-model-path (an {alg} head folder)")
    steps = 3 if a.speculative_num_steps is None else a.speculative_num_steps
    if steps < 1:
        p.error("--speculative-num-steps must be ≥ 1")
    if topk < 1:
        p.error("--speculative-eagle-topk must be ≥ 1")
    alg = "EAGLE" if alg == "NEXTN" else alg  # SGLang 0.5.17 resolves the alias (arg_groups/speculative_hook.py)
    if topk == 1:
        return ResolvedSpec(alg, steps, 1, steps + 1)
    ndt = a.speculative_num_draft_tokens
    most = topk + (steps - 1) * topk * topk
    if ndt is None or not 2 <= ndt - 1 <= most:
        p.error(f"--speculative-num-draft-tokens must be given with --speculative-eagle-topk {topk} and lie in "
                f"3..{most + 1} (the tree takes num_draft_tokens − 1 of {most} scored candidates)")
    return ResolvedSpec(alg, steps, topk, ndt)
