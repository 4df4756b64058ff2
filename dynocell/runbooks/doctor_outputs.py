"""Doctor rules over outputs, context length and metric definitions (issue 22, shapes 3, 5 and 7).

Rules (id — shape):

- ``corrupt_output`` — placeholder / padding tokens leaking into otherwise healthy output: a run of one
  low token id (0 … ``low_id_max``: specials in SentencePiece vocabularies, ``!`` ``"`` ``#`` ``$`` in
  byte-level BPE ones such as Llama-3 / Qwen, where a zeroed logit row's argmax, id 0, prints ``!!!!``), a
  burst of one punctuation character, output broken on one serving mode and fine on another (attributed to
  the mode that differs), or a greedy mismatch whose top-2 margin is far from a tie. Never defaults to "dummy weights".
- ``lossless_near_tie`` — every greedy mismatch sits on a numerical near-tie (top-2 log-probability margin
  ≤ ``margin_max``): ``lossless: near-tie (margin …)``, not corruption.
- ``lossless_margin_unknown`` — a greedy mismatch whose margin could not be fetched: ``margin unknown: <why>``.
- ``length_cliff`` — τ per context-length bucket with a cliff (one step carries most of the fall) rather
  than a drafter's gradual decay; with step costs, the length where speculation stops paying.
- ``rate_above_one`` — an engine "rate" above 1 (accept length or a count passed off as a rate): refused.
- ``skipped_steps_average`` — the engine's τ is the average over verify steps that accepted at least one
  draft (undrafted / all-rejected steps skipped): corrected from the histogram, flagged without one.
"""

from __future__ import annotations

from typing import Any

from dynocell.runbooks.doctor_model import DoctorInputs, Finding, Mismatch, r

#: Punctuation that healthy text does not repeat in long runs (separators such as ``-``, ``=``, ``*``, ``.`` and
#: ``#`` do: markdown rules, ellipses, headings, so they are never judged).
_PUNCT = set("!?,;:。，、！？")


def _longest_run(ids: list[Any]) -> tuple[Any, int]:
    best, n, prev, cur = None, 0, object(), 0
    for x in ids:
        cur = cur + 1 if x == prev else 1
        prev = x
        if cur > n:
            best, n = x, cur
    return best, n


def _corrupt_in(ids_lists: list[list[int]], texts: list[str], t: dict[str, Any]) -> str | None:
    """Why these outputs look corrupt (placeholder ids or punctuation bursts), or None."""
    for ids in ids_lists:
        tok, n = _longest_run(ids)
        if tok is not None and isinstance(tok, int) and tok <= t["low_id_max"] and n >= t["min_run"]:
            return (f"a run of {n} × token id {tok} (a special id in SentencePiece vocabularies; in byte-level BPE "
                    f"ones such as Llama-3 and Qwen ids 0–3 are ! \" # $, and a zeroed logit row argmaxes to id 0)")
    for txt in texts:
        ch, n = _longest_run([c for c in txt if not c.isspace()])
        if ch in _PUNCT and n >= t["min_text_run"]:
            return f"a burst of {n} × {ch!r}"
    return None


def _broken_texts(texts: list[str], t: dict[str, Any]) -> str | None:
    """Why a mode's texts are broken: all empty (tokens generated that decode to nothing) or a burst."""
    if texts and all(not x.strip() for x in texts):
        return f"{len(texts)} empty output(s): the tokens generated decode to nothing (placeholder ids)"
    return _corrupt_in([], texts, t)


def _mode_diff(inp: DoctorInputs, t: dict[str, Any]) -> tuple[str, str, str] | None:
    """(broken mode, clean mode, why) when one serving mode's outputs are corrupt and another's are not."""
    judged = {m: _corrupt_in(ids, [], t) for m, ids in inp.mode_outputs.items()}
    judged.update({m: _broken_texts(txts, t) for m, txts in inp.mode_texts.items() if m not in judged})
    clean = [m for m, why in judged.items() if not why]
    first = next(iter(judged), None)
    if first is not None and judged[first] and clean:
        return first, clean[0], judged[first] or ""  # spoken on the broken mode's run (listed first)
    return None


def rule_corrupt_output(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    t = th["corrupt_output"]
    near = th["lossless_near_tie"]["margin_max"]
    md = _mode_diff(inp, t)
    own = _corrupt_in(inp.output_ids, inp.output_texts, t)
    real = [m for m in inp.mismatches if m.margin is not None and m.margin > near]
    if not md and not own and not real:
        return []
    tau = inp.overall_tau()
    parts = []
    if md:
        parts.append(f"outputs on {md[0]} show {md[2]} while {md[1]} is clean on the same prompts: the mode that "
                     f"differs ({md[0]} vs {md[1]}) corrupts the target's output — bisect that knob")
    elif own:
        parts.append(f"the output holds {own}" + (f" while τ is {tau:.2f}" if tau else "")
                     + ": a buffer of placeholder tokens reaches the output (a captured graph's static buffer, an "
                     "overlap / spec-v2 path or a parallel size) — compare graphs full vs piecewise vs off, overlap "
                     "on vs off, and parallel 1 vs N on the same greedy prompts")
    if real:
        m = real[0]
        parts.append(f"greedy prompt {m.prompt} diverges from plain at token {m.position} with a top-2 margin of "
                     f"{m.margin:.3f} nats (far from a tie): the speculative path computes a different token")
    return [Finding("corrupt_output", "error", "; ".join(parts) + ".",
                    {"broken_mode": md[0] if md else None, "clean_mode": md[1] if md else None,
                     "why": (md[2] if md else own), "tau": r(tau),
                     "mismatches": len(inp.mismatches), "margin": r(real[0].margin) if real else None,
                     "position": real[0].position if real else None})]


def rule_lossless_near_tie(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """Greedy mismatches that are all numerical near-ties (reduced precision; verify and plain decode run
    different batch shapes, so their reductions round differently)."""
    t = th["lossless_near_tie"]
    ms: list[Mismatch] = inp.mismatches
    if not ms or any(m.margin is None or m.margin > t["margin_max"] for m in ms):
        return []
    worst = max(m.margin for m in ms if m.margin is not None)
    first = min(ms, key=lambda m: m.position)
    return [Finding("lossless_near_tie", "info",
                    f"lossless: near-tie (margin {worst:.3f}) — {len(ms)} greedy prompt(s) diverge from plain "
                    f"(first at token {first.position}), each where the top two tokens are within "
                    f"{t['margin_max']} nats: reduced-precision rounding in different batch shapes, not corruption.",
                    {"mismatches": len(ms), "max_margin": r(worst), "first_position": first.position,
                     "margin_max": t["margin_max"]})]


def rule_lossless_margin_unknown(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """A greedy mismatch whose top-2 margin could not be fetched: ``lossless: no — margin unknown: <why>``.
    Without the margin a numerical near-tie cannot be told from corruption, so the finding says why and how
    to get it rather than calling either (issue 22, shape 3)."""
    unknown = [m for m in inp.mismatches if m.margin is None]
    if len(unknown) < th["lossless_margin_unknown"]["min_mismatches"] or not unknown:
        return []
    m = min(unknown, key=lambda x: x.position)
    why = m.margin_unknown or "the log-probabilities were not fetched"
    return [Finding("lossless_margin_unknown", "warn",
                    f"lossless: no — margin unknown: {why}. {len(unknown)} greedy prompt(s) diverge from plain (first "
                    f"at position {m.position}) with no top-2 log-probability margin, so a numerical near-tie (reduced "
                    "precision, verify and plain decode in different batch shapes) cannot be told from corruption. "
                    "Let the engine answer log-probabilities (SGLang /generate return_logprob + top_logprobs_num; vLLM "
                    "/v1/completions logprobs, allowed by --max-logprobs ≥ 2, and return_token_ids) and run again.",
                    {"mismatches": len(unknown), "first_position": m.position, "why": why})]


def rule_length_cliff(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """τ by context length: a cliff (one step ≥ ``step_drop_min`` carrying ≥ ``share_min`` of the fall) is a
    bug at a boundary (draft max length, rope scaling, a cache window); a gradual fall is the drafter's
    nature (``depth_decay``'s policy: gate speculation by length)."""
    from dynocell.runbooks.doctor import length_crossover, ladder_points, zero_acceptance_boundary

    t = th["length_cliff"]
    pts = ladder_points(inp, th)
    lengths = sorted({c.prompt_tokens for c in pts if c.prompt_tokens is not None})  # all (ladder_points)
    if len(lengths) < t["min_points"] or zero_acceptance_boundary(pts, th["zero_past_length"]) is not None:
        return []
    taus = [sum(c.curve.tau for c in pts if c.prompt_tokens == L) / sum(1 for c in pts if c.prompt_tokens == L)
            for L in lengths]
    total = taus[0] - taus[-1]
    steps = [(taus[i] - taus[i + 1]) / taus[i] for i in range(len(taus) - 1)]
    i = max(range(len(steps)), key=lambda j: steps[j])
    if steps[i] < t["step_drop_min"] or total <= 0 or (taus[i] - taus[i + 1]) / total < t["share_min"]:
        return []
    ev: dict[str, Any] = {"lengths": [r(L, 1) for L in lengths], "tau": [r(x) for x in taus],
                          "cliff_after": r(lengths[i], 1), "cliff_at": r(lengths[i + 1], 1), "step_drop": r(steps[i])}
    msg = (f"τ by prompt length {', '.join(f'{L:.0f}: {x:.2f}' for L, x in zip(lengths, taus))}: a cliff between "
           f"{lengths[i]:.0f} and {lengths[i + 1]:.0f} tokens ({steps[i] * 100:.0f} % in one step), not a gradual "
           "decay — a boundary in the drafter (its max position / context length, rope scaling, a sliding window "
           "or cache size) stops there.")
    cross = length_crossover(inp, lengths, taus)
    ev.update(cross)
    if cross.get("crossover_length") is not None:
        msg += (f" Speculation stops paying from {cross['crossover_length']:.0f} tokens (τ below the break-even "
                f"{cross['crossover_breakeven_tau']:.2f}).")
    return [Finding("length_cliff", "error", msg, ev)]


#: Names engines use for a rate in [0, 1] (vLLM V0 "Draft acceptance rate", "System efficiency",
#: SGLang spec_accept_rate, vLLM per-position acceptance rates).
RATE_NAMES = ("accept_rate", "acceptance_rate", "draft_acceptance_rate", "system_efficiency", "spec_accept_rate")


def rule_rate_above_one(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    lim = th["rate_above_one"]["max_rate"]
    rates = list(inp.engine_rates) + [{"name": "accept_rate", "value": c.curve.accept_rate,
                                       "definition": c.engine_source or f"{c.text_class}'s reported accept rate"}
                                      for c in inp.curves if c.curve.accept_rate > lim]
    bad = [x for x in rates if str(x.get("name")) in RATE_NAMES and float(x.get("value") or 0) > lim]
    if not bad:
        return []
    x = bad[0]
    return [Finding("rate_above_one", "error",
                    f"the engine reports {x['name']} = {float(x['value']):.3f}: a rate is accepted / proposed and "
                    "cannot exceed 1, so dynocell refuses it as a rate. It is probably an accept length (τ, bonus "
                    "token included) or accepted tokens / steps under another name; read the engine version's "
                    "definition "
                    f"({x.get('definition') or 'not given'}) before comparing.",
                    {"name": x["name"], "value": r(float(x["value"])), "definition": x.get("definition"),
                     "refused": len(bad)})]


def rule_skipped_steps_average(inp: DoctorInputs, th: dict[str, Any]) -> list[Finding]:
    """The engine's τ matches 1 + Σk·h[k] / (N − h[0]) (steps with no accepted draft skipped) rather than
    1 + Σk·h[k] / N: corrected where the histogram is known."""
    from dynocell.engine.acceptance import relative_diff

    t = th["skipped_steps_average"]
    out = []
    for c in inp.curves:
        h = c.curve.histogram
        if c.engine_tau is None:
            continue
        if not h or sum(h) <= h[0]:
            if c.engine_source and "skip" in str(c.engine_source):
                out.append(Finding("skipped_steps_average", "warn",
                                   f"{c.text_class}: the engine's τ {c.engine_tau:.3f} skips undrafted steps by its "
                                   "definition and no histogram is known to correct it: read it as an upper bound.",
                                   {"text_class": c.text_class, "engine_tau": r(c.engine_tau), "corrected_tau": None}))
            continue
        skipped = 1.0 + sum(k * x for k, x in enumerate(h)) / (sum(h) - h[0])
        if (relative_diff(c.curve.tau, c.engine_tau) <= t["rel_diff_min"]
                or relative_diff(skipped, c.engine_tau) > t["match"]):
            continue
        out.append(Finding("skipped_steps_average", "warn",
                           f"{c.text_class}: the engine's τ {c.engine_tau:.3f} is the average over the {sum(h) - h[0]} "
                           f"verify steps that accepted a draft; over all {sum(h)} steps it is {c.curve.tau:.3f} "
                           f"(corrected from the histogram, {h[0]} steps with none accepted).",
                           {"text_class": c.text_class, "engine_tau": r(c.engine_tau), "corrected_tau": r(c.curve.tau),
                            "skipped_steps": h[0], "steps": sum(h)}))
    return out


OUTPUT_RULES = {
    "corrupt_output": rule_corrupt_output,
    "lossless_near_tie": rule_lossless_near_tie,
    "lossless_margin_unknown": rule_lossless_margin_unknown,
    "length_cliff": rule_length_cliff,
    "rate_above_one": rule_rate_above_one,
    "skipped_steps_average": rule_skipped_steps_average,
}
