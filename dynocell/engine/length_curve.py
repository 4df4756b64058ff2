"""Acceptance by context length (issue 22, shape 5), store-free: one acceptance curve per input-length
bucket of a workload's ladder, with the speed-up and the break-even crossover.

A bucket is one rung of the workload's ``[acceptance] input_tokens`` ladder (the target length; the
measured mean ``prompt_tokens`` beside it, which the context cap can make shorter). Per bucket:

- the curve pooled over every text class at that rung (histograms summed, :func:`dynocell.engine.acceptance.merge`):
  τ, accept rate, per-position p_i;
- the verify step's median time (ms) over its requests (:func:`dynocell.engine.breakeven.verify_step_ms`);
- with a plain decode step time (ms, from the run's break-even): the break-even τ of that bucket
  ``τ_be = verify_step_ms / plain_step_ms`` and the speed-up ``τ · plain_step_ms / verify_step_ms``
  (docs/DESIGN.md "Break-even": speculation pays while a speculative step costs less than τ × the plain step).

The crossover is the first bucket, in increasing length, whose speed-up is below 1: from there on
speculation stops paying and should be gated off by length. The plain step is the one the break-even
step measured (short prompts); a plain step also grows with the context, so at long lengths the
speed-up read here is a lower bound and the crossover an early estimate — said in :data:`PLAIN_STEP_NOTE`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

from dynocell.engine import acceptance as acc
from dynocell.engine import breakeven as be

PLAIN_STEP_NOTE = ("speed-up = τ × plain step / verify step at that length; the plain step is the break-even "
                   "step's (short prompts), and it grows with context too, so long buckets read low")


@dataclass(frozen=True)
class LengthBucket:
    """One rung of a length ladder: ``input_tokens`` (the workload's target), ``prompt_tokens`` (measured mean,
    tokens), ``requests`` (ok requests pooled), ``curve`` (:class:`~dynocell.engine.acceptance.Curve` over
    every class at this rung) and ``verify_step_ms`` (median ms per verify step, None when unknown)."""

    input_tokens: int
    prompt_tokens: float | None
    requests: int
    curve: acc.Curve
    verify_step_ms: float | None

    def as_dict(self) -> dict[str, Any]:
        """JSON-ready: ``{input_tokens, prompt_tokens, requests, num_drafts, steps, tau, accept_rate, histogram,
        p, verify_step_ms}`` (rounded as stored in the acceptance step's detail)."""
        c = self.curve
        return {"input_tokens": self.input_tokens,
                "prompt_tokens": None if self.prompt_tokens is None else round(self.prompt_tokens, 1),
                "requests": self.requests, "num_drafts": c.num_drafts, "steps": c.steps, "tau": round(c.tau, 4),
                "accept_rate": round(c.accept_rate, 4), "histogram": list(c.histogram or []),
                "p": [round(x, 4) for x in c.p],
                "verify_step_ms": None if self.verify_step_ms is None else round(self.verify_step_ms, 4)}


def buckets(pairs: Iterable[tuple[int, Any]]) -> list[LengthBucket]:
    """Pool request results by their target input length.

    ``pairs``: ``(input_tokens_target, RequestResult)`` (``ok``, ``meta_info`` with SGLang's
    ``spec_correct_drafts_histogram``, ``prompt_tokens``, ``ttft_s``, ``e2e_s``). Returns one bucket per
    length with at least one speculative histogram, shortest first; [] when fewer than two lengths
    (no ladder, nothing to plot). Every bucket's histogram has the run's D + 1 buckets. Raises
    :class:`~dynocell.engine.acceptance.AcceptanceError` for histograms that contradict themselves.
    """
    by_len: dict[int, list[Any]] = {}
    for target, res in pairs:
        if getattr(res, "ok", False):
            by_len.setdefault(int(target), []).append(res)
    if len(by_len) < 2:
        return []
    # One D for every bucket: SGLang trims a request's histogram to the largest k it saw, so a bucket
    # that never accepted D drafts would otherwise look narrower than the rest.
    whole = acc.curve_from_meta_infos([r.meta_info for rs in by_len.values() for r in rs])
    if whole is None:
        return []
    out = []
    for length in sorted(by_len):
        results = by_len[length]
        curve = acc.curve_from_meta_infos([r.meta_info for r in results], len(whole.histogram or ()) - 1)
        if curve is None:
            continue
        prompts = [r.prompt_tokens for r in results if isinstance(r.prompt_tokens, int)]
        out.append(LengthBucket(length, sum(prompts) / len(prompts) if prompts else None, len(results), curve,
                                be.verify_step_ms(results)))
    return out if len(out) >= 2 else []


def with_breakeven(rows: list[dict[str, Any]], plain_step_ms: float | None) -> dict[str, Any]:
    """The curve an operator reads: ``{buckets, plain_step_ms, crossover_tokens, note}``.

    ``rows``: :meth:`LengthBucket.as_dict` dicts (as stored). Each bucket gains ``breakeven_tau``
    (verify step / plain step), ``speedup`` (τ × plain step / verify step) and ``pays`` (speed-up > 1);
    None where a step time is missing. ``crossover_tokens``: the first bucket's ``input_tokens`` from
    which every longer bucket's speed-up is below 1 as well (speculation stops paying there; None when it
    pays at the longest length, or without step times); ``pays_at_no_length``: True when no timed bucket pays
    (the crossover is then the shortest bucket: there is no length to gate speculation by).
    """
    out = []
    for row in sorted(rows, key=lambda x: x["input_tokens"]):
        b = dict(row)
        v = b.get("verify_step_ms")
        if plain_step_ms and v:
            b["breakeven_tau"] = round(v / plain_step_ms, 4)
            b["speedup"] = round(b["tau"] * plain_step_ms / v, 4)
            b["pays"] = b["speedup"] > 1.0
        else:
            b["breakeven_tau"] = b["speedup"] = b["pays"] = None
        out.append(b)
    cross = None
    for b in reversed(out):
        if b["pays"] is False:
            cross = b["input_tokens"]
        else:
            break
    timed = [b for b in out if b["pays"] is not None]
    nowhere = bool(timed) and not any(b["pays"] for b in timed)
    return {"buckets": out, "plain_step_ms": plain_step_ms, "crossover_tokens": cross, "pays_at_no_length": nowhere,
            "note": PLAIN_STEP_NOTE if plain_step_ms else "no plain step time: speed-up unknown (run with the "
                                                          "lossless check to time the plain twin)"}
