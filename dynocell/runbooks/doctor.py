"""The acceptance doctor: rules over acceptance curves and runs that recognise the shapes silent bugs leave.

Speculative decoding is lossless, so a drafter that sees wrong inputs still
produces correct text, only slower (a *target* that sees wrong inputs — e.g. a
captured verify graph reading stale buffers, field report 000 — garbles the text
as well: ``garbage_output``). Each rule here looks for one shape in the
numbers and names the runbook entries that explain it (entries whose front
matter lists the rule in ``signatures.rules``). Thresholds live in
``doctor_thresholds.toml`` next to this file, one comment each.

Rules (id — shape):

- ``pinned_near_one`` — τ ≤ 1.4 with D ≥ 3 on every class (repetition too):
  the draft sees wrong or zero inputs.
- ``recursive_collapse`` — a_1 healthy, mean(a_2..a_D) collapses.
- ``position_cliff`` — no verify step accepts more than k drafts on any class while p_k is healthy.
- ``depth_decay`` — τ falls with prompt length across a length ladder.
- ``acceptance_decay`` — τ falls gradually over one server's life (one log's acceptance windows).
- ``zero_past_length`` — acceptance exactly 0 beyond a context length.
- ``length_breakeven`` — τ holds up with length but the verify step grows: speculation stops paying from a length.
- ``scales_with_parallel`` — configs differing only in a parallel size: τ drops with the size.
- ``graph_vs_eager`` — the same config with CUDA graphs disabled gives a different τ.
- ``no_net_win`` — τ fine but speculative decode ≤ plain; the verify-step cost and break-even τ
  (accounting suspected only when engine counters and client histograms disagree).
- ``definitions_mismatch`` — engine-reported τ vs client histogram > 2 % apart.
- ``independence`` — per-position p_i vs the best single p (Σ p^i = τ − 1): a shape no one p explains.
- ``garbage_output`` — generations dominated by one token or a handful of tokens.
- ``engine_vs_oracle`` — engine curve vs the reference engine's on the same prompts
  (greedy within 2 % per position; sampled only against the engine's proposal mode).

Issue 22's shapes live in one module per family, merged into :data:`RULES`:
:mod:`~dynocell.runbooks.doctor_compare` (``baseline_regression``, ``confounded_comparison``,
``tau_up_throughput_down``, ``spread_collapse``, ``concurrency_loss``),
:mod:`~dynocell.runbooks.doctor_outputs` (``corrupt_output``, ``lossless_near_tie``, ``length_cliff``,
``rate_above_one``, ``skipped_steps_average``) and :mod:`~dynocell.runbooks.doctor_runtime`
(``health_lies``, ``stalled_queue``, ``nccl_startup_skew``, ``nccl_serving_timeout``, ``profile_no_trace``,
``graph_launches_missing``, ``capture_size_miss``, ``config_smell``); their inputs are the plain shapes of
:mod:`~dynocell.runbooks.doctor_model`, read from the store by :mod:`~dynocell.runbooks.doctor_evidence`.
Rules know the speculative algorithm (:func:`algorithm_family`): an n-gram proposer is judged on
greedy verbatim repetition only, and causes are named only where the config has them.

:func:`diagnose_inputs` is pure (plain inputs → findings); :func:`diagnose`
loads a run's (or boot's) rows from the store, runs the rules and stores the findings.
"""

from __future__ import annotations

import json
import math
import re
import tomllib
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Sequence

from dynocell.engine import contention
from dynocell.errors import NotFound
from dynocell.runbooks.doctor_compare import COMPARE_RULES, rule_graph_vs_eager
from dynocell.runbooks.doctor_oracle import ORACLE_RULES
from dynocell.runbooks.doctor_outputs import OUTPUT_RULES
from dynocell.runbooks.doctor_runtime import RUNTIME_RULES
from dynocell.runbooks.doctor_model import (  # noqa: F401 - re-exported: the doctor's public shapes
    Baseline, ClassCurve, ConcurrencyPoint, DoctorInputs, Finding, Mismatch, OracleCurve, Sibling, headline_tok_s,
    r as _r,
)
from dynocell.runbooks.doctor_model import differing_knobs, self_and_siblings

if TYPE_CHECKING:  # pragma: no cover
    from dynocell.db.runs import CurveRow, RunRow

THRESHOLDS_PATH = Path(__file__).with_name("doctor_thresholds.toml")
SEVERITIES = ("info", "warn", "error")


def load_thresholds(path: Path = THRESHOLDS_PATH) -> dict[str, dict[str, float]]:
    """The thresholds file as ``{rule: {name: value}}``."""
    with open(path, "rb") as fh:
        return tomllib.load(fh)


def flatten_config(cfg: Any) -> dict[str, Any]:
    """An EngineConfig (or canonical dict / JSON text) as ``{dotted field: value}`` (``env.NAME`` per variable).

    An observed config (``{"observed": true, "engine", "fields"}``, :mod:`dynocell.engine.observed`: what an
    imported log, scrape or attached engine revealed) flattens to the same names a written config does —
    ``engine`` plus its already-dotted ``fields`` (``parallel.tp_size``, ``speculative.algorithm``, and the
    unmodelled settings under ``extra.``) — so every rule that reads a setting reads an imported config as
    it reads a booted one (issue 35). Fields the source did not reveal stay absent (unknown, not default).
    """
    if isinstance(cfg, str):
        data = json.loads(cfg)
    elif isinstance(cfg, dict):
        data = cfg
    else:
        data = cfg.canonical()
    if isinstance(data, dict) and data.get("observed") is True and isinstance(data.get("fields"), dict):
        fields = {str(k): tuple(v) if isinstance(v, list) else v for k, v in data["fields"].items()}
        return {"engine": data.get("engine"), **fields}
    out: dict[str, Any] = {}

    def walk(d: dict[str, Any], prefix: str) -> None:
        for k, v in d.items():
            if isinstance(v, dict):
                walk(v, f"{prefix}{k}.")
            else:
                out[f"{prefix}{k}"] = tuple(v) if isinstance(v, list) else v

    walk(data, "")
    return out


# ------------------------------------------------------------------ rules

def _judged(inp: DoctorInputs, th: dict[str, Any]) -> list[ClassCurve]:
    """Curves with enough verify steps to judge; a curve whose accept rate exceeds 1 is refused
    (``rate_above_one`` says so) and judged by no other rule."""
    min_steps = th["general"]["min_steps"]
    lim = th["rate_above_one"]["max_rate"]
    return [c for c in inp.curves if (c.curve.steps is None or c.curve.steps >= min_steps)
            and c.curve.accept_rate <= lim]


#: Speculative algorithms by what their drafter reads (SGLang ``--speculative-algorithm`` and vLLM
#: ``speculative_config.method`` names, upper-cased). The causes a rule names depend on it: an n-gram
#: proposer has no hidden state, KV or parallel config of its own; a draft model has no hidden state.
ALGORITHM_FAMILIES = {
    "NGRAM": "ngram", "PROMPT_LOOKUP": "ngram", "LOOKAHEAD": "ngram", "SUFFIX": "ngram",
    "STANDALONE": "draft_model", "DRAFT_MODEL": "draft_model",
    "EAGLE": "hidden_state", "EAGLE3": "hidden_state", "NEXTN": "hidden_state", "MTP": "hidden_state",
    "DFLASH": "hidden_state", "MEDUSA": "hidden_state",
}
#: What a drafter of each family reads, i.e. what can be wrong when τ is pinned near one.
_WRONG_INPUTS = {
    "hidden_state": "hidden states (EAGLE / NEXTN aux layers), positions, the KV it attends to, the parallel "
                    "config it was built with, a captured graph's static buffers",
    "draft_model": "positions, the draft model's own KV cache, its tokenizer / vocabulary, the parallel config it "
                   "was built with, a captured graph's static buffers",
    None: "hidden state, positions, KV, parallel config, a captured graph's static buffers",
}


def algorithm_family(knobs: dict[str, Any]) -> str | None:
    """``ngram`` | ``draft_model`` | ``hidden_state`` for the run's ``speculative.algorithm``; None when unknown."""
    alg = str(knobs.get("speculative.algorithm") or "").upper()
    return ALGORITHM_FAMILIES.get(alg)


def _is_repetition(text_class: str) -> bool:
    return "repet" in text_class.lower() or "verbatim" in text_class.lower()


def _pinned_ngram(inp: DoctorInputs, cs: list[ClassCurve], t: dict[str, Any]) -> list[Finding]:
    """An n-gram proposer can only propose text it has seen (prompt + output so far): τ near one on fresh
    text is its nature, and under sampling even a repeated passage is not followed token for token. Only
    a greedy run whose verbatim-repetition class stays pinned says the proposer matches nothing."""
    rep = [c for c in cs if _is_repetition(c.text_class)]
    if inp.sampling != "greedy" or not rep or any(c.curve.tau > t["ngram_repetition_tau_max"] for c in rep):
        return []
    taus = {c.text_class: _r(c.curve.tau) for c in rep}
    msg = (f"n-gram proposer: τ ≤ {t['ngram_repetition_tau_max']} on verbatim repetition under greedy decoding "
           f"({', '.join(f'{k} {v:.2f}' for k, v in taus.items())}, D = {rep[0].curve.num_drafts}): the continuation "
           "is in the prompt, so the proposer matches nothing — its token history (prompt + output) is not fed, or "
           "its match window (prompt_lookup_min / prompt_lookup_max, ngram sizes) cannot match.")
    return [Finding("pinned_near_one", "error", msg,
                    {"tau_by_class": taus, "max_tau": max(taus.values()), "num_drafts": rep[0].curve.num_drafts,
                     "tau_max": t["ngram_repetition_tau_max"], "repetition_class": True, "algorithm_family": "ngram"})]


#: Rules whose judgment rests on what the weights predict: acceptance (τ, p_i and their shapes), the
#: text the model writes, and speculative-vs-plain speed (which follows τ). With random weights
#: (``--load-format dummy``) none of these says anything about a real model, so :func:`diagnose_inputs`
#: leaves them out and :func:`rule_dummy_weights` says so. Boot, runtime, counting-convention, lossless
#: and config rules still hold: the engine, its counters and its kernels are real.
WEIGHT_DEPENDENT = frozenset({
    "pinned_near_one", "recursive_collapse", "position_cliff", "zero_past_length", "depth_decay",
    "acceptance_decay", "length_breakeven", "scales_with_parallel", "no_net_win", "independence",
    "garbage_output", "engine_vs_oracle", "corrupt_output", "length_cliff", "tau_up_throughput_down",
    "spread_collapse", "concurrency_loss",
})


def dummy_weights(knobs: dict[str, Any]) -> str | None:
    """The setting that makes the engine load random weights, as written, or None.

    Both engines take ``--load-format dummy`` (SGLang ``ServerArgs.load_format``, vLLM ``LoadConfig``):
    weights are initialised at random instead of read, so boot phases, KV sizing, graphs and kernels
    are real while acceptance and text are noise. Read from ``extra_args`` (``--load-format dummy`` or
    ``--load-format=dummy``) and from an observed setting (``load_format``, ``extra.load_format``)."""
    args = [str(a) for a in knobs.get("extra_args") or ()]
    for i, a in enumerate(args):
        if a == "--load-format=dummy" or (a == "--load-format" and args[i + 1:i + 2] == ["dummy"]):
            return "--load-format dummy"
    for key in ("load_format", "extra.load_format", "extra.load-format", "fields.load_format"):
        if str(knobs.get(key) or "").strip().lower() == "dummy":
            return f"{key} = dummy"
    return None


def rule_dummy_weights(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Random weights (:func:`dummy_weights`): the acceptance, output and speed-vs-plain rules are not run.

    One info finding naming the setting and the rules left out, so a report over a dummy-weight run
    (a model too large to ship, booted at real size to measure the engine) never reads as a verdict on
    acceptance."""
    setting = dummy_weights(inp.knobs)
    if setting is None:
        return []
    return [Finding("dummy_weights", "info",
                    f"the engine loaded random weights ({setting}): acceptance (τ, per-position), output text "
                    "and speculative-vs-plain speed are not a model's, so the rules that judge them are not run. "
                    "Boot phases, KV sizing, graph capture, kernels and tok/s are real.",
                    {"setting": setting, "rules_not_run": sorted(WEIGHT_DEPENDENT)})]


def rule_pinned_near_one(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """τ ≤ ``tau_max`` on every class with D ≥ ``min_drafts``: the drafter (or the target) reads wrong inputs.

    Algorithm-aware (issue 22): for an n-gram proposer only a greedy verbatim-repetition class counts
    (:func:`_pinned_ngram`); for a draft model or a hidden-state drafter the causes named are the inputs
    that family reads (:data:`_WRONG_INPUTS`).
    """
    t = th["pinned_near_one"]
    cs = [c for c in _judged(inp, th) if c.curve.num_drafts >= t["min_drafts"]]
    family = algorithm_family(inp.knobs)
    if family == "ngram":
        return _pinned_ngram(inp, cs, t)
    if not inp.curves and inp.accept_lengths:
        return _pinned_any_drafts(inp, t, family)
    if not cs or any(c.curve.tau > t["tau_max"] for c in cs):
        return []
    has_rep = any(_is_repetition(c.text_class) for c in cs)
    taus = {c.text_class: _r(c.curve.tau) for c in cs}
    msg = (f"τ ≤ {t['tau_max']} on every class ({', '.join(f'{k} {v:.2f}' for k, v in taus.items())}) with "
           f"D = {cs[0].curve.num_drafts}" + (", verbatim repetition included" if has_rep else "")
           + f": the draft (or, with garbled output, the target's verify step) sees wrong or zero inputs "
           f"({_WRONG_INPUTS[family]}) — not a weak drafter.")
    return [Finding("pinned_near_one", "error", msg,
                    {"tau_by_class": taus, "max_tau": max(taus.values()), "num_drafts": cs[0].curve.num_drafts,
                     "tau_max": t["tau_max"], "repetition_class": has_rep, "algorithm_family": family})]


def _pinned_any_drafts(inp: DoctorInputs, t: dict[str, Any], family: str | None) -> list[Finding]:
    """τ with the draft count D unknown (``inp.accept_lengths``: a bench tool's ``accept_length`` of a server
    whose config dynocell never saw). τ − 1 is the drafts accepted per verify step whatever D is, so τ ≤
    ``unknown_drafts_tau_max`` on every level is an accept rate at or below (τ − 1) / 1 even at D = 1 — no
    trained drafter, only one that reads wrong inputs (or an n-gram proposer on text it cannot match, which
    the config would say). SGLang's ``bench_serving`` writes ``accept_length`` only for a server with
    speculation on (``avg_spec_accept_length`` of ``/get_server_info``), so a plain server is not judged."""
    lim = t["unknown_drafts_tau_max"]
    taus = {a["text_class"]: _r(a["tau"]) for a in inp.accept_lengths}
    if any(v > lim for v in taus.values()):
        return []
    worst = max(taus.values())
    msg = (f"accept length τ ≤ {lim} ({', '.join(f'{k} {v:.2f}' for k, v in taus.items())}; "
           f"{inp.accept_lengths[0]['source']}) with the draft count unknown: τ − 1 = {worst - 1:.2f} drafts "
           f"accepted per verify step whatever k is (≤ {worst - 1:.0%} even at k = 1) — the drafter contributes "
           f"nothing: it (or the target's verify step) sees wrong or zero inputs ({_WRONG_INPUTS[family]}), or the "
           "algorithm named does not match the draft's architecture — not a weak drafter.")
    return [Finding("pinned_near_one", "error", msg,
                    {"tau_by_class": taus, "max_tau": worst, "num_drafts": None, "tau_max": lim,
                     "source": inp.accept_lengths[0]["source"], "algorithm_family": family})]


def _later_ratio(a: Sequence[float]) -> float | None:
    """mean(a_2..a_D) / a_1 of a conditional-acceptance curve (None when a_1 is 0 or D < 2)."""
    if len(a) < 2 or a[0] <= 0:
        return None
    return sum(a[1:]) / (len(a) - 1) / a[0]


def _collapse_yardstick(inp: DoctorInputs, text_class: str, tau: float, t: dict[str, Any]) -> tuple[str, str, Any]:
    """What a collapse of ``text_class`` is measured against: ``(verdict, why, value)``.

    ``verdict``: ``"head"`` — the reference engine (this run, or its twin on the same prompts in the same
    proposal mode) shows the same collapse, so it is the drafter's own decay (e.g. a head trained for one
    step only); ``"engine"`` — the twin's later positions are healthy, or a sibling differing only in
    parallel sizes / CUDA graphs reaches a τ ``sibling_tau_gain`` higher: the engine loses them;
    ``"unknown"`` — nothing to compare with."""
    if inp.knobs.get("engine") == "reference":
        return "head", "this run is the reference engine (the yardstick itself)", None
    want = "greedy" if inp.sampling == "greedy" else inp.proposal_mode
    refs = [o for o in inp.oracle if o.text_class == text_class and o.mode == want]
    if refs:
        ratio = _later_ratio(list(refs[0].curve.a))
        if ratio is not None and ratio <= t["later_ratio_max"] + t["oracle_ratio_slack"]:
            return "head", f"the reference engine on the same head shows the same shape (ratio {ratio:.2f})", ratio
        if ratio is not None:
            return "engine", f"the reference engine on the same head keeps them (ratio {ratio:.2f})", ratio
    better = [s for s in inp.siblings if s.tau >= tau * (1 + t["sibling_tau_gain"])]
    if better:
        b = max(better, key=lambda s: s.tau)
        return "engine", f"sibling {b.label} (parallel sizes or CUDA graphs differ) reaches τ {b.tau:.2f}", b.tau
    return "unknown", "", None


def rule_recursive_collapse(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """a_1 healthy but mean(a_2..a_D) ≤ ``later_ratio_max`` · a_1: later draft steps fail.

    Whose fault decides the severity (calibrated on the H200 EAGLE / EAGLE-3 / tree runs of issue 24, whose
    heads decay this way on the reference engine too): **error** when the reference twin keeps later
    positions or a parallel/graph sibling reaches a higher τ (the engine loses them: a seed, position or
    buffer from the wrong step); **info** when the reference engine shows the same shape (the head's own
    decay — a head trained for the first step only, or a tree whose draft-token budget spends few nodes
    below depth 1); **warn** with nothing to compare, naming the twin run that would tell."""
    t = th["recursive_collapse"]
    out = []
    tree = (inp.knobs.get("speculative.eagle_topk") or 1) > 1
    for c in _judged(inp, th):
        cv = c.curve
        if cv.num_drafts < 2 or len(cv.a) < 2:
            continue
        a1 = cv.a[0]
        later = list(cv.a[1:])
        reach = cv.p[0] * cv.steps if cv.steps else None
        if reach is not None and reach < t["min_reach"]:
            continue
        mean_later = sum(later) / len(later)
        if a1 < t["a1_min"] or mean_later > t["later_ratio_max"] * a1:
            continue
        verdict, why, value = _collapse_yardstick(inp, c.text_class, cv.tau, t)
        head = (f"{c.text_class}: a_1 = {a1:.2f} is healthy but a_2..a_{cv.num_drafts} average {mean_later:.2f} "
                f"({mean_later / a1 * 100:.0f} % of a_1)")
        if verdict == "engine":
            sev, msg = "error", (f"{head}, and {why}: draft steps after the first see the wrong context "
                                 "(a seed, a position or a buffer taken from the wrong step).")
        elif verdict == "head":
            sev, msg = "info", (f"{head}; {why}: the drafter's own decay with depth (a head trained for the first "
                                "step only" + (", or a tree whose draft tokens leave few nodes below depth 1" if tree
                                               else "") + "), not an engine bug.")
        else:
            sev, msg = "warn", (f"{head}: either draft steps after the first see the wrong context (a seed, a "
                                "position or a buffer from the wrong step) or the head decays this way on its own"
                                + (" (a tree spends few draft tokens below depth 1)" if tree else "")
                                + " — run the reference twin (the same config with engine = \"reference\", same "
                                "workload): the same shape there is the head, healthy later positions there is the "
                                "engine.")
        out.append(Finding(
            "recursive_collapse", sev, msg,
            {"text_class": c.text_class, "a": [_r(x) for x in cv.a], "p": [_r(x) for x in cv.p],
             "a1": _r(a1), "mean_later_a": _r(mean_later), "ratio": _r(mean_later / a1),
             "cause": verdict, "yardstick": why or None, "yardstick_value": _r(value) if value is not None else None,
             "tree": tree}))
    return out


def rule_position_cliff(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """A draft position that is tried often and (almost) never accepted, on every class: a cliff, not decay.

    Natural decay leaves the conditional acceptance a_j = p_j / p_(j-1) well above zero. The rule looks
    for the first position j ≥ 2 whose a_j, pooled over ≥ ``min_classes`` classes, is ≤ ``a_max`` with at
    most ``a_class_max`` in any class, after ≥ ``min_reach`` tries per class (verify steps that accepted
    j − 1 drafts), while a_(j-1) pooled is ≥ ``a_before_min``. Measured (issue 24, one H200): the planted
    fault in SGLang 0.5.17's captured TARGET_VERIFY graph (odd verify rows' logits shifted) gave a_2 =
    1 / 222 over five classes at temperature 0.5 (one sampled match); the healthy EAGLE tree's weakest
    position gave a_3 = 11 / 123 — its depth-3 nodes are few, not wrong.
    """
    t = th["position_cliff"]
    cs = [c for c in _judged(inp, th) if c.curve.num_drafts >= 2 and c.curve.steps]
    if len(cs) < t["min_classes"]:
        return []
    for j in range(2, min(c.curve.num_drafts for c in cs) + 1):
        tries = {c.text_class: c.curve.p[j - 2] * c.curve.steps for c in cs}
        hits = {c.text_class: c.curve.p[j - 1] * c.curve.steps for c in cs}
        before = sum(tries.values()) / sum((c.curve.p[j - 3] if j > 2 else 1.0) * c.curve.steps for c in cs)
        if min(tries.values()) < t["min_reach"] or before < t["a_before_min"]:
            return []  # later positions are tried even less often
        pooled = sum(hits.values()) / sum(tries.values())
        if pooled > t["a_max"] or any(hits[k] / tries[k] > t["a_class_max"] for k in tries):
            continue
        k = j - 1
        msg = (f"draft position {j} was tried {round(sum(tries.values()))} times over {len(cs)} classes and accepted "
               f"{round(sum(hits.values()))} time(s) (a_{j} {pooled:.3f}), although position {k} is accepted "
               f"(a_{k} {before:.2f}): a cliff, not decay (decay leaves a_{j} well above zero). The verify step or the "
               f"draft handles draft position {j} wrong — its row of the captured graph, its position id, the tree / "
               "causal mask or the logits of that row. Bisect graph vs eager per component of the step "
               "(dynocell bisect run).")
        return [Finding("position_cliff", "error", msg,
                        {"position": j, "a_pooled": _r(pooled), "a_before": _r(before),
                         "tries": {c: round(v) for c, v in tries.items()},
                         "accepted": {c: round(v) for c, v in hits.items()}, "classes": len(cs)})]
    return []


def ladder_points(inp: DoctorInputs, th: dict[str, Any]) -> list[ClassCurve]:
    """The length ladder's rungs (``inp.ladder``, else the curves that carry a prompt length) with at least
    ``general.min_steps`` verify steps, shortest prompt first."""
    pts = inp.ladder or [c for c in inp.curves if c.prompt_tokens is not None]
    min_steps = th["general"]["min_steps"]
    return sorted((c for c in pts
                   if c.prompt_tokens is not None and (c.curve.steps is None or c.curve.steps >= min_steps)),
                  key=lambda c: c.prompt_tokens or 0.0)  # never None: filtered just above


def zero_acceptance_boundary(pts: list[ClassCurve], t: dict[str, Any]) -> tuple[float | None, float | None] | None:
    """(last length with acceptance, first length with none) when acceptance is 0 exactly beyond a boundary."""
    zero = [c.curve.accept_rate <= t["zero_accept_max"] for c in pts]
    if not any(zero) or all(zero):
        return None
    first = zero.index(True)
    if not all(zero[first:]):
        return None
    if any(c.curve.accept_rate < t["below_accept_min"] for c in pts[:first]):
        return None
    return pts[first - 1].prompt_tokens, pts[first].prompt_tokens


def rule_zero_past_length(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    t = th["zero_past_length"]
    pts = ladder_points(inp, th)
    b = zero_acceptance_boundary(pts, t) if len(pts) >= 2 else None
    if b is None:
        return []
    return [Finding(
        "zero_past_length", "error",
        f"acceptance is exactly 0 for prompts of {b[1]:.0f} tokens and longer, and healthy up to {b[0]:.0f}: "
        "the draft's max length or position scaling stops between them.",
        {"last_length_with_acceptance": _r(b[0], 1), "first_length_without": _r(b[1], 1),
         "lengths": [_r(c.prompt_tokens, 1) for c in pts], "accept_rate": [_r(c.curve.accept_rate) for c in pts],
         "tau": [_r(c.curve.tau) for c in pts]})]


def _spearman(x: Sequence[float], y: Sequence[float]) -> float:
    def ranks(v: Sequence[float]) -> list[float]:
        order = sorted(range(len(v)), key=lambda i: v[i])
        r = [0.0] * len(v)
        i = 0
        while i < len(order):
            j = i
            while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
                j += 1
            for k in range(i, j + 1):
                r[order[k]] = (i + j) / 2
            i = j + 1
        return r

    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    num = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    den = math.sqrt(sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry))
    return num / den if den else 0.0


def rule_depth_decay(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    t = th["depth_decay"]
    pts = ladder_points(inp, th)
    lengths = sorted({c.prompt_tokens for c in pts if c.prompt_tokens is not None})  # all (ladder_points)
    if len(lengths) < t["min_points"]:
        return []
    if zero_acceptance_boundary(pts, th["zero_past_length"]) is not None:
        return []  # the sharper zero_past_length finding explains it
    from dynocell.runbooks.doctor_outputs import rule_length_cliff

    if rule_length_cliff(inp, th):
        return []  # a cliff at one boundary is a bug, not the drafter's natural decay (length_cliff says so)
    # Mean τ per distinct length (classes at the same rung are averaged).
    by_len = {L: [c.curve.tau for c in pts if c.prompt_tokens == L] for L in lengths}
    taus = [sum(v) / len(v) for v in by_len.values()]
    drop = 1 - taus[-1] / taus[0] if taus[0] else 0.0
    rho = _spearman(lengths, taus)
    if drop < t["drop_min"] or rho > t["rank_corr_max"]:
        return []
    return [Finding(
        "depth_decay", "warn",
        f"τ falls from {taus[0]:.2f} at {lengths[0]:.0f} prompt tokens to {taus[-1]:.2f} at {lengths[-1]:.0f} "
        f"({drop * 100:.0f} % drop, Spearman ρ {rho:.2f}): a gradual decay, no cliff and no zero past a boundary — "
        "the drafter's nature (it predicts less well as the context it conditions on grows), not a bug"
        + _gate_text(inp, lengths, taus) + ". Only a decay much steeper than the "
        "drafter's training data explains points at position scaling or a truncated draft cache.",
        {"lengths": [_r(L, 1) for L in lengths], "tau": [_r(x) for x in taus], "drop": _r(drop), "spearman": _r(rho),
         **length_crossover(inp, lengths, taus)})]


def rule_acceptance_decay(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """τ falls gradually over one server's life: ``inp.acceptance_windows`` (one log's logging intervals, each
    with its τ and token counts, vLLM's per-interval ``SpecDecoding metrics`` lines) in order, at least
    ``min_windows`` spanning at least ``min_span_s`` (when the lines carry times), τ falling with time
    (Spearman ρ ≤ ``rank_corr_max``), the last third of the windows ≥ ``drop_min`` below the first third,
    the pooled accept rates of the two thirds ≥ ``z_min`` standard errors apart (drafted tokens counted as
    independent, which overstates z; hence the high bar), and no single step between windows carrying more
    than ``max_step_share`` of the fall (a step is a change of workload, not a decay). The cause lives in the
    server's state (a cache or a pool that grows with uptime), since only a restart resets it."""
    t = th["acceptance_decay"]
    ws = [w for w in inp.acceptance_windows if w.get("drafted") and w.get("tau") is not None]
    if len(ws) < t["min_windows"]:
        return []
    offs = [w.get("offset_s") for w in ws]
    first, last = offs[0], offs[-1]
    span = float(last) - float(first) if first is not None and last is not None and None not in offs else None
    if span is not None and span < t["min_span_s"]:
        return []
    taus = [float(w["tau"]) for w in ws]
    rho = _spearman(list(range(len(taus))), taus)
    third = len(ws) // 3
    first, last = ws[:third], ws[-third:]
    tau0, tau1 = (sum(float(w["tau"]) for w in g) / len(g) for g in (first, last))
    drop = 1.0 - tau1 / tau0
    a0, n0 = sum(w["accepted"] for w in first), sum(w["drafted"] for w in first)
    a1, n1 = sum(w["accepted"] for w in last), sum(w["drafted"] for w in last)
    pooled = (a0 + a1) / (n0 + n1)
    se = math.sqrt(pooled * (1 - pooled) * (1 / n0 + 1 / n1)) if 0 < pooled < 1 else 0.0
    z = (a0 / n0 - a1 / n1) / se if se else 0.0
    fall = taus[0] - taus[-1]
    biggest = max(taus[i] - taus[i + 1] for i in range(len(taus) - 1))
    if rho > t["rank_corr_max"] or drop < t["drop_min"] or z < t["z_min"] or fall <= 0 \
            or biggest > t["max_step_share"] * fall:
        return []
    over = f" over {span / 3600:.1f} h" if span is not None else ""
    msg = (f"τ falls from {tau0:.2f} to {tau1:.2f} (−{drop:.1%}, first vs last third of {len(ws)} acceptance "
           f"windows{over} of one server, Spearman ρ = {rho:.2f}, accept rate {a0 / n0:.3f} → {a1 / n1:.3f}, "
           f"z = {z:.1f}), gradually (no step carries more than {biggest / fall:.0%} of it): a decay within the "
           "server's life, not a weak drafter — state that grows with uptime (prefix-cache blocks the drafter "
           "reuses, a pool or buffer that is never reset); a restart resets it. Compare windows at the same load.")
    return [Finding("acceptance_decay", "warn", msg,
                    {"windows": len(ws), "span_s": span, "tau_first": _r(tau0), "tau_last": _r(tau1),
                     "drop": _r(drop), "spearman": _r(rho), "z": _r(z, 2), "max_step_share": _r(biggest / fall)})]


def rule_length_breakeven(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Speculation pays at short contexts and stops paying from some length on, while τ neither falls off
    a cliff nor decays enough for ``depth_decay``: the verify step grows with the context faster than τ
    pays for it (per length bucket: τ < verify step / plain step, :func:`length_crossover`). Policy: gate
    speculation by length. Needs a ladder (longest ≥ ``min_span`` × shortest) whose rungs carry their own verify
    step (the acceptance step's length buckets): classes of a little different prompt length are no ladder, and
    one run-wide step cannot show a step that grows. Silent when it pays at no length (``no_net_win`` speaks)
    or at every one."""
    t = th["length_breakeven"]
    pts = ladder_points(inp, th)
    lengths = sorted({c.prompt_tokens for c in pts if c.prompt_tokens is not None})  # all (ladder_points)
    if (len(lengths) < t["min_points"] or lengths[-1] < t["min_span"] * lengths[0]
            or not all(c.step_ms for c in pts) or zero_acceptance_boundary(pts, th["zero_past_length"]) is not None):
        return []  # a real ladder with each rung's own verify step, or nothing to say
    from dynocell.runbooks.doctor_outputs import rule_length_cliff

    if rule_length_cliff(inp, th) or rule_depth_decay(inp, th):
        return []  # those findings already carry the crossover
    taus = [sum(c.curve.tau for c in pts if c.prompt_tokens == L) / sum(1 for c in pts if c.prompt_tokens == L)
            for L in lengths]
    c = length_crossover(inp, lengths, taus)
    cross = c.get("crossover_length")
    if cross is None or cross <= lengths[0]:
        return []
    return [Finding(
        "length_breakeven", "warn",
        f"τ by prompt length {', '.join(f'{L:.0f}: {x:.2f}' for L, x in zip(lengths, taus))} holds up, but from "
        f"{cross:.0f} tokens on it is below the break-even {c['crossover_breakeven_tau']:.2f} (verify step / plain "
        "step): speculation stops paying there — the verify step grows with the context. A drafter's nature, not a "
        f"bug: gate speculation by length (off from {cross:.0f} prompt tokens).",
        {"lengths": [_r(L, 1) for L in lengths], "tau": [_r(x) for x in taus], **c})]


def length_crossover(inp: DoctorInputs, lengths: list[float], taus: list[float]) -> dict[str, Any]:
    """With measured step times: the break-even τ (verify step / plain step) and the prompt length from which
    τ stays below it (speculation stops paying there; :func:`dynocell.engine.length_curve.with_breakeven`'s
    crossover); {} without step times. A ladder rung that carries its own verify step (``step_ms``, the
    acceptance step's length buckets) has its own break-even, since the verify step grows with the context;
    ``breakeven_tau`` is then the list per length."""
    if not inp.plain_step_ms:
        return {}
    own = {c.prompt_tokens: c.step_ms for c in inp.ladder if c.step_ms}
    if not own and not inp.spec_step_ms:
        return {}
    bes = [(own.get(L) or inp.spec_step_ms or 0.0) / inp.plain_step_ms for L in lengths]
    if not all(bes):
        return {}
    i = len(lengths)
    while i > 0 and taus[i - 1] < bes[i - 1]:
        i -= 1
    out: dict[str, Any] = {"breakeven_tau": [_r(b) for b in bes] if own else _r(bes[0]),
                           "crossover_length": _r(lengths[i], 1) if i < len(lengths) else None}
    if i < len(lengths):
        out["crossover_breakeven_tau"] = _r(bes[i])
    return out


def _gate_text(inp: DoctorInputs, lengths: list[float], taus: list[float]) -> str:
    """The policy the decay calls for: gate speculation by length from the crossover on — or, when τ is below
    the break-even already at the shortest length, say that it pays at no measured length (a gate by length
    would suggest it pays below it)."""
    c = length_crossover(inp, lengths, taus)
    cross = c.get("crossover_length")
    if cross is None:
        return ": gate speculation by length"
    if cross <= lengths[0]:
        return (f"; speculation pays at no measured length (τ is below the break-even "
                f"{c['crossover_breakeven_tau']:.2f} from the shortest prompt on), so there is no length to gate by")
    return (f": gate speculation by length (from {cross:.0f} tokens on τ is below the break-even "
            f"{c['crossover_breakeven_tau']:.2f})")


def rule_scales_with_parallel(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    t = th["scales_with_parallel"]
    me, sibs = self_and_siblings(inp)
    if me is None:
        return []
    out = []
    knobs = sorted({k for s in sibs for k in differing_knobs(me.knobs, s.knobs, include_env=True)
                    if k.startswith("parallel.")})
    for knob in knobs:
        group = [s for s in sibs if differing_knobs(me.knobs, s.knobs, include_env=True) == [knob]]
        if not group:
            continue
        members = sorted([me] + group, key=lambda s: (s.knobs.get(knob) or 1))
        smallest = members[0]
        my_size = me.knobs.get(knob) or 1
        if smallest is me or (smallest.knobs.get(knob) or 1) >= my_size:
            continue
        drop = 1 - me.tau / smallest.tau if smallest.tau else 0.0
        if drop < t["drop_min"]:
            continue
        sizes = [s.knobs.get(knob) for s in members]
        taus = [_r(s.tau) for s in members]
        out.append(Finding(
            "scales_with_parallel", "error",
            f"τ {me.tau:.2f} at {knob} = {my_size} vs {smallest.tau:.2f} at {knob} = {smallest.knobs.get(knob)} "
            f"with everything else equal ({drop * 100:.0f} % lower): a size that the draft's parallel config does "
            f"not carry. Bisect: dynocell bisect plan <{knob}={smallest.knobs.get(knob)} config> <this config>.",
            {"knob": knob, "sizes": sizes, "tau": taus, "drop": _r(drop), "labels": [s.label for s in members]}))
    return out


def like_for_like_engine_tau(c: ClassCurve) -> tuple[float | None, bool]:
    """``(engine τ counted as the histogram counts, True when it still includes the prefill's token)``.

    SGLang's ``completion_tokens / spec_verify_ct`` (stored before issue 36 as
    ``breakeven.META_TAU_SOURCE_WITH_PREFILL``) counts the token sampled by the prefill, so it exceeds the
    histogram's τ by requests / verify steps (≈ 1/L relative, L output tokens per request). With the class's
    request records stored, that offset is taken off; without them the figure is returned as is, flagged."""
    from dynocell.engine.breakeven import META_TAU_SOURCE_WITH_PREFILL

    if c.engine_tau is None or c.engine_source != META_TAU_SOURCE_WITH_PREFILL or not c.curve.steps:
        return c.engine_tau, False
    if c.requests:
        return c.engine_tau - len(c.requests) / c.curve.steps, False
    return c.engine_tau, True


def _counters_disagree(inp: DoctorInputs, th: dict[str, Any]) -> list[ClassCurve]:
    """Classes whose engine-reported τ (like for like: :func:`like_for_like_engine_tau`) and client-histogram
    τ differ by more than ``definitions_mismatch.rel_diff_max``; a figure that still counts the prefill's
    token is not suspect for a difference that token explains (``prefill_tolerance``)."""
    from dynocell.engine.acceptance import relative_diff

    lim = th["definitions_mismatch"]["rel_diff_max"]
    out = []
    for c in inp.curves:
        tau, with_prefill = like_for_like_engine_tau(c)
        if tau is None or not c.curve.steps or relative_diff(c.curve.tau, tau) <= lim:
            continue
        if (with_prefill and _prefill_explains(c, tau, th)) or _truncation_explains(c, tau):
            continue
        out.append(c)
    return out


def _truncation_explains(c: ClassCurve, engine_tau: float) -> bool:
    """True when an engine τ above the histogram's is within what each request's last verify step can add.

    The engine counts the drafts accepted in a request's last verify step before ``max_tokens`` (or a stop
    string) cuts that step's tokens from the output; the client's histogram sees only the tokens it got.
    vLLM 0.26.0 does so by construction: ``Scheduler.update_from_output`` records ``num_accepted`` into
    ``SpecDecodingStats`` before ``_update_request_with_output`` trims ``new_token_ids`` at the stop
    (``vllm/v1/core/sched/scheduler.py``). That adds at most ``num_drafts`` tokens per request, so the
    excess ``(engine τ − histogram τ) × steps`` must lie in ``(0, requests × num_drafts]``. Needs the
    class's request records (their count); without them nothing is explained."""
    if not c.requests or not c.curve.steps or not c.curve.num_drafts:
        return False
    extra = (engine_tau - c.curve.tau) * c.curve.steps  # accepted tokens the engine counted beyond the client
    return 0 < extra <= len(c.requests) * c.curve.num_drafts + 1e-9


def _prefill_explains(c: ClassCurve, engine_tau: float, th: dict[str, Any]) -> bool:
    """True when an engine τ that still counts the prefill's token (requests unknown) is above the
    histogram's by no more than one token per request could make it: at most ``steps /
    prefill_min_steps_per_request`` extra tokens over the class's ``steps`` verify steps (a class of shorter
    requests is too short to judge)."""
    per_req = th["definitions_mismatch"]["prefill_min_steps_per_request"]
    extra = (engine_tau - c.curve.tau) * c.curve.steps  # tokens the engine counted beyond the histogram
    return 0 <= extra <= c.curve.steps / per_req + 1e-9


def rule_no_net_win(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """τ is fine but speculative decode is no faster than plain decode.

    The first explanation is the cost of a speculative step: with a verify step
    costing ``c`` plain steps, speculation pays only when τ > c (break-even).
    Field report 004 (GLM-5.3-Flash W4A16, vLLM fork, expert offload) measured
    τ 3.83–4.90 with D = 4 and decode flat (9.6–11.2 vs 10.0 tok/s); the
    counters were not shown wrong. Its 44 % pointwise share of a plain step
    alone would make a 5-token verify step about 2.8 plain steps (below τ), so
    the step cost there also holds the offload's expert gathers; the verify
    step itself was not profiled. The acceptance accounting is suspected only when the engine's own
    counters and the client's accepted-drafts histograms disagree
    (``accounting_suspect``), never from τ's size alone.
    """
    t = th["no_net_win"]
    tau = inp.overall_tau()
    if tau is None or tau < t["tau_min"]:
        return []
    speedup = None
    if inp.spec_decode_tok_s and inp.plain_decode_tok_s:
        speedup = inp.spec_decode_tok_s / inp.plain_decode_tok_s
    elif inp.spec_step_ms and inp.plain_step_ms:
        speedup = tau * inp.plain_step_ms / inp.spec_step_ms
    if speedup is None or speedup > t["speedup_max"]:
        return []
    if inp.breakeven_noise and abs(speedup - 1.0) <= inp.breakeven_noise:
        return []  # within the measured noise: break-even says "within noise", not "does NOT pay"
    interval = inp.breakeven.get("interval")
    if isinstance(interval, (list, tuple)) and len(interval) == 2 and interval[1] >= 0:
        return []  # issue 33: the margin's interval reaches 0, so break-even says "inconclusive", not "does NOT pay"
    if inp.contended and not inp.allow_contended:
        return []  # issue 33: a step slow because the host was loaded is not the glue's fault (left out)
    d = max((c.curve.num_drafts for c in inp.curves), default=0)
    measured = bool(inp.spec_step_ms and inp.plain_step_ms)
    step_cost = (inp.spec_step_ms / inp.plain_step_ms) if (  # plain steps per verify step
        inp.spec_step_ms and inp.plain_step_ms) else tau / speedup
    disagree = _counters_disagree(inp, th)
    ev = {"tau": _r(tau), "speedup": _r(speedup), "step_cost_ratio": _r(step_cost), "breakeven_tau": _r(step_cost),
          "margin": _r(speedup - 1.0), "spec_decode_tok_s": _r(inp.spec_decode_tok_s, 2),
          "plain_decode_tok_s": _r(inp.plain_decode_tok_s, 2), "spec_step_ms": _r(inp.spec_step_ms),
          "plain_step_ms": _r(inp.plain_step_ms), "num_drafts": d, "step_cost_measured": measured,
          "accounting_suspect": bool(disagree)}
    msg = (f"τ {tau:.2f} but speculative decode is {speedup:.2f}× plain (margin {(speedup - 1) * 100:+.0f} %): "
           f"a verify step costs {step_cost:.2f} plain steps, so τ must exceed {step_cost:.2f} to pay.")
    if measured:
        msg += (f" Measured: verify step {inp.spec_step_ms:.2f} ms vs plain step {inp.plain_step_ms:.2f} ms; "
                "the step's "
                "cost, not the acceptance, decides the win.")
    else:
        msg += (" First measure one verify step against one plain step at this concurrency (profile both, or "
                "compare step times): the break-even τ is their ratio.")
    if disagree:
        c = disagree[0]
        msg += (f" The engine's counters and the client histograms also disagree ({c.text_class}: engine τ "
                f"{c.engine_tau:.2f} vs histogram τ {c.curve.tau:.2f}): audit the acceptance accounting as well.")
        ev["engine_tau"], ev["histogram_tau"] = _r(c.engine_tau), _r(c.curve.tau)
    else:
        msg += (" Engine counters and client histograms do not disagree, so treat the acceptance as real; the "
                f"likely cost: {step_cost_causes(inp.knobs, d)}.")
    return [Finding("no_net_win", "warn", msg, ev)]


def _extra_args_text(knobs: dict[str, Any]) -> str:
    extra = knobs.get("extra_args") or ()
    return " ".join(str(a) for a in (extra if isinstance(extra, (list, tuple)) else [extra])).lower()


#: Model names that say mixture-of-experts (Qwen "30B-A3B", Mixtral, DeepSeek V2+/R1, gpt-oss, GLM 4.5+, Kimi K2).
_MOE_NAME = re.compile(r"(?i)\bmoe\b|-a\d+(?:\.\d+)?b\b|mixtral|deepseek-(?:v[2-9]|r1)|gpt-oss"
                       r"|glm-(?:4\.5|4\.6|5)|kimi-k2")


def step_cost_causes(knobs: dict[str, Any], num_drafts: int) -> str:
    """What makes a verify step expensive, named only where the config says it can apply (issue 22).

    Always: per-token work that grows with the D + 1 positions verified (norms, activations, sampling).
    Expert traffic only with expert parallelism or MoE flags; offload only with an offload flag; collectives
    only with tp/pp/dcp > 1; the drafter's own forward passes only for a draft model or a hidden-state drafter.
    """
    extra = _extra_args_text(knobs)
    causes = [f"per-token work that grows with the {num_drafts + 1} positions verified per step (norms, "
              "activations, sampling — pointwise glue)"]
    family = algorithm_family(knobs)
    steps = knobs.get("speculative.num_steps")
    if family in ("draft_model", "hidden_state"):
        causes.append(f"the drafter's own {steps or num_drafts} forward pass(es) per step")
    moe_name = bool(_MOE_NAME.search(str(knobs.get("model_path") or "")))
    if (knobs.get("parallel.ep_size") or 1) > 1 or "expert" in extra or "moe" in extra or moe_name:
        causes.append(f"expert routing and dispatch for every verified token ({'an MoE model, ' if moe_name else ''}"
                      f"ep_size {knobs.get('parallel.ep_size') or 1})")
    if "offload" in extra:
        causes.append("weights moved by offload on each verify step")
    par = {k.split(".")[1]: v for k, v in knobs.items() if k in ("parallel.tp_size", "parallel.pp_size",
                                                                 "parallel.dcp_size") and (v or 1) > 1}
    if par:
        causes.append("collectives over " + ", ".join(f"{k} {v}" for k, v in sorted(par.items())))
    return "; ".join(causes)


def rule_definitions_mismatch(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    from dynocell.engine.acceptance import relative_diff

    t = th["definitions_mismatch"]
    out = []
    for c in inp.curves:
        engine, with_prefill = like_for_like_engine_tau(c)
        if engine is None or not c.curve.steps:
            continue
        diff = relative_diff(c.curve.tau, engine)
        if diff <= t["rel_diff_max"]:
            continue
        if _truncation_explains(c, engine):
            out.append(Finding(
                "definitions_mismatch", "info",
                f"{c.text_class}: engine τ {engine:.3f} ({c.engine_source or 'engine'}) vs client histogram τ "
                f"{c.curve.tau:.3f}: {diff * 100:.1f} % apart, within what the requests' last verify steps "
                f"explain — the engine counts drafts accepted in a request's last step before max_tokens or a "
                f"stop cuts them from the output (at most {c.curve.num_drafts} per request, {len(c.requests or ())} "
                "requests). Not a counter fault; longer requests shrink the gap.",
                {"text_class": c.text_class, "client_tau": _r(c.curve.tau), "engine_tau": _r(engine),
                 "rel_diff": _r(diff), "explained_by": "counts the last step's drafts before the stop cuts them",
                 "alternatives": {}}))
            continue
        if with_prefill and _prefill_explains(c, engine, th):
            out.append(Finding(
                "definitions_mismatch", "info",
                f"{c.text_class}: engine τ {engine:.3f} ({c.engine_source}) vs client histogram τ "
                f"{c.curve.tau:.3f}: {diff * 100:.1f} % apart, within what the prefill's token explains — SGLang's "
                "completion_tokens / spec_verify_ct counts the token sampled by the prefill, so it exceeds the "
                "histogram's τ by requests / verify steps (≈ 1/L relative, L output tokens per request). Not a "
                "counter fault; newer runs store the engine τ without that token.",
                {"text_class": c.text_class, "client_tau": _r(c.curve.tau), "engine_tau": _r(engine),
                 "rel_diff": _r(diff), "explained_by": "counts the prefill's token", "alternatives": {}}))
            continue
        alts: dict[str, float] = {"no bonus token (τ − 1)": c.curve.tau - 1.0}
        h = c.curve.histogram
        if h and sum(h) > h[0]:
            accepted = sum(k * x for k, x in enumerate(h))
            alts["skips verify steps with 0 accepted drafts"] = 1.0 + accepted / (sum(h) - h[0])
        alts["accept rate × D + 1 over proposed positions"] = 1.0 + c.curve.accept_rate * c.curve.num_drafts
        explained = [name for name, v in alts.items() if relative_diff(v, engine) <= t["alt_match"]]
        explained = [n for n in explained if not n.startswith("accept rate")]  # equals τ by definition
        msg = (f"{c.text_class}: engine τ {engine:.3f} ({c.engine_source or 'engine'}) vs client histogram "
               f"τ {c.curve.tau:.3f}: {diff * 100:.1f} % apart (> {t['rel_diff_max'] * 100:.0f} %).")
        msg += (f" The engine's figure matches an average that {explained[0]}." if explained else
                " Find the engine's definition before comparing numbers across engines.")
        out.append(Finding("definitions_mismatch", "warn", msg,
                           {"text_class": c.text_class, "client_tau": _r(c.curve.tau), "engine_tau": _r(engine),
                            "rel_diff": _r(diff), "explained_by": explained[0] if explained else None,
                            "alternatives": {k: _r(v) for k, v in alts.items()}}))
    return out


def fit_single_p(tau: float, num_drafts: int) -> float:
    """The one p whose independence curve has the measured τ: Σ_{i=1..D} p^i = τ − 1 (bisection, 60 steps).

    Unlike p = p_1, this p also fits a drafter's ordinary decay with depth (a_i falling slowly), so only
    a shape no single p explains is left as a deviation."""
    target = min(max(tau - 1.0, 0.0), float(num_drafts))
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(1, num_drafts + 1)) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


def rule_independence(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Per-position acceptance that no single p explains (issue 22: calibrated on healthy curves).

    Fit p̂ with Σ p̂^i = τ − 1 (:func:`fit_single_p`) and compare every p_i with p̂^i. A finding needs the
    largest gap to be both large (≥ ``abs_dev_min``; healthy curves from the reference engine, SGLang 0.5.17
    and vLLM 0.26.0 reach 0.14) and real (≥ ``z_min`` standard errors of a proportion over N steps; curves
    without a step count are judged on the gap alone). Later positions below the fit → warn (they fail
    abnormally); above it → info (acceptance comes in bursts).
    """
    from dynocell.engine.acceptance import expected_tau_independent

    t = th["independence"]
    out = []
    for c in _judged(inp, th):
        cv = c.curve
        if cv.num_drafts < t["min_drafts"] or not cv.p or cv.p[0] <= 0:
            continue
        ph = fit_single_p(cv.tau, cv.num_drafts)
        devs = [cv.p[i] - ph ** (i + 1) for i in range(cv.num_drafts)]
        i = max(range(len(devs)), key=lambda j: abs(devs[j]))
        q = ph ** (i + 1)
        z = abs(devs[i]) / math.sqrt(max(q * (1 - q), 1e-9) / cv.steps) if cv.steps else None
        if abs(devs[i]) < t["abs_dev_min"] or (z is not None and z < t["z_min"]):
            continue
        low = devs[-1] < 0
        pred = expected_tau_independent(cv.p[0], cv.num_drafts)
        same = _oracle_same_shape(inp, c.text_class, i, devs[i], t)
        out.append(Finding(
            "independence", "warn" if low and not same else "info",
            f"{c.text_class}: no single p explains the curve p = {', '.join(f'{x:.2f}' for x in cv.p)} "
            f"(τ {cv.tau:.2f}): the best single p = {ph:.2f} predicts p_{i + 1} = {q:.2f}, measured {cv.p[i]:.2f} "
            f"({devs[i]:+.2f}" + (f", {z:.1f} standard errors" if z is not None else "") + "); "
            + ("later positions fail far more often than the first — read a_i position by position."
               if low else "acceptance comes in long bursts.")
            + (f" {same[:1].upper()}{same[1:]}: the drafter's own shape, not the engine's." if same else ""),
            {"text_class": c.text_class, "tau": _r(cv.tau), "tau_independent": _r(pred), "p1": _r(cv.p[0]),
             "p_fit": _r(ph), "position": i + 1, "deviation": _r(devs[i]), "z": _r(z, 2),
             "num_drafts": cv.num_drafts, "head_shape": same}))
    return out


def _oracle_same_shape(inp: DoctorInputs, text_class: str, i: int, dev: float, t: dict[str, Any]) -> str | None:
    """Why a deviation from one p is the drafter's own shape, or None: this run is the reference engine, or the
    reference twin's curve (same class, same proposal mode) deviates the same way at the same position by at
    least half ``abs_dev_min`` (issue 24: the H200 EAGLE-3 and tree heads decay like this on the CPU oracle)."""
    if inp.knobs.get("engine") == "reference":
        return "this run is the reference engine"
    want = "greedy" if inp.sampling == "greedy" else inp.proposal_mode
    for o in inp.oracle:
        cv = o.curve
        if o.text_class != text_class or o.mode != want or len(cv.p) <= i or cv.num_drafts < 1:
            continue
        ph = fit_single_p(cv.tau, cv.num_drafts)
        odev = cv.p[i] - ph ** (i + 1)
        if odev * dev > 0 and abs(odev) >= t["abs_dev_min"] / 2:
            return f"the reference engine on the same head deviates the same way at p_{i + 1} ({odev:+.2f})"
    return None


def _tokens(inp: DoctorInputs, min_tokens: int = 16) -> tuple[list[Any], str]:
    """What to count for the garbage rule: token ids when known, else words of the texts.

    Characters stand in for words only for text that is mostly CJK (no spaces to split on);
    short English-like samples are not judged by characters, where spaces and a few letters
    always dominate.
    """
    if inp.output_ids:
        return [t for ids in inp.output_ids for t in ids], "token ids"
    words = [w for txt in inp.output_texts for w in txt.split()]
    if len(words) >= min_tokens:
        return words, "words"
    chars = [ch for txt in inp.output_texts for ch in txt if not ch.isspace()]
    if chars and sum(1 for ch in chars if ord(ch) >= 0x2E80) / len(chars) > 0.5:
        return chars, "characters"
    return words, "words"


def rule_garbage_output(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    t = th["garbage_output"]
    toks, unit = _tokens(inp, int(t["min_tokens"]))
    if len(toks) < t["min_tokens"]:
        return []
    counts = Counter(toks)
    n = len(toks)
    top = counts.most_common(int(t["topk"]))
    top1_share = top[0][1] / n
    topk_share = sum(c for _, c in top) / n
    zero_share = counts.get(0, 0) / n if unit == "token ids" else 0.0
    reason = None
    if zero_share >= t["zero_id_share"]:
        reason = f"token id 0 is {zero_share * 100:.0f} % of the output"
    elif top1_share >= t["top1_share"]:
        reason = f"one {unit[:-1]} ({top[0][0]!r}) is {top1_share * 100:.0f} % of the output"
    elif topk_share >= t["topk_share"]:
        reason = f"{len(top)} {unit} make up {topk_share * 100:.0f} % of the output"
    if reason is None:
        return []
    tau = inp.overall_tau()
    healthy = tau is not None and tau >= t["healthy_tau"]
    msg = (f"generated output{f' ({inp.outputs_of})' if inp.outputs_of else ''} is degenerate: {reason} "
           f"({n} {unit}, {len(counts)} distinct)."
           + (f" Acceptance τ {tau:.2f} looks healthy only because target and draft agree on degenerate text: "
              "compare with the plain twin's output on the same prompts — degenerate there too means the weights "
              "(dummy or broken), clean there means the speculative path garbles the target." if healthy else ""))
    return [Finding("garbage_output", "error" if healthy else "warn", msg,
                    {"tokens": n, "distinct": len(counts), "top1_share": _r(top1_share), "topk_share": _r(topk_share),
                     "zero_id_share": _r(zero_share), "tau": _r(tau), "top_tokens": [str(k) for k, _ in top],
                     "outputs_of": inp.outputs_of})]



RULES = {
    "dummy_weights": rule_dummy_weights,
    "pinned_near_one": rule_pinned_near_one,
    "recursive_collapse": rule_recursive_collapse,
    "position_cliff": rule_position_cliff,
    "zero_past_length": rule_zero_past_length,
    "depth_decay": rule_depth_decay,
    "acceptance_decay": rule_acceptance_decay,
    "length_breakeven": rule_length_breakeven,
    "scales_with_parallel": rule_scales_with_parallel,
    "graph_vs_eager": rule_graph_vs_eager,
    "no_net_win": rule_no_net_win,
    "definitions_mismatch": rule_definitions_mismatch,
    "independence": rule_independence,
    "garbage_output": rule_garbage_output,
}
# Issue 22's shapes, one module per family (each rule documented there).
RULES.update(COMPARE_RULES)
RULES.update(ORACLE_RULES)
RULES.update(OUTPUT_RULES)
RULES.update(RUNTIME_RULES)


def _entry_fits(entry: Any, knobs: dict[str, Any]) -> bool:
    """Whether a runbook entry may be linked for a run with flattened config ``knobs``.

    Without knobs (plain data) every entry naming the rule is linked. With them,
    an entry scoped to other engines (``engines``) or whose ``applies_to``
    selects a different config (e.g. expert offload on a dense model) is left
    out, so the doctor does not send the operator the wrong way.
    """
    if not knobs:
        return True
    from dynocell.runbooks.knowledge import selector_matches

    engine = knobs.get("engine")
    if entry.engines and engine and engine not in entry.engines:
        return False
    return not entry.applies_to or selector_matches(entry.applies_to, knobs)


def diagnose_inputs(inputs: DoctorInputs, thresholds: dict[str, Any] | None = None,
                    knowledge: Any | None = None) -> list[Finding]:
    """Run every rule over ``inputs``; findings carry the slugs of entries that name their rule.

    Pure apart from reading the bundled thresholds and entries (``thresholds``
    and ``knowledge`` override them). Findings are ordered error → warn → info,
    then by rule order. A config that loads random weights skips :data:`WEIGHT_DEPENDENT`.
    """
    from dynocell.runbooks.knowledge import bundled_knowledge

    th = thresholds or load_thresholds()
    kn = knowledge or bundled_knowledge()
    out: list[Finding] = []
    random_weights = dummy_weights(inputs.knobs) is not None
    for rule, fn in RULES.items():
        if random_weights and rule in WEIGHT_DEPENDENT:
            continue
        for f in fn(inputs, th):
            slugs = [s for s in kn.for_rule(rule) if _entry_fits(kn.entries[s], inputs.knobs)]
            out.append(Finding(f.rule, f.severity, f.message, f.evidence, slugs))
    order = list(RULES)
    return sorted(out, key=lambda f: (-SEVERITIES.index(f.severity), order.index(f.rule)))


# ------------------------------------------------------------------ from plain data

def curve_from_dict(d: dict[str, Any]) -> Any:
    """A Curve from ``{histogram: [...]}``, ``{p: [...], steps: N}`` or ``{tau, accept_rate, num_drafts}``."""
    return _curve_from_row(d)


def inputs_from_dict(d: dict[str, Any]) -> DoctorInputs:
    """:class:`DoctorInputs` from plain JSON data (the shape of ``tests/data/curves/*.json``).

    Keys: ``curves`` / ``ladder`` (lists of ``{text_class, histogram | p + steps,
    prompt_tokens, engine_tau, engine_source, step_ms}``), ``knobs`` (flattened config),
    ``siblings`` (``{label, knobs, tau}``), ``oracle`` (``{text_class, mode, histogram | p}``),
    ``spec_decode_tok_s``, ``plain_decode_tok_s``, ``spec_step_ms``, ``plain_step_ms``, ``breakeven_noise``,
    ``output_ids``, ``output_texts``, ``sampling``, ``proposal_mode``; issue 22: ``baselines`` (``{label, build,
    curves, decode_tok_s}``), ``others`` (``{label, knobs, tau, tau_by_class, decode_tok_s}``), ``concurrency``
    (``{concurrency, spec_tok_s, plain_tok_s}``), ``mismatches`` (``{prompt, position, spec_token, plain_token,
    margin}``), ``mode_outputs``, ``mode_texts``, ``engine_rates``, ``log``, ``gauges``, ``profile``, ``windows``
    (``{target_context, target_source, draft_window, draft_source}``); issue 35: ``accept_lengths``
    (``{text_class, tau, source}``, τ with D unknown), ``acceptance_windows`` (``{line, offset_s, tau, accepted,
    drafted}``, one log's logging intervals in order), ``draft_model`` (``{head, architectures, source}``).
    """
    def cc(x: dict[str, Any]) -> ClassCurve:
        return ClassCurve(x.get("text_class", "all"), curve_from_dict(x), x.get("prompt_tokens"),
                          x.get("engine_tau"), x.get("engine_source"), x.get("step_ms"),
                          tuple(x["requests"]) if x.get("requests") else None)

    return DoctorInputs(
        curves=[cc(x) for x in d.get("curves", [])],
        ladder=[cc(x) for x in d.get("ladder", [])],
        knobs=dict(d.get("knobs", {})),
        siblings=[Sibling(x.get("label", f"sibling {i}"), dict(x["knobs"]), float(x["tau"]),
                          requests=tuple(x.get("requests") or ()), context=dict(x.get("context") or {}))
                  for i, x in enumerate(d.get("siblings", []))],
        spec_decode_tok_s=d.get("spec_decode_tok_s"), plain_decode_tok_s=d.get("plain_decode_tok_s"),
        spec_step_ms=d.get("spec_step_ms"), plain_step_ms=d.get("plain_step_ms"),
        breakeven_noise=d.get("breakeven_noise"),
        output_ids=[list(x) for x in d.get("output_ids", [])], output_texts=list(d.get("output_texts", [])),
        outputs_of=d.get("outputs_of"),
        oracle=[OracleCurve(x.get("text_class", "all"), x["mode"], curve_from_dict(x),
                            tuple(x["requests"]) if x.get("requests") else None) for x in d.get("oracle", [])],
        sampling=d.get("sampling", "greedy"), proposal_mode=d.get("proposal_mode", "top1"),
        baselines=[Baseline(x.get("label", f"baseline {i}"), x.get("build"),
                            {c.get("text_class", "all"): curve_from_dict(c) for c in x.get("curves", [])},
                            x.get("decode_tok_s")) for i, x in enumerate(d.get("baselines", []))],
        others=[Sibling(x.get("label", f"other {i}"), dict(x.get("knobs", {})), float(x["tau"]),
                        dict(x.get("tau_by_class", {})), x.get("decode_tok_s"))
                for i, x in enumerate(d.get("others", []))],
        concurrency=[ConcurrencyPoint(int(x["concurrency"]), float(x["spec_tok_s"]), float(x["plain_tok_s"]),
                                      tuple(x.get("spec_requests") or ()), tuple(x.get("plain_requests") or ()))
                     for x in d.get("concurrency", [])],
        mismatches=[Mismatch(int(x.get("prompt", 0)), int(x["position"]), x.get("spec_token"), x.get("plain_token"),
                             x.get("margin"), x.get("margin_unknown")) for x in d.get("mismatches", [])],
        mode_outputs={k: [list(ids) for ids in v] for k, v in d.get("mode_outputs", {}).items()},
        mode_texts={k: list(v) for k, v in d.get("mode_texts", {}).items()},
        engine_rates=list(d.get("engine_rates", [])), log=dict(d.get("log", {})), gauges=dict(d.get("gauges", {})),
        profile=dict(d.get("profile", {})), windows=dict(d.get("windows", {})),
        accept_lengths=[dict(x) for x in d.get("accept_lengths", [])],
        acceptance_windows=[dict(x) for x in d.get("acceptance_windows", [])],
        draft_model=dict(d.get("draft_model", {})),
    )


# ------------------------------------------------------------------ from the store

def _curve_from_row(row: dict[str, Any]) -> Any:
    from dynocell.engine.acceptance import Curve

    if row.get("histogram") and len(row["histogram"]) >= 2:
        return Curve.from_histogram(row["histogram"])
    if row.get("p"):
        return Curve.from_positions(row["p"], steps=row.get("steps"))
    curve = Curve.from_summary(row["tau"], row.get("accept_rate"), row.get("num_drafts"))
    if row.get("steps"):
        import dataclasses

        curve = dataclasses.replace(curve, steps=int(row["steps"]))  # how much evidence, when the source said
    return curve


def curve_of(c: CurveRow) -> Any:
    """The :class:`~dynocell.engine.acceptance.Curve` of a stored curve (``db.runs.CurveRow``): from its
    histogram when it kept one, else its per-position p_k, else its τ and accept rate."""
    return _curve_from_row({"histogram": c.histogram, "p": [p.p_uncond for p in c.points],  # points by position
                            "steps": c.steps, "tau": c.tau, "accept_rate": c.accept_rate,
                            "num_drafts": c.num_drafts})


def _class_curves(store: Any, run_id: str) -> list[ClassCurve]:
    from dynocell.db import runs as db_runs

    # Acceptance bench rows are written just before each curve, class by class: pair them in order.
    queue: dict[str, list[Any]] = {}
    for b in db_runs.bench_rows(store, run_id):
        if b.text_class:
            queue.setdefault(b.text_class, []).append(b)
    out = []
    for c in db_runs.curves(store, run_id):
        q = queue.get(c.text_class, [])
        brow = q.pop(0) if q else None
        prompt = (brow.prompt_tokens / brow.num_requests) if brow and brow.num_requests else None
        out.append(ClassCurve(c.text_class, curve_of(c), prompt, c.engine_tau, c.engine_source,
                              requests=tuple(c.requests) if c.requests else None))
    return out


def _length_ladder(store: Any, run_id: str) -> list[ClassCurve]:
    """The acceptance step's length buckets (issue 22, shape 5) as ladder rungs: one curve per input length
    over every class, with its mean prompt length and verify step; [] for a run of one length."""
    from dynocell.db import runs as db_runs

    step = next((s for s in db_runs.steps(store, run_id) if s.name == "acceptance"), None)
    rows = ((step.detail if step else None) or {}).get("by_length") or []
    return [ClassCurve(f"{b['input_tokens']} tokens", _curve_from_row(b),
                       b.get("prompt_tokens") or float(b["input_tokens"]), step_ms=b.get("verify_step_ms"))
            for b in rows]


def _run_tau(store: Any, run: RunRow) -> float | None:
    from dynocell.db import runs as db_runs

    tau = (run.summary or {}).get("tau")
    if tau is not None:
        return float(tau)
    cs = db_runs.curves(store, run.id)
    steps = sum(c.steps for c in cs)
    return sum(c.tau * c.steps for c in cs) / steps if steps else None


#: Knobs a reference twin may differ in besides ``engine``: how a GPU engine runs (CUDA graphs, attention
#: kernels, memory pool, batch caps) changes nothing the reference engine computes (it accepts them for
#: compatibility), so an eager or a graph run has the same twin (issue 24's eager twins on the H200).
ORACLE_NEUTRAL = ("cuda_graph.", "attention_backend", "memory.mem_fraction_static", "memory.max_running_requests",
                  "memory.chunked_prefill_size")


def _reference_twin(diff: set[str]) -> bool:
    """True when configs differing in ``diff`` are a run and its reference twin: the engine differs and
    nothing else but :data:`ORACLE_NEUTRAL` knobs."""
    return "engine" in diff and all(k == "engine" or k.startswith(ORACLE_NEUTRAL) for k in diff)


def _other_workload(run: RunRow, other: RunRow) -> bool:
    """True when two stored runs measured different workloads: their stored workload sha256 differ, or
    (for runs that predate the column) their sampling temperatures do. A graph-vs-eager or parallel-size
    comparison across workloads compares the workloads, not the knob."""
    a, b = run.workload_sha256, other.workload_sha256
    if a and b:
        return a != b
    return (run.options or {}).get("temperature") != (other.options or {}).get("temperature")


def inputs_for_run(cell: Any, run_id: str) -> DoctorInputs:
    """Build :class:`DoctorInputs` for a stored run: its curves (with prompt lengths from the acceptance
    bench rows), its config's knobs, sibling runs (latest completed run per other config), break-even
    numbers, the plain twin's decode throughput, greedy outputs and reference-engine oracle curves."""
    from dynocell.db import runs as db_runs
    from dynocell.runbooks.doctor_evidence import (
        requests_by_class, add_run_evidence, completed_others, full_context, knobs_of, run_samples,
    )

    store = cell.store
    run = db_runs.get_run(store, run_id)
    if run is None:
        raise NotFound(f"no run {run_id!r}", "see dynocell runs")
    inp = DoctorInputs(curves=_class_curves(store, run_id), ladder=_length_ladder(store, run_id))
    inp.knobs = knobs_of(store, run.config_hash)
    opts = run.options or {}
    temp = opts.get("temperature")
    inp.sampling = "sampled" if temp not in (None, 0, 0.0) else "greedy"
    topk = inp.knobs.get("speculative.eagle_topk")
    inp.proposal_mode = str(opts.get("draft_proposal") or ("top1" if topk in (None, 1) else "sampled"))
    be = run.breakeven or {}
    inp.breakeven = dict(be)
    inp.effect_size = cell.settings.effect_size
    inp.context = full_context(store, run)
    inp.contended = contention.contended(inp.context.get("contention"))
    inp.allow_contended = bool(opts.get("allow_contended"))
    inp.spec_step_ms = be.get("spec_step_ms")
    inp.plain_step_ms = be.get("plain_step_ms")
    inp.breakeven_noise = be.get("noise_band")
    inp.spec_decode_tok_s = headline_tok_s(run.summary)
    inp.acceptance_windows = list((((run.summary or {}).get("acceptance") or {}).get("windows")) or [])
    plain_hash = (run.lossless_detail or {}).get("plain_config_hash")
    seen: set[str] = {run.config_hash}
    others = completed_others(store, run_id)
    for other, knobs in others:
        h = other.config_hash
        if h == plain_hash and inp.plain_decode_tok_s is None:
            inp.plain_decode_tok_s = headline_tok_s(other.summary)
        if h in seen:
            continue
        if _other_workload(run, other):
            continue  # siblings and oracles speak about this run only on the same workload (prompts, lengths, T)
        tau = _run_tau(store, other)
        if tau is None or not inp.knobs:
            continue  # a newer run without acceptance must not shadow an older one with it (issue 35 item 7)
        seen.add(h)
        diff = set(differing_knobs(inp.knobs, knobs, include_env=True))
        if diff and all(k.startswith("parallel.") for k in diff) or diff == {"cuda_graph.disable"}:
            recs = tuple(x for rs in requests_by_class(store, other.id).values() for x in rs)
            inp.siblings.append(Sibling(other.id, knobs, tau, requests=recs, context=full_context(store, other)))
        elif knobs.get("engine") == "reference" and _reference_twin(diff):
            o_opts = other.options or {}
            o_temp = o_opts.get("temperature")
            mode = "greedy" if o_temp in (None, 0, 0.0) else str(o_opts.get("draft_proposal") or "top1")
            for cc in _class_curves(store, other.id):
                inp.oracle.append(OracleCurve(cc.text_class, mode, cc.curve, cc.requests))
    # The run's own generations (kept by the bench step at the workload's sampling settings) say
    # what the engine serves; the plain twin's greedy goldens are the fallback for older runs.
    # The plain twin's goldens are greedy: they speak about this run's curves only when its workload was
    # greedy too (issue 22: a tiny model repeating a space under greedy said nothing about a sampled τ).
    samples = run_samples(store, run_id)
    if samples:
        inp.output_texts, inp.outputs_of = samples, "run samples"
    elif plain_hash and "temperature" in opts and temp in (0, 0.0):
        inp.outputs_of = "plain twin greedy goldens"
        goldens = db_runs.goldens(store, plain_hash)
        inp.output_ids = [g.output_ids for g in goldens if g.output_ids]
        if not inp.output_ids:
            inp.output_texts = [g.output_text for g in goldens]
    add_run_evidence(cell, run, inp, others)
    return inp


def diagnose(cell: Any, ref: str, *, store_findings: bool = True) -> list[Finding]:
    """Diagnose a run (id or unique prefix) or a boot (id or prefix) and store the findings.

    A run: every rule over its stored rows (:func:`inputs_for_run`). A boot: its
    failure signature resolved to entries (rule ``boot_failure``) plus the
    findings of each run on it. Raises NotFound when ``ref`` names neither.
    """
    from dynocell.db import boots as db_boots, knowledge as dbk, refs, runs as db_runs
    from dynocell.runbooks.knowledge import knowledge_for

    store = cell.store
    kn = knowledge_for(cell.settings)
    found = refs.resolve(store, ref, ("run", "boot"))
    run_id = found.key if found.kind == "run" else None
    if run_id:
        findings = diagnose_inputs(inputs_for_run(cell, run_id), knowledge=kn)
        if store_findings:
            run = db_runs.get_run(store, run_id)
            dbk.save_findings(store, [f.to_dict() for f in findings], run_id=run_id,
                              boot_id=run.boot_id if run else None)
        return findings
    boot_id = found.key
    boot = db_boots.get_boot(store, boot_id)
    findings = _boot_runtime_findings(cell, boot, kn)
    sig = boot.failure_signature if boot else None
    if sig == "nccl_timeout_startup" and any(f.rule == "nccl_serving_timeout" for f in findings):
        sig = None  # the timeout came while serving (issue 22): nccl_serving_timeout says so, not the start-up id
    if sig:
        slugs = kn.for_signature(sig)
        log_hits = _log_hits(kn, boot.log_path if boot else None)
        for s in log_hits:
            if s not in slugs:
                slugs.append(s)
        detail = (boot.failure_detail if boot else None) or {}
        phase = detail.get("phase")
        # issue 35: a crash while serving (after ready, or an excerpt without start-up lines whose failure no
        # boot phase claims) is not a failed boot
        serving = boot is not None and boot.state == "crashed" and phase in (None, "serving")
        line = f": {detail.get('line')}" if detail.get("line") else ""
        msg = (f"the engine of boot {boot_id} died while serving ({sig!r}){line} — not a start-up failure: the "
               "requests in flight failed; read the exception and the frames above it, the load it came under"
               if serving else
               f"boot {boot_id} failed with signature {sig!r}" + (f" in {phase.replace('_', ' ')}" if phase else "")
               + line)
        findings.insert(0, Finding("engine_crash_serving" if serving else "boot_failure", "error", msg,
                                {"signature": sig, "state": boot.state if boot else None,
                                 "last_phase": boot.last_phase if boot else None, "phase": phase,
                                 "exception": (detail.get("groups") or {}).get("exception")},
                                slugs))
    if store_findings:
        dbk.save_findings(store, [f.to_dict() for f in findings], boot_id=boot_id)
    said = {(f.rule, f.message) for f in findings}
    for rid in reversed([r.id for r in db_runs.list_runs(store, boot_id=boot_id, limit=10_000)]):
        findings.extend(f for f in diagnose(cell, rid, store_findings=store_findings)
                        if (f.rule, f.message) not in said)
    return findings


def _boot_runtime_findings(cell: Any, boot: Any, kn: Any) -> list[Finding]:
    """The runtime rules (issue 22, shape 9) over a boot's own log and config (``boot``: its
    ``db.boots.BootRow``, or None: no findings)."""
    from dynocell.runbooks.doctor_evidence import boot_inputs

    if not boot:
        return []
    inp = boot_inputs(cell, boot)
    th = load_thresholds()
    out = []
    for rule, fn in RUNTIME_RULES.items():
        for f in fn(inp, th):
            slugs = [s for s in kn.for_rule(rule) if _entry_fits(kn.entries[s], inp.knobs)]
            out.append(Finding(f.rule, f.severity, f.message, f.evidence, slugs))
    return out


def _log_hits(kn: Any, log_path: str | None, tail_bytes: int = 200_000) -> list[str]:
    if not log_path or not Path(log_path).is_file():
        return []
    with open(log_path, "rb") as fh:
        fh.seek(0, 2)
        size = fh.tell()
        fh.seek(max(0, size - tail_bytes))
        text = fh.read().decode("utf-8", "replace")
    return sorted(kn.for_log(text.splitlines()))


#: The command to run after a finding, per rule (``{ref}``: the run or boot diagnosed); a rule
#: not listed here points at its first runbook entry, else at a search of the knowledge.
NEXT_COMMANDS: dict[str, str] = {
    "pinned_near_one": ("dynocell show {ref}  (then compare the draft's inputs: "
                        "dynocell runbook search \"pinned near one\")"),
    "graph_vs_eager": "dynocell bisect plan <eager config> <graph config>",
    "scales_with_parallel": "dynocell bisect plan <smaller config> <larger config>",
    "definitions_mismatch": ("dynocell engine build --patch spec-per-position-metrics  "
                             "(per-position counters from the engine)"),
    "garbage_output": "dynocell show {ref}  (read the samples; then boot the plain twin and compare)",
    "boot_failure": "dynocell logs <boot id>  (from the last phase on; `dynocell show {ref}` names the boot)",
    "confounded_comparison": "dynocell bisect plan <the other config> <this config>  (one knob at a time)",
    "config_smell": "dynocell config show <this config> --toml  (write num_draft_tokens = num_steps + 1)",
    "health_lies": "dynocell health <boot id>  (the oracle's generation check, not /health alone)",
    "stalled_queue": "dynocell health <boot id>  (a generation of its own; then the log around the stall)",
}


def next_command(f: Finding, ref: str | None = None) -> str:
    """The one command an operator runs next for finding ``f`` (``ref``: the run/boot diagnosed)."""
    template = NEXT_COMMANDS.get(f.rule)
    if template and ("{ref}" not in template or ref):
        return template.format(ref=ref)
    if f.entries:
        return f"dynocell runbook show {f.entries[0]}"
    return f"dynocell runbook search {f.rule.replace('_', ' ')}"


def render_findings(findings: Iterable[Finding], ref: str | None = None) -> str:
    """Plain-text report: one block per finding (severity, rule, message, evidence, entries, and
    the next command to run, :func:`next_command`)."""
    lines = []
    for f in findings:
        lines.append(f"[{f.severity}] {f.rule}: {f.message}")
        ev = ", ".join(f"{k}={v}" for k, v in f.evidence.items() if v is not None)
        if ev:
            lines.append(f"    evidence: {ev}")
        if f.entries:
            lines.append(f"    entries: {', '.join(f.entries)}")
        lines.append(f"    next: {next_command(f, ref)}")
    return "\n".join(lines) if lines else "no findings"
