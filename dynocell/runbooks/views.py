"""Read-side views of the store for the faces (web panel, TUI): plain dicts, no ORM objects.

Every function takes a ``cell`` (anything with ``.store`` — a migrated
:class:`dynocell.db.session.Store` — and ``.settings`` — :class:`dynocell.settings.Settings`)
and returns JSON-able values (``datetime`` left as is). Ids may be given as
unique prefixes. Missing things raise :class:`dynocell.errors.NotFound`.

Units follow the store (``*_s`` seconds, ``*_ms`` milliseconds, tok/s).
Acceptance: p_i (unconditional) and a_i = p_i / p_{i−1} per DESIGN.md; τ = 1 + Σ p_i.
"""

from __future__ import annotations

import json
import re
from collections import deque
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable

from sqlalchemy import desc, func, or_, select

from dynocell.db import models as m, refs
from dynocell.engine.adapters import REDACTED, redact_env
from dynocell.errors import NotFound, UserError

LIVE_STATES = ("starting", "ready", "stopping")
FAILED_STATES = ("failed", "crashed", "lost")


# ---------------------------------------------------------------- helpers

def _aware(dt: datetime | None) -> datetime | None:
    if dt is None:
        return None
    return dt if dt.tzinfo else dt.replace(tzinfo=timezone.utc)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _row(obj: Any, fields: Iterable[str]) -> dict[str, Any]:
    out = {}
    for f in fields:
        v = getattr(obj, f)
        out[f] = _aware(v) if isinstance(v, datetime) else v
    return out


_BOOT_FIELDS = ("id", "config_hash", "build_hash", "engine", "hostname", "host", "host_id", "port", "pid", "pgid", "state",
                "last_phase", "log_path", "log_size", "started_at", "ready_at", "ready_s", "ended_at", "exit_code",
                "stop_how", "stop_s", "zombies", "failure_signature", "failure_detail", "argv", "kind")
_RUN_FIELDS = ("id", "kind", "config_hash", "boot_id", "build_hash", "host_id", "state", "step", "error", "options", "lossless",
               "lossless_detail", "breakeven", "summary", "started_at", "ended_at")
_BENCH_FIELDS = ("text_class", "concurrency", "num_requests", "num_failed", "length_mismatches", "duration_s",
                 "prompt_tokens", "completion_tokens", "request_throughput", "output_tok_s", "total_tok_s",
                 "prefill_tok_s", "decode_tok_s", "ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def _resolve(s, model, ref: str, kind: str) -> Any:
    """The row of ``model`` that ``ref`` names by the one resolver's rule (:mod:`dynocell.db.refs`)."""
    return s.get(model, refs.resolve_in(s, ref, kind).key)


def _labels(s) -> dict[str, list[str]]:
    """config_hash → current label names (newest row of each name wins)."""
    latest: dict[str, tuple[int, str]] = {}
    for lab in s.scalars(select(m.ConfigLabel).order_by(m.ConfigLabel.id)):
        latest[lab.name] = (lab.id, lab.config_hash)
    out: dict[str, list[str]] = {}
    for name, (_, h) in sorted(latest.items()):
        out.setdefault(h, []).append(name)
    return out


def _latest_health(s, boot_id: str) -> dict[str, Any] | None:
    hc = s.scalars(select(m.HealthCheck).where(m.HealthCheck.boot_id == boot_id)
                   .order_by(desc(m.HealthCheck.id)).limit(1)).first()
    return None if hc is None else _row(hc, ("ts", "verdict", "failed", "checks"))


def _run_tau(s, run_id: str) -> float | None:
    curves = s.scalars(select(m.AcceptanceCurve).where(m.AcceptanceCurve.run_id == run_id)).all()
    if not curves:
        return None
    steps = sum(c.steps for c in curves)
    if steps <= 0:
        return sum(c.tau for c in curves) / len(curves)
    return sum(c.tau * c.steps for c in curves) / steps


def _host_label(s, host_id: str | None, hostname: str | None = None) -> str:
    """``hostname (machine id prefix)`` of ``host_id``; the recorded ``hostname`` (or ``?``) for rows
    written before hosts were recorded."""
    h = s.get(m.Host, host_id) if host_id else None
    return f"{h.hostname} ({h.id[:8]})" if h else (hostname or "?")


def _boot_summary(s, b: m.Boot, labels: dict[str, list[str]]) -> dict[str, Any]:
    d = _row(b, _BOOT_FIELDS)
    d["host_label"] = _host_label(s, b.host_id, b.hostname)
    start = d["ready_at"] or d["started_at"]
    end = d["ended_at"] or _now()
    d["uptime_s"] = max(0.0, (end - start).total_seconds()) if start else None
    # Only a ready boot can be healthy now (a stopped boot never shows a green light); its last
    # verdict stays available as ``last_health``.
    d["last_health"] = _latest_health(s, b.id)
    d["health"] = d["last_health"] if b.state == "ready" else None
    last_run = s.scalars(select(m.Run).where(m.Run.boot_id == b.id).order_by(desc(m.Run.started_at)).limit(1)).first()
    d["last_run_id"] = last_run.id if last_run else None
    d["last_tau"] = _run_tau(s, last_run.id) if last_run else None
    d["labels"] = labels.get(b.config_hash, [])
    return d


def _run_summary(s, r: m.Run, labels: dict[str, list[str]]) -> dict[str, Any]:
    d = _row(r, _RUN_FIELDS)
    d["host_label"] = _host_label(s, r.host_id)
    d["tau"] = _run_tau(s, r.id)
    d["labels"] = labels.get(r.config_hash, [])
    # Throughput levels only: the acceptance step's per-class rows (a few requests each) are not a headline.
    best = s.scalars(select(m.BenchRun).where(m.BenchRun.run_id == r.id,
                                              (m.BenchRun.text_class.is_(None)) | (m.BenchRun.text_class == ""))
                     .order_by(desc(m.BenchRun.output_tok_s)).limit(1)).first()
    d["best_output_tok_s"] = best.output_tok_s if best else None
    # What a list shows beside the numbers: the doctor's rules and the break-even verdict.
    d["finding_rules"] = list(s.scalars(select(m.Finding.rule).where(m.Finding.run_id == r.id).order_by(m.Finding.id)))
    be = d.get("breakeven") or {}
    d["verdict"] = be.get("verdict") or (("pays" if be["pays"] else "does NOT pay") if "pays" in be else None)
    end = d["ended_at"] or (_now() if r.state == "running" else None)
    d["duration_s"] = (end - d["started_at"]).total_seconds() if end and d["started_at"] else None
    return d


def _notes(s, kind: str, target: str) -> list[dict[str, Any]]:
    return [_row(n, ("id", "text", "created_at")) for n in
            s.scalars(select(m.Note).where(m.Note.target_kind == kind, m.Note.target_id == target)
                      .order_by(m.Note.id))]


# ---------------------------------------------------------------- dashboard / lists

def dashboard(cell, *, recent: int = 10) -> dict[str, Any]:
    """Fleet overview: ``{live_boots, recent_runs, failures, counts, hosts}``.

    ``live_boots``: boots in starting/ready/stopping with ``health`` (latest verdict or None),
    ``uptime_s`` (since ready, else since start), ``port``, ``last_tau`` (step-weighted τ of the
    boot's newest run). ``failures``: newest failed/crashed/lost boots with ``failure_signature``,
    plus failed runs (``kind`` "run"). ``hosts``: the live boots grouped by host (see :func:`_live_by_host`).
    Every boot and run row carries ``host_label``.
    """
    with cell.store.session() as s:
        labels = _labels(s)
        live = [_boot_summary(s, b, labels) for b in
                s.scalars(select(m.Boot).where(m.Boot.state.in_(LIVE_STATES)).order_by(desc(m.Boot.started_at)))]
        runs = [_run_summary(s, r, labels) for r in
                s.scalars(select(m.Run).order_by(desc(m.Run.started_at)).limit(recent))]
        failures = []
        for b in s.scalars(select(m.Boot).where(m.Boot.state.in_(FAILED_STATES)).order_by(desc(m.Boot.started_at))
                           .limit(recent)):
            failures.append({"what": "boot", "id": b.id, "state": b.state, "signature": b.failure_signature,
                             "when": _aware(b.ended_at or b.started_at), "step": b.last_phase,
                             "labels": labels.get(b.config_hash, [])})
        for r in s.scalars(select(m.Run).where(m.Run.state.in_(("failed", "interrupted")))
                           .order_by(desc(m.Run.started_at)).limit(recent)):
            sig = None
            if r.boot_id:
                b = s.get(m.Boot, r.boot_id)
                sig = b.failure_signature if b else None
            failures.append({"what": "run", "id": r.id, "state": r.state, "signature": sig,
                             "when": _aware(r.ended_at or r.started_at), "step": r.step, "error": r.error,
                             "labels": labels.get(r.config_hash, [])})
        failures.sort(key=lambda f: f["when"] or _now(), reverse=True)
        counts = {
            "configs": s.scalar(select(func.count()).select_from(m.Config)) or 0,
            "boots": s.scalar(select(func.count()).select_from(m.Boot)) or 0,
            "runs": s.scalar(select(func.count()).select_from(m.Run)) or 0,
        }
        by_host = _live_by_host(s, live, cell.settings.host_stale_s)
    return {"live_boots": live, "recent_runs": runs, "failures": failures[:recent], "counts": counts,
            "hosts": by_host, "generated_at": _now()}


def _live_by_host(s, live: list[dict[str, Any]], stale_s: float) -> list[dict[str, Any]]:
    """Live boots grouped by host: ``[{host_id, label, last_seen_at, quiet, boots, verdicts}]``, hosts by label.

    ``quiet``: the host has not been heard from for ``stale_s`` seconds, so its boots' states are
    unknown (only that host can judge them).

    ``verdicts``: the newest health verdict of each of that host's live boots (``{boot_id, verdict, ts}``).
    Boots from before hosts were recorded are grouped under their recorded hostname.
    """
    groups: dict[str, dict[str, Any]] = {}
    for b in live:
        key = b.get("host_id") or f"hostname:{b.get('hostname')}"
        g = groups.get(key)
        if g is None:
            h = s.get(m.Host, b["host_id"]) if b.get("host_id") else None
            seen = _aware(h.last_seen_at) if h else None
            g = groups[key] = {"host_id": b.get("host_id"), "label": b["host_label"], "last_seen_at": seen,
                               "quiet": bool(seen and (_now() - seen).total_seconds() > stale_s),
                               "boots": [], "verdicts": []}
        g["boots"].append(b)
        if b.get("health"):
            g["verdicts"].append({"boot_id": b["id"], "verdict": b["health"]["verdict"], "ts": b["health"]["ts"]})
    return sorted(groups.values(), key=lambda g: g["label"])


def list_boots(cell, all: bool = False, *, limit: int = 200,  # noqa: A002 - CLI flag name
               host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Boots newest first (only live ones unless ``all``; only of ``host_ids`` when given), each as in
    :func:`dashboard`'s ``live_boots``."""
    with cell.store.session() as s:
        labels = _labels(s)
        q = select(m.Boot).order_by(desc(m.Boot.started_at)).limit(limit)
        if host_ids is not None:
            q = q.where(m.Boot.host_id.in_(host_ids))
        if not all:
            q = q.where(m.Boot.state.in_(LIVE_STATES))
        return [_boot_summary(s, b, labels) for b in s.scalars(q)]


def host_choices(cell) -> list[dict[str, Any]]:
    """Every host of the store as ``{id, label}`` by label (for a face's host filter)."""
    with cell.store.session() as s:
        rows = [{"id": h.id, "label": f"{h.hostname} ({h.id[:8]})"} for h in s.scalars(select(m.Host))]
    return sorted(rows, key=lambda r: r["label"])


def host_ids_for(cell, host: str | None) -> list[str] | None:
    """Host ids matching ``host`` (a hostname or machine id prefix), or None (no filter) when empty.
    Raises NotFound when nothing matches."""
    if not host or not host.strip():
        return None
    from dynocell.runbooks import hosts as rb_hosts

    return rb_hosts.resolve(cell, host)


def list_runs(cell, *, limit: int = 100, config_hash: str | None = None,
              host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs newest first with ``tau``, ``best_output_tok_s`` (tok/s, the best throughput level) and
    ``host_label``; only those of ``host_ids`` when given."""
    with cell.store.session() as s:
        labels = _labels(s)
        q = select(m.Run).order_by(desc(m.Run.started_at)).limit(limit)
        if host_ids is not None:
            q = q.where(m.Run.host_id.in_(host_ids))
        if config_hash:
            q = q.where(m.Run.config_hash == config_hash)
        return [_run_summary(s, r, labels) for r in s.scalars(q)]


# ---------------------------------------------------------------- boot

def _phase_bars(boot: dict[str, Any], events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    phases = [e for e in events if e["kind"] == "phase"]
    end_s = None
    if boot["ended_at"] and boot["started_at"]:
        end_s = (boot["ended_at"] - boot["started_at"]).total_seconds()
    elif boot["ready_s"] is not None:
        end_s = boot["ready_s"]
    elif boot["started_at"]:
        end_s = (_now() - boot["started_at"]).total_seconds()
    bars = []
    for i, e in enumerate(phases):
        nxt = phases[i + 1]["offset_s"] if i + 1 < len(phases) else max(end_s or e["offset_s"], e["offset_s"])
        bars.append({"name": e["name"], "start_s": e["offset_s"], "end_s": nxt,
                     "duration_s": max(0.0, nxt - e["offset_s"]), "model": e.get("model"),
                     "label": f"{e['name']} ({e['model']})" if e.get("model") else e["name"]})
    return bars


def boot_detail(cell, boot_id: str) -> dict[str, Any]:
    """One boot: ``{boot, events, phases, health, runs, notes, entries, artifacts, elsewhere}``
    (``elsewhere``: where its files live when that is another host, else None).

    ``phases``: ``[{name, label, model, start_s, end_s, duration_s}]`` (``model``: target / draft for
    per-model phases logged twice, :func:`label_model_phases`) — each phase lasts until the next one
    (the last until ready/end/now), offsets in seconds from boot start. ``health``: every verdict
    oldest first. ``entries``: runbook entries linked to the failure signature (slug, title).
    """
    with cell.store.session() as s:
        b = _resolve(s, m.Boot, boot_id, "boot")
        labels = _labels(s)
        boot = _boot_summary(s, b, labels)
        events = label_model_phases([_row(e, ("ts", "offset_s", "kind", "name", "detail")) for e in b.events])
        health = [_row(h, ("ts", "verdict", "failed", "checks")) for h in
                  s.scalars(select(m.HealthCheck).where(m.HealthCheck.boot_id == b.id).order_by(m.HealthCheck.id))]
        runs = [_run_summary(s, r, labels) for r in
                s.scalars(select(m.Run).where(m.Run.boot_id == b.id).order_by(desc(m.Run.started_at)))]
        entries = _signature_entries(s, b.failure_signature, _knowledge(cell))
        notes = _notes(s, "boot", b.id)
    return {"boot": boot, "events": events, "phases": _phase_bars(boot, events), "health": health, "runs": runs,
            "notes": notes, "entries": entries, "artifacts": list_artifacts(cell, boot["id"]),
            "failure": failure_text(b.failure_detail if b.state in FAILED_STATES or b.failure_signature
                                    or (b.failure_detail or {}).get("reason") else None),
            "elsewhere": elsewhere(cell, boot["id"])}


_FAILURE_FIELDS = (("title", "what"), ("reason", "why"), ("error", "error"), ("line", "log line"),
                   ("last_phase", "last phase"), ("last_state", "state before"), ("hint", "what to do"),
                   ("survivors", "processes left"))


def failure_text(detail: dict[str, Any] | None) -> dict[str, Any] | None:
    """A boot's ``failure_detail`` as readable text: ``{fields: [(label, text)], tail: [log lines]}``
    (bookkeeping such as process create times left out); None when there is nothing to say."""
    if not detail:
        return None
    fields = []
    for key, label in _FAILURE_FIELDS:
        v = detail.get(key)
        if v in (None, "", [], {}):
            continue
        fields.append((label, ", ".join(map(str, v)) if isinstance(v, list) else str(v)))
    tail = [str(x) for x in (detail.get("tail") or [])][-30:]
    return {"fields": fields, "tail": tail} if fields or tail else None


#: Phases logged once per model loaded: a speculative boot with a draft model logs them twice.
MODEL_PHASES = ("weights_begin", "weights_end", "kv_cache_allocated", "memory_pool_end")


def label_model_phases(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Add ``model`` (``target`` / ``draft``) to per-model phase events that occur exactly twice.

    SGLang (and the reference engine, which copies its log lines) loads the target model first,
    then the draft worker's model, logging the same loading lines for each; a name seen once
    (no draft model) or more than twice (several ranks) is left unlabelled rather than guessed.
    """
    seen: dict[str, int] = {}
    for e in events:
        if e.get("kind") == "phase" and e.get("name") in MODEL_PHASES:
            seen[e["name"]] = seen.get(e["name"], 0) + 1
    n: dict[str, int] = {}
    for e in events:
        name = e.get("name")
        if e.get("kind") == "phase" and seen.get(name) == 2:
            e["model"] = ("target", "draft")[n.get(name, 0)]
            n[name] = n.get(name, 0) + 1
    return events


def _signature_entries(s, signature: str | None, k: Any = None) -> list[dict[str, Any]]:
    if not signature:
        return []
    if k is not None:
        return [{"slug": slug, "title": k.entries[slug].title, "kind": k.entries[slug].kind}
                for slug in k.for_signature(signature)]
    out = []
    for e in s.scalars(select(m.RunbookEntry)):
        fm = e.front_matter or {}
        sigs = fm.get("signatures") or []
        names = {x.get("name") or x.get("id") for x in sigs if isinstance(x, dict)} | {
            x for x in sigs if isinstance(x, str)}
        if e.slug == signature or signature in names or signature in (e.tags or []):
            out.append({"slug": e.slug, "title": e.title, "kind": e.kind})
    return out


# ---------------------------------------------------------------- runs

def _run_data(s, r: m.Run, labels: dict[str, list[str]]) -> dict[str, Any]:
    run = _run_summary(s, r, labels)
    steps = [_row(x, ("name", "state", "started_at", "ended_at", "detail", "error")) for x in
             s.scalars(select(m.RunStep).where(m.RunStep.run_id == r.id).order_by(m.RunStep.id))]
    bench = [_row(x, _BENCH_FIELDS) for x in
             s.scalars(select(m.BenchRun).where(m.BenchRun.run_id == r.id)
                       .order_by(m.BenchRun.concurrency, m.BenchRun.text_class, m.BenchRun.id))]
    curves = []
    for c in s.scalars(select(m.AcceptanceCurve).where(m.AcceptanceCurve.run_id == r.id)
                       .order_by(m.AcceptanceCurve.text_class)):
        d = _row(c, ("text_class", "num_drafts", "steps", "tau", "accept_rate", "histogram", "completion_tokens",
                     "engine_tau", "engine_source", "disagreement_pct", "warning"))
        d["points"] = [{"position": p.position, "p": p.p_uncond, "a": p.a_cond} for p in c.points]
        curves.append(d)
    profile = None
    pr = s.scalars(select(m.ProfileRun).where(m.ProfileRun.run_id == r.id).order_by(desc(m.ProfileRun.id))
                   .limit(1)).first()
    if pr is None and r.kind == "profile" and r.boot_id:
        pr = None
    if pr is not None:
        profile = _row(pr, ("id", "state", "error", "trace_dir", "traces", "source", "num_ranks", "device_ms",
                            "window_ms", "busy_pct", "launches", "graph_launches", "output_tokens", "ms_per_token",
                            "launches_per_token", "rank_skew", "warnings"))
        profile["splits"] = [_row(x, ("category", "ms", "pct", "launches")) for x in
                             s.scalars(select(m.ProfileSplit).where(m.ProfileSplit.profile_id == pr.id,
                                                                    m.ProfileSplit.rank == -1)
                                       .order_by(desc(m.ProfileSplit.ms)))]
        per_rank: dict[int, list[dict[str, Any]]] = {}
        for x in s.scalars(select(m.ProfileSplit).where(m.ProfileSplit.profile_id == pr.id, m.ProfileSplit.rank >= 0)
                           .order_by(m.ProfileSplit.rank, desc(m.ProfileSplit.ms))):
            per_rank.setdefault(x.rank, []).append(_row(x, ("category", "ms", "pct", "launches")))
        profile["rank_splits"] = [{"rank": rk, "device_ms": sum(x["ms"] or 0.0 for x in rows), "splits": rows}
                                  for rk, rows in sorted(per_rank.items())]
        profile["kernels"] = [_row(x, ("name", "category", "ms", "launches")) for x in
                              s.scalars(select(m.ProfileKernel).where(m.ProfileKernel.profile_id == pr.id,
                                                                      m.ProfileKernel.rank == -1)
                                        .order_by(desc(m.ProfileKernel.ms)).limit(20))]
    findings = [_row(x, ("rule", "severity", "message", "evidence", "entries", "created_at")) for x in
                s.scalars(select(m.Finding).where(m.Finding.run_id == r.id).order_by(m.Finding.id))]
    return {"run": run, "steps": steps, "bench": bench, "curves": curves, "profile": profile,
            "findings": findings, "notes": _notes(s, "run", r.id)}


def run_detail(cell, run_id: str) -> dict[str, Any]:
    """One run: ``{run, steps, bench, curves, profile, findings, notes}``.

    ``bench``: levels by concurrency (latency dicts p50/p90/p99 in ms; throughputs tok/s, req/s).
    ``curves``: per text class with ``points`` ``[{position, p, a}]``, ``tau``, ``engine_tau``.
    ``profile``: newest profile window of the run with ``splits`` (all ranks, ms/pct/launches),
    ``rank_splits`` (``[{rank, device_ms, splits}]``, one per rank; empty for single-rank traces
    stored without per-rank rows) and top ``kernels``, or None. ``run.lossless`` / ``run.breakeven`` as stored.
    """
    with cell.store.session() as s:
        r = _resolve(s, m.Run, run_id, "run")
        return _run_data(s, r, _labels(s))


def compare_runs(cell, run_ids: list[str]) -> dict[str, Any]:
    """Side by side: ``{runs: [run_detail…], throughput: [...], splits: [...]}``; first run is the base.

    ``throughput``: per (concurrency, text_class) ``{concurrency, text_class, values: [tok/s|None],
    deltas_pct: [None|%]}``; ``splits``: per category ``{category, pct: [...], delta_pp: [...]}``
    (percentage points against the base). ``hardware_warning``: a sentence when the runs come from
    hosts of different hardware (CPU, GPU names/memory/driver, CUDA), else None. Raises UserError with
    fewer than two runs.
    """
    ids = [r for r in dict.fromkeys(x.strip() for x in run_ids) if r]
    if len(ids) < 2:
        raise UserError("compare needs at least two runs", "pick two or more runs (ids or prefixes)")
    with cell.store.session() as s:
        labels = _labels(s)
        runs = [_run_data(s, _resolve(s, m.Run, rid, "run"), labels) for rid in ids]
    keys = sorted({(b["concurrency"], b["text_class"] or "") for r in runs for b in r["bench"]})
    throughput = []
    for conc, tc in keys:
        vals = []
        for r in runs:
            match = [b["output_tok_s"] for b in r["bench"] if b["concurrency"] == conc and (b["text_class"] or "") == tc]
            vals.append(match[0] if match else None)
        base = vals[0]
        deltas = [None if (v is None or not base) else 100.0 * (v - base) / base for v in vals]
        throughput.append({"concurrency": conc, "text_class": tc or None, "values": vals, "deltas_pct": deltas})
    cats = []
    for r in runs:
        for sp in (r["profile"] or {}).get("splits", []):
            if sp["category"] not in cats:
                cats.append(sp["category"])
    splits = []
    for c in cats:
        pcts = []
        for r in runs:
            match = [sp["pct"] for sp in (r["profile"] or {}).get("splits", []) if sp["category"] == c]
            pcts.append(match[0] if match else None)
        base = pcts[0]
        splits.append({"category": c, "pct": pcts,
                       "delta_pp": [None if (p is None or base is None) else p - base for p in pcts]})
    from dynocell.runbooks import hosts as rb_hosts

    kinds = rb_hosts.different_hardware(rb_hosts.by_id(cell), [r["run"].get("host_id") for r in runs])
    warning = (f"these runs come from different hardware ({'; '.join(kinds)}): throughput and profile "
               "differences include the machines, not only the configs") if kinds else None
    return {"runs": runs, "throughput": throughput, "splits": splits, "hardware_warning": warning}


# ---------------------------------------------------------------- configs

def _resolve_config(s, ref: str) -> m.Config:
    return _resolve(s, m.Config, ref, "config")


def list_configs(cell) -> list[dict[str, Any]]:
    """Configs newest first: ``{config_hash, engine, model_path, labels, created_at, boots, runs, last_tau}``."""
    with cell.store.session() as s:
        labels = _labels(s)
        out = []
        boots = dict(s.execute(select(m.Boot.config_hash, func.count()).group_by(m.Boot.config_hash)).all())
        runs = dict(s.execute(select(m.Run.config_hash, func.count()).group_by(m.Run.config_hash)).all())
        for c in s.scalars(select(m.Config).order_by(desc(m.Config.created_at))):
            d = _row(c, ("config_hash", "engine", "model_path", "created_at"))
            d["labels"] = labels.get(c.config_hash, [])
            d["boots"] = boots.get(c.config_hash, 0)
            d["runs"] = runs.get(c.config_hash, 0)
            last = s.scalars(select(m.Run).where(m.Run.config_hash == c.config_hash)
                             .order_by(desc(m.Run.started_at)).limit(1)).first()
            d["last_tau"] = _run_tau(s, last.id) if last else None
            d["injection_env"] = _env_marks(c.canonical_json)[0]
            out.append(d)
        return out


def config_detail(cell, ref: str) -> dict[str, Any]:
    """One config by label, hash or hash prefix: ``{config, canonical, boots, runs, traps, notes}``.

    ``config.source_toml`` is the TOML as stored; ``canonical`` the parsed canonical JSON;
    ``traps``: runbook entries whose ``applies_to`` matches (via runbooks.knowledge when present).
    Secret-looking ``[env]`` values (``redact_env``: names with TOKEN, KEY, SECRET, PASSWORD) are
    ``***`` in ``canonical``, ``config.canonical_json`` and ``config.source_toml`` (then the
    canonical TOML, since the text as written carries them); ``config_hash`` is the real one.
    ``config.injection_env``: its process-injection ``[env]`` names; ``config.trusted``:
    ``{by, at}`` when trusted from the CLI, else None.
    """
    with cell.store.session() as s:
        c = _resolve_config(s, ref)
        labels = _labels(s)
        cfg = _row(c, ("config_hash", "engine", "model_path", "canonical_json", "source_toml", "created_at"))
        cfg["labels"] = labels.get(c.config_hash, [])
        boots = [_boot_summary(s, b, labels) for b in
                 s.scalars(select(m.Boot).where(m.Boot.config_hash == c.config_hash)
                           .order_by(desc(m.Boot.started_at)).limit(50))]
        runs = [_run_summary(s, r, labels) for r in
                s.scalars(select(m.Run).where(m.Run.config_hash == c.config_hash)
                          .order_by(desc(m.Run.started_at)).limit(50))]
        notes = _notes(s, "config", c.config_hash)
        trust = s.get(m.ConfigTrust, c.config_hash)
    traps = _traps(cell, cfg["canonical_json"])
    injection, secrets = _env_marks(cfg["canonical_json"])
    canonical = json.loads(cfg["canonical_json"])
    if secrets:
        from dynocell.engine.config import config_from_canonical, to_toml

        canonical["env"] = redact_env(canonical.get("env") or {})
        cfg["canonical_json"] = json.dumps(canonical, sort_keys=True)
        shown = config_from_canonical(json.dumps(canonical))
        cfg["source_toml"] = ("# secret [env] values are redacted (the hash covers the real ones); the TOML as "
                              "written is not shown\n" + to_toml(shown))
    cfg["injection_env"] = injection
    cfg["trusted"] = None if trust is None else {"by": trust.trusted_by, "at": _aware(trust.trusted_at)}
    return {"config": cfg, "canonical": canonical, "boots": boots, "runs": runs, "traps": traps, "notes": notes}


def _env_marks(canonical_json: str) -> tuple[list[str], list[str]]:
    """``(process-injection env names, secret-looking env names)`` of a stored config."""
    from dynocell.engine.config import injection_env_keys

    env = json.loads(canonical_json).get("env") or {}
    return injection_env_keys(env), sorted(k for k, v in redact_env(env).items() if v != env[k])


def _traps(cell, canonical_json: str) -> list[dict[str, Any]]:
    k = _knowledge(cell)
    if k is None:
        return []
    from dynocell.engine.config import config_from_canonical

    try:
        found = k.for_config(config_from_canonical(canonical_json))
    except Exception:  # noqa: BLE001 - a selector bug must not break the config page
        return []
    return [{"slug": e.slug, "title": e.title, "kind": e.kind} for e in found]


def config_diff(cell, ref_a: str, ref_b: str) -> dict[str, Any]:
    """Field-by-field differences: ``{a, b, fields: [{field, a, b}]}`` (only fields that differ)."""
    from dynocell.engine.config import config_from_canonical, diff_configs

    with cell.store.session() as s:
        ca, cb = _resolve_config(s, ref_a), _resolve_config(s, ref_b)
        labels = _labels(s)
        a = {"config_hash": ca.config_hash, "labels": labels.get(ca.config_hash, [])}
        b = {"config_hash": cb.config_hash, "labels": labels.get(cb.config_hash, [])}
        fields = diff_configs(config_from_canonical(ca.canonical_json), config_from_canonical(cb.canonical_json))
    out = []
    for f, va, vb in fields:
        if f.startswith("env.") and redact_env({f[4:]: ""}).get(f[4:]) != "":
            va, vb = (None if va is None else REDACTED), (None if vb is None else REDACTED)
        out.append({"field": f, "a": va, "b": vb})
    return {"a": a, "b": b, "fields": out}


# ---------------------------------------------------------------- logs and artifacts

def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def elsewhere(cell, boot_id: str) -> dict[str, Any] | None:
    """Where a boot's files live when that is another host: ``{host, host_id, dir, log_path, log_sha256}``;
    None when they are on this host (or the boot predates host records).

    Logs and traces stay on the host that made them; the store keeps host, path and sha256, so a
    panel on another host names the place instead of serving a file it does not have.
    """
    from dynocell.runbooks import hosts as rb_hosts

    with cell.store.session() as s:
        b = _resolve(s, m.Boot, boot_id, "boot")
        if not b.host_id or b.host_id == rb_hosts.this_host_id(cell):
            return None
        return {"host": _host_label(s, b.host_id, b.hostname), "host_id": b.host_id,
                "dir": str(Path(b.log_path).parent), "log_path": b.log_path, "log_sha256": b.log_sha256}


def _not_here(where: dict[str, Any]) -> NotFound:
    return NotFound(f"this file lives on host {where['host']} under {where['dir']}, not on this host",
                    "open the panel (or run the command) on that host; the store is shared")


def _boot_log(cell, boot_id: str) -> Path:
    where = elsewhere(cell, boot_id)
    if where is not None:
        raise _not_here(where)
    with cell.store.session() as s:
        b = _resolve(s, m.Boot, boot_id, "boot")
        log_path = b.log_path
    home = Path(cell.settings.home).resolve()
    p = Path(log_path).resolve()
    if not _inside(p, home):
        raise NotFound(f"log of boot {boot_id} is outside the data directory", "logs are served only from the data dir")
    return p


def log_tail(cell, boot_id: str, n: int = 200, search: str | None = None) -> dict[str, Any]:
    """The last ``n`` lines of a boot's log (only lines containing ``search``, case-insensitive, when given).

    Returns ``{boot_id, lines: [str], total_lines, matched, size (bytes), path, elsewhere}``. Lines are raw
    text — faces must escape them. A missing file gives no lines, not an error; so does a log that
    lives on another host (``elsewhere`` then says where, see :func:`elsewhere`).
    """
    n = max(1, min(int(n), 5000))
    where = elsewhere(cell, boot_id)
    if where is not None:
        return {"boot_id": boot_id, "lines": [], "total_lines": 0, "matched": 0, "size": 0,
                "path": where["log_path"], "elsewhere": where}
    p = _boot_log(cell, boot_id)
    needle = (search or "").lower()
    lines: deque[str] = deque(maxlen=n)
    total = matched = 0
    if p.is_file():
        with p.open("r", encoding="utf-8", errors="replace") as f:
            for line in f:
                total += 1
                if needle and needle not in line.lower():
                    continue
                matched += 1
                lines.append(line.rstrip("\n"))
    return {"boot_id": boot_id, "lines": list(lines), "total_lines": total, "matched": matched,
            "size": p.stat().st_size if p.is_file() else 0, "path": str(p), "elsewhere": None}


def list_artifacts(cell, boot_id: str) -> list[dict[str, Any]]:
    """Files under the boot's folder in the data dir (``boots/<id>/``): ``[{name, size}]``, name relative.
    Empty for a boot of another host (its files are there, see :func:`elsewhere`)."""
    if elsewhere(cell, boot_id) is not None:
        return []
    home = Path(cell.settings.home).resolve()
    base = (home / "boots" / boot_id).resolve()
    out = []
    if base.is_dir() and _inside(base, home):
        for p in sorted(base.rglob("*")):
            if p.is_file() and not p.is_symlink():
                out.append({"name": p.relative_to(base).as_posix(), "size": p.stat().st_size})
            if len(out) >= 200:
                break
    return out


_SAFE_NAME = re.compile(r"^[\w.\-/]+$")


def artifact_path(cell, boot_id: str, name: str) -> Path:
    """The file ``name`` of boot ``boot_id``, resolved ONLY inside the data directory.

    ``name`` is relative to ``<home>/boots/<boot id>/`` (the boot's log is also reachable as
    ``log``). Absolute names, ``..`` parts, odd characters, symlinks leading out, or anything
    not an existing regular file raise NotFound (HTTP 404) — never a hint of what exists.
    """
    home = Path(cell.settings.home).resolve()
    if name == "log":
        p = _boot_log(cell, boot_id)
        if p.is_file():
            return p
        raise NotFound("no such artifact", "see the boot page for its files")
    bad = (not name or not _SAFE_NAME.match(name) or name.startswith("/") or ".." in Path(name).parts
           or not re.match(r"^[\w\-]+$", boot_id))
    if bad:
        raise NotFound("no such artifact", "see the boot page for its files")
    with cell.store.session() as s:
        b = _resolve(s, m.Boot, boot_id, "boot")
        bid = b.id
    base = (home / "boots" / bid).resolve()
    p = (base / name).resolve()
    if not (_inside(p, base) and _inside(p, home)) or not p.is_file():
        raise NotFound("no such artifact", "see the boot page for its files")
    return p


# ---------------------------------------------------------------- knowledge (helper F's functions when present)

def _knowledge(cell) -> Any:
    """helper F's Knowledge for the cell (bundled + operator entries), or None when unavailable."""
    try:
        from dynocell.runbooks import knowledge
    except ImportError:
        return None
    try:
        return knowledge.knowledge_for(cell.settings)
    except Exception:  # noqa: BLE001 - a broken operator entry must not take the panel down
        return None


def search_entries(cell, query: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """Runbook entries matching ``query``: ``[{slug, title, kind, tags, snippet}]``.

    Uses ``dynocell.runbooks.knowledge.search`` (FTS5, bm25) for a query; an empty query lists
    every entry in effect. Falls back to the ``runbook_entries`` rows when knowledge is absent.
    """
    query = (query or "").strip()
    k = _knowledge(cell)
    if k is not None:
        from dynocell.runbooks import knowledge

        if query and re.search(r"\w", query):
            hits = knowledge.search(cell.store, k, query, limit=limit)
            out = []
            for h in hits:
                e = k.entries.get(h["slug"])
                out.append({"slug": h["slug"], "title": h["title"], "kind": h["kind"],
                            "tags": list(e.tags) if e else [], "snippet": h.get("snippet") or ""})
            return out
        return [{"slug": e.slug, "title": e.title, "kind": e.kind, "tags": list(e.tags),
                 "snippet": " ".join(e.body.split())[:200]} for e in sorted(k.entries.values(), key=lambda e: e.slug)]
    with cell.store.session() as s:
        q = select(m.RunbookEntry).order_by(m.RunbookEntry.slug).limit(limit)
        if query:
            like = "%" + query.replace("%", "") + "%"
            q = q.where(or_(m.RunbookEntry.title.ilike(like), m.RunbookEntry.body.ilike(like),
                            m.RunbookEntry.slug.ilike(like)))
        return [{"slug": e.slug, "title": e.title, "kind": e.kind, "tags": e.tags or [], "snippet": e.body[:200]}
                for e in s.scalars(q)]


def get_entry(cell, slug: str) -> dict[str, Any]:
    """One runbook entry ``{slug, title, kind, tags, front_matter, body (markdown), origin, fix, evidence,
    applies_to, applies_to_text}`` (``applies_to_text``: the selector in words).

    Raises NotFound when no entry (bundled, operator, or indexed row) has that slug.
    """
    from dynocell.runbooks.knowledge import selector_text

    k = _knowledge(cell)
    if k is not None:
        try:
            d = k.get(slug).to_dict()
            d["front_matter"] = k.get(slug).front_matter
            d["applies_to_text"] = selector_text(d.get("applies_to"))
            with cell.store.session() as s:
                d["notes"] = _notes(s, "entry", d["slug"])
            return d
        except NotFound:
            pass
    with cell.store.session() as s:
        e = s.get(m.RunbookEntry, slug)
        if e is None:
            raise NotFound(f"no runbook entry {slug!r}", "search the runbooks for the right slug")
        fm = e.front_matter or {}
        return {"slug": e.slug, "title": e.title, "kind": e.kind, "tags": e.tags or [],
                "front_matter": fm, "body": e.body, "origin": e.origin,
                "evidence": list(fm.get("evidence") or []), "fix": list(fm.get("fix") or []),
                "applies_to_text": selector_text(fm.get("applies_to")),
                "notes": _notes(s, "entry", e.slug)}


def add_note(cell, target_kind: str, target_id: str, text: str) -> int:
    """Attach a note to a target (config, boot, run, entry, experiment); returns the note id.

    Raises UserError on an empty text, an unknown kind or more than 20000 characters.
    """
    text = (text or "").strip()
    if target_kind not in ("config", "boot", "run", "entry", "experiment"):
        raise UserError(f"note target kind {target_kind!r} is unknown", "use config, boot, run, entry or experiment")
    if not text:
        raise UserError("note text is empty", "write something")
    if len(text) > 20_000:
        raise UserError("note is longer than 20000 characters", "shorten it or link a file")
    with cell.store.session() as s:
        note = m.Note(target_kind=target_kind, target_id=target_id, text=text)
        s.add(note)
        s.flush()
        return int(note.id)


def running_state(cell, run_id: str) -> str | None:
    """The state of run ``run_id`` (running, completed, failed, interrupted) or None when absent."""
    with cell.store.session() as s:
        r = s.get(m.Run, run_id)
        return r.state if r else None


# ---------------------------------------------------------------- web access tokens (write-side, tiny)

def web_token_create(cell, label: str | None = None) -> str:
    """Create a web-panel token; returns the clear token (print it once; only its scrypt hash is stored)."""
    from dynocell.db import web as dbweb

    return dbweb.create_token(cell.store, label)


def web_token_count(cell) -> int:
    """Number of live web-panel tokens."""
    from dynocell.db import web as dbweb

    return dbweb.count_tokens(cell.store)


def web_token_verify(cell, token: str) -> int | None:
    """Id of the live token equal to ``token``, or None."""
    from dynocell.db import web as dbweb

    return dbweb.verify_token(cell.store, token)


def web_token_live(cell, token_id: int) -> bool:
    """True when stored web token ``token_id`` exists and is not revoked."""
    from dynocell.db import web as dbweb

    return dbweb.is_live(cell.store, token_id)


def web_token_list(cell) -> list[dict[str, Any]]:
    """Every web token as ``{id, label, created_at, revoked_at}`` (never the token or its hash)."""
    from dynocell.db import web as dbweb

    return [{**t, "created_at": _aware(t["created_at"]), "revoked_at": _aware(t["revoked_at"])}
            for t in dbweb.list_tokens(cell.store)]


def web_token_revoke(cell, token_id: int) -> None:
    """Revoke web token ``token_id`` (its sessions end at their next request). Raises NotFound
    when no live token has that id."""
    from dynocell.db import web as dbweb

    if not dbweb.revoke_token(cell.store, token_id):
        raise NotFound(f"no live web token with id {token_id}", "see `dynocell web token list`")


# ---------------------------------------------------------------- cell and keys for faces

def reconcile_live(cell) -> None:
    """Settle live-looking boots whose supervisor died, exactly as ``dynocell ps`` does
    (:func:`dynocell.runbooks.boots.reconcile`: engine gone → ``lost``; orphaned engine → stopped)."""
    from dynocell.runbooks.boots import ps

    ps(cell)


def open_view_cell(settings) -> Any:
    """A cell for the faces: ``dynocell.runbooks.cell.open_cell(settings)`` when available, else a
    minimal object with ``.settings`` and ``.store`` (the migrated store at ``settings.db_url``)."""
    try:
        from dynocell.runbooks.cell import open_cell

        return open_cell(settings)
    except ImportError:
        from types import SimpleNamespace

        from dynocell.db.session import open_store

        return SimpleNamespace(settings=settings, store=open_store(settings.db_url))


def boot_key(cell, ref: str) -> str:
    """The full boot id ``ref`` (id or unique prefix) names; NotFound otherwise."""
    with cell.store.session() as s:
        return _resolve(s, m.Boot, ref, "boot").id
