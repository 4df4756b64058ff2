"""Uncertainty of dynocell's numbers, store-free (issue 33): intervals, comparisons, samples needed.

Every judgment dynocell prints compares two numbers (τ of two runs, a speculative and a plain step,
throughput at two concurrencies). A number measured on a handful of requests moves between runs by
more than the spread of one run's samples suggests, so each comparison here is made on an interval
that reflects request-to-request variation, and a verdict is given only when the interval excludes
"no effect". Otherwise the answer is ``inconclusive`` with the number of requests (or runs) that would
decide an effect of the size the operator cares about (``Settings.effect_size``, default 5 %).

Sources of the formulas:

- :func:`bootstrap` — the percentile bootstrap (Efron & Tibshirani, *An Introduction to the
  Bootstrap*, 1993, ch. 13) via :func:`scipy.stats.bootstrap`, with a fixed seed so a report
  reproduces; the seed and the number of resamples are returned with the interval.
- :func:`ratio_of_sums` — a ratio estimator over clusters (requests), e.g. τ = Σ tokens / Σ verify
  steps, with the linearised (delta-method) variance of Cochran, *Sampling Techniques*, 3rd ed.,
  1977, §6.3: var(R̂) ≈ Σ (yᵢ − R̂ xᵢ)² / (n (n − 1) x̄²).
- :func:`log_ratio` — the log response ratio of two independent means, var(ln R) = s₁²/(n₁ x̄₁²) +
  s₂²/(n₂ x̄₂²) (Hedges, Gurevitch & Curtis, *Ecology* 80(4), 1999, eq. 1–2); the interval is
  exponentiated, so a relative change is never below −100 %.
- :func:`samples_needed` — the two-sample normal approximation for comparing means, n per arm =
  2 (z₁₋α/₂ + z₁₋β)² σ² / δ² (Chow, Shao & Wang, *Sample Size Calculations in Clinical Research*,
  2nd ed., 2008, §3.2.1); with α = 0.05 and power 0.8 it is Lehr's rule n ≈ 16 σ²/δ².
- :func:`percentile` — a q-quantile is printed only when the sample has at least 1/(1 − q) values
  beyond the median's side (p99 needs ≥ 100, p90 ≥ 10): with fewer, "p99" is just the maximum.

All intervals are two-sided at ``level`` (default 0.95). Pure functions: no I/O, no store.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy import stats as sps

#: Seed of every bootstrap unless the caller names one: a report computed twice prints the same interval.
BOOTSTRAP_SEED = 20261202
#: Resamples of every bootstrap unless the caller names another number.
BOOTSTRAP_RESAMPLES = 2000
#: Fewest values an interval is computed from; fewer → ``None`` (said as "n too small").
MIN_SAMPLES = 2


def z_of(level: float) -> float:
    """The standard normal quantile z₁₋α/₂ of a two-sided ``level`` (0.95 → 1.95996)."""
    return float(sps.norm.ppf(0.5 + level / 2))


@dataclass(frozen=True)
class Interval:
    """A point estimate with its two-sided interval: ``value``, ``lo``, ``hi`` (same unit as the data),
    ``n`` the number of independent units (requests, runs) it came from, ``level`` (0.95), ``method``
    (``bootstrap`` | ``delta`` | ``log-ratio``), and for a bootstrap its ``seed`` and ``resamples``."""

    value: float
    lo: float
    hi: float
    n: int
    level: float = 0.95
    method: str = "delta"
    seed: int | None = None
    resamples: int | None = None

    def contains(self, x: float) -> bool:
        """True when ``lo`` ≤ ``x`` ≤ ``hi``."""
        return self.lo <= x <= self.hi

    def to_dict(self, digits: int = 4) -> dict[str, Any]:
        """JSON-ready dict, numbers rounded to ``digits``."""
        d = asdict(self)
        for k in ("value", "lo", "hi"):
            d[k] = round(d[k], digits)
        return d

    def text(self, fmt: str = "{:.2f}", unit: str = "") -> str:
        """``1.85 [1.62, 2.04] n=15`` (``fmt`` formats each number, ``unit`` follows the point)."""
        return f"{fmt.format(self.value)}{unit} [{fmt.format(self.lo)}, {fmt.format(self.hi)}] n={self.n}"


def _clean(values: Sequence[float | None]) -> np.ndarray:
    return np.asarray([float(v) for v in values if v is not None and math.isfinite(float(v))], dtype=float)


def bootstrap(values: Sequence[float | None], statistic: Callable[[np.ndarray], float] = np.median, *,
              level: float = 0.95, resamples: int = BOOTSTRAP_RESAMPLES, seed: int = BOOTSTRAP_SEED,
              ) -> Interval | None:
    """Percentile-bootstrap interval of ``statistic`` (default the median) over ``values`` (one per request;
    ``None`` and non-finite values dropped). ``None`` when fewer than :data:`MIN_SAMPLES` remain.

    Fixed ``seed`` (:data:`BOOTSTRAP_SEED`) and ``resamples``: the same values give the same interval.
    A sample whose values are all equal gets the degenerate interval [v, v]."""
    x = _clean(values)
    if x.size < MIN_SAMPLES:
        return None
    point = float(statistic(x))
    if np.all(x == x[0]):
        return Interval(point, point, point, int(x.size), level, "bootstrap", seed, resamples)
    res = sps.bootstrap((x,), lambda a: float(statistic(a)), vectorized=False,
                        n_resamples=resamples, confidence_level=level, method="percentile",
                        random_state=np.random.default_rng(seed))
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    return Interval(point, min(lo, point), max(hi, point), int(x.size), level, "bootstrap", seed, resamples)


def ratio_of_sums(num: Sequence[float], den: Sequence[float], *, level: float = 0.95) -> Interval | None:
    """R̂ = Σ numᵢ / Σ denᵢ over clusters (one pair per request: e.g. accepted tokens and verify steps, so R̂ is
    τ) with the delta-method interval R̂ ± z·SE, SE² = Σ (numᵢ − R̂ denᵢ)² / (n (n − 1) d̄²) (Cochran 1977,
    §6.3). Steps inside one request are not independent; the request is the unit, hence ``n`` = requests.

    ``None`` when fewer than :data:`MIN_SAMPLES` pairs have ``den`` > 0. The interval is clipped at 0 below
    (a ratio of counts)."""
    pairs = [(float(a), float(b)) for a, b in zip(num, den) if b and b > 0]
    if len(pairs) < MIN_SAMPLES:
        return None
    y = np.array([p[0] for p in pairs])
    x = np.array([p[1] for p in pairs])
    n = len(pairs)
    r = float(y.sum() / x.sum())
    se = math.sqrt(float(((y - r * x) ** 2).sum()) / (n * (n - 1)) / float(x.mean()) ** 2)
    z = z_of(level)
    return Interval(r, max(0.0, r - z * se), r + z * se, n, level, "delta")


def rel_se(iv: Interval | None) -> float | None:
    """The relative standard error of an interval's point, (hi − lo) / (2 z · value), i.e. the SE of its log
    (delta method); ``None`` when unknown or the point is 0."""
    if iv is None or not iv.value:
        return None
    return (iv.hi - iv.lo) / (2 * z_of(iv.level) * abs(iv.value))


@dataclass(frozen=True)
class Effect:
    """A relative difference ``a / b − 1`` with its interval (``lo``, ``hi``: fractions, both > −1),
    the SE of ln(a/b) (``se_log``), the units behind each side (``n_a``, ``n_b``), and ``verdict``:
    ``higher`` / ``lower`` when the interval excludes 0, ``inconclusive`` when it does not, ``too few``
    when a side has fewer than :data:`MIN_SAMPLES`. ``more_needed``: units per side that would decide an
    effect of ``effect_size`` at the observed variance (:func:`samples_needed` − the smaller side), 0 when
    decided."""

    ratio: float
    lo: float
    hi: float
    se_log: float
    n_a: int
    n_b: int
    verdict: str
    effect_size: float
    more_needed: int = 0
    level: float = 0.95

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict, fractions rounded to 4 digits."""
        d = asdict(self)
        for k in ("ratio", "lo", "hi", "se_log"):
            d[k] = round(d[k], 4)
        return d

    def text(self, unit: str = "requests") -> str:
        """``−7.9 % [−12.0 %, −3.6 %]`` plus, when inconclusive, ``inconclusive: about 40 more requests would
        decide a 5 % effect``."""
        s = f"{self.ratio * 100:+.1f} % [{self.lo * 100:+.1f} %, {self.hi * 100:+.1f} %]"
        if self.verdict == "inconclusive":
            s += (f"; inconclusive: about {self.more_needed} more {unit} per side would decide a "
                  f"{self.effect_size * 100:.0f} % effect")
        elif self.verdict == "too few":
            s += f"; too few {unit} to judge (n={self.n_a} and {self.n_b})"
        return s


def effect_from_log(log_ratio_value: float, se_log: float, n_a: int, n_b: int, *, effect_size: float = 0.05,
                    level: float = 0.95) -> Effect:
    """The :class:`Effect` of a log ratio ``log_ratio_value`` = ln(a/b) with standard error ``se_log``
    (``n_a``/``n_b`` units behind each side): interval exp(ln R ± z·SE) − 1, verdict, and the units per
    side that would decide ``effect_size`` (σ per unit = SE·√(harmonic n/2), :func:`samples_needed`)."""
    z = z_of(level)
    lo, hi = math.expm1(log_ratio_value - z * se_log), math.expm1(log_ratio_value + z * se_log)
    ratio = math.expm1(log_ratio_value)
    if min(n_a, n_b) < MIN_SAMPLES:
        return Effect(ratio, lo, hi, se_log, n_a, n_b, "too few", effect_size,
                      samples_needed(1.0, effect_size, level=level), level)
    if lo > 0:
        return Effect(ratio, lo, hi, se_log, n_a, n_b, "higher", effect_size, 0, level)
    if hi < 0:
        return Effect(ratio, lo, hi, se_log, n_a, n_b, "lower", effect_size, 0, level)
    # se_log² = σ²/n_a + σ²/n_b  →  σ = se_log / √(1/n_a + 1/n_b)
    sigma = se_log / math.sqrt(1 / n_a + 1 / n_b)
    more = max(1, samples_needed(sigma, effect_size, level=level) - min(n_a, n_b))
    return Effect(ratio, lo, hi, se_log, n_a, n_b, "inconclusive", effect_size, more, level)


def log_ratio(a: Sequence[float | None], b: Sequence[float | None], *, effect_size: float = 0.05,
              level: float = 0.95) -> Effect | None:
    """The relative difference of the means of two independent samples, mean(a)/mean(b) − 1, with the
    log-response-ratio interval: var(ln R) = s_a²/(n_a ā²) + s_b²/(n_b b̄²) (Hedges, Gurevitch & Curtis 1999).
    ``None`` when a mean is not positive or a side is empty; a side of one value gives ``too few``."""
    xa, xb = _clean(a), _clean(b)
    if xa.size == 0 or xb.size == 0 or xa.mean() <= 0 or xb.mean() <= 0:
        return None
    if min(xa.size, xb.size) < MIN_SAMPLES:
        return effect_from_log(math.log(xa.mean() / xb.mean()), math.inf, int(xa.size), int(xb.size),
                               effect_size=effect_size, level=level)
    var = xa.var(ddof=1) / (xa.size * xa.mean() ** 2) + xb.var(ddof=1) / (xb.size * xb.mean() ** 2)
    return effect_from_log(math.log(xa.mean() / xb.mean()), math.sqrt(var), int(xa.size), int(xb.size),
                           effect_size=effect_size, level=level)


def compare_intervals(a: Interval | None, b: Interval | None, *, effect_size: float = 0.05) -> Effect | None:
    """a/b − 1 of two independent estimates given as intervals (each interval's half-width read as z·SE on
    the log scale, :func:`rel_se`): SE² of ln(a/b) = rel_se(a)² + rel_se(b)². ``None`` when either is
    unknown or not positive."""
    if a is None or b is None or a.value <= 0 or b.value <= 0:
        return None
    sa, sb = rel_se(a), rel_se(b)
    if sa is None or sb is None:
        return None
    return effect_from_log(math.log(a.value / b.value), math.hypot(sa, sb), a.n, b.n, effect_size=effect_size,
                           level=a.level)


#: Fewest runs of one experiment whose spread is read as the run-to-run variation (2 degrees of freedom).
MIN_RUNS = 3


def between_runs_sd(values: Sequence[float | None]) -> float | None:
    """The run-to-run standard deviation of ln(value) over repeated runs of one experiment (same config,
    workload, host, engine version; each value one run's figure, any positive unit: ms, tok/s, 1 + margin),
    or None with fewer than :data:`MIN_RUNS` positive values.

    It is the SD of single runs about their mean, so it already holds each run's own sampling noise plus
    whatever moves between runs (boot, host state, clocks): a single run's total SE on the log scale is
    max(its within-run SE, this), never their sum — the observed between-run variance is within + between
    (one-way random-effects model; Searle, Casella & McCulloch 1992, §3.6)."""
    x = _clean(values)
    x = x[x > 0]
    if x.size < MIN_RUNS:
        return None
    return float(np.log(x).std(ddof=1))


def samples_needed(sigma: float, delta: float, *, level: float = 0.95, power: float = 0.8) -> int:
    """Units per arm that detect a difference ``delta`` of two means with standard deviation ``sigma`` per
    unit (same unit as ``delta``; relative σ with a relative δ works the same): the two-sample normal
    approximation n = 2 (z₁₋α/₂ + z₁₋β)² σ² / δ² (Chow, Shao & Wang 2008, §3.2.1), rounded up; α = 1 −
    ``level``, 1 − β = ``power``. With σ = δ, α = 0.05, power 0.8: 2·(1.95996 + 0.84162)² = 15.7 → 16.

    Raises ValueError when ``delta`` ≤ 0 or ``sigma`` < 0."""
    if delta <= 0 or sigma < 0:
        raise ValueError(f"samples_needed: delta must be > 0 and sigma ≥ 0 (got delta={delta}, sigma={sigma})")
    n = 2 * (z_of(level) + float(sps.norm.ppf(power))) ** 2 * sigma ** 2 / delta ** 2
    return max(1, math.ceil(n - 1e-9))


def min_samples_for(q: float) -> int:
    """Fewest values a q-quantile (0 < q < 1) is reported from: ⌈1 / (1 − q)⌉ for q > 0.5 (p90 → 10,
    p99 → 100), ⌈1 / q⌉ below the median, 1 for the median."""
    if not 0 < q < 1:
        raise ValueError(f"quantile must be in (0, 1), got {q}")
    if q > 0.5:
        return math.ceil(1 / (1 - q) - 1e-9)
    if q < 0.5:
        return math.ceil(1 / q - 1e-9)
    return 1


def percentile(values: Sequence[float | None], q: float) -> float | None:
    """The q-quantile of ``values`` (linear interpolation, numpy's default), or ``None`` when the sample has
    fewer than :func:`min_samples_for` ``(q)`` values: the faces print "n too small" then."""
    x = _clean(values)
    if x.size < min_samples_for(q):
        return None
    return float(np.quantile(x, q))


def describe(effect: Effect | None, unit: str = "requests") -> str:
    """One phrase for an effect: its text, or ``no interval (n too small)`` when there is none."""
    return effect.text(unit) if effect is not None else "no interval (n too small)"


def _histogram(record: Any) -> list[int] | None:
    h = record.get("spec_correct_drafts_histogram") if hasattr(record, "get") else None
    if h is None and hasattr(record, "get"):
        h = record.get("spec_accept_histogram")
    if not isinstance(h, (list, tuple)) or not h or not all(isinstance(x, int) and x >= 0 for x in h):
        return None
    return list(h)


def tau_interval(records: Sequence[Any], *, level: float = 0.95) -> Interval | None:
    """τ over request records (``{spec_correct_drafts_histogram: [h0, h1, …]}``, SGLang ``meta_info``'s
    histogram of verify steps by accepted drafts) with its interval over requests: τ = Σ (k+1)·h_k / Σ h_k
    (docs/DESIGN.md's acceptance math; equal to the step-weighted τ of the classes pooled), the request as the
    unit (:func:`ratio_of_sums`); a record with no histogram counts by its drafted / accepted counts
    (:func:`_tokens_and_steps`). ``None`` with fewer than two requests that carry either."""
    tokens, steps = [], []
    for r in records:
        pair = _tokens_and_steps(r)
        if pair is not None:
            tokens.append(pair[0])
            steps.append(pair[1])
    return ratio_of_sums(tokens, steps, level=level)


def _tokens_and_steps(record: Any) -> tuple[float, float] | None:
    """(tokens, verify steps) of one request record: from its histogram (Σ (k+1)·h_k, Σ h_k), else from the
    counts an engine kind stores (``spec_drafted``, ``spec_accepted`` and the window's mean draft length
    ``spec_draft_len``; llama-server's ``timings.draft_n`` / ``draft_n_accepted``): steps = drafted / length,
    tokens = steps + accepted (τ = 1 + accepted / steps, the vLLM log formula). None when it carries neither."""
    h = _histogram(record)
    if h and sum(h):
        return float(sum((k + 1) * c for k, c in enumerate(h))), float(sum(h))
    if not hasattr(record, "get"):
        return None
    d, a, k = record.get("spec_drafted"), record.get("spec_accepted"), record.get("spec_draft_len")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (d, a, k)) or d <= 0 or k <= 0:
        return None
    steps = d / k
    return steps + a, steps


def position_interval(records: Sequence[Any], i: int, *, level: float = 0.95) -> Interval | None:
    """p_i (unconditional: the share of verify steps that accepted at least ``i`` drafts, 1-based) over request
    records, with its interval over requests (:func:`ratio_of_sums`: steps inside a request are not independent
    trials). ``None`` with fewer than two requests that carry a histogram."""
    hits, steps = [], []
    for r in records:
        h = _histogram(r)
        if h and sum(h):
            hits.append(sum(h[i:]))
            steps.append(sum(h))
    return ratio_of_sums(hits, steps, level=level)
