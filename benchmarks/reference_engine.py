"""Tokens/s of the reference engine on this CPU: no speculation, STANDALONE, NGRAM — measured in one run.

Usage: ``python benchmarks/reference_engine.py [--models-dir DIR] [--max-new-tokens N] [--temperature T]``.
Starts the engine three times (each on a free port, as a real subprocess), sends the same prompts
one at a time, and prints decode tokens/s (completion tokens / wall seconds), τ, and the ratios.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import httpx

from dynocell.engine.reference.launch import start_engine
from dynocell.engine.reference.nets import DEFAULT_TEMPERATURE, ensure_pair

PROMPTS = [
    "def __init__(self, ",
    "import os\nimport sys\n\n",
    "The quick brown fox jumps over the lazy dog. It was",
    "abc abc abc abc abc abc ",
    "    def close(self):\n        ",
    "class Error(Exception):\n    ",
]


def measure(url: str, max_new_tokens: int, temperature: float) -> tuple[float, float | None]:
    """(tokens/s, τ or None) over PROMPTS, sequentially; τ = Σ completion tokens / Σ verify steps."""
    toks, verify, t = 0, 0, time.perf_counter()
    for i, p in enumerate(PROMPTS):
        r = httpx.post(url + "/generate", json={"text": p, "sampling_params": {
            "max_new_tokens": max_new_tokens, "temperature": temperature, "seed": i, "ignore_eos": True}},
            timeout=600).json()
        toks += r["meta_info"]["completion_tokens"]
        verify += r["meta_info"].get("spec_verify_ct", 0)
    dt = time.perf_counter() - t
    return toks / dt, (toks / verify if verify else None)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--models-dir", type=Path, default=Path(__file__).resolve().parents[1] / ".cache" / "models")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--temperature", type=float, default=DEFAULT_TEMPERATURE)
    a = ap.parse_args()
    pair = ensure_pair(a.models_dir, progress=lambda m: print(m, file=sys.stderr))
    spec = ["--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"]
    runs = {
        "none": [],
        "STANDALONE": ["--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", str(pair.draft),
                       *spec],
        "NGRAM": ["--speculative-algorithm", "NGRAM", "--speculative-num-draft-tokens", "4"],
    }
    results = {}
    with tempfile.TemporaryDirectory() as td:
        for name, extra in runs.items():
            eng = start_engine(pair.target, extra, Path(td) / f"{name}.log")
            try:
                measure(eng.url, 8, a.temperature)  # warm-up
                results[name] = measure(eng.url, a.max_new_tokens, a.temperature)
            finally:
                eng.stop()
            tps, tau = results[name]
            print(f"{name:>10}: {tps:8.1f} tok/s" + (f"  τ {tau:.2f}" if tau else ""), flush=True)
    base = results["none"][0]
    for name in ("STANDALONE", "NGRAM"):
        print(f"{name} / none: {results[name][0] / base:.2f}×")
    print(f"(temperature {a.temperature}, {a.max_new_tokens} tokens × {len(PROMPTS)} prompts, one request at a time)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
