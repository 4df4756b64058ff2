"""Break-even maths of speculative decoding, store-free (the main job's ``breakeven`` step records it).

Source of the rule: docs/DESIGN.md, "Break-even": speculation pays only while a speculative step
costs less than τ × the plain decode step; report the margin, not just τ. Here

    budget_ms = τ · plain_step_ms          margin = budget_ms / spec_step_ms − 1

with a noise band (:data:`BREAKEVEN_MIN_BAND`, or the combined :func:`median_noise` of both step
medians when wider) and a verdict (:func:`breakeven_verdict`). Times in milliseconds.

The speculative step time comes from the bench's requests (:func:`verify_step_ms`); the engine's
own τ, to cross-check the client-side curve, from per-position counters or from ``meta_info``
averages (:func:`engine_tau`: SGLang's completion tokens / verify steps, less the prefill's token).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

#: ``engine_source`` of an engine τ from ``meta_info`` averages, the prefill's token left out (≤ 64 characters).
META_TAU_SOURCE = "meta_info (completion_tokens − 1) / spec_verify_ct"
#: ``engine_source`` stored before issue 36: SGLang's own ratio, the prefill's token included.
META_TAU_SOURCE_WITH_PREFILL = "meta_info completion_tokens / spec_verify_ct"

BREAKEVEN_MIN_BAND = 0.05
"""Smallest noise band of a break-even margin: one unchanged config gave +3.1 % and −3.0 % on two
runs (issue 20), so a margin within ±5 % is not a verdict."""


def count(v: Any) -> int:
    """A token or step count as the engine reported it; 0 when it is not a whole number (a lie is
    flagged elsewhere)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _get(m: Any, key: str) -> Any:
    return m.get(key) if isinstance(m, dict) else getattr(m, key, None)


def median_noise(samples: list[float]) -> float:
    """Relative standard error of the median of ``samples`` (0 for fewer than two).

    σ is estimated robustly from the median absolute deviation (σ ≈ 1.4826·MAD, exact for a normal
    sample; one slow outlier on a loaded host barely moves it), and the median's standard error
    is ≈ 1.2533·σ/√n (its asymptotic efficiency against the mean); returned over the median.
    """
    vals = [v for v in samples if v]
    if len(vals) < 2:
        return 0.0
    med = statistics.median(vals)
    mad = statistics.median(abs(v - med) for v in vals)
    return 1.2533 * 1.4826 * mad / len(vals) ** 0.5 / med


def breakeven_verdict(margin: float, band: float) -> str:
    """``pays`` when ``margin`` > ``band``, ``does NOT pay`` when < −``band``, else ``within noise``."""
    if margin > band:
        return "pays"
    if margin < -band:
        return "does NOT pay"
    return "within noise"


def interval_verdict(lo: float, hi: float) -> str:
    """A break-even verdict from the margin's interval [``lo``, ``hi``] (fractions): ``pays`` when it
    excludes 0 from above, ``does NOT pay`` from below, else ``within noise``."""
    return "pays" if lo > 0 else "does NOT pay" if hi < 0 else "within noise"


def margin(tau: float, spec_step_ms: float, plain_step_ms: float, spec_samples: list[float],
           plain_samples: list[float], *, tau_interval: Any = None, effect_size: float = 0.05,
           level: float = 0.95, repeats: Sequence[float] = ()) -> dict[str, Any]:
    """The break-even record of one run: ``{tau, spec_step_ms, plain_step_ms, budget_ms, margin, pays,
    speedup_estimate, noise_band, interval, verdict, decide}`` (rounded as stored; ``pays``: spec step < budget).

    ``interval`` ([lo, hi], fractions > −1) is the margin's on the log scale (issue 33): ln(1 + margin) =
    ln τ + ln plain − ln spec, so its SE² is the sum of τ's relative SE (``tau_interval``, a
    :class:`dynocell.engine.stats.Interval` over requests; 0 when unknown), each median's relative SE
    (:func:`median_noise`) and a between-run floor (:data:`BREAKEVEN_MIN_BAND` read as z·SE). ``verdict`` is
    ``pays`` / ``does NOT pay`` only when the interval excludes 0, else ``within noise``; ``decide`` then says
    about how many more requests would decide an ``effect_size`` margin. ``noise_band`` keeps its meaning
    (combined σ of both medians, at least :data:`BREAKEVEN_MIN_BAND`).

    ``repeats``: the margins (fractions) of earlier runs of the same experiment (same config, workload,
    host, engine version: the caller matches contexts). With this run they make ≥ :data:`stats.MIN_RUNS`
    values, their SD of ln(1 + margin) (:func:`dynocell.engine.stats.between_runs_sd`) is the run-to-run
    spread, and the SE is the larger of it and the within-run SE above (issue 33: identical H200 runs moved
    −44 % → −30 % while each run's own interval was ±8 %). ``between_runs`` records ``{runs, sd_log}`` or
    None (fewer runs: the spread between runs is not measured, and the record says so)."""
    import math

    from dynocell.engine import stats

    budget = tau * plain_step_ms
    m = budget / spec_step_ms - 1.0
    band = max(BREAKEVEN_MIN_BAND, (median_noise(spec_samples) ** 2 + median_noise(plain_samples) ** 2) ** 0.5)
    z = stats.z_of(level)
    tau_se = stats.rel_se(tau_interval) or 0.0
    se = math.sqrt(tau_se ** 2 + median_noise(spec_samples) ** 2 + median_noise(plain_samples) ** 2
                   + (BREAKEVEN_MIN_BAND / z) ** 2)
    n = getattr(tau_interval, "n", 0) or len(spec_samples)
    within_se = se
    runs = [x for x in repeats if x is not None and x > -1] + [m]
    sd_runs = stats.between_runs_sd([1 + x for x in runs])
    if sd_runs is not None:
        se = max(se, sd_runs)
    lo, hi = math.expm1(math.log1p(m) - z * se), math.expm1(math.log1p(m) + z * se)
    verdict = interval_verdict(lo, hi)
    decide = None
    if verdict == "within noise" and sd_runs is not None and sd_runs > within_se:
        need_runs = stats.samples_needed(sd_runs, effect_size, level=level)
        decide = (f"inconclusive: the margin moves ±{sd_runs * 100:.0f} % between runs of this experiment "
                  f"({len(runs)} runs); about {max(1, need_runs - len(runs))} more runs would decide a "
                  f"{effect_size * 100:.0f} % margin")
    elif verdict == "within noise":
        # σ per request ≈ the SE above the floor × √n (the floor does not shrink with requests)
        sampling_se = math.sqrt(max(0.0, se ** 2 - (BREAKEVEN_MIN_BAND / z) ** 2))
        need = stats.samples_needed(sampling_se * math.sqrt(max(n, 1)), effect_size, level=level) if n else None
        decide = (f"inconclusive: about {max(1, need - n)} more requests would decide a {effect_size * 100:.0f} % "
                  "margin" if need and need > n else
                  "inconclusive: inside the between-run floor (±5 %); more requests will not decide it")
    return {"tau": round(tau, 4), "spec_step_ms": round(spec_step_ms, 4), "plain_step_ms": round(plain_step_ms, 4),
            "budget_ms": round(budget, 4), "margin": round(m, 4), "pays": spec_step_ms < budget,
            "speedup_estimate": round(budget / spec_step_ms, 3),
            "noise_band": round(band, 4), "interval": [round(lo, 4), round(hi, 4)],
            "interval_n": n, "verdict": verdict, "decide": decide,
            "between_runs": {"runs": len(runs), "sd_log": round(sd_runs, 4)} if sd_runs is not None else None}


def interval_basis(be: dict[str, Any]) -> str:
    """What a stored break-even interval covers, for every face: ``τ over n=15 requests, the step medians,
    ±11.8 % between 3 runs`` — or, with fewer than :data:`stats.MIN_RUNS` runs of the experiment, that the
    run-to-run spread is not measured (so the interval may be too narrow). ``be``: a :func:`margin` record."""
    from dynocell.engine import stats

    parts = [f"τ over n={be['interval_n']} requests" if be.get("interval_n") else "τ as measured",
             "the step medians", f"a ±{BREAKEVEN_MIN_BAND * 100:.0f} % floor"]
    br = be.get("between_runs")
    if br:
        parts.append(f"±{br['sd_log'] * 100:.1f} % between {br['runs']} runs of this experiment")
    else:
        parts.append(f"run-to-run spread not measured (fewer than {stats.MIN_RUNS} runs of this experiment)")
    return ", ".join(parts)


def verify_step_ms(results: list[Any]) -> float | None:
    """Median decode time per verify step, ms: (e2e − TTFT) / (spec_verify_ct − 1) per request.

    ``results``: bench request results (``ok``, ``ttft_s``, ``e2e_s``, ``meta_info``). The first
    verify step happens inside TTFT (prefill + first decode), hence − 1.
    """
    vals = []
    for r in results:
        vct = count((r.meta_info or {}).get("spec_verify_ct"))
        if r.ok and r.ttft_s is not None and r.e2e_s is not None and vct > 1:
            vals.append((r.e2e_s - r.ttft_s) / (vct - 1) * 1000)
    return sorted(vals)[len(vals) // 2] if vals else None


def engine_tau(engine_metrics: Any, before: Any, after: Any, metas: list[Any]) -> tuple[float | None, str | None]:
    """The engine's own τ over a text class and where it came from: per-position counter deltas of
    ``/metrics`` (``engine_metrics``: the engine's metrics module, ``before``/``after`` parsed
    snapshots) when exported, else the ``meta_info`` averages: SGLang's ``spec_accept_length`` is
    ``completion_tokens / spec_verify_ct``, which counts the token the prefill sampled, so it exceeds the
    histogram's τ by requests / verify steps (≈ τ / L relative, L output tokens per request: 1/64 at 64 tokens);
    here that token is left out, ``(Σ completion_tokens − requests) / Σ spec_verify_ct``
    (:data:`META_TAU_SOURCE`), to compare like with like. ``(None, None)`` when neither is there."""
    if before is not None and after is not None:
        try:
            curve = engine_metrics.position_curve(engine_metrics.delta(before, after))
            if curve is not None and curve.steps:
                return curve.tau, "metrics per-position counters"
        except Exception:  # noqa: BLE001 - a malformed counter set falls back to the averages
            pass
    # completion_tokens counts the token sampled by the prefill (before any verify step), the histogram's τ
    # does not: leave one token out per request that verified, so both count verify-step tokens only.
    num = sum(count(_get(m, "completion_tokens")) - 1 for m in metas
              if count(_get(m, "spec_verify_ct")) and count(_get(m, "completion_tokens")))
    den = sum(count(_get(m, "spec_verify_ct")) for m in metas if count(_get(m, "completion_tokens")))
    if den:
        return num / den, META_TAU_SOURCE
    return None, None


def completion_tokens(metas: list[Any]) -> int:
    """Σ ``completion_tokens`` of ``metas`` (dicts or objects), counting only whole numbers."""
    return sum(count(_get(m, "completion_tokens")) for m in metas)
