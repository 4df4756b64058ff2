"""Read-side views of the store for the faces (web panel, TUI): plain dicts, no ORM objects.

Every function takes a ``cell`` (anything with ``.store`` — a migrated
:class:`dynocell.db.session.Store` — and ``.settings`` — :class:`dynocell.settings.Settings`)
and returns JSON-able values (``datetime`` left as is). Ids may be given as
unique prefixes (:mod:`dynocell.db.refs`). Missing things raise :class:`dynocell.errors.NotFound`.

The queries live in :mod:`dynocell.db.listings`; this module adds what needs the engine domain
(secret redaction, config parsing), the markdown knowledge, hosts, and files (logs, artifacts).
Units follow the store (``*_s`` seconds, ``*_ms`` milliseconds, tok/s).
"""

from __future__ import annotations

import json
import re
import statistics
from collections import deque
from pathlib import Path
from typing import Any

from dynocell.boot_states import FAILED_STATES, LIVE_STATES  # noqa: F401 - faces read them here
from dynocell.db import listings, refs, runs as db_runs
from dynocell.clock import now_utc as _now
from dynocell.engine.adapters import REDACTED, redact_env
from dynocell.engine.breakeven import interval_basis  # noqa: F401 - faces read it here
from dynocell.errors import NotFound, UserError


# ---------------------------------------------------------------- dashboard / lists

def dashboard(cell, *, recent: int = 10) -> dict[str, Any]:
    """Fleet overview: ``{live_boots, recent_runs, failures, counts, hosts, generated_at}``
    (:func:`dynocell.db.listings.dashboard`; a host is quiet after ``settings.host_stale_s``)."""
    return listings.dashboard(cell.store, recent=recent, stale_s=cell.settings.host_stale_s)


def list_boots(cell, all: bool = False, *, limit: int = 200,  # noqa: A002 - CLI flag name
               host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Boots newest first (only live ones unless ``all``; only of ``host_ids`` when given), each as in
    :func:`dashboard`'s ``live_boots``."""
    return listings.list_boots(cell.store, all, limit=limit, host_ids=host_ids)


def host_choices(cell) -> list[dict[str, Any]]:
    """Every host of the store as ``{id, label}`` by label (for a face's host filter)."""
    return listings.host_choices(cell.store)


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
    return listings.list_runs(cell.store, limit=limit, config_hash=config_hash, host_ids=host_ids)


def latest_run_id(cell) -> str:
    """The id of the newest recorded run (what ``dynocell show`` and ``diagnose`` take with no argument).

    Raises :class:`~dynocell.errors.NotFound` (with the command that records one) when the store has no run.
    """
    rows = listings.list_runs(cell.store, limit=1)
    if not rows:
        raise NotFound("no run is recorded in this store yet", hint="record one: dynocell run")
    return str(rows[0]["id"])


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
    rec = listings.boot_record(cell.store, boot_id)
    boot, events = rec["boot"], label_model_phases(rec["events"])
    k = _knowledge(cell)
    entries = rec["entries"] if k is None else _signature_entries(k, rec["failure_signature"])
    detail = rec["failure_detail"]
    return {"boot": boot, "events": events, "phases": _phase_bars(boot, events), "health": rec["health"],
            "runs": rec["runs"], "notes": rec["notes"], "entries": entries,
            "artifacts": list_artifacts(cell, boot["id"]),
            "failure": failure_text(detail if rec["state"] in FAILED_STATES or rec["failure_signature"]
                                    or (detail or {}).get("reason") else None),
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
        if e.get("kind") == "phase" and name is not None and seen.get(name) == 2:
            e["model"] = ("target", "draft")[n.get(name, 0)]
            n[name] = n.get(name, 0) + 1
    return events


def _signature_entries(k: Any, signature: str | None) -> list[dict[str, Any]]:
    """Entries of the knowledge ``k`` linked to ``signature``: ``[{slug, title, kind}]``."""
    if not signature:
        return []
    return [{"slug": slug, "title": k.entries[slug].title, "kind": k.entries[slug].kind}
            for slug in k.for_signature(signature)]


# ---------------------------------------------------------------- runs

def run_detail(cell, run_id: str) -> dict[str, Any]:
    """One run: ``{run, steps, bench, curves, profile, findings, notes}``.

    ``bench``: levels by concurrency (latency dicts p50/p90/p99 in ms; throughputs tok/s, req/s).
    ``curves``: per text class with ``points`` ``[{position, p, a}]``, ``tau``, ``engine_tau``.
    ``profile``: newest profile window of the run with ``splits`` (all ranks, ms/pct/launches),
    ``rank_splits`` (``[{rank, device_ms, splits}]``, one per rank; empty for single-rank traces
    stored without per-rank rows), top ``kernels`` and ``phases`` (the speculative step's phase split,
    :mod:`dynocell.runbooks.phase_split`; None when not computed), or None. ``run.lossless`` /
    ``run.breakeven`` as stored.
    ``by_length``: acceptance by context length (:func:`length_curve_of`), or None without a length ladder.
    """
    detail = listings.run_detail(cell.store, run_id)
    detail["by_length"] = length_curve_of(detail)
    detail["judgment"] = judgment_of(cell, detail)
    return detail


def percentile_shown(q: float, n: Any) -> bool:
    """Whether a stored q-percentile of ``n`` samples is printed (:func:`dynocell.engine.stats.min_samples_for`:
    p90 needs ≥ 10, p99 ≥ 100); an unknown ``n`` (older rows) prints."""
    from dynocell.engine.stats import min_samples_for

    return not isinstance(n, int) or n >= min_samples_for(q)


def judgment_of(cell: Any, detail: dict[str, Any]) -> dict[str, Any]:
    """What a run's numbers can support (issue 33), for every face: ``{context, contended, temperature,
    requests_per_class, tau, tau_by_class}`` — ``context`` the stored comparability context
    (:mod:`dynocell.runbooks.run.context`; ``{}`` for older runs), ``contended`` why its window counts as contended
    (None: quiet or unknown), ``tau`` the step-weighted τ with its interval over requests
    (:func:`dynocell.engine.stats.tau_interval`, ``Interval.to_dict``; None with fewer than two requests) and
    ``tau_by_class`` the same per text class; ``decode_tok_s_c1`` the median per-request decode rate at
    concurrency 1 with its bootstrap interval (:func:`dynocell.engine.stats.bootstrap`, fixed seed). Each curve
    dict of ``detail["curves"]`` gets its ``tau_interval``."""
    from dynocell.engine import contention, stats

    run = detail.get("run") or {}
    opts = run.get("options") or {}
    ctx = dict(opts.get("context") or {})
    by_class: dict[str, Any] = {}
    pooled: list[Any] = []
    try:
        rows = db_runs.curves(cell.store, run["id"]) if run.get("id") else []
    except Exception:  # noqa: BLE001 - a report shows what it can
        rows = []
    for c in rows:
        recs = list(c.requests or ())
        pooled += recs
        iv = stats.tau_interval(recs)
        by_class[c.text_class] = iv.to_dict() if iv else None
    for c in detail.get("curves") or []:
        c["tau_interval"] = by_class.get(c.get("text_class"))
    overall = stats.tau_interval(pooled)
    wl = ctx.get("workload") or {}
    # decode tok/s per request at concurrency 1 (every c=1 row: the throughput level and the acceptance classes)
    try:
        brows = db_runs.bench_rows(cell.store, run["id"]) if run.get("id") else []
    except Exception:  # noqa: BLE001 - a report shows what it can
        brows = []
    dec = _c1_decode(brows)
    decode = stats.bootstrap(dec)
    row = db_runs.get_run(cell.store, run["id"]) if run.get("id") else None
    others = _same_experiment(cell, row)
    between = _between_runs(cell, others, overall, decode)
    _rejudge_breakeven(run, others)
    if between.get("tau") and overall:
        overall = _widened(overall, between["tau"]["sd_log"])
    if between.get("decode_tok_s_c1") and decode:
        decode = _widened(decode, between["decode_tok_s_c1"]["sd_log"])
    return {"context": ctx, "contended": contention.contended(ctx.get("contention")),
            "allow_contended": bool(opts.get("allow_contended")),
            "temperature": wl.get("temperature", opts.get("temperature")),
            "requests_per_class": wl.get("requests_per_class"),
            "tau": overall.to_dict() if overall else None, "tau_by_class": by_class,
            "decode_tok_s_c1": decode.to_dict() if decode else None, "between_runs": between}


def _c1_decode(brows: list[Any]) -> list[float]:
    """Each request's decode rate (tok/s) at concurrency 1: the throughput level and the acceptance classes."""
    return [v for b in brows if b.concurrency == 1
            for v in (((b.extra or {}).get("requests") or {}).get("decode_tok_s") or [])]


def _widened(iv: Any, sd_log: float) -> Any:
    """``iv`` with its half-widths on the log scale raised to at least z · ``sd_log`` (the run-to-run SD of
    ln value: :func:`dynocell.engine.stats.between_runs_sd`), around the same point."""
    import dataclasses
    import math

    from dynocell.engine import stats

    if iv.value <= 0 or iv.lo <= 0:
        return iv
    w = stats.z_of(iv.level) * sd_log
    lo = min(iv.lo, iv.value * math.exp(-w))
    hi = max(iv.hi, iv.value * math.exp(w))
    return dataclasses.replace(iv, lo=lo, hi=hi)


def _same_experiment(cell: Any, row: Any) -> list[Any]:
    from dynocell.runbooks.run.context import same_experiment

    if row is None:
        return []
    try:
        return same_experiment(cell, row)
    except Exception:  # noqa: BLE001 - a report shows what it can
        return []


def _rejudge_breakeven(run: dict[str, Any], others: list[Any]) -> None:
    """Replace ``run["breakeven"]`` by its verdict with the margins of every other run of the same experiment
    as the run-to-run spread (:func:`dynocell.engine.breakeven.margin` ``repeats``): a report read after
    the repeats were made shows the interval they measure, not the narrower one known when the run ran."""
    from dynocell.engine import breakeven

    be = run.get("breakeven") or {}
    reps = [float(o.breakeven["margin"]) for o in others if (o.breakeven or {}).get("margin") is not None]
    need = ("tau", "spec_step_ms", "plain_step_ms")
    if not reps or not all(isinstance(be.get(k), (int, float)) and be[k] > 0 for k in need):
        return
    # τ's own interval is inside the stored one, which bounds the result below
    again = breakeven.margin(be["tau"], be["spec_step_ms"], be["plain_step_ms"],
                             list(be.get("spec_step_samples") or []), list(be.get("plain_samples") or []),
                             repeats=reps)
    if not again.get("between_runs"):
        return
    stored = be.get("interval")
    lo, hi = again["interval"]
    if stored:  # never narrower than what the run itself stored (its τ interval is inside that one)
        lo, hi = min(lo, stored[0]), max(hi, stored[1])
    verdict = breakeven.interval_verdict(lo, hi)
    run["breakeven"] = {**be, "interval": [round(lo, 4), round(hi, 4)], "verdict": verdict,
                        "decide": again["decide"] if verdict == "within noise" else None,
                        "between_runs": again["between_runs"], "stored_verdict": be.get("verdict")}


def _between_runs(cell: Any, others: list[Any], tau: Any, decode: Any) -> dict[str, Any]:
    """``{tau, decode_tok_s_c1}``: each ``{runs, sd_log}`` over this run and ``others``, the other completed
    runs of the same experiment (:func:`dynocell.runbooks.run.context.same_experiment`), or None with fewer
    than :data:`dynocell.engine.stats.MIN_RUNS` runs (then ``note`` says the run-to-run spread is not
    measured). The printed intervals are widened to it: identical runs moved 2× on an H200 while each run's
    interval over its own requests was ±5 % (issue 33)."""
    from dynocell.engine import stats

    out: dict[str, Any] = {"tau": None, "decode_tok_s_c1": None}
    taus = [tau.value if tau else None]
    decs = [decode.value if decode else None]
    for o in others:
        recs = [x for c in db_runs.curves(cell.store, o.id) for x in (c.requests or ())]
        iv = stats.tau_interval(recs)
        taus.append(iv.value if iv else None)
        d = _c1_decode(db_runs.bench_rows(cell.store, o.id))
        decs.append(statistics.median(d) if d else None)  # the median, as this run's bootstrap point is
    for key, vals in (("tau", taus), ("decode_tok_s_c1", decs)):
        sd = stats.between_runs_sd(vals)
        n = sum(1 for v in vals if v)
        out[key] = {"runs": n, "sd_log": round(sd, 4)} if sd is not None else None
    if not any(out.values()):
        with_values = max(sum(1 for v in taus if v), sum(1 for v in decs if v))
        out["note"] = (f"run-to-run spread not measured: {len(others) + 1} run(s) of this experiment (same config, "
                       f"workload, host, version), {with_values} with per-request τ or decode records; "
                       f"{stats.MIN_RUNS} or more such runs measure it")
    return out


def length_curve_of(detail: dict[str, Any]) -> dict[str, Any] | None:
    """Acceptance by context length of a run detail (issue 22, shape 5): the acceptance step's ``by_length``
    buckets with the break-even per bucket against the run's plain step
    (:func:`dynocell.engine.length_curve.with_breakeven`: ``{buckets, plain_step_ms, crossover_tokens, note}``;
    each bucket ``{input_tokens, prompt_tokens, requests, tau, accept_rate, p, steps, verify_step_ms,
    breakeven_tau, speedup, pays}``), or None when the run measured one length only."""
    from dynocell.engine.length_curve import with_breakeven

    step = next((s for s in detail.get("steps") or [] if s.get("name") == "acceptance"), None)
    rows = ((step or {}).get("detail") or {}).get("by_length")
    if not rows:
        return None
    plain = ((detail.get("run") or {}).get("breakeven") or {}).get("plain_step_ms")
    return with_breakeven(rows, plain)

def compare_runs(cell, run_ids: list[str]) -> dict[str, Any]:
    """Side by side: ``{runs: [run_detail…], throughput: [...], splits: [...]}``; first run is the base.

    ``throughput``: per (concurrency, text_class) ``{concurrency, text_class, values: [tok/s|None],
    deltas_pct: [None|%]}``; ``splits``: per category ``{category, pct: [...], delta_pp: [...]}``
    (percentage points against the base). ``hardware_warning``: a sentence when the runs come from
    hosts of different hardware (CPU, GPU names/memory/driver, CUDA), else None. Raises UserError with
    fewer than two runs.
    """
    given = [x.strip() for x in run_ids]
    if "" in given:
        raise UserError("compare: an empty run id was given", "pick two or more runs (ids or prefixes): dynocell runs")
    ids = list(dict.fromkeys(given))
    if len(ids) < len(given):
        twice = next(x for i, x in enumerate(given) if x in given[:i])
        raise UserError(f"compare: run {twice!r} was given twice", "pick two or more different runs")
    if len(ids) < 2:
        raise UserError("compare needs at least two runs", "pick two or more runs (ids or prefixes)")
    runs = listings.runs_data(cell.store, ids)
    keys = sorted({(b["concurrency"], b["text_class"] or "") for r in runs for b in r["bench"]})
    throughput = []
    for conc, tc in keys:
        vals = []
        for r in runs:
            match = [b["output_tok_s"] for b in r["bench"]
                     if b["concurrency"] == conc and (b["text_class"] or "") == tc]
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

def list_configs(cell) -> list[dict[str, Any]]:
    """Configs newest first: ``{config_hash, engine, model_path, labels, created_at, boots, runs, last_tau,
    injection_env, concerns}`` (``injection_env``: the config's ``[env]`` names off the allow-list;
    ``concerns``: its trust concerns, :func:`~dynocell.engine.config.trust_concerns`)."""
    out = []
    for d in listings.list_configs(cell.store):
        canonical_json = d.pop("canonical_json")
        d["injection_env"] = _env_marks(canonical_json)[0]
        d["concerns"] = _concerns(canonical_json)
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
    rec = listings.config_record(cell.store, ref)
    cfg, boots, runs, notes = rec["config"], rec["boots"], rec["runs"], rec["notes"]
    traps = _traps(cell, cfg["canonical_json"])
    injection, secrets = _env_marks(cfg["canonical_json"])
    canonical = json.loads(cfg["canonical_json"])
    if secrets:
        from dynocell.engine.config import config_from_canonical, redact_args, to_toml

        canonical["env"] = redact_env(canonical.get("env") or {})
        if isinstance(canonical.get("extra_args"), list):
            canonical["extra_args"] = redact_args(canonical["extra_args"])
        cfg["canonical_json"] = json.dumps(canonical, sort_keys=True)
        shown = config_from_canonical(json.dumps(canonical))
        cfg["source_toml"] = ("# secret [env] values are redacted (the hash covers the real ones); the TOML as "
                              "written is not shown\n" + to_toml(shown))
    cfg["injection_env"] = injection
    cfg["concerns"] = _concerns(cfg["canonical_json"])  # names, patches, host: redaction keeps them
    cfg["trusted"] = rec["trust"]
    return {"config": cfg, "canonical": canonical, "boots": boots, "runs": runs, "traps": traps, "notes": notes}


def _concerns(canonical_json: str) -> list[str]:
    """The trust concerns (:func:`~dynocell.engine.config.trust_concerns`) of a stored config; for an
    observed one (what an engine revealed, never booted from here) its ``[env]`` names only."""
    from dynocell.engine.config import config_from_canonical, injection_env_keys, trust_concerns

    data = json.loads(canonical_json)
    if data.get("observed"):
        keys = injection_env_keys(data.get("env") or {})
        return [f"env sets {', '.join(keys)}"] if keys else []
    return trust_concerns(config_from_canonical(canonical_json))


def _env_marks(canonical_json: str) -> tuple[list[str], list[str]]:
    """``(env names off the allow-list, what holds a secret)`` of a stored config: secret-looking env
    names, env names whose value holds a URL password, and ``extra_args`` when a secret flag's value
    (``--api-key KEY``) is in it."""
    from dynocell.engine.config import injection_env_keys, redact_args

    data = json.loads(canonical_json)
    env = data.get("env") or {}
    args = data.get("extra_args") if isinstance(data.get("extra_args"), list) else []
    secrets = sorted(k for k, v in redact_env(env).items() if v != env[k])
    if redact_args(args) != args:
        secrets.append("extra_args")
    return injection_env_keys(env), secrets


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

    ha, hb = listings.config_heads(cell.store, [ref_a, ref_b])
    a = {"config_hash": ha["config_hash"], "labels": ha["labels"]}
    b = {"config_hash": hb["config_hash"], "labels": hb["labels"]}
    fields = diff_configs(config_from_canonical(ha["canonical_json"]), config_from_canonical(hb["canonical_json"]))
    out = []
    from dynocell.engine.config import redact_args, redact_value

    for f, va, vb in fields:
        if f.startswith("env.") and redact_env({f[4:]: ""}).get(f[4:]) != "":
            va, vb = (None if va is None else REDACTED), (None if vb is None else REDACTED)
        elif f.startswith("env."):
            va, vb = (None if va is None else redact_value(va)), (None if vb is None else redact_value(vb))
        elif f == "extra_args":
            va, vb = (None if va is None else redact_args(va)), (None if vb is None else redact_args(vb))
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

    place = listings.boot_place(cell.store, boot_id)
    if not place["host_id"] or place["host_id"] == rb_hosts.this_host_id(cell):
        return None
    return {"host": place["host"], "host_id": place["host_id"], "dir": str(Path(place["log_path"]).parent),
            "log_path": place["log_path"], "log_sha256": place["log_sha256"]}

def _not_here(where: dict[str, Any]) -> NotFound:
    return NotFound(f"this file lives on host {where['host']} under {where['dir']}, not on this host",
                    "open the panel (or run the command) on that host; the store is shared")


def _private(cell, p: Path) -> bool:
    """Whether ``p`` (resolved) holds secrets no face may serve: anything under the secrets folder
    (:attr:`~dynocell.settings.Settings.secrets_dir`, the configs' real values) and SGLang's
    ``--config`` file of secret flags a boot writes beside its log
    (:data:`dynocell.engine.adapters.SGLANG_SECRETS_FILE`)."""
    from dynocell.engine.adapters import SGLANG_SECRETS_FILE

    secrets = Path(cell.settings.secrets_dir).resolve()
    return p.name == SGLANG_SECRETS_FILE or _inside(p, secrets)


def _boot_log(cell, boot_id: str) -> Path:
    where = elsewhere(cell, boot_id)
    if where is not None:
        raise _not_here(where)
    log_path = listings.boot_place(cell.store, boot_id)["log_path"]
    home = Path(cell.settings.home).resolve()
    p = Path(log_path).resolve()
    if not _inside(p, home) or _private(cell, p):  # a row (another host's, say) may name any path
        raise NotFound(f"log of boot {boot_id} is outside the data directory", "logs are served only from the data dir")
    return p


def log_tail(cell, boot_id: str, n: int = 200, search: str | None = None) -> dict[str, Any]:
    """The last ``n`` lines of a boot's log (only lines containing ``search``, case-insensitive, when given);
    ``boot_id`` is any reference to one boot (id or unique prefix; NotFound / AmbiguousRef else).

    Returns ``{boot_id (the full id), lines: [str], total_lines, matched, size (bytes), path, elsewhere, unavailable}``.
    Lines are raw text — faces must escape them. A missing file gives no lines, not an error; so does a log
    that lives on another host (``elsewhere`` then says where, see :func:`elsewhere`) and one recorded outside
    this data directory (a store copied from another data directory; only files inside it are served):
    ``unavailable`` then says why, else it is None.
    """
    n = max(1, min(int(n), 5000))
    boot_id = refs.resolve_key(cell.store, boot_id, "boot")  # the id, not the prefix a request gave
    where = elsewhere(cell, boot_id)
    if where is not None:
        return {"boot_id": boot_id, "lines": [], "total_lines": 0, "matched": 0, "size": 0,
                "path": where["log_path"], "elsewhere": where, "unavailable": None}
    try:
        p = _boot_log(cell, boot_id)
    except NotFound:  # recorded outside the data directory: the boot's page still shows the rest
        path = listings.boot_place(cell.store, boot_id)["log_path"]
        return {"boot_id": boot_id, "lines": [], "total_lines": 0, "matched": 0, "size": 0, "path": path,
                "elsewhere": None, "unavailable": f"the log was recorded at {path}, outside this data directory "
                                                  f"({cell.settings.home}): the panel serves only files inside it"}
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
            "size": p.stat().st_size if p.is_file() else 0, "path": str(p), "elsewhere": None, "unavailable": None}


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
            if p.is_file() and not p.is_symlink() and not _private(cell, p.resolve()):
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
    bid = refs.resolve_key(cell.store, boot_id, "boot")
    base = (home / "boots" / bid).resolve()
    p = (base / name).resolve()
    if not (_inside(p, base) and _inside(p, home)) or not p.is_file() or _private(cell, p):
        raise NotFound("no such artifact", "see the boot page for its files")
    return p


# ---------------------------------------------------------------- knowledge (helper F's functions when present)

def _knowledge(cell) -> Any:
    """The Knowledge for the cell (bundled + operator entries), or None when it cannot be loaded."""
    from dynocell.runbooks import knowledge

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
                e = k.entries.get(h.slug)
                out.append({"slug": h.slug, "title": h.title, "kind": h.kind,
                            "tags": list(e.tags) if e else [], "snippet": h.snippet or ""})
            return out
        return [{"slug": e.slug, "title": e.title, "kind": e.kind, "tags": list(e.tags),
                 "snippet": " ".join(e.body.split())[:200]} for e in sorted(k.entries.values(), key=lambda e: e.slug)]
    return listings.search_entry_rows(cell.store, query, limit=limit)

def get_entry(cell, slug: str) -> dict[str, Any]:
    """One runbook entry ``{slug, title, kind, tags, front_matter, body (markdown), origin, fix, evidence,
    applies_to, applies_to_text}`` (``applies_to_text``: the selector in words).

    Raises NotFound when no entry (bundled, operator, or indexed row) has that slug.
    """
    from dynocell.runbooks.knowledge import selector_text

    k = _knowledge(cell)
    missing: NotFound | None = None
    if k is not None:
        try:
            d = k.get(slug).to_dict()
            d["front_matter"] = k.get(slug).front_matter
            d["applies_to_text"] = selector_text(d.get("applies_to"))
            d["notes"] = listings.notes_of(cell.store, "entry", d["slug"])
            return d
        except refs.AmbiguousRef:
            raise
        except NotFound as exc:
            missing = exc  # the knowledge's reason (too short a prefix) unless an indexed row has the slug
    try:
        d = listings.entry_row(cell.store, slug)
    except NotFound:
        if missing is not None:
            raise missing from None
        raise
    d["applies_to_text"] = selector_text(d["front_matter"].get("applies_to"))
    return d

def running_state(cell, run_id: str) -> str | None:
    """The state of run ``run_id`` (running, completed, failed, interrupted) or None when absent."""
    r = db_runs.get_run(cell.store, run_id)
    return r.state if r else None


# ---------------------------------------------------------------- cell and keys for faces

def reconcile_live(cell) -> None:
    """Settle live-looking boots whose supervisor died, exactly as ``dynocell ps`` does
    (:func:`dynocell.runbooks.boots.reconcile`: engine gone → ``lost``; orphaned engine → stopped)."""
    from dynocell.runbooks.boots import reconcile_and_list

    reconcile_and_list(cell)


def open_view_cell(settings) -> Any:
    """A cell for the faces: :func:`dynocell.runbooks.cell.open_cell` over ``settings``."""
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


def boot_key(cell, ref: str) -> str:
    """The full boot id ``ref`` (id or unique prefix) names; NotFound otherwise."""
    return refs.resolve_key(cell.store, ref, "boot")
