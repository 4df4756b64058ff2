"""Doctor rules that compare this run with other measurements (issue 22, shapes 1, 2, 4 and 6).

Rules (id — shape):

- ``baseline_regression`` — against a recorded run of the SAME config (another engine build, version or
  date): τ beyond the tolerance, or one position's p_i beyond the noise of two proportions, even when no
  knob differs.
- ``confounded_comparison`` — another config of the same model with τ far apart and several knobs
  differing: which differences could explain a τ change and which changed along with them.
- ``tau_up_throughput_down`` — two builds/configs without a plain baseline: τ up while decode tok/s falls.
- ``spread_collapse`` — the spread of τ across text classes collapses to one value (accounting, not
  drafting: real drafters accept verbatim repetition far more often than prose).
- ``concurrency_loss`` — speculation wins at concurrency 1 and loses at ≥ 4 with acceptance unchanged.
- ``graph_vs_eager`` — the same config with CUDA graphs disabled gives a different τ.

Each judges two numbers only as the same experiment (matching comparability contexts, no contended window
unless ``--allow-contended``) and fires only beyond the interval of the difference; inside it, an ``info``
finding says how many more requests would decide (issue 33).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dynocell.engine import contention, stats
from dynocell.runbooks.doctor_model import (
    ConcurrencyPoint, DoctorInputs, Finding, differing_knobs, r, self_and_siblings,
)

#: Knob prefixes that change what the drafter or the verify step sees (so they can move τ); any other
#: differing knob (topology, memory, versions …) moves speed, and confounds a τ comparison.
ACCEPTANCE_KNOBS = ("speculative.", "parallel.", "cuda_graph.", "serving.spec_v2", "serving.disable_overlap_schedule",
                    "dtype", "memory.kv_cache_dtype", "model_path", "memory.context_length", "engine")


def _weighted_tau(curves: dict[str, Any]) -> float | None:
    cs = list(curves.values())
    if not cs:
        return None
    w = [c.steps or 1 for c in cs]
    return sum(c.tau * wi for c, wi in zip(cs, w)) / sum(w)


def _p_gap(mine: Any, base: Any, t: dict[str, Any], mine_recs: Sequence[Any] = (),
           base_recs: Sequence[Any] = ()) -> tuple[int, float, float] | None:
    """The position whose p_i fell most beyond max(abs floor, z · SE of the difference), or None.

    With each request's record on both sides the SE is the ratio estimator's over requests
    (:func:`dynocell.engine.stats.position_interval`: the steps of one request are not independent trials, so
    the binomial SE of the steps understates the run-to-run spread, issue 33); without them, two proportions
    over the verify steps."""
    worst = None
    for i in range(min(len(mine.p), len(base.p))):
        pm, pb = mine.p[i], base.p[i]
        im, ib = stats.position_interval(mine_recs, i + 1), stats.position_interval(base_recs, i + 1)
        if im is not None and ib is not None:
            z = stats.z_of(im.level)
            se = math.hypot((im.hi - im.lo) / (2 * z), (ib.hi - ib.lo) / (2 * z))
        else:
            nm, nb = mine.steps or 0, base.steps or 0
            se = math.sqrt((pm * (1 - pm) / nm if nm else 0.25) + (pb * (1 - pb) / nb if nb else 0.25))
        tol = max(t["p_abs_floor"], t["z"] * se)
        if pb - pm > tol and (worst is None or pb - pm - tol > worst[1] - worst[2]):
            worst = (i + 1, pb - pm, tol)
    return worst


def left_out(inp: DoctorInputs, other_context: dict[str, Any] | None = None) -> str | None:
    """Why a two-number rule must not judge this comparison (issue 33): this run's window, or the other
    measurement's, was contended and the operator did not pass ``--allow-contended``; None when it may."""
    if inp.allow_contended:
        return None
    theirs = contention.contended((other_context or {}).get("contention"))
    if inp.contended:
        return f"this run was measured under contention ({inp.contended})"
    if theirs:
        return f"the other measurement was taken under contention ({theirs})"
    return None


def rule_baseline_regression(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """τ or per-position p below a recorded baseline of the same config (config_hash equal), beyond its interval.

    Issue 33: the two runs are compared only as the same experiment — their comparability contexts
    (:func:`dynocell.runbooks.run.context.differences`: workload, temperature, lengths, k, context length,
    engine version, dtype, host, contention) must match; otherwise the finding (info) names what differs and
    infers no build change. A contended window is left out unless ``--allow-contended``. With each request's
    record on both sides, τ's drop must exceed its interval (ratio estimator over requests, log scale,
    :func:`dynocell.engine.stats.compare_intervals`); a drop inside it is ``inconclusive`` (info) with the
    requests per side that would decide an effect of ``effect_size``."""
    from dynocell.runbooks.run.context import differences

    t = th["baseline_regression"]
    mine = {c.text_class: c.curve for c in inp.curves}
    mine_recs = {c.text_class: c.requests or () for c in inp.curves}
    tau = inp.overall_tau()
    out = []
    for b in inp.baselines:
        common = sorted(set(mine) & set(b.curves))
        if tau is None or not common:
            continue
        btau = _weighted_tau({k: b.curves[k] for k in common})
        mtau = _weighted_tau({k: mine[k] for k in common})
        if mtau is None:  # never: common is not empty
            continue
        drop = 1 - mtau / btau if btau else 0.0
        gaps = {k: g for k in common
                if (g := _p_gap(mine[k], b.curves[k], t, mine_recs.get(k, ()), b.requests.get(k, ())))}
        eff = stats.compare_intervals(stats.tau_interval([x for k in common for x in mine_recs.get(k, ())]),
                                      stats.tau_interval([x for k in common for x in b.requests.get(k, ())]),
                                      effect_size=inp.effect_size)
        if drop < t["tau_rel_drop"] and not gaps:
            continue
        ev = {"baseline": b.label, "build": b.build, "tau": r(mtau), "baseline_tau": r(btau), "drop": r(drop),
              "classes": common, **({"interval": eff.to_dict()} if eff else {})}
        diffs = differences(inp.context, b.context)
        if diffs:
            out.append(Finding("baseline_regression", "info",
                               f"same config as {b.label}, but not the same experiment: {'; '.join(diffs)}. "
                               f"τ {mtau:.2f} vs {btau:.2f} is not compared, and no build change is inferred; "
                               "measure both with one workload on one quiet host to compare them.",
                               {**ev, "differs": diffs}))
            continue
        why = left_out(inp, b.context)
        if why:
            out.append(Finding("baseline_regression", "info",
                               f"τ {mtau:.2f} vs {btau:.2f} in {b.label} is not judged: {why}. Rerun on a quiet "
                               "host, or pass --allow-contended to judge it anyway.", {**ev, "left_out": why}))
            continue
        tau_beyond = drop >= t["tau_rel_drop"] and (eff is None or eff.verdict == "lower")
        if not tau_beyond and not gaps:
            out.append(Finding("baseline_regression", "info",
                               f"same config, {b.build or b.label}: τ {mtau:.2f} vs {btau:.2f} "
                               f"({stats.describe(eff)}): within the interval, not a regression.",
                               {**ev, "more_needed": eff.more_needed if eff else None}))
            continue
        cls, (pos, gap, tol) = next(iter(gaps.items())) if gaps else (None, (None, 0.0, 0.0))
        msg = (f"same config, {b.build or b.label}: τ {mtau:.2f} vs the recorded {btau:.2f} ({drop * 100:.1f} % lower"
               + (f"; {eff.text()}" if eff else "") + ")"
               if tau_beyond else f"same config, {b.build or b.label}: τ {mtau:.2f} vs {btau:.2f}")
        if cls is not None and pos is not None:  # gaps: the first one's
            msg += (f"; {cls}: p_{pos} {mine[cls].p[pos - 1]:.3f} vs {b.curves[cls].p[pos - 1]:.3f} "
                    f"({gap:.3f} lower, tolerance {tol:.3f})")
        msg += (". No knob differs and the workload, engine version, host and contention match, so the engine "
                "build or environment changed what the drafter sees: bisect the builds (dynocell bisect) position "
                "by position.")
        out.append(Finding("baseline_regression", "error" if tau_beyond and drop >= t["error_rel_drop"] else "warn",
                           msg, {**ev, "text_class": cls, "position": pos, "p_gap": r(gap) if gaps else None}))
    return out


def rule_confounded_comparison(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Several knobs differ and τ is lower here: name the candidates and the confounders instead of refusing."""
    t = th["confounded_comparison"]
    tau = inp.overall_tau()
    if tau is None or not inp.knobs:
        return []
    out = []
    for o in inp.others:
        diff = differing_knobs(inp.knobs, o.knobs)
        rel = (tau - o.tau) / o.tau if o.tau else 0.0
        if len(diff) < t["min_knobs"] or -rel < t["tau_rel_min"]:
            continue  # spoken on the run that got worse; the better one has nothing to fix
        # The build (patches) and env switches are not knobs of the comparison above, but either can change
        # τ by itself (a patched verify graph, an env that switches a graph off): name them as candidates.
        build_env = sorted(set(differing_knobs(inp.knobs, o.knobs, include_patches=True, include_env=True)) - set(diff))
        cands = [k for k in diff if k.startswith(ACCEPTANCE_KNOBS)] + build_env
        confs = [k for k in diff if k not in cands]
        desc = ", ".join(f"{k} {o.knobs.get(k)!r}→{inp.knobs.get(k)!r}" for k in diff)
        msg = (f"τ {tau:.2f} vs {o.tau:.2f} in {o.label} ({rel * 100:+.0f} %) with {len(diff)} knobs differing "
               f"({desc})" + (f", and the build or environment too ({', '.join(build_env)})" if build_env else "")
               + f". Could explain a τ change: {', '.join(cands) or 'none of them (look at the build)'}; "
               f"changed along with them: {', '.join(confs) or 'nothing else'}"
               + (f" — {len(cands)} candidates confound each other" if len(cands) > 1 else "")
               + ". Vary one at a time: dynocell bisect plan <one config> <the other>.")
        out.append(Finding("confounded_comparison", "warn", msg,
                           {"other": o.label, "tau": r(tau), "other_tau": r(o.tau), "rel_diff": r(rel),
                            "knobs": diff, "candidates": cands, "confounders": confs, "build_env": build_env}))
    return out


def _builds(inp: DoctorInputs) -> list[tuple[str, float | None, float | None, dict[str, float]]]:
    """(label, τ, decode tok/s, τ by class) of every other build or config measured."""
    rows = [(b.build or b.label, _weighted_tau(b.curves), b.decode_tok_s,
             {k: c.tau for k, c in b.curves.items()}) for b in inp.baselines]
    rows += [(o.label, o.tau, o.decode_tok_s, dict(o.tau_by_class)) for o in inp.others]
    return rows


#: Knobs that name a build of the same engine rather than a different way of running it.
BUILD_KNOBS = frozenset({"patches"})
def _build_only(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """True when two flattened configs differ in :data:`BUILD_KNOBS` at most — env variables count (an env
    switch such as ``SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH`` changes how the build runs)."""
    return set(differing_knobs(a, b, include_patches=True, include_env=True)) <= BUILD_KNOBS


def rule_tau_up_throughput_down(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """More tokens accepted per step but fewer tokens per second: the accounting (or the step cost)
    changed, not the drafting — check with a plain baseline before believing either build.

    Issue 33: a recorded run of the same config is compared only as the same experiment (its context
    matches, neither window contended unless ``--allow-contended``), and where both sides kept each
    request's record the rise of τ must exceed its interval (:func:`dynocell.engine.stats.compare_intervals`
    verdict ``higher``): a τ that moved inside the request-to-request spread says nothing about accounting."""
    t = th["tau_up_throughput_down"]
    tau, tok_s = inp.overall_tau(), inp.spec_decode_tok_s
    if tau is None or not tok_s:
        return []
    mine_recs = [x for c in inp.curves for x in (c.requests or ())]
    # Other builds of the same config only: another config that differs in knobs which change the step's cost
    # (CUDA graphs, env switches, parallel sizes …) is expected to trade τ for speed (confounded_comparison's job).
    rows = [(b.build or b.label, _weighted_tau(b.curves), b.decode_tok_s, b.context,
             [x for recs in b.requests.values() for x in recs]) for b in inp.baselines]
    rows += [(o.label, o.tau, o.decode_tok_s, o.context, list(o.requests)) for o in inp.others
             if inp.knobs and _build_only(inp.knobs, o.knobs)]
    out = []
    for label, otau, otok, octx, orecs in rows:
        if not otau or not otok:
            continue
        up, down = tau / otau - 1, 1 - tok_s / otok
        if up < t["tau_rel_up"] or down < t["tok_s_rel_down"] or _not_comparable(inp, octx):
            continue
        eff = stats.compare_intervals(stats.tau_interval(mine_recs), stats.tau_interval(orecs),
                                      effect_size=inp.effect_size)
        if eff is not None and eff.verdict != "higher":
            continue  # τ rose inside its interval: not a rise to explain
        band = f" ({eff.text()})" if eff else ""
        out.append(Finding("tau_up_throughput_down", "warn",
                           f"τ {tau:.2f} vs {otau:.2f} in {label} (+{up * 100:.0f} %{band}) while decode falls to "
                           f"{tok_s:.1f} from {otok:.1f} tok/s (−{down * 100:.0f} %): accepted tokens per second fell "
                           "although τ rose. Either the acceptance is counted differently (definitions, skipped "
                           "steps) or each step got dearer; measure a plain baseline on both builds.",
                           {"other": label, "tau": r(tau), "other_tau": r(otau), "decode_tok_s": r(tok_s, 2),
                            "other_decode_tok_s": r(otok, 2), "tau_rel_up": r(up), "tok_s_rel_down": r(down),
                            **({"interval": eff.to_dict()} if eff else {})}))
    return out


def _spread(taus: list[float]) -> float:
    return (max(taus) - min(taus)) / (sum(taus) / len(taus)) if taus else 0.0


def rule_spread_collapse(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """τ identical across ≥ 3 text classes (repetition included) below the ceiling, or collapsed from a
    wide spread in another build: one number is being reported for every request."""
    t = th["spread_collapse"]
    cs = [c for c in inp.curves if c.curve.steps is None or c.curve.steps >= th["general"]["min_steps"]]
    if len(cs) < t["min_classes"]:
        return []
    taus = [c.curve.tau for c in cs]
    d = max(c.curve.num_drafts for c in cs)
    if sum(taus) / len(taus) >= t["ceiling_frac"] * (d + 1):
        return []  # every class near D + 1: no room to spread
    if max(taus) <= th["pinned_near_one"]["tau_max"]:
        return []  # every class pinned near one: pinned_near_one's shape, nothing left to spread
    mine = _spread(taus)
    if mine > t["collapsed_max"]:
        return []
    others = [(label, _spread(list(by.values()))) for label, _, _, by in _builds(inp) if len(by) >= t["min_classes"]]
    wide = [(label, s) for label, s in others if s >= t["healthy_min"]]
    if others and not wide:
        return []
    msg = (f"τ is the same on every text class ({', '.join(f'{c.text_class} {c.curve.tau:.3f}' for c in cs)}; spread "
           f"{mine * 100:.1f} %)")
    msg += (f" while {wide[0][0]} spread {wide[0][1] * 100:.0f} %" if wide else "")
    msg += (": real drafting accepts repetition far more often than prose, so one value for every class is "
            "accounting (a configured or averaged figure reported per request), not drafting.")
    return [Finding("spread_collapse", "warn", msg,
                    {"tau_by_class": {c.text_class: r(c.curve.tau) for c in cs}, "spread": r(mine),
                     "other": wide[0][0] if wide else None, "other_spread": r(wide[0][1]) if wide else None})]


def _not_comparable(inp: DoctorInputs, other_context: dict[str, Any]) -> str | None:
    """Why this run and another measurement are not one experiment (their contexts differ:
    :func:`dynocell.runbooks.run.context.differences`) or may not be judged (:func:`left_out`); None when
    they may be compared. An empty context (an input built from plain data) is not compared."""
    from dynocell.runbooks.run.context import differences

    diffs = differences(inp.context, other_context) if inp.context and other_context else []
    if diffs:
        return "not the same experiment: " + "; ".join(diffs)
    return left_out(inp, other_context)


def rule_graph_vs_eager(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """The same config with only ``cuda_graph.disable`` flipped gives a τ more than ``rel_diff_min`` apart,
    beyond the interval of the difference: a static buffer the captured graph reads is not refreshed on
    some path. With both sides' request records the difference must exclude 0 at 95 % (τ as a ratio
    estimator over requests, log scale: :func:`dynocell.engine.stats.compare_intervals`); inside it the
    finding is ``info``, "inconclusive", with the requests per side that would decide ``effect_size``."""
    t = th["graph_vs_eager"]
    me, sibs = self_and_siblings(inp)
    if me is None:
        return []
    out = []
    for s in sibs:
        if differing_knobs(me.knobs, s.knobs, include_env=True) != ["cuda_graph.disable"]:
            continue
        graph, eager = (s, me) if s.knobs.get("cuda_graph.disable") is False else (me, s)
        diff = abs(graph.tau - eager.tau) / max(graph.tau, eager.tau)
        if diff <= t["rel_diff_min"]:
            continue
        pp = me.knobs.get("parallel.pp_size") or 1
        eff = stats.compare_intervals(stats.tau_interval(graph.requests), stats.tau_interval(eager.requests),
                                      effect_size=inp.effect_size)
        ev = {"tau_graph": r(graph.tau), "tau_eager": r(eager.tau), "rel_diff": r(diff), "pp_size": pp,
              "eager_label": eager.label, "graph_label": graph.label,
              **({"interval": eff.to_dict()} if eff else {})}
        pair = f"CUDA graph τ {graph.tau:.2f} vs eager τ {eager.tau:.2f} for the same config"
        why = _not_comparable(inp, s.context)
        if why:
            out.append(Finding("graph_vs_eager", "info", f"{pair} is not judged: {why}. Measure both with one "
                               "workload on one quiet host.", {**ev, "left_out": why}))
            continue
        if eff is not None and eff.verdict not in ("higher", "lower"):
            out.append(Finding("graph_vs_eager", "info", f"{pair} ({eff.text()}): not beyond the run-to-run "
                               "interval, so no graph bug is inferred.", {**ev, "more_needed": eff.more_needed}))
            continue
        stage = (f" With pp_size {pp}, disable graphs on one pipeline stage at a time next." if pp > 1 else "")
        band = f"; {eff.text()}" if eff else "; no request records, so no interval: the gap alone"
        out.append(Finding(
            "graph_vs_eager", "error",
            f"{pair} ({diff * 100:.1f} % apart{band}): a static buffer the captured graph reads is not refreshed "
            f"on some path. Bisect: dynocell bisect plan <eager config> <graph config>.{stage}", ev))
    return out


def _speedup(p: ConcurrencyPoint, effect_size: float) -> stats.Effect | None:
    """spec / plain − 1 at one level, with the log-ratio interval of the mean per-request decode rates
    (:func:`dynocell.engine.stats.log_ratio`); None when either side kept no per-request rates."""
    if not p.spec_requests or not p.plain_requests:
        return None
    return stats.log_ratio(p.spec_requests, p.plain_requests, effect_size=effect_size)


def rule_concurrency_loss(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Speculation pays at concurrency 1 and stops paying at ≥ ``min_high_concurrency``: the verify
    step's extra tokens compete with other requests for the batch (gate speculation by load). Not judged on a
    contended window unless ``--allow-contended`` (issue 33).

    The speed-up at a level is spec/plain aggregate output tok/s; with each request's decode rate kept on
    both sides, "pays" and "loses" each need the log-ratio interval of the per-request rates
    (:func:`_speedup`) to exclude 0, else the finding is ``info``, "inconclusive", with the requests that
    would decide; without them, the measured break-even noise band (or ``noise``) is the band."""
    t = th["concurrency_loss"]
    if left_out(inp):
        return []  # issue 33: throughput under a loaded host says nothing about the batch
    pts = sorted(inp.concurrency, key=lambda p: p.concurrency)
    noise = inp.breakeven_noise or t["noise"]
    low = [p for p in pts if p.concurrency == 1 and p.plain_tok_s]
    high = [p for p in pts if p.concurrency >= t["min_high_concurrency"] and p.plain_tok_s]
    if not low or not high:
        return []

    def ratio(p: ConcurrencyPoint) -> float:
        return p.spec_tok_s / p.plain_tok_s

    def side(p: ConcurrencyPoint) -> tuple[str, stats.Effect | None]:
        """``pays`` / ``loses`` / ``even`` / ``inconclusive`` at one level."""
        eff, s = _speedup(p, inp.effect_size), ratio(p)
        if eff is not None:
            decided = eff.verdict in ("higher", "lower")
            if not decided:
                return ("inconclusive" if abs(s - 1) > noise else "even"), eff
        return ("pays" if s > 1 + noise else "loses" if s < 1 - noise else "even"), eff

    c1, eff1 = side(low[0])
    judged = [(p, *side(p)) for p in high]
    losers = [(p, e) for p, v, e in judged if v == "loses"]
    if c1 == "pays" and losers:
        p, e = losers[0]
        bands = "; ".join(f"c={q.concurrency}: {x.text()}" for q, x in ((low[0], eff1), (p, e)) if x is not None)
        return [Finding("concurrency_loss", "warn",
                        f"speculation is {ratio(low[0]):.2f}× plain at concurrency 1 but {ratio(p):.2f}× at "
                        f"{p.concurrency}" + (f" ({bands})" if bands else "") + ": with acceptance unchanged, the "
                        "verify step's extra tokens compete for the batch. Gate speculation by load (turn it off "
                        "above the crossover) and check the capture sizes cover max running × (drafts + 1).",
                        {"speedup_c1": r(ratio(low[0])), "concurrency": p.concurrency, "speedup": r(ratio(p)),
                         "speedups": {str(x.concurrency): r(ratio(x)) for x in pts if x.plain_tok_s},
                         **({"interval_c1": eff1.to_dict()} if eff1 else {}),
                         **({"interval": e.to_dict()} if e else {})})]
    open_ = [(q, e) for q, v, e in [(low[0], c1, eff1), *judged] if v == "inconclusive" and e is not None]
    if open_ and c1 in ("pays", "inconclusive") and any(v in ("loses", "inconclusive") for _, v, _ in judged):
        q, e = open_[0]
        return [Finding("concurrency_loss", "info",
                        f"speculation is {ratio(low[0]):.2f}× plain at concurrency 1 and "
                        f"{', '.join(f'{ratio(x):.2f}× at {x.concurrency}' for x, _, _ in judged)}; at "
                        f"c={q.concurrency} {e.text()}, so whether it stops paying under load is not decided.",
                        {"speedups": {str(x.concurrency): r(ratio(x)) for x in pts if x.plain_tok_s},
                         "concurrency": q.concurrency, "interval": e.to_dict(), "more_needed": e.more_needed})]
    return []


COMPARE_RULES = {
    "baseline_regression": rule_baseline_regression,
    "confounded_comparison": rule_confounded_comparison,
    "tau_up_throughput_down": rule_tau_up_throughput_down,
    "spread_collapse": rule_spread_collapse,
    "concurrency_loss": rule_concurrency_loss,
}
# graph_vs_eager is registered in doctor.RULES at its place in the acceptance rules' order
