"""Acceptance from vLLM: per-class curves from ``/metrics`` counter deltas, cross-checked with the log.

vLLM (V1, 0.26) puts no speculative counts in a response, so a class's curve is the difference of its
``/metrics`` counters around that class alone (one class at a time, nothing else in flight):
N = Δ``vllm:spec_decode_num_drafts_total``, τ = 1 + Δ``…num_accepted_tokens_total`` / N,
p_i = Δ``…num_accepted_tokens_per_pos_total{position=i−1}`` / N — the same
:class:`~dynocell.engine.acceptance.Curve` as SGLang's (the counter math is
:func:`dynocell.engine.metrics.vllm_position_curve`, reused here).

vLLM's per-position rate is **unconditional**: p_i counts drafts whose first i tokens were all
accepted, over all drafts (``vllm/v1/spec_decode/metrics.py``), so p_1 ≥ p_2 ≥ …; the conditional
rate a_i = p_i / p_{i−1} is derived (:data:`UNCONDITIONAL_NOTE` says so in reports).

Cross-check: the API server's ``SpecDecoding metrics: … Accepted: A tokens, Drafted: T tokens, …``
lines (one per ``VLLM_LOG_STATS_INTERVAL``) cover intervals of the same counters; over the lines of
a class window, τ_log = 1 + ΣA / (ΣT / k) must agree with the counter τ within
:data:`TOLERANCE` (relative). The windows do not align exactly with the log's intervals (the real
C_draft_graph run: counters τ 3.048, its log line 3.069, 0.7 %).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dynocell.engine.acceptance import Curve, VllmSpecSample, relative_diff
from dynocell.engine.metrics import MetricsError, MetricsSnapshot, counter_decreases, delta, restarted_between, \
    vllm_position_curve, PositionFigures

__all__ = ["TOLERANCE", "UNCONDITIONAL_NOTE", "ClassCurve", "class_curve", "cross_check", "log_tau"]

#: Relative τ disagreement above which the cross-check warns (the 2 % of SGLang's cross-checks).
TOLERANCE = 0.02
UNCONDITIONAL_NOTE = ("vLLM's per-position acceptance rate is unconditional: p_i = drafts with positions "
                      "1..i all accepted / drafts (so τ = 1 + Σ p_i); the conditional a_i = p_i / p_(i−1) is derived")


@dataclass(frozen=True)
class ClassCurve:
    """One class window: ``curve`` (steps = drafts N), the engine's ``figures`` (drafts,
    draft_tokens, accepted_tokens, engine_tau) and ``k`` (drafted tokens per draft = D)."""

    curve: Curve
    figures: PositionFigures
    k: int


def class_curve(before: MetricsSnapshot, after: MetricsSnapshot) -> ClassCurve | None:
    """The curve of the window between two scrapes of one vLLM engine; None when no draft was made.

    Raises :class:`MetricsError` when the scrapes are not of one running engine (a counter went
    down, or a ``*_created`` timestamp changed: restart) or the counters contradict each other.
    """
    if restarted_between(before, after) or counter_decreases(before, after):
        raise MetricsError("the vLLM counters were reset between the two scrapes (engine restarted?)",
                           "measure the class again on one running engine")
    got = vllm_position_curve(delta(before, after))
    if got is None or not got[0].steps:
        return None
    curve, figures = got
    drafts = figures["drafts"]
    k = round(figures["draft_tokens"] / drafts) if figures.get("draft_tokens") else curve.num_drafts
    return ClassCurve(curve, figures, int(k))


def log_tau(samples: Iterable[VllmSpecSample], k: int) -> float | None:
    """τ over the log lines of a window: 1 + ΣAccepted / (ΣDrafted / k); None without counts."""
    acc = drafted = 0
    for s in samples:
        if s.accepted is None or s.drafted is None:
            continue
        acc, drafted = acc + s.accepted, drafted + s.drafted
    if drafted <= 0 or k <= 0:
        return None
    return 1.0 + acc / (drafted / k)


def cross_check(counter_tau: float, samples: Iterable[VllmSpecSample], k: int,
                tolerance: float = TOLERANCE) -> tuple[float | None, float | None, str | None]:
    """``(log τ, relative difference, warning)`` of the counter τ against the window's log lines.

    No usable line → ``(None, None, None)``; a difference above ``tolerance`` → a warning naming both.
    """
    lt = log_tau(samples, k)
    if lt is None:
        return None, None, None
    dis = relative_diff(counter_tau, lt)
    warn = None
    if dis > tolerance:
        warn = (f"/metrics counter τ {counter_tau:.3f} and the log's SpecDecoding τ {lt:.3f} differ by "
                f"{dis * 100:.1f} % (> {tolerance * 100:g} %)")
    return lt, dis, warn


def verify_step_ms(results: Iterable[Any], drafts: float, concurrency: int) -> float | None:
    """Mean wall time of one verify step in a class window of vLLM, in ms; None when not defined.

    vLLM returns no per-request step count (SGLang's ``meta_info.spec_verify_ct``), but its
    ``vllm:spec_decode_num_drafts_total`` counts one draft per running request per engine step.
    At concurrency 1 the window's steps are therefore the drafts, one request at a time, and the
    first step of each request falls inside its TTFT (prefill + first token), as in
    ``runbooks.run._verify_step_ms``: step = Σ(e2e − TTFT) / (drafts − requests). A mean over
    the window, where the SGLang figure is a per-request median. ``results`` are
    ``engine.bench.RequestResult`` (seconds); only successful requests count. None at
    concurrency > 1 (steps shared by requests), or without requests or enough drafts.
    """
    if concurrency != 1:
        return None
    decode_s, n = 0.0, 0
    for r in results:
        if getattr(r, "ok", False) and r.ttft_s is not None and r.e2e_s is not None:
            decode_s += r.e2e_s - r.ttft_s
            n += 1
    steps = drafts - n
    return decode_s / steps * 1000 if n and steps > 0 else None
