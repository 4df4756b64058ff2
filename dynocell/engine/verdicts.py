"""Noise-aware verdicts of an experiment: is an arm better than the incumbent, beyond the noise?

Pure statistics; persists nothing, imports nothing from ``db``/``runbooks``.

Inputs are *samples*: one value per repeated run, per metric and per level
(a concurrency level ``"c=1"``, or ``"acceptance"`` for τ). For each
(metric, level) of an arm against the incumbent:

- **noise floor** ``f`` = max(``min_floor``, CV of the incumbent's samples)
  where CV = sample standard deviation / mean: the incumbent's own
  run-to-run relative spread. A difference smaller than what the incumbent
  does to itself between identical runs is noise. ``min_floor`` (default
  2 %) keeps a perfectly repeatable metric from calling a 0.1 % change.
- **relative difference** ``d = mean_arm / mean_inc − 1`` with a 95 %
  confidence interval by **Welch's t** on the ratio of means (delta method):
  ``se² = (s_a²/n_a)/m_i² + m_a²·(s_i²/n_i)/m_i⁴``, degrees of freedom by
  Welch–Satterthwaite on the two terms; CI = d ± t(0.975, df)·se. Welch
  (1947), "The generalization of Student's problem when several different
  population variances are involved", Biometrika 34. The t quantile is
  computed here (regularized incomplete beta, Numerical Recipes §6.4), so
  no SciPy is needed.
- **verdict** (for a higher-is-better metric; mirrored for lower-is-better):
  An interval that would reach below −100 % is carried to the log scale (exp(ln(1 + d) ± t·se/(1 + d)) − 1,
  issue 33). ``better`` when the whole CI lies above ``+f``; ``worse`` when it lies
  below ``−f``; ``neutral`` when it lies inside ``[−f, +f]``; otherwise
  ``inconclusive`` with ``more_repeats``: how many more runs *per side*
  would make the CI decide, assuming the observed spreads (None when no
  number up to :data:`MAX_REPEATS` would). Fewer than 2 samples on a side:
  ``inconclusive`` (no spread can be estimated); fewer than :data:`MIN_RUNS` (3) on a side: a better or
  worse interval is still ``inconclusive`` (two runs say little about a third).
- **rejected** — a correctness gate (lossless mismatch, unhealthy boot,
  failed boot, garbage output) overrides every metric: ``rejected: <reason>``.

The overall verdict of an arm: ``rejected`` if any gate failed; else
``worse`` if any (metric, level) is worse (a regression anywhere blocks
qualification; improvements elsewhere are listed as a trade-off); else
``better`` if any is better; else ``inconclusive`` if any is inconclusive;
else ``neutral``. ``drivers`` lists the (metric, level, relative difference)
that decided it.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any, Iterable, Mapping, Sequence

METHOD = "welch-t 95% (ratio of means, delta method)"
CONFIDENCE = 0.95
MIN_FLOOR = 0.02
MAX_REPEATS = 50
#: Fewest runs per side a better/worse verdict is given on (issue 33: a "worse" verdict on 2 runs per arm).
MIN_RUNS = 3
VERDICTS = ("better", "worse", "neutral", "inconclusive", "rejected")


@dataclass(frozen=True)
class Metric:
    """A judged metric: ``key`` (sample key), ``label``, ``unit``, and its direction."""

    key: str
    label: str
    unit: str
    higher_is_better: bool

    @property
    def direction(self) -> str:
        """``"higher-better"`` or ``"lower-better"``."""
        return "higher-better" if self.higher_is_better else "lower-better"


METRICS: tuple[Metric, ...] = (
    Metric("decode_tok_s", "decode tok/s", "tok/s", True),
    Metric("prefill_tok_s", "prefill tok/s", "tok/s", True),
    Metric("ttft_p50_ms", "TTFT p50", "ms", False),
    Metric("ttft_p99_ms", "TTFT p99", "ms", False),
    Metric("tpot_ms", "TPOT p50", "ms", False),
    Metric("tau", "τ", "tokens/step", True),
)
METRIC_BY_KEY = {m.key: m for m in METRICS}


# ---------------------------------------------------------------- Student t quantile (no SciPy)

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (Numerical Recipes, 3rd ed., §6.4)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        de = d * c
        h *= de
        if abs(de - 1.0) < 1e-14:
            break
    return h


def _betai(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    lbt = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(lbt) * _betacf(a, b, x) / a
    return 1.0 - math.exp(lbt) * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """CDF of Student's t with ``df`` (> 0, may be fractional) degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * _betai(df / 2.0, 0.5, x)
    return 1.0 - tail if t >= 0 else tail


def t_quantile(p: float, df: float) -> float:
    """Quantile of Student's t (``0 < p < 1``), by bisection on :func:`t_cdf`; df = inf gives the normal.

    ``df`` is rounded to 3 decimals (a change below 0.001 df moves the
    quantile by far less than the CI's own uncertainty) and results are cached.
    """
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    return _t_quantile(round(p, 9), math.inf if math.isinf(df) else round(df, 3))


@lru_cache(maxsize=4096)
def _t_quantile(p: float, df: float) -> float:
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if math.isinf(df) or df > 1e7:
        return _norm_quantile(p)
    if p < 0.5:
        return -_t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
        if hi > 1e12:
            return hi
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10 * max(1.0, hi):
            break
    return (lo + hi) / 2.0


def _norm_quantile(p: float) -> float:
    lo, hi = -40.0, 40.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if 0.5 * math.erfc(-mid / math.sqrt(2.0)) < p:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


# ---------------------------------------------------------------- one comparison

@dataclass
class Comparison:
    """One (metric, level) of one arm against the incumbent.

    ``rel_diff``, ``ci_low``, ``ci_high`` and ``noise_floor`` are fractions
    (0.05 = +5 %) of the incumbent's mean; ``incumbent_mean``/``arm_mean`` in
    the metric's unit; ``more_repeats`` = further runs per side that would
    decide an ``inconclusive`` verdict (None when none would, or when not
    inconclusive); ``reason`` explains an inconclusive verdict.
    """

    metric: str
    level: str
    direction: str
    verdict: str
    n_incumbent: int
    n_arm: int
    incumbent_mean: float | None
    arm_mean: float | None
    rel_diff: float | None
    ci_low: float | None
    ci_high: float | None
    noise_floor: float
    df: float | None = None
    more_repeats: int | None = None
    reason: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return asdict(self)


def _mean_sd(xs: Sequence[float]) -> tuple[float, float]:
    n = len(xs)
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    return m, sd


def _clean(xs: Iterable[float | None]) -> list[float]:
    return [float(x) for x in xs if x is not None and math.isfinite(float(x))]


def _ratio_ci(m_a: float, s_a: float, n_a: int, m_i: float, s_i: float, n_i: int,
              conf: float) -> tuple[float, float, float, float]:
    """(rel_diff, half_width, se, df) of m_a/m_i − 1 by Welch + delta method."""
    d = m_a / m_i - 1.0
    v_a = (s_a ** 2 / n_a) / m_i ** 2
    v_i = (m_a ** 2) * (s_i ** 2 / n_i) / m_i ** 4
    se = math.sqrt(v_a + v_i)
    if se == 0.0:
        return d, 0.0, 0.0, math.inf
    den = (v_a ** 2 / (n_a - 1) if n_a > 1 else 0.0) + (v_i ** 2 / (n_i - 1) if n_i > 1 else 0.0)
    df = (v_a + v_i) ** 2 / den if den > 0 else math.inf
    tq = t_quantile(0.5 + conf / 2.0, df)
    return d, tq * se, se, df


def _log_interval(d: float, half: float) -> tuple[float, float]:
    """The interval of a relative difference ``d`` (= ratio − 1) with linear half-width ``half`` (t·SE of the
    ratio): d ± half while that stays above −100 %; otherwise carried to the log scale, exp(ln(1 + d) ± half /
    (1 + d)) − 1 (delta method: SE of ln R = SE(R)/R), which never reaches −100 % (issue 33: "[-222.6 %,
    +408.3 %]"). The two agree to first order for a small SE."""
    if d - half > -1.0:
        return d - half, d + half
    if 1.0 + d <= 0.0:
        return -1.0, d + half
    r = 1.0 + d
    w = half / r
    return math.expm1(math.log(r) - w), math.expm1(math.log(r) + w)


def _decide(lo: float, hi: float, floor: float, higher_is_better: bool) -> str:
    if lo > floor:
        return "better" if higher_is_better else "worse"
    if hi < -floor:
        return "worse" if higher_is_better else "better"
    if -floor <= lo and hi <= floor:
        return "neutral"
    return "inconclusive"


def repeats_to_decide(rel_diff: float, floor: float, cv_arm: float, cv_inc: float, ratio: float,
                      *, conf: float = CONFIDENCE, max_n: int = MAX_REPEATS) -> int | None:
    """Smallest n (runs per side) whose CI half-width would decide, assuming the observed spreads.

    The CI must clear the floor on the side the point estimate lies: half-width
    < |d| − f when |d| > f (better/worse), < f − |d| otherwise (neutral).
    ``cv_*`` are coefficients of variation, ``ratio`` = m_a/m_i. Returns None
    when the point sits on the floor or no n ≤ ``max_n`` suffices.
    """
    margin = abs(abs(rel_diff) - floor)
    if margin <= 1e-12:
        return None
    # var of the ratio per run: ratio² (cv_a² + cv_i²)
    unit_var = ratio ** 2 * (cv_arm ** 2 + cv_inc ** 2)
    if unit_var == 0.0:
        return 2

    def decides(n: int) -> bool:
        va, vi = ratio ** 2 * cv_arm ** 2 / n, ratio ** 2 * cv_inc ** 2 / n
        den = (va ** 2 + vi ** 2) / (n - 1)
        df = (va + vi) ** 2 / den if den > 0 else math.inf
        return t_quantile(0.5 + conf / 2.0, df) * math.sqrt(unit_var / n) < margin

    # the half-width falls monotonically with n: bisect for the smallest n that decides
    if not decides(max_n):
        return None
    lo, hi = 2, max_n
    while lo < hi:
        mid = (lo + hi) // 2
        if decides(mid):
            hi = mid
        else:
            lo = mid + 1
    return lo


def compare(metric: Metric | str, level: str, incumbent: Sequence[float | None], arm: Sequence[float | None],
            *, min_floor: float = MIN_FLOOR, conf: float = CONFIDENCE) -> Comparison:
    """Judge one (metric, level): samples (one per run, metric's unit) of the incumbent and of the arm.

    ``None``/NaN samples are dropped. See the module docstring for the floor,
    the Welch-t interval and the decision rule. Never raises on data; raises
    KeyError for an unknown metric key.
    """
    m = METRIC_BY_KEY[metric] if isinstance(metric, str) else metric
    inc, arm_x = _clean(incumbent), _clean(arm)
    n_i, n_a = len(inc), len(arm_x)
    base: dict[str, Any] = dict(metric=m.key, level=level, direction=m.direction, n_incumbent=n_i, n_arm=n_a)
    if n_i == 0 or n_a == 0:
        return Comparison(**base, verdict="inconclusive", incumbent_mean=_mean_sd(inc)[0] if inc else None,
                          arm_mean=_mean_sd(arm_x)[0] if arm_x else None, rel_diff=None, ci_low=None,
                          ci_high=None, noise_floor=min_floor,
                          reason="no samples from " + ("the incumbent" if n_i == 0 else "the arm"))
    m_i, s_i = _mean_sd(inc)
    m_a, s_a = _mean_sd(arm_x)
    if m_i == 0.0:
        return Comparison(**base, verdict="inconclusive", incumbent_mean=m_i, arm_mean=m_a, rel_diff=None,
                          ci_low=None, ci_high=None, noise_floor=min_floor,
                          reason="the incumbent's mean is 0: no relative difference")
    cv_i = s_i / abs(m_i) if n_i > 1 else 0.0
    cv_a = s_a / abs(m_a) if n_a > 1 and m_a != 0 else 0.0
    floor = max(min_floor, cv_i)
    if n_i < 2 or n_a < 2:
        d = m_a / m_i - 1.0
        return Comparison(**base, verdict="inconclusive", incumbent_mean=m_i, arm_mean=m_a, rel_diff=d,
                          ci_low=None, ci_high=None, noise_floor=floor, more_repeats=2 - min(n_i, n_a),
                          reason="fewer than 2 runs on a side: no spread to judge against")
    d, half, _se, df = _ratio_ci(m_a, s_a, n_a, m_i, s_i, n_i, conf)
    lo, hi = _log_interval(d, half)
    verdict = _decide(lo, hi, floor, m.higher_is_better)
    more = None
    reason = None
    if verdict in ("better", "worse") and min(n_i, n_a) < MIN_RUNS:
        # issue 33: a "worse" verdict on 2 runs per arm — the spread of two runs says little about a third
        verdict = "inconclusive"
        more = MIN_RUNS - min(n_i, n_a)
        reason = (f"{min(n_i, n_a)} run(s) on a side: a {'better' if (d > 0) == m.higher_is_better else 'worse'} "
                  f"verdict needs at least {MIN_RUNS} per side; about {more} more run(s) per side would decide")
        return Comparison(**base, verdict=verdict, incumbent_mean=m_i, arm_mean=m_a, rel_diff=d, ci_low=lo,
                          ci_high=hi, noise_floor=floor, df=None if math.isinf(df) else df, more_repeats=more,
                          reason=reason)
    if verdict == "inconclusive":
        need = repeats_to_decide(d, floor, cv_a, cv_i, m_a / m_i, conf=conf)
        have = min(n_i, n_a)
        more = max(1, need - have) if need is not None else None
        reason = (f"the {int(conf * 100)}% interval [{lo:+.1%}, {hi:+.1%}] straddles the noise floor ±{floor:.1%}"
                  + (f"; about {more} more run(s) per side would decide" if more else
                     f"; more than {MAX_REPEATS} runs per side would be needed at this spread"))
    return Comparison(**base, verdict=verdict, incumbent_mean=m_i, arm_mean=m_a, rel_diff=d, ci_low=lo,
                      ci_high=hi, noise_floor=floor, df=None if math.isinf(df) else df, more_repeats=more,
                      reason=reason)


# ---------------------------------------------------------------- gates and the arm's verdict

@dataclass
class ArmVerdict:
    """The verdict of one arm: ``verdict`` (better | worse | neutral | inconclusive | rejected),
    ``verdict_label`` (``"rejected: <reason>"`` for a rejection, else the verdict), ``rejections``
    (gate failures), ``drivers`` (``[{metric, level, verdict, rel_diff}]`` that decided it),
    ``tradeoffs`` (improvements alongside a regression), ``more_repeats`` (max over
    inconclusive comparisons), ``comparisons`` (every (metric, level))."""

    arm: str
    verdict: str
    verdict_label: str
    summary: str
    rejections: list[str] = field(default_factory=list)
    drivers: list[dict[str, Any]] = field(default_factory=list)
    tradeoffs: list[dict[str, Any]] = field(default_factory=list)
    more_repeats: int | None = None
    comparisons: list[Comparison] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (comparisons as dicts)."""
        d = asdict(self)
        d["comparisons"] = [c.as_dict() for c in self.comparisons]
        return d


def _driver(c: Comparison) -> dict[str, Any]:
    return {"metric": c.metric, "level": c.level, "verdict": c.verdict, "rel_diff": c.rel_diff,
            "ci_low": c.ci_low, "ci_high": c.ci_high}


def _describe(ds: list[dict[str, Any]]) -> str:
    parts = []
    for x in ds:
        lab = METRIC_BY_KEY[x["metric"]].label if x["metric"] in METRIC_BY_KEY else x["metric"]
        rd = f" {x['rel_diff']:+.1%}" if x.get("rel_diff") is not None else ""
        parts.append(f"{lab} @{x['level']}{rd}")
    return ", ".join(parts)


def judge_arm(arm: str, incumbent: Mapping[tuple[str, str], Sequence[float | None]],
              samples: Mapping[tuple[str, str], Sequence[float | None]], *,
              rejections: Sequence[str] = (), min_floor: float = MIN_FLOOR,
              conf: float = CONFIDENCE) -> ArmVerdict:
    """Judge an arm: ``incumbent``/``samples`` map ``(metric key, level)`` → samples (one per run).

    Every (metric, level) present on either side is compared (in
    :data:`METRICS` order, then level order); ``rejections`` (correctness
    gate failures, each a short reason) override: the verdict is
    ``rejected`` and the label ``"rejected: <reasons>"``.
    """
    order = {m.key: i for i, m in enumerate(METRICS)}
    keys = sorted(set(incumbent) | set(samples), key=lambda k: (order.get(k[0], 99), _level_key(k[1])))
    comps = [compare(k[0], k[1], incumbent.get(k, ()), samples.get(k, ()), min_floor=min_floor, conf=conf)
             for k in keys if k[0] in METRIC_BY_KEY]
    worse = [_driver(c) for c in comps if c.verdict == "worse"]
    better = [_driver(c) for c in comps if c.verdict == "better"]
    inconc = [c for c in comps if c.verdict == "inconclusive"]
    more = max((c.more_repeats for c in inconc if c.more_repeats is not None), default=None)
    tradeoffs: list[dict[str, Any]] = []
    if worse:
        verdict, label, drivers, tradeoffs = "worse", "worse", worse, better
        summary = "worse: " + _describe(worse) + (f" (though better: {_describe(better)})" if better else "")
    elif better:
        verdict, label, drivers = "better", "better", better
        summary = "better: " + _describe(better) + (f"; {len(inconc)} comparison(s) inconclusive" if inconc else "")
    elif inconc:
        verdict, label = "inconclusive", "inconclusive"
        drivers = [_driver(c) for c in inconc]
        summary = ("inconclusive: " + _describe(drivers)
                   + (f"; about {more} more run(s) per side would decide" if more else ""))
    else:
        verdict, label, drivers = "neutral", "neutral", []
        summary = "neutral: every metric within the incumbent's noise" if comps else "neutral: nothing to compare"
    if rejections:
        # A failed correctness gate overrides the numbers; they stay in the summary for the record.
        verdict, label = "rejected", "rejected: " + "; ".join(rejections)
        summary = f"rejected by correctness gate(s); the metrics alone say {summary}"
        drivers, tradeoffs = [], []
    return ArmVerdict(arm=arm, verdict=verdict, verdict_label=label, summary=summary, rejections=list(rejections),
                      drivers=drivers, tradeoffs=tradeoffs, more_repeats=more if verdict == "inconclusive" else None,
                      comparisons=comps)


def _level_key(level: str) -> tuple[int, Any]:
    if level.startswith("c="):
        try:
            return (0, int(level[2:]))
        except ValueError:
            return (1, level)
    return (2, level)


# ---------------------------------------------------------------- schedule

def interleaved_schedule(incumbent: str, arms: Sequence[str], repeats: int) -> list[tuple[str, int]]:
    """The counterbalanced run order ``[(config, repeat), …]``: A B … B A … (ABBA generalised).

    Each repeat visits the incumbent and every arm once; odd repeats reverse
    the order of even ones, so a slow drift (thermal, cache, a neighbour)
    cannot favour one side: 2 arms, 2 repeats → I A1 A2 A2 A1 I. Raises
    ValueError for ``repeats`` < 1 or no arms.
    """
    if repeats < 1:
        raise ValueError("repeats must be at least 1")
    if not arms:
        raise ValueError("an experiment needs at least one arm")
    block = [incumbent, *arms]
    out: list[tuple[str, int]] = []
    for r in range(repeats):
        for c in (block if r % 2 == 0 else list(reversed(block))):
            out.append((c, r))
    return out
