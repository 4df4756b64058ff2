"""Acceptance math of speculative decoding: one definition each, used everywhere.

Source: ``docs/DESIGN.md`` "Acceptance math". With D drafts proposed per verify step
(chain drafting: D = num_draft_tokens − 1) and the histogram h[k], k = 0..D, of
"k drafts accepted in one verify step":

- steps N = Σ h[k]
- accept length τ = 1 + Σ k·h[k] / N (the bonus token is counted)
- unconditional per-position acceptance p_i = Σ_{k≥i} h[k] / N, i = 1..D
  (vLLM's "per-position acceptance rate"; τ = 1 + Σ p_i)
- conditional per-position acceptance a_i = p_i / p_{i−1}, p_0 = 1
  (0 when p_{i−1} = 0)
- accept rate = Σ k·h[k] / (N·D) = Σ p_i / D

Worked examples (docs/DESIGN.md): p = 0.917/0.833/0.583/0.500 → τ = 3.833;
p = 0.90/0.79/0.67 → τ = 3.36.

Also here: the independence model τ(p, D) = (1 − p^(D+1)) / (1 − p), the
relative difference used for the 2 % cross-checks, and parsers for the two log
shapes engines print (vLLM ``SpecDecoding metrics: … Per-position acceptance
rate: …`` and SGLang ``Decode batch, … accept len: …, accept rate: …``).

Pure functions: no I/O, no HTTP, no database.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dynocell.errors import EngineError

__all__ = [
    "AcceptanceError",
    "Curve",
    "DecodeLogSample",
    "VllmSpecSample",
    "curve_from_meta_infos",
    "expected_tau_independent",
    "merge",
    "parse_decode_line",
    "parse_decode_lines",
    "parse_vllm_spec_line",
    "parse_vllm_spec_lines",
    "relative_diff",
]


class AcceptanceError(EngineError, ValueError):
    """Acceptance data that cannot be turned into a curve (negative counts, mismatched
    draft widths, probabilities outside [0, 1]). Usually an engine reporting nonsense."""


def _conditional(p: Sequence[float]) -> tuple[float, ...]:
    out: list[float] = []
    prev = 1.0
    for pi in p:
        out.append(pi / prev if prev > 0 else 0.0)
        prev = pi
    return tuple(out)


@dataclass(frozen=True)
class Curve:
    """One acceptance curve (docs/DESIGN.md "Acceptance math").

    Fields:
    - ``histogram``: h[k] for k = 0..D (verify steps that accepted exactly k
      drafts), or ``None`` when the curve came from per-position rates or a
      summary (log lines).
    - ``num_drafts``: D, drafts proposed per verify step.
    - ``steps``: N = Σ h[k] verify steps, or ``None`` when unknown.
    - ``tau``: accept length τ (tokens per verify step, bonus included).
    - ``accept_rate``: accepted / proposed drafts, in [0, 1].
    - ``p``: p_1..p_D unconditional per-position acceptance (empty when unknown,
      e.g. from a summary line).
    - ``a``: a_1..a_D conditional per-position acceptance, a_i = p_i / p_{i−1}.

    A curve with ``steps == 0`` (no verify step at all) has the neutral values
    τ = 1, accept_rate = 0, p_i = a_i = 0.
    """

    histogram: tuple[int, ...] | None
    num_drafts: int
    steps: int | None
    tau: float
    accept_rate: float
    p: tuple[float, ...]
    a: tuple[float, ...]

    @classmethod
    def from_histogram(cls, h: Sequence[int], proposed_per_step: int | None = None) -> Curve:
        """Curve from a histogram h[0..D] (SGLang ``spec_correct_drafts_histogram``).

        ``proposed_per_step``: drafts proposed per verify step when it exceeds D — an EAGLE tree
        (``eagle_topk`` > 1) proposes ``num_draft_tokens − 1`` nodes but accepts a path at most
        ``num_steps`` = D deep; SGLang's accept rate is then correct / (N · tree size)
        (``tokenizer_manager.py``). τ and p_i are over the accepted depth either way.
        Raises :class:`AcceptanceError` for fewer than 2 buckets, non-integer or
        negative counts, or ``proposed_per_step`` < D.
        """
        if isinstance(h, (str, bytes)) or not isinstance(h, Sequence):
            raise AcceptanceError(f"acceptance histogram must be a list of counts, got {type(h).__name__}")
        if len(h) < 2:
            raise AcceptanceError(
                f"acceptance histogram needs buckets k = 0..D with D ≥ 1, got {len(h)} bucket(s): {list(h)}",
                "a speculative engine reports num_draft_tokens buckets",
            )
        hist: list[int] = []
        for k, v in enumerate(h):
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
                raise AcceptanceError(f"acceptance histogram bucket {k} is not a count: {v!r}")
            if v < 0:
                raise AcceptanceError(f"acceptance histogram bucket {k} is negative: {v}")
            hist.append(int(v))
        d = len(hist) - 1
        n = sum(hist)
        if proposed_per_step is not None and proposed_per_step < d:
            raise AcceptanceError(f"{proposed_per_step} drafts proposed per verify step cannot be accepted "
                                  f"{d} deep (histogram of {d + 1} buckets)")
        per_step = proposed_per_step or d
        if n == 0:
            return cls(tuple(hist), d, 0, 1.0, 0.0, (0.0,) * d, (0.0,) * d)
        accepted = sum(k * c for k, c in enumerate(hist))
        p = []
        tail = n
        for i in range(1, d + 1):
            tail -= hist[i - 1]
            p.append(tail / n)
        return cls(
            histogram=tuple(hist),
            num_drafts=d,
            steps=n,
            tau=1.0 + accepted / n,
            accept_rate=accepted / (n * per_step),
            p=tuple(p),
            a=_conditional(p),
        )

    @classmethod
    def from_positions(cls, p: Sequence[float], steps: int | None = None) -> Curve:
        """Curve from unconditional per-position rates p_1..p_D (vLLM's log line).

        τ = 1 + Σ p_i, accept rate = Σ p_i / D. ``steps`` (N) is carried when
        known (it weights :func:`merge`). Raises :class:`AcceptanceError` when
        p is empty or a p_i is outside [0, 1].
        """
        ps = [float(x) for x in p]
        if not ps:
            raise AcceptanceError("per-position acceptance needs at least one position")
        for i, x in enumerate(ps, start=1):
            if not (0.0 <= x <= 1.0) or math.isnan(x):
                raise AcceptanceError(f"per-position acceptance p_{i} = {x} is outside [0, 1]")
        if steps is not None and steps < 0:
            raise AcceptanceError(f"verify steps cannot be negative: {steps}")
        d = len(ps)
        return cls(None, d, steps, 1.0 + sum(ps), sum(ps) / d, tuple(ps), _conditional(ps))

    @classmethod
    def from_summary(cls, tau: float, accept_rate: float | None = None, num_drafts: int | None = None) -> Curve:
        """Curve known only by τ and accept rate (SGLang's ``accept len`` / ``accept rate``).

        D is ``num_drafts`` when given, else derived as round((τ − 1) / accept_rate)
        (accept rate = (τ − 1) / D); p and a are empty (unknown). Raises
        :class:`AcceptanceError` when τ < 1 or D cannot be known.
        """
        if tau < 1.0 or math.isnan(tau):
            raise AcceptanceError(f"accept length τ = {tau} is below 1 (the bonus token alone gives 1)")
        if num_drafts is None:
            if not accept_rate:
                raise AcceptanceError(
                    f"cannot derive the draft count from τ = {tau} and accept rate = {accept_rate}",
                    "pass num_drafts",
                )
            num_drafts = max(1, round((tau - 1.0) / accept_rate))
        if num_drafts < 1:
            raise AcceptanceError(f"num_drafts must be ≥ 1, got {num_drafts}")
        rate = accept_rate if accept_rate is not None else (tau - 1.0) / num_drafts
        return cls(None, num_drafts, None, float(tau), float(rate), (), ())

    def as_dict(self) -> dict[str, Any]:
        """Plain-JSON form (lists instead of tuples)."""
        return {
            "histogram": list(self.histogram) if self.histogram is not None else None,
            "num_drafts": self.num_drafts,
            "steps": self.steps,
            "tau": self.tau,
            "accept_rate": self.accept_rate,
            "p": list(self.p),
            "a": list(self.a),
        }


def merge(curves: Iterable[Curve]) -> Curve | None:
    """Merge curves of the same draft width D into one.

    When every curve has a histogram the histograms are summed (exact). Else,
    when every curve has per-position rates and ``steps``, p_i is the
    step-weighted mean. Returns ``None`` for no curves. Raises
    :class:`AcceptanceError` for mixed D or curves that cannot be weighted.
    """
    cs = list(curves)
    if not cs:
        return None
    widths = {c.num_drafts for c in cs}
    if len(widths) > 1:
        raise AcceptanceError(
            f"cannot merge acceptance curves with different draft counts D: {sorted(widths)}",
            "merge curves of one engine configuration only",
        )
    if all(c.histogram is not None for c in cs):
        summed = [sum(col) for col in zip(*(c.histogram for c in cs))]
        return Curve.from_histogram(summed)
    weighted = [(c.steps, c.p) for c in cs if c.steps is not None and c.p]
    if len(weighted) == len(cs):
        n = sum(steps for steps, _ in weighted)
        if n == 0:
            return Curve.from_positions([0.0] * cs[0].num_drafts, steps=0)
        p = [sum(steps * ps[i] for steps, ps in weighted) / n for i in range(cs[0].num_drafts)]
        return Curve.from_positions(p, steps=n)
    raise AcceptanceError(
        "cannot merge acceptance curves without histograms unless each has per-position rates and a step count"
    )


def _field(meta: Any, name: str) -> Any:
    if isinstance(meta, Mapping):
        return meta.get(name)
    return getattr(meta, name, None)


def curve_from_meta_infos(metas: Iterable[Any], num_drafts: int | None = None) -> Curve | None:
    """Sum the ``spec_correct_drafts_histogram`` of generations into one curve.

    ``metas``: SGLang ``meta_info`` dicts (or :class:`dynocell.engine.meta.GenerationMeta`
    objects). SGLang 0.5.17 also names the field ``spec_accept_histogram``; it is
    used when the first is absent. Generations without a histogram are skipped;
    returns ``None`` when none had one (no speculation). Raises
    :class:`AcceptanceError` when histograms disagree in length or hold negative counts.

    SGLang 0.5.17 grows a request's histogram only up to the largest k it saw (``schedule_batch.py``
    ``Req.update_spec_correct_drafts_histogram``: starts as ``[]`` and ``extend``s with zeros), so a
    request that never accepted D drafts reports fewer than D + 1 buckets: shorter histograms are
    padded with zero buckets to the longest one, or to ``num_drafts + 1`` when the caller knows D
    (an EAGLE tree: ``num_steps``); a histogram longer than that raises.

    When every generation reports ``spec_num_proposed_drafts`` and ``spec_verify_ct`` and they
    give more proposed drafts per verify step than the histogram is deep (an EAGLE tree), the
    accept rate is taken over the proposed drafts (:meth:`Curve.from_histogram`'s
    ``proposed_per_step``).
    """
    total: list[int] | None = [0] * (num_drafts + 1) if num_drafts is not None else None
    proposed, verify, known, seen = 0, 0, True, False
    for m in metas:
        h = _field(m, "spec_correct_drafts_histogram")
        if h is None:
            h = _field(m, "spec_accept_histogram")
        if not h:
            continue
        if isinstance(h, (list, tuple)) and len(h) == 1:
            h = [*h, 0]  # SGLang's histogram of a request that accepted no draft at all: [verify steps]
        c = Curve.from_histogram(h)  # validates
        assert c.histogram is not None
        pd, vc = _field(m, "spec_num_proposed_drafts"), _field(m, "spec_verify_ct")
        if isinstance(pd, int) and isinstance(vc, int) and not isinstance(pd, bool) and vc > 0:
            proposed, verify = proposed + pd, verify + vc
        else:
            known = False
        hist = list(c.histogram)
        seen = True
        if total is None:
            total = hist
            continue
        if num_drafts is not None and len(hist) > num_drafts + 1:
            raise AcceptanceError(
                f"a generation reports {len(hist)} histogram buckets but D = {num_drafts} allows {num_drafts + 1}",
                "one engine configuration has one draft count",
            )
        width = max(len(total), len(hist))
        total = [x + y for x, y in zip(total + [0] * (width - len(total)), hist + [0] * (width - len(hist)))]
    if total is None or not seen:
        return None
    per_step = proposed // verify if known and verify and proposed % verify == 0 else None
    return Curve.from_histogram(total, per_step if per_step and per_step > len(total) - 1 else None)


def expected_tau_independent(p: float, num_drafts: int) -> float:
    """τ if every draft position were accepted independently with probability ``p``.

    τ = Σ_{i=0..D} p^i = (1 − p^(D+1)) / (1 − p) (= D + 1 at p = 1). Used by the
    doctor's independence check with p = p_1.
    """
    if not (0.0 <= p <= 1.0):
        raise AcceptanceError(f"acceptance probability p = {p} is outside [0, 1]")
    if num_drafts < 0:
        raise AcceptanceError(f"num_drafts must be ≥ 0, got {num_drafts}")
    if p == 1.0:
        return float(num_drafts + 1)
    return (1.0 - p ** (num_drafts + 1)) / (1.0 - p)


def relative_diff(a: float, b: float) -> float:
    """|a − b| / max(|a|, |b|): symmetric relative difference (0 when both are 0).

    The 2 % cross-checks (client histogram vs engine counters) compare
    ``relative_diff(x, y) > 0.02``.
    """
    scale = max(abs(a), abs(b))
    return 0.0 if scale == 0 else abs(a - b) / scale


# --------------------------------------------------------------------------- logs

_NUM = r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?"


@dataclass(frozen=True)
class VllmSpecSample:
    """One vLLM ``SpecDecoding metrics:`` line.

    ``curve`` is built from the per-position rates (:meth:`Curve.from_positions`,
    with ``steps`` = the ``Drafts:`` count when printed); ``mean_acceptance_length``
    is the engine's own τ as printed (compare with ``curve.tau``); ``accepted`` and
    ``drafted`` are token counts when printed.
    """

    curve: Curve
    mean_acceptance_length: float | None
    accepted: int | None
    drafted: int | None
    drafts: int | None


_V_MEAN = re.compile(rf"Mean acceptance length:\s*({_NUM})")
_V_POS = re.compile(rf"Per-position acceptance rate:\s*((?:{_NUM}\s*,\s*)*{_NUM})")
_V_ACC = re.compile(r"Accepted:\s*(\d+)\s*tokens")
_V_DRAFTED = re.compile(r"Drafted:\s*(\d+)\s*tokens")
_V_DRAFTS = re.compile(r"Drafts:\s*(\d+)")


def parse_vllm_spec_line(line: str) -> VllmSpecSample | None:
    """Parse a vLLM-style acceptance log line; ``None`` when it has no per-position rates.

    Shape (vLLM ``SpecDecodingLogging``): ``SpecDecoding metrics: Mean acceptance
    length: 3.83, …, Accepted: 460 tokens, Drafted: 640 tokens, Per-position
    acceptance rate: 0.917, 0.833, 0.583, 0.500, Avg Draft acceptance rate: 71.9%``.
    Raises :class:`AcceptanceError` for rates outside [0, 1].
    """
    m = _V_POS.search(line)
    if not m:
        return None
    rates = [float(x) for x in re.findall(_NUM, m.group(1))]
    drafts = _V_DRAFTS.search(line)
    n = int(drafts.group(1)) if drafts else None
    mean = _V_MEAN.search(line)
    acc = _V_ACC.search(line)
    dr = _V_DRAFTED.search(line)
    return VllmSpecSample(
        curve=Curve.from_positions(rates, steps=n),
        mean_acceptance_length=float(mean.group(1)) if mean else None,
        accepted=int(acc.group(1)) if acc else None,
        drafted=int(dr.group(1)) if dr else None,
        drafts=n,
    )


@dataclass(frozen=True)
class SpecWindow:
    """One acceptance window of a log: what the engine measured over its last logging interval.

    vLLM V1's ``SpecDecodingLogging`` prints, per interval (``--log-stats``, every 10 s by default), ``Mean
    acceptance length: τ``, ``Accepted: A tokens``, ``Drafted: G tokens`` and, when it can, the per-position
    rates; counts are of that interval only (vLLM resets them after logging), so windows are independent
    samples of one server's life. ``tau``: τ as printed (2 decimals); ``accepted``/``drafted``: token counts;
    ``num_drafts``: D = round(G · (τ − 1) / A) (drafts = A / (τ − 1) verify steps of D tokens each), None when
    nothing was accepted (τ − 1 = 0 says nothing of D).
    """

    tau: float
    accepted: int
    drafted: int

    @property
    def num_drafts(self) -> int | None:
        """D derived from the window's counts (None when A or τ − 1 is 0)."""
        if not self.accepted or self.tau <= 1.0:
            return None
        return max(1, round(self.drafted * (self.tau - 1.0) / self.accepted))


def parse_vllm_spec_window(line: str) -> SpecWindow | None:
    """A vLLM V1 ``SpecDecoding metrics:`` line as one :class:`SpecWindow` — with or without the
    per-position rates (vLLM 0.17 prints ``Mean acceptance length: 3.07, Accepted throughput: …, Accepted: 2070
    tokens, Drafted: 4000 tokens``, vllm-project/vllm#41838; an excerpt may stop after ``Per-position
    acceptance rate:``, vllm-project/vllm#40624). None without τ and both counts, or for an interval that drafted
    nothing. Raises :class:`AcceptanceError` for τ below 1 or more accepted than drafted."""
    if "SpecDecoding metrics:" not in line:
        return None
    mean, acc, dr = _V_MEAN.search(line), _V_ACC.search(line), _V_DRAFTED.search(line)
    if not (mean and acc and dr):
        return None
    tau, accepted, drafted = float(mean.group(1)), int(acc.group(1)), int(dr.group(1))
    if drafted == 0:
        return None  # an idle (or prefill-only) interval: vLLM prints τ 0.00, nothing was measured
    if tau < 1.0 or accepted > drafted:
        raise AcceptanceError(f"a SpecDecoding line with τ = {tau}, {accepted} accepted of {drafted} drafted: "
                              "τ below 1 or more accepted than drafted is not a measurement")
    return SpecWindow(tau, accepted, drafted)


def windows_curve(windows: Sequence[SpecWindow]) -> Curve | None:
    """One summary curve over acceptance windows of one width D (the widest derived): τ = 1 + ΣA / Σsteps with
    steps = G / D per window, accept rate ΣA / ΣG; p and a unknown. None when no window says D."""
    widths = [w.num_drafts for w in windows if w.num_drafts]
    if not widths:
        return None
    d = max(set(widths), key=widths.count)
    drafted = sum(w.drafted for w in windows)
    accepted = sum(w.accepted for w in windows)
    steps = drafted // d
    if not steps:
        return None
    return Curve(None, d, steps, 1.0 + accepted / steps, accepted / drafted, (), ())


def parse_vllm_spec_lines(lines: Iterable[str]) -> list[VllmSpecSample]:
    """All vLLM acceptance samples in ``lines`` (other lines ignored)."""
    out = []
    for line in lines:
        s = parse_vllm_spec_line(line)
        if s is not None:
            out.append(s)
    return out


@dataclass(frozen=True)
class DecodeLogSample:
    """One SGLang ``Decode batch, …`` log line (printed every ``--decode-log-interval`` steps).

    ``accept_len`` (τ of the batch) and ``accept_rate`` are ``None`` without
    speculation; ``gen_throughput`` in tok/s as SGLang prints it (averaged over
    the interval); ``running_req``/``queue_req`` request counts; ``tokens`` the
    ``#token`` KV tokens in use; ``cuda_graph`` whether the step ran a captured
    graph; ``timestamp`` the ``[YYYY-MM-DD HH:MM:SS]`` prefix when present.
    """

    accept_len: float | None
    accept_rate: float | None
    gen_throughput: float | None
    running_req: int | None
    cuda_graph: bool | None
    queue_req: int | None = None
    tokens: int | None = None
    timestamp: str | None = None

    def to_curve(self, num_drafts: int | None = None) -> Curve | None:
        """:meth:`Curve.from_summary` of this line, ``None`` without speculation."""
        if self.accept_len is None:
            return None
        return Curve.from_summary(self.accept_len, self.accept_rate, num_drafts)


_S_DECODE = re.compile(r"Decode batch[.,]")
_S_FIELDS = {
    "accept_len": re.compile(rf"accept len:\s*({_NUM})"),
    "accept_rate": re.compile(rf"accept rate:\s*({_NUM})"),
    "gen_throughput": re.compile(rf"gen throughput \(token/s\):\s*({_NUM})"),
    "running_req": re.compile(r"#running-req:\s*(\d+)"),
    "queue_req": re.compile(r"#queue-req:\s*(\d+)"),
    "tokens": re.compile(r"#token:\s*(\d+)"),
    "cuda_graph": re.compile(r"cuda graph:\s*(True|False)"),
}
_S_TS = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def parse_decode_line(line: str) -> DecodeLogSample | None:
    """Parse one SGLang decode log line; ``None`` for any other line.

    Shape (SGLang 0.5.17 scheduler): ``[2026-11-30 03:25:43] Decode batch,
    #running-req: 1, #token: 20, token usage: 0.00, accept len: 4.00, accept
    rate: 1.00, cuda graph: True, gen throughput (token/s): 589.77, #queue-req: 0``.
    """
    if not _S_DECODE.search(line):
        return None
    vals: dict[str, Any] = {}
    for key, rx in _S_FIELDS.items():
        m = rx.search(line)
        if not m:
            vals[key] = None
        elif key == "cuda_graph":
            vals[key] = m.group(1) == "True"
        elif key in ("running_req", "queue_req", "tokens"):
            vals[key] = int(m.group(1))
        else:
            vals[key] = float(m.group(1))
    ts = _S_TS.search(line)
    return DecodeLogSample(timestamp=ts.group(1) if ts else None, **vals)


def parse_decode_lines(lines: Iterable[str]) -> list[DecodeLogSample]:
    """All SGLang decode samples in ``lines`` (e.g. a server log), in order."""
    out = []
    for line in lines:
        s = parse_decode_line(line)
        if s is not None:
            out.append(s)
    return out
