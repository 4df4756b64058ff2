"""The doctor's ``engine_vs_oracle`` rule: an engine's acceptance curve against the reference engine's on the
same prompts and the same target/draft pair (docs/DESIGN.md "Acceptance math"; the reference runs in fp32 on CPU).

- Greedy: per-position p_i within ``greedy_abs_tol`` — on the requests whose generated text is identical on
  both sides when the store has each request's record (migration 0009,
  :mod:`dynocell.engine.request_acceptance`): a near-tie of the target's top two tokens resolved differently
  in fp16 and fp32 puts a request on another text, whose acceptance is another text's (issue 24: the H200
  EAGLE tree, 3 of 15 requests). Those are named (info), not reported as an engine bug — unless more than
  ``greedy_text_differ_max`` of the requests differ, when the engine's output itself is in question and
  the whole curves are compared.
- Sampled: only against a reference in the engine's draft-proposal mode (top1 for ``eagle_topk`` 1),
  within ``sampled_z`` standard errors of the two proportions (steps counted for steps / design effect).

Thresholds and their sources: ``doctor_thresholds.toml`` ``[engine_vs_oracle]``.
"""

from __future__ import annotations

import math
from typing import Any

from dynocell.runbooks.doctor_model import ClassCurve, DoctorInputs, Finding, OracleCurve, r as _r


def _worst_gap(pe_list: Any, pr_list: Any, tol_at: Any) -> tuple[int, float, float] | None:
    """The position (1-based), gap and tolerance where |p_engine − p_reference| exceeds its tolerance the
    most; None when every position is within."""
    worst = None
    for i in range(min(len(pe_list), len(pr_list))):
        gap, tol = abs(pe_list[i] - pr_list[i]), tol_at(i)
        if gap > tol and (worst is None or gap - tol > worst[1] - worst[2]):
            worst = (i + 1, gap, tol)
    return worst


def _same_text_curves(c: ClassCurve, o: OracleCurve, t: dict[str, Any]) -> tuple[Finding | None, Any, Any, str] | None:
    """Greedy: compare on the requests whose generated text is identical on both sides
    (:func:`dynocell.engine.request_acceptance.match_by_text`). None when either side has no request records
    or every paired request generated the same text (the whole curves compare). Else ``(finding, engine
    curve, reference curve, where)``: an info ``finding`` ends the comparison (no request left, or the curves
    on identical text agree); with None the caller compares the two subset curves, ``where`` naming them."""
    from dynocell.engine import acceptance as acc
    from dynocell.engine.request_acceptance import match_by_text

    if not c.requests or not o.requests:
        return None
    m = match_by_text(c.requests, o.requests)
    if not m.paired or not m.differing:
        return None
    text = (f"{c.text_class}: {m.differing} of {m.paired} requests generated different greedy text on the engine "
            "than on the reference (typically a near-tie of the target's top two tokens resolved differently in "
            "fp16 and fp32), so their acceptance is another text's")
    ev: dict[str, Any] = {"text_class": c.text_class, "mode": "greedy", "paired": m.paired, "same_text": m.same,
                          "differing_text": m.differing}
    ce = acc.curve_from_meta_infos(m.engine_same, num_drafts=c.curve.num_drafts) if m.same else None
    cr = acc.curve_from_meta_infos(m.reference_same, num_drafts=o.curve.num_drafts) if m.same else None
    if ce is None or cr is None:
        return Finding("engine_vs_oracle", "info", text + "; no request is left to compare on.", ev), None, None, ""
    if _worst_gap(ce.p, cr.p, lambda i: float(t["greedy_abs_tol"])) is None:
        return Finding(
            "engine_vs_oracle", "info",
            text + f"; on the {m.same} with identical text the curves agree (τ {ce.tau:.3f} vs {cr.tau:.3f}).",
            {**ev, "tau_engine": _r(ce.tau), "tau_reference": _r(cr.tau),
             "p_engine": [_r(x) for x in ce.p], "p_reference": [_r(x) for x in cr.p]}), ce, cr, ""
    return None, ce, cr, f" on the {m.same} of {m.paired} requests with identical text"


def _oracle_tol(want: str, t: dict[str, Any], mine: Any, ref: Any, i: int) -> float:
    """The tolerance of |p_engine − p_reference| at position ``i`` (0-based): ``greedy_abs_tol`` greedy; sampled,
    ``sampled_z`` standard errors of the two proportions (never below ``sampled_abs_floor``)."""
    if want == "greedy":
        return float(t["greedy_abs_tol"])
    # Verify steps of one request are not independent trials (acceptance comes in runs within a
    # request), so the steps count for steps / design_effect (calibrated: see the thresholds file).
    pe, pr = mine.p[i], ref.p[i]
    deff = t["sampled_design_effect"]
    ne, nr = (mine.steps or 0) / deff, (ref.steps or 0) / deff
    se = math.sqrt((pe * (1 - pe) / ne if ne else 0.25) + (pr * (1 - pr) / nr if nr else 0.25))
    return max(t["sampled_abs_floor"], t["sampled_z"] * se)


def _text_differ_share(inp: DoctorInputs) -> tuple[int, int]:
    """Greedy: (requests whose generated text differs from the reference's, requests paired) over every class
    with request records on both sides."""
    from dynocell.engine.request_acceptance import match_by_text

    differ = paired = 0
    for c in inp.curves:
        o = next((o for o in inp.oracle if o.text_class == c.text_class and o.mode == "greedy"), None)
        if o is not None and c.requests and o.requests:
            m = match_by_text(c.requests, o.requests)
            differ, paired = differ + m.differing, paired + m.paired
    return differ, paired


def rule_engine_vs_oracle(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    t = th["engine_vs_oracle"]
    out = []
    want = "greedy" if inp.sampling == "greedy" else inp.proposal_mode
    # Near-ties explain a few requests on another text; when most differ, the engine's greedy output itself is
    # in question, so the whole curves are compared (and the share is said) instead of the identical-text ones.
    differ, paired = _text_differ_share(inp) if want == "greedy" else (0, 0)
    by_text = not paired or differ / paired <= t["greedy_text_differ_max"]
    also = (f" {differ} of {paired} requests generated different greedy text than the reference: more than "
            "near-ties of the target's top two tokens explain — check the output (`dynocell run` with the "
            "lossless check against the plain twin)." if not by_text else "")
    for c in inp.curves:
        refs = [o for o in inp.oracle if o.text_class == c.text_class and o.mode == want]
        if not refs:
            continue  # only a reference in the wrong proposal mode (or none): comparing would be a false alarm
        mine, ref, where = c.curve, refs[0].curve, ""
        split = _same_text_curves(c, refs[0], t) if want == "greedy" and by_text else None
        if split is not None:
            note, mine, ref, where = split
            if note is not None:
                out.append(note)
                continue
        worst = _worst_gap(mine.p, ref.p, lambda i, a=mine, b=ref: _oracle_tol(want, t, a, b, i))
        if worst is None:
            continue
        pos, gap, tol = worst
        out.append(Finding(
            "engine_vs_oracle", "error" if want == "greedy" else "warn",
            f"{c.text_class}: engine p_{pos} = {mine.p[pos - 1]:.3f} vs reference ({want}) "
            f"{ref.p[pos - 1]:.3f}{where}, {gap:.3f} apart (tolerance {tol:.3f}); τ {mine.tau:.3f} vs {ref.tau:.3f}. "
            + ("Greedy curves of the same pair on the same prompts must agree." + also
               if want == "greedy" else "The reference runs in the engine's draft-proposal mode, so the gap is real."),
            {"text_class": c.text_class, "mode": want, "position": pos, "gap": _r(gap), "tolerance": _r(tol),
             "p_engine": [_r(x) for x in mine.p], "p_reference": [_r(x) for x in ref.p],
             "tau_engine": _r(mine.tau), "tau_reference": _r(ref.tau)}))
    return out


ORACLE_RULES = {"engine_vs_oracle": rule_engine_vs_oracle}
