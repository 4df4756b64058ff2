"""Prometheus ``/metrics`` parsing and the speculative counters dynocell reads.

Parsing is prometheus-client's own text parser
(``prometheus_client.parser.text_string_to_metric_families``). Names are the
SGLang 0.5.17 ones, checked against real captures in
``tests/data/sglang-0.5.17/*.metrics.txt``:

- ``sglang:spec_accept_length`` / ``sglang:spec_accept_rate`` — gauges (the last
  logging interval's τ and accept rate, per ``tp_rank``);
- ``sglang:spec_verify_calls_total`` — counter of verify steps;
- ``sglang:generation_tokens_total`` / ``sglang:prompt_tokens_total`` — counters;
- ``sglang:num_running_reqs`` / ``sglang:num_queue_reqs`` — gauges.

Per-position counters (exported by dynocell's reference engine and by the
bundled SGLang patch ``spec-per-position-metrics``; not in stock SGLang):
``sglang:spec_verify_steps_total`` and
``sglang:spec_accepted_drafts_at_position_total{position="i"}`` with positions
1-based (i = 1..D, the p_i of docs/DESIGN.md). A 0-based export (a ``position="0"``
series) is accepted and shifted by one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypedDict

from prometheus_client.parser import text_string_to_metric_families

from dynocell.engine.acceptance import Curve
from dynocell.errors import EngineError

__all__ = [
    "ACCEPTED_AT_POSITION",
    "GENERATION_TOKENS",
    "MetricsError",
    "MetricsSnapshot",
    "Sample",
    "VERIFY_STEPS",
    "delta",
    "generation_tokens",
    "num_queue_reqs",
    "num_running_reqs",
    "parse_metrics",
    "position_curve",
    "prompt_tokens",
    "spec_accept_length",
    "spec_accept_rate",
    "spec_verify_calls",
    "tokens_per_verify",
    "VLLM_ACCEPTED_PER_POS",
    "counter_decreases",
    "restarted_between",
    "vllm_position_curve",
]

SPEC_ACCEPT_LENGTH = "sglang:spec_accept_length"
SPEC_ACCEPT_RATE = "sglang:spec_accept_rate"
SPEC_VERIFY_CALLS = "sglang:spec_verify_calls_total"
GENERATION_TOKENS = "sglang:generation_tokens_total"
PROMPT_TOKENS = "sglang:prompt_tokens_total"
NUM_RUNNING = "sglang:num_running_reqs"
NUM_QUEUE = "sglang:num_queue_reqs"
VERIFY_STEPS = "sglang:spec_verify_steps_total"
ACCEPTED_AT_POSITION = "sglang:spec_accepted_drafts_at_position_total"

# vLLM V1 (vllm/v1/metrics/loggers.py): per-position accepted draft tokens, 0-based position label
VLLM_NUM_DRAFTS = "vllm:spec_decode_num_drafts_total"
VLLM_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
VLLM_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
VLLM_ACCEPTED_PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"

_CUMULATIVE_SUFFIXES = ("_total", "_count", "_sum", "_bucket")


class PositionFigures(TypedDict):
    """The counters beside :func:`vllm_position_curve`'s curve: drafts N, draft and accepted tokens, and
    the engine's own τ (None when it accepted nothing countable)."""

    drafts: float
    draft_tokens: float
    accepted_tokens: float
    engine_tau: float | None


class MetricsError(EngineError, ValueError):
    """A ``/metrics`` body that is not Prometheus text exposition format."""


@dataclass(frozen=True)
class Sample:
    """One time series value: metric ``name`` (sample name, e.g. ``…_total``), ``labels``, ``value``."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    @property
    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)


@dataclass(frozen=True)
class MetricsSnapshot:
    """All samples of one ``/metrics`` scrape.

    ``samples``: ``{sample name: [Sample, …]}``; ``types``: ``{sample name:
    "counter" | "gauge" | "histogram" | "summary" | "untyped" …}`` from the
    ``# TYPE`` lines (histogram/summary parts carry their family's type).
    """

    samples: dict[str, tuple[Sample, ...]]
    types: dict[str, str]

    def names(self) -> list[str]:
        """Sample names present, sorted."""
        return sorted(self.samples)

    def values(self, name: str, **labels: str) -> list[float]:
        """Values of every series of ``name`` whose labels include ``labels``."""
        want = {k: str(v) for k, v in labels.items()}
        return [
            s.value for s in self.samples.get(name, ())
            if all(s.label_dict.get(k) == v for k, v in want.items())
        ]

    def get(self, name: str, **labels: str) -> float | None:
        """The value of the series of ``name`` matching ``labels``.

        ``None`` when no series matches. Raises :class:`MetricsError` when several
        match (name more labels, or use :meth:`values` / :meth:`sum` / :meth:`mean`).
        """
        vals = self.values(name, **labels)
        if not vals:
            return None
        if len(vals) > 1:
            raise MetricsError(
                f"{name}{labels or ''} matches {len(vals)} series",
                "pass more labels (e.g. tp_rank='0') or use .sum() / .values()",
            )
        return vals[0]

    def sum(self, name: str, **labels: str) -> float | None:
        """Sum over the matching series of ``name``; ``None`` when there is none."""
        vals = self.values(name, **labels)
        return math.fsum(vals) if vals else None

    def mean(self, name: str, **labels: str) -> float | None:
        """Mean over the matching series (e.g. a gauge reported per ``tp_rank``)."""
        vals = self.values(name, **labels)
        return math.fsum(vals) / len(vals) if vals else None

    def is_cumulative(self, name: str) -> bool:
        """True for counters and histogram/summary ``_count``/``_sum``/``_bucket`` series."""
        t = self.types.get(name)
        if name.endswith("_created"):  # a creation timestamp, not a count
            return False
        if t == "counter":
            return True
        if t in ("histogram", "summary", "gaugehistogram"):
            return not name.endswith("_gcount") and not name.endswith("_gsum") and name.endswith(_CUMULATIVE_SUFFIXES)
        if t in (None, "unknown", "untyped"):
            return name.endswith("_total")
        return False


def parse_metrics(text: str) -> MetricsSnapshot:
    """Parse Prometheus text exposition (``/metrics`` body) into a :class:`MetricsSnapshot`.

    An empty body gives an empty snapshot. Raises :class:`MetricsError` (naming
    the parser's complaint and the first characters) for anything that is not
    the text format, e.g. an HTML error page.
    """
    if not isinstance(text, str):
        raise MetricsError(f"/metrics body must be text, got {type(text).__name__}")
    samples: dict[str, list[Sample]] = {}
    types: dict[str, str] = {}
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                samples.setdefault(s.name, []).append(
                    Sample(s.name, tuple(sorted(s.labels.items())), float(s.value))
                )
                types.setdefault(s.name, fam.type)
    except (ValueError, TypeError, IndexError, KeyError) as exc:
        head = text.strip().splitlines()[0][:80] if text.strip() else ""
        raise MetricsError(
            f"/metrics body is not Prometheus text format ({exc}); it starts with {head!r}",
            "check the engine was started with --enable-metrics and the URL is /metrics",
        ) from None
    return MetricsSnapshot({k: tuple(v) for k, v in samples.items()}, types)


def delta(before: MetricsSnapshot, after: MetricsSnapshot) -> MetricsSnapshot:
    """``after − before`` for cumulative series (counters, histogram parts); gauges keep ``after``.

    A counter that went down was reset (engine restart): its delta is ``after``'s
    value. Series absent from ``before`` count from 0.
    """
    out: dict[str, tuple[Sample, ...]] = {}
    for name, series in after.samples.items():
        if not after.is_cumulative(name):
            out[name] = series
            continue
        prev = {s.labels: s.value for s in before.samples.get(name, ())}
        new = []
        for s in series:
            b = prev.get(s.labels, 0.0)
            v = s.value - b if s.value >= b else s.value
            new.append(Sample(s.name, s.labels, v))
        out[name] = tuple(new)
    return MetricsSnapshot(out, dict(after.types))


def spec_accept_length(snap: MetricsSnapshot) -> float | None:
    """``sglang:spec_accept_length`` (τ of the last logging interval), mean over ranks; ``None`` if absent."""
    return snap.mean(SPEC_ACCEPT_LENGTH)


def spec_accept_rate(snap: MetricsSnapshot) -> float | None:
    """``sglang:spec_accept_rate`` (accepted / proposed drafts, last interval), mean over ranks."""
    return snap.mean(SPEC_ACCEPT_RATE)


def spec_verify_calls(snap: MetricsSnapshot) -> float | None:
    """``sglang:spec_verify_calls_total`` (verify steps, counter), summed over series."""
    return snap.sum(SPEC_VERIFY_CALLS)


def tokens_per_verify(snap: MetricsSnapshot) -> float | None:
    """Engine-side accept length: generation tokens / verify steps (use on a :func:`delta`).

    The same definition as SGLang's per-request ``meta_info.spec_accept_length``
    (completion_tokens / spec_verify_ct), aggregated by the engine's counters —
    the cross-check for a workload's client-side τ. Unlike the
    ``sglang:spec_accept_length`` gauge (last logging interval only: 1.0 once
    idle in the real trained-pair capture) it covers the whole window. ``None``
    without verify steps.
    """
    g = generation_tokens(snap)
    v = spec_verify_calls(snap)
    if g is None or not v:
        return None
    return g / v


def generation_tokens(snap: MetricsSnapshot) -> float | None:
    """``sglang:generation_tokens_total`` (output tokens, counter), summed over series."""
    return snap.sum(GENERATION_TOKENS)


def prompt_tokens(snap: MetricsSnapshot) -> float | None:
    """``sglang:prompt_tokens_total`` (prompt tokens, counter), summed over series."""
    return snap.sum(PROMPT_TOKENS)


def num_running_reqs(snap: MetricsSnapshot) -> float | None:
    """``sglang:num_running_reqs`` gauge, summed over ranks/series."""
    return snap.sum(NUM_RUNNING)


def num_queue_reqs(snap: MetricsSnapshot) -> float | None:
    """``sglang:num_queue_reqs`` gauge, summed over ranks/series."""
    return snap.sum(NUM_QUEUE)


def _per_position(snap: MetricsSnapshot, name: str) -> dict[int, float]:
    """``{position: value summed over the other labels}`` of a counter with a ``position`` label.

    Raises :class:`MetricsError` for a series whose position is not a non-negative integer.
    """
    per_pos: dict[int, float] = {}
    for smp in snap.samples.get(name, ()):
        raw = smp.label_dict.get("position")
        try:
            pos = int(raw) if raw is not None else None
        except ValueError:
            pos = None
        if pos is None or pos < 0:
            raise MetricsError(f"{name} has a series without an integer position label: {raw!r}")
        per_pos[pos] = per_pos.get(pos, 0.0) + smp.value
    return per_pos


def position_curve(snap: MetricsSnapshot) -> Curve | None:
    """Per-position curve from the per-position counters, ``None`` when not exported.

    p_i = accepted_drafts_at_position{position=i} / verify_steps (docs/DESIGN.md: the
    unconditional p_i), summed over other labels (ranks). Use it on
    :func:`delta` of two scrapes to get one workload's curve. Returns a curve with
    ``steps == 0`` when no verify step happened. Raises :class:`MetricsError` for
    a non-integer position label or counts that make p_i > 1.
    """
    steps = snap.sum(VERIFY_STEPS)
    per_pos = _per_position(snap, ACCEPTED_AT_POSITION)
    if steps is None or not per_pos:
        return None
    if 0 in per_pos:  # 0-based export → shift to p_1..p_D
        per_pos = {k + 1: v for k, v in per_pos.items()}
    d = max(per_pos)
    counts: Iterable[float] = (per_pos.get(i, 0.0) for i in range(1, d + 1))
    if steps <= 0:
        return Curve.from_positions([0.0] * d, steps=0)
    p = []
    for i, c in enumerate(counts, start=1):
        if c > steps + 1e-9 or c < 0:
            raise MetricsError(
                f"{ACCEPTED_AT_POSITION}{{position=\"{i}\"}} = {c:g} is outside [0, verify steps = {steps:g}]",
                "the counters were taken at different times or the engine double counts",
            )
        p.append(c / steps)
    return Curve.from_positions(p, steps=int(round(steps)))


#: The largest counter value taken: 2^53, the last integer a float (Prometheus' sample type) counts exactly.
MAX_COUNT = float(2 ** 53)


def vllm_position_curve(snap: MetricsSnapshot, prefix: str = "vllm:") -> tuple[Curve, PositionFigures] | None:
    """vLLM's per-position curve from its spec-decode counters; None when not exported.

    Per vLLM (``vllm/v1/spec_decode/metrics.py``): drafts N = ``num_drafts``,
    p_i = ``accepted_tokens_per_pos{position=i−1}`` / N (positions are 0-based
    there), τ = 1 + ``num_accepted_tokens`` / N, summed over engines (DP ranks).
    Use on a :func:`delta` of two scrapes for one window, or on one scrape for
    "since the engine started". Returns ``(curve, figures)`` with the engine's own
    τ in ``figures["engine_tau"]``. Raises :class:`MetricsError` for a position
    label that is not an integer, a count above N, or a counter that is not a count
    (negative, NaN, inf, above :data:`MAX_COUNT`).

    ``prefix``: the family prefix. llama.cpp's llama-server exports the same four counters with
    the same meaning under ``llamacpp:`` (``tools/server/server-task.cpp`` ``to_metrics``:
    ``spec_decode_num_drafts_total`` = verify steps, ``…_num_draft_tokens_total``,
    ``…_num_accepted_tokens_total``, ``…_num_accepted_tokens_per_pos_total{position}`` 0-based,
    incremented for every position below the step's accepted count).
    """
    names = [n.replace("vllm:", prefix, 1) for n in (VLLM_NUM_DRAFTS, VLLM_ACCEPTED_PER_POS, VLLM_ACCEPTED,
                                                        VLLM_DRAFT_TOKENS)]
    num_drafts, per_pos_name, accepted_name, draft_tokens_name = names
    drafts = snap.sum(num_drafts)
    per_pos = _per_position(snap, per_pos_name)
    if drafts is None or not per_pos:
        return None
    d = max(per_pos) + 1
    accepted = snap.sum(accepted_name)
    figures: PositionFigures = {"drafts": drafts, "draft_tokens": snap.sum(draft_tokens_name) or 0.0,
               "accepted_tokens": accepted or 0.0,
               "engine_tau": (1.0 + accepted / drafts) if (drafts and accepted is not None) else None}
    for name, v in ((num_drafts, drafts), (accepted_name, accepted), (draft_tokens_name, figures["draft_tokens"])):
        if v is not None and not 0 <= v <= MAX_COUNT:  # NaN, inf, negative, or past what a float counts
            raise MetricsError(f"{name} = {v:g} is not a count (0 to 2^53)",
                               "the scrape is corrupt or edited: save the engine's own /metrics text")
    if drafts <= 0:
        return Curve.from_positions([0.0] * d, steps=0), figures
    p = []
    for i in range(d):
        c = per_pos.get(i, 0.0)
        if not 0 <= c <= drafts + 1e-9:  # NaN too
            raise MetricsError(f"{per_pos_name}{{position=\"{i}\"}} = {c:g} is outside "
                               f"[0, drafts = {drafts:g}]", "the scrapes are of different engines or windows")
        p.append(c / drafts)
    return Curve.from_positions(p, steps=int(round(drafts))), figures


def counter_decreases(before: MetricsSnapshot,
                      after: MetricsSnapshot) -> list[tuple[str, dict[str, str], float, float]]:
    """Cumulative series (counters, histogram parts) that went down from ``before`` to ``after``:
    ``[(name, labels, before_value, after_value)]`` — a restart, or scrapes out of order."""
    out = []
    for name, series in after.samples.items():
        if not after.is_cumulative(name):
            continue
        prev = {smp.labels: smp.value for smp in before.samples.get(name, ())}
        for smp in series:
            b = prev.get(smp.labels)
            if b is not None and smp.value < b:
                out.append((name, smp.label_dict, b, smp.value))
    return out


def restarted_between(before: MetricsSnapshot, after: MetricsSnapshot) -> list[str]:
    """Counters whose ``*_created`` timestamp changed between two scrapes (the process was restarted,
    or the scrapes are of two engines): their names. prometheus-client exports ``<counter>_created``."""
    out = []
    for name, series in after.samples.items():
        if not name.endswith("_created"):
            continue
        prev = {smp.labels: smp.value for smp in before.samples.get(name, ())}
        for smp in series:
            b = prev.get(smp.labels)
            if b is not None and abs(b - smp.value) > 1e-3:
                out.append(name)
                break
    return out
