"""Runs side by side, across configs and engines (``dynocell compare``).

Builds on :func:`dynocell.runbooks.views.compare_runs` (throughput deltas, profile categories,
hardware warning) and adds, per run, what an engine-vs-engine table needs: the config's name and
engine, the boot's ready time and phase ends, the whole-workload throughput levels, τ and
p_1..p_D per text class, the lossless verdict, break-even and the profile headline (with the
speculative step's phase split when stored).
"""

from __future__ import annotations

from typing import Any

from dynocell.runbooks import views

#: Phases whose end an operator reads first when two engines boot the same model (the
#: engines' own phase names, ``engine/rules/*.toml``); the others stay in ``phases``.
KEY_PHASES = ("weights_end", "kv_cache_allocated", "compile_end", "cuda_graph_end", "http_listening", "ready")


def _config_name(detail: dict[str, Any]) -> tuple[str | None, str | None]:
    """(name, engine) from the run's ``config`` step detail (what ``dynocell run`` stored)."""
    for step in detail.get("steps") or []:
        if step["name"] == "config" and step.get("detail"):
            return step["detail"].get("name"), step["detail"].get("engine")
    return None, None


def _phase_ends(cell: Any, boot_id: str | None) -> tuple[float | None, dict[str, float], str | None]:
    """(ready s, {phase: s after spawn when its line was seen}, engine) of a boot; (None, {}, None) without
    one. A repeated phase counts at its last occurrence (:func:`dynocell.engine.rules.phase_marks`, as
    ``import log``). The engine is the boot's: runs of imported and attached boots have no config step."""
    from dynocell.engine.rules import phase_marks

    if not boot_id:
        return None, {}, None
    bd = views.boot_detail(cell, boot_id)
    marks = phase_marks((p["name"], p.get("start_s")) for p in bd.get("phases") or [])
    return bd["boot"].get("ready_s"), {name: round(float(s), 1) for name, s in marks.items()}, bd["boot"].get("engine")


def _levels(detail: dict[str, Any]) -> list[dict[str, Any]]:
    """The whole-workload throughput levels (bench rows without a text class), by concurrency."""
    rows = [b for b in detail.get("bench") or [] if not b.get("text_class")]
    return [{"concurrency": b["concurrency"], "output_tok_s": b.get("output_tok_s"),
             "decode_tok_s": b.get("decode_tok_s"), "tpot_ms_p50": (b.get("tpot_ms") or {}).get("p50")
             if isinstance(b.get("tpot_ms"), dict) else None} for b in sorted(rows, key=lambda b: b["concurrency"])]


def _curves(detail: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"text_class": c["text_class"], "tau": c["tau"], "steps": c.get("steps"),
             "p": [pt["p"] for pt in sorted(c.get("points") or [], key=lambda pt: pt["position"])]}
            for c in detail.get("curves") or []]


def _profile(detail: dict[str, Any]) -> dict[str, Any] | None:
    prof = detail.get("profile")
    if not prof or prof.get("state") != "completed":
        return None
    top = sorted(prof.get("splits") or [], key=lambda s: -(s.get("pct") or 0))[:3]
    return {"device_ms": prof.get("device_ms"), "busy_pct": prof.get("busy_pct"),
            "launches_per_token": prof.get("launches_per_token"), "graph_launches": prof.get("graph_launches"),
            "top": [{"category": s["category"], "pct": s["pct"]} for s in top],
            "phases": _phases(prof.get("phases"))}


def _phases(ph: dict[str, Any] | None) -> dict[str, Any] | None:
    """The speculative step's split for the table: ``{state, reason, phases [{phase, label, pct,
    launches_per_token}]}`` (the steps' phases only), or None when none is stored."""
    if not ph:
        return None
    return {"state": ph["state"], "reason": ph.get("reason"),
            "phases": [{k: p.get(k) for k in ("phase", "label", "pct", "launches_per_token")}
                       for p in ph.get("phases") or [] if p.get("pct") is not None]}


def compare(cell: Any, run_ids: list[str]) -> dict[str, Any]:
    """Runs side by side: :func:`views.compare_runs` plus ``table`` — one dict per run with
    ``run_id, config, engine, state, temperature, ready_s, phases {name: s after spawn}, levels
    [{concurrency, output_tok_s (aggregate), decode_tok_s (per request), tpot_ms_p50}],
    curves [{text_class, tau, steps, p [p_1..p_D]}], lossless, breakeven {margin, verdict,
    spec_step_ms, plain_step_ms} | None, profile {device_ms, busy_pct, launches_per_token,
    graph_launches, top [{category, pct}], phases (:func:`_phases`) | None} | None``. Raises UserError
    with fewer than two runs and NotFound for a reference that matches no run (from ``compare_runs``).
    """
    base = views.compare_runs(cell, run_ids)
    table = []
    for detail in base["runs"]:
        run = detail["run"]
        name, engine = _config_name(detail)
        ready_s, ends, boot_engine = _phase_ends(cell, run.get("boot_id"))
        be = run.get("breakeven") or None
        table.append({
            "run_id": run["id"], "config": name or run["config_hash"][7:19], "engine": engine or boot_engine,
            "state": run["state"], "temperature": (run.get("options") or {}).get("temperature"),
            "ready_s": ready_s, "phases": ends, "levels": _levels(detail), "curves": _curves(detail),
            "lossless": run.get("lossless"),
            "breakeven": None if not be else {k: be.get(k) for k in ("margin", "verdict", "spec_step_ms",
                                                                       "plain_step_ms", "noise_band")},
            "profile": _profile(detail),
        })
    return {**base, "table": table}
