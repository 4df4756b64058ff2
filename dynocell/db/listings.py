"""The list and detail queries the faces need (dashboard, boots, runs, configs, entries), one read
transaction each, as plain JSON-able dicts (``datetime`` aware UTC, left as is).

This is the read side behind :mod:`dynocell.runbooks.views`: everything here is store-only; what
needs the engine domain (secret redaction, config parsing) or files (logs, artifacts) or the
markdown knowledge is added by the procedure. References (ids, prefixes, labels) go through
the one resolver, :mod:`dynocell.db.refs`; a missing thing raises :class:`~dynocell.errors.NotFound`.

Units follow the store (``*_s`` seconds, ``*_ms`` milliseconds, tok/s).
Acceptance: p_i (unconditional) and a_i = p_i / p_{i−1} per docs/DESIGN.md; τ = 1 + Σ p_i.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable

from sqlalchemy import desc, func, or_, select

from dynocell.clock import aware_utc, now_utc
from dynocell.db import refs, tables as m
from dynocell.db.boots import FAILED_STATES, LIVE_STATES
from dynocell.db.session import Store
from dynocell.errors import NotFound




def _row(obj: Any, fields: Iterable[str]) -> dict[str, Any]:
    out = {}
    for f in fields:
        v = getattr(obj, f)
        out[f] = aware_utc(v) if isinstance(v, datetime) else v
    return out


_BOOT_FIELDS = ("id", "config_hash", "build_hash", "engine", "hostname", "host", "host_id", "port", "pid", "pgid",
                "state", "last_phase", "log_path", "log_size", "started_at", "ready_at", "ready_s", "ended_at",
                "exit_code", "stop_how", "stop_s", "zombies", "failure_signature", "failure_detail", "argv", "kind")
_RUN_FIELDS = ("id", "kind", "config_hash", "boot_id", "build_hash", "host_id", "state", "step", "error", "options",
               "lossless", "lossless_detail", "breakeven", "summary", "started_at", "ended_at")
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
    end = d["ended_at"] or now_utc()
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
    end = d["ended_at"] or (now_utc() if r.state == "running" else None)
    d["duration_s"] = (end - d["started_at"]).total_seconds() if end and d["started_at"] else None
    return d


def _notes(s, kind: str, target: str) -> list[dict[str, Any]]:
    return [_row(n, ("id", "text", "created_at")) for n in
            s.scalars(select(m.Note).where(m.Note.target_kind == kind, m.Note.target_id == target)
                      .order_by(m.Note.id))]



# ---------------------------------------------------------------- dashboard / lists

def dashboard(store: Store, *, recent: int = 10, stale_s: float = 600.0) -> dict[str, Any]:
    """Fleet overview: ``{live_boots, recent_runs, failures, counts, hosts}``.

    ``live_boots``: boots in starting/ready/stopping with ``health`` (latest verdict or None),
    ``uptime_s`` (since ready, else since start), ``port``, ``last_tau`` (step-weighted τ of the
    boot's newest run). ``failures``: newest failed/crashed/lost boots with ``failure_signature``,
    plus failed runs (``kind`` "run"). ``hosts``: the live boots grouped by host (see :func:`_live_by_host`).
    Every boot and run row carries ``host_label``.
    """
    with store.session() as s:
        labels = _labels(s)
        live = [_boot_summary(s, b, labels) for b in
                s.scalars(select(m.Boot).where(m.Boot.state.in_(LIVE_STATES)).order_by(desc(m.Boot.started_at)))]
        runs = [_run_summary(s, r, labels) for r in
                s.scalars(select(m.Run).order_by(desc(m.Run.started_at)).limit(recent))]
        failures = []
        for b in s.scalars(select(m.Boot).where(m.Boot.state.in_(FAILED_STATES)).order_by(desc(m.Boot.started_at))
                           .limit(recent)):
            failures.append({"what": "boot", "id": b.id, "state": b.state, "signature": b.failure_signature,
                             "when": aware_utc(b.ended_at or b.started_at), "step": b.last_phase,
                             "labels": labels.get(b.config_hash, [])})
        for r in s.scalars(select(m.Run).where(m.Run.state.in_(("failed", "interrupted")))
                           .order_by(desc(m.Run.started_at)).limit(recent)):
            sig = None
            if r.boot_id:
                rb = s.get(m.Boot, r.boot_id)
                sig = rb.failure_signature if rb else None
            failures.append({"what": "run", "id": r.id, "state": r.state, "signature": sig,
                             "when": aware_utc(r.ended_at or r.started_at), "step": r.step, "error": r.error,
                             "labels": labels.get(r.config_hash, [])})
        failures.sort(key=lambda f: f["when"] or now_utc(), reverse=True)
        counts = {
            "configs": s.scalar(select(func.count()).select_from(m.Config)) or 0,
            "boots": s.scalar(select(func.count()).select_from(m.Boot)) or 0,
            "runs": s.scalar(select(func.count()).select_from(m.Run)) or 0,
        }
        by_host = _live_by_host(s, live, stale_s)
    return {"live_boots": live, "recent_runs": runs, "failures": failures[:recent], "counts": counts,
            "hosts": by_host, "generated_at": now_utc()}


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
            seen = aware_utc(h.last_seen_at) if h else None
            g = groups[key] = {"host_id": b.get("host_id"), "label": b["host_label"], "last_seen_at": seen,
                               "quiet": bool(seen and (now_utc() - seen).total_seconds() > stale_s),
                               "boots": [], "verdicts": []}
        g["boots"].append(b)
        if b.get("health"):
            g["verdicts"].append({"boot_id": b["id"], "verdict": b["health"]["verdict"], "ts": b["health"]["ts"]})
    return sorted(groups.values(), key=lambda g: g["label"])


def list_boots(store: Store, all: bool = False, *, limit: int = 200,  # noqa: A002 - CLI flag name
               host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Boots newest first (only live ones unless ``all``; only of ``host_ids`` when given), each as in
    :func:`dashboard`'s ``live_boots``."""
    with store.session() as s:
        labels = _labels(s)
        q = select(m.Boot).order_by(desc(m.Boot.started_at)).limit(limit)
        if host_ids is not None:
            q = q.where(m.Boot.host_id.in_(host_ids))
        if not all:
            q = q.where(m.Boot.state.in_(LIVE_STATES))
        return [_boot_summary(s, b, labels) for b in s.scalars(q)]


def host_choices(store: Store) -> list[dict[str, Any]]:
    """Every host of the store as ``{id, label}`` by label (for a face's host filter)."""
    with store.session() as s:
        rows = [{"id": h.id, "label": f"{h.hostname} ({h.id[:8]})"} for h in s.scalars(select(m.Host))]
    return sorted(rows, key=lambda r: r["label"])


def list_runs(store: Store, *, limit: int = 100, config_hash: str | None = None,
              host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Runs newest first with ``tau``, ``best_output_tok_s`` (tok/s, the best throughput level) and
    ``host_label``; only those of ``host_ids`` when given."""
    with store.session() as s:
        labels = _labels(s)
        q = select(m.Run).order_by(desc(m.Run.started_at)).limit(limit)
        if host_ids is not None:
            q = q.where(m.Run.host_id.in_(host_ids))
        if config_hash:
            q = q.where(m.Run.config_hash == config_hash)
        return [_run_summary(s, r, labels) for r in s.scalars(q)]


def _signature_entries(s, signature: str | None) -> list[dict[str, Any]]:
    """Indexed runbook entries naming ``signature`` (slug, a ``signatures`` item, or a tag):
    ``[{slug, title, kind}]`` — for when the markdown knowledge cannot be loaded."""
    if not signature:
        return []
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
                     "engine_tau", "engine_source", "disagreement_pct", "warning", "requests"))
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
        ph = s.scalars(select(m.ProfilePhases).where(m.ProfilePhases.profile_id == pr.id)).first()
        profile["phases"] = None if ph is None else _row(ph, ("state", "source", "total_ms", "phases", "ranks",
                                                               "reason", "created_at"))
        profile["kernels"] = [_row(x, ("name", "category", "ms", "launches")) for x in
                              s.scalars(select(m.ProfileKernel).where(m.ProfileKernel.profile_id == pr.id,
                                                                      m.ProfileKernel.rank == -1)
                                        .order_by(desc(m.ProfileKernel.ms)).limit(20))]
    findings = [_row(x, ("rule", "severity", "message", "evidence", "entries", "created_at")) for x in
                s.scalars(select(m.Finding).where(m.Finding.run_id == r.id).order_by(m.Finding.id))]
    return {"run": run, "steps": steps, "bench": bench, "curves": curves, "profile": profile,
            "findings": findings, "notes": _notes(s, "run", r.id)}


def run_detail(store: Store, run_id: str) -> dict[str, Any]:
    """One run: ``{run, steps, bench, curves, profile, findings, notes}``.

    ``bench``: levels by concurrency (latency dicts p50/p90/p99 in ms; throughputs tok/s, req/s).
    ``curves``: per text class with ``points`` ``[{position, p, a}]``, ``tau``, ``engine_tau``.
    ``profile``: newest profile window of the run with ``splits`` (all ranks, ms/pct/launches),
    ``rank_splits`` (``[{rank, device_ms, splits}]``, one per rank; empty for single-rank traces
    stored without per-rank rows), top ``kernels`` and ``phases`` (the speculative step's split,
    ``models.ProfilePhases`` columns, or None when never computed), or None. ``run.lossless`` /
    ``run.breakeven`` as stored. ``run_id``: an id or unique prefix (:mod:`dynocell.db.refs`). Raises NotFound.
    """
    with store.session() as s:
        r = _resolve(s, m.Run, run_id, "run")
        return _run_data(s, r, _labels(s))


# ---------------------------------------------------------------- configs

def list_configs(store: Store) -> list[dict[str, Any]]:
    """Configs newest first: ``{config_hash, engine, model_path, canonical_json, labels, created_at, boots, runs,
    last_tau}``."""
    with store.session() as s:
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
            d["canonical_json"] = c.canonical_json
            out.append(d)
        return out


# ---------------------------------------------------------------- boot, config and entry records

def boot_record(store: Store, ref: str) -> dict[str, Any]:
    """One boot's stored rows: ``{boot, events, health, runs, notes, entries, failure_signature, failure_detail,
    state, place}``. ``boot`` as in :func:`dashboard`'s ``live_boots``; ``events`` oldest first;
    ``health`` every verdict oldest first; ``entries`` the indexed entries naming its failure signature;
    ``place`` as :func:`boot_place`. ``ref``: id or unique prefix. Raises NotFound."""
    with store.session() as s:
        b = _resolve(s, m.Boot, ref, "boot")
        labels = _labels(s)
        return {
            "boot": _boot_summary(s, b, labels),
            "events": [_row(e, ("ts", "offset_s", "kind", "name", "detail")) for e in b.events],
            "health": [_row(h, ("ts", "verdict", "failed", "checks")) for h in
                       s.scalars(select(m.HealthCheck).where(m.HealthCheck.boot_id == b.id)
                                 .order_by(m.HealthCheck.id))],
            "runs": [_run_summary(s, r, labels) for r in
                     s.scalars(select(m.Run).where(m.Run.boot_id == b.id).order_by(desc(m.Run.started_at)))],
            "notes": _notes(s, "boot", b.id),
            "entries": _signature_entries(s, b.failure_signature),
            "failure_signature": b.failure_signature, "failure_detail": b.failure_detail, "state": b.state,
            "place": _place(s, b),
        }


def _place(s, b: m.Boot) -> dict[str, Any]:
    return {"id": b.id, "host_id": b.host_id, "host": _host_label(s, b.host_id, b.hostname),
            "log_path": b.log_path, "log_sha256": b.log_sha256}


def boot_place(store: Store, ref: str) -> dict[str, Any]:
    """Where a boot's files are: ``{id, host_id, host (label), log_path, log_sha256}``. Raises NotFound."""
    with store.session() as s:
        return _place(s, _resolve(s, m.Boot, ref, "boot"))


def runs_data(store: Store, run_refs: list[str]) -> list[dict[str, Any]]:
    """:func:`run_detail` of each of ``run_refs`` (ids or unique prefixes), in one transaction."""
    with store.session() as s:
        labels = _labels(s)
        return [_run_data(s, _resolve(s, m.Run, rid, "run"), labels) for rid in run_refs]


def config_record(store: Store, ref: str) -> dict[str, Any]:
    """One config (label, hash or unique prefix): ``{config, boots, runs, notes, trust}``; ``config`` has
    ``config_hash, engine, model_path, canonical_json, source_toml, created_at, labels``; boots and runs
    (newest 50 each) as in the lists; ``trust`` ``{by, at}`` or None. Raises NotFound."""
    with store.session() as s:
        c = _resolve(s, m.Config, ref, "config")
        labels = _labels(s)
        cfg = _row(c, ("config_hash", "engine", "model_path", "canonical_json", "source_toml", "created_at"))
        cfg["labels"] = labels.get(c.config_hash, [])
        boots = [_boot_summary(s, b, labels) for b in
                 s.scalars(select(m.Boot).where(m.Boot.config_hash == c.config_hash)
                           .order_by(desc(m.Boot.started_at)).limit(50))]
        runs = [_run_summary(s, r, labels) for r in
                s.scalars(select(m.Run).where(m.Run.config_hash == c.config_hash)
                          .order_by(desc(m.Run.started_at)).limit(50))]
        trust = s.get(m.ConfigTrust, c.config_hash)
        return {"config": cfg, "boots": boots, "runs": runs, "notes": _notes(s, "config", c.config_hash),
                "trust": None if trust is None else {"by": trust.trusted_by, "at": aware_utc(trust.trusted_at)}}


def config_heads(store: Store, refs_: list[str]) -> list[dict[str, Any]]:
    """``{config_hash, labels, canonical_json}`` of each config reference (for a diff). Raises NotFound."""
    with store.session() as s:
        labels = _labels(s)
        out = []
        for ref in refs_:
            c = _resolve(s, m.Config, ref, "config")
            out.append({"config_hash": c.config_hash, "labels": labels.get(c.config_hash, []),
                        "canonical_json": c.canonical_json})
        return out


def notes_of(store: Store, kind: str, target: str) -> list[dict[str, Any]]:
    """Notes on ``(kind, target)`` oldest first: ``[{id, text, created_at}]``."""
    with store.session() as s:
        return _notes(s, kind, target)


def search_entry_rows(store: Store, query: str, *, limit: int = 50) -> list[dict[str, Any]]:
    """Indexed runbook entries whose title, body or slug contain ``query`` (all when empty):
    ``[{slug, title, kind, tags, snippet}]`` — for when the markdown knowledge cannot be loaded."""
    with store.session() as s:
        q = select(m.RunbookEntry).order_by(m.RunbookEntry.slug).limit(limit)
        if query:
            like = "%" + query.replace("%", "") + "%"
            q = q.where(or_(m.RunbookEntry.title.ilike(like), m.RunbookEntry.body.ilike(like),
                            m.RunbookEntry.slug.ilike(like)))
        return [{"slug": e.slug, "title": e.title, "kind": e.kind, "tags": e.tags or [], "snippet": e.body[:200]}
                for e in s.scalars(q)]


def entry_row(store: Store, slug: str) -> dict[str, Any]:
    """One indexed runbook entry ``{slug, title, kind, tags, front_matter, body, origin, evidence, fix, notes}``.
    Raises NotFound."""
    with store.session() as s:
        e = s.get(m.RunbookEntry, slug)
        if e is None:
            raise NotFound(f"no runbook entry {slug!r}", "search the runbooks for the right slug")
        fm = e.front_matter or {}
        return {"slug": e.slug, "title": e.title, "kind": e.kind, "tags": e.tags or [],
                "front_matter": fm, "body": e.body, "origin": e.origin,
                "evidence": list(fm.get("evidence") or []), "fix": list(fm.get("fix") or []),
                "notes": _notes(s, "entry", e.slug)}
