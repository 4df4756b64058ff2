"""The ``breakeven`` step: where the plain step time comes from (twin, stored measurement, the plain
config's runs) and the stored verdict; the maths is :mod:`dynocell.engine.breakeven`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dynocell.clock import iso_utc, now_utc
from dynocell.db import runs as db_runs
from dynocell.engine import breakeven as be
from dynocell.engine import contention, stats
from dynocell.engine.config import EngineConfig
from dynocell.runbooks.cell import Cell
from dynocell.runbooks.run import context
from dynocell.runbooks.run.job import RunOptions, RunJob, SkipStep
from dynocell.runbooks.run.lossless_step import (
    boot_twin, lossless_prompts, plain_twin,
)


def run_breakeven(job: RunJob, plain: dict[str, Any] | float | None, d: dict[str, Any], *,
               cfg: EngineConfig | None = None, workload: Any = None, opts: RunOptions | None = None) -> None:
    """Speculation pays while a speculative step costs less than τ × the plain step (docs/DESIGN.md).

    The plain step time comes from, in order: the plain twin booted by this run's lossless
    check; the newest stored twin measurement of the same plain config (model, engine,
    patches) on this host, with its age; the plain config's own completed runs (TPOT p50 at
    concurrency 1); else a plain twin booted now (not with ``--no-lossless-check``, which opts out
    of the twin: then the step is skipped saying why). The margin carries a noise band
    and a ``verdict`` (:func:`dynocell.engine.breakeven.margin`: the maths and its source);
    ``pays`` keeps its meaning: spec step < budget.
    ``plain`` may be a bare plain step time in ms (source ``given``); without ``cfg`` the plain
    config is the one the run's lossless check used and no twin is booted here.
    """
    cell = job.cell
    curves = db_runs.curves(cell.store, job.run_id)
    if not curves:
        raise SkipStep("no acceptance curve")
    steps = sum(c.steps for c in curves)
    tau = sum(c.tau * c.steps for c in curves) / steps if steps else None
    rows = [r for r in db_runs.bench_rows(cell.store, job.run_id) if r.text_class]
    spec_step = [v for r in rows if r.extra and (v := r.extra.get("verify_step_ms_p50"))]
    spec_step_ms = sorted(spec_step)[len(spec_step) // 2] if spec_step else None
    if tau is None or spec_step_ms is None:
        raise SkipStep("needs τ and the speculative step time")
    if isinstance(plain, (int, float)):
        plain = {"step_ms": float(plain), "samples": [], "source": "given", "measured_at": now_utc().isoformat()}
    run = db_runs.get_run(cell.store, job.run_id)
    plain_hash: str | None
    if cfg is not None:
        plain_cfg, plain_hash = plain_twin(cell, cfg)
    else:
        plain_cfg, plain_hash = None, ((run.lossless_detail if run else None) or {}).get("plain_config_hash")
    ctx = context.of_run(run)
    fresh_why: list[str] = []
    if plain is None and plain_hash:
        # a plain step is only reused from a comparable measurement (issue 33): same workload (prompt and output
        # lengths set the step), host, engine version and dtype (the plain config's hash), young enough, and the
        # host about as busy as now
        wl = run.workload_sha256 if run else None
        plain = (_stored_plain(cell, plain_hash, job.run_id, wl, ctx, fresh_why)
                 or _plain_step_from_store(cell, plain_hash, wl, ctx, fresh_why))
    if plain is None and plain_cfg is not None and plain_hash and (opts is None or opts.lossless):
        plain = boot_twin(
            job,
            plain_cfg,
            plain_hash,
            lossless_prompts(workload),
            opts or RunOptions(),
            "to time the plain decode step for break-even",
        )
    if plain is None:
        raise SkipStep(
            "no plain step time: none stored for this model, engine, host and workload, and --no-lossless-check "
            "boots no plain twin (run once with the lossless check to measure it)"
            + (f"; not comparable: {'; '.join(fresh_why)}" if fresh_why else "")
        )
    age_s = _age_s(plain.get("measured_at"))
    records = [x for c in curves for x in (c.requests or ())]
    result = {
        **be.margin(tau, spec_step_ms, plain["step_ms"], spec_step, plain.get("samples") or [],
                    tau_interval=stats.tau_interval(records), effect_size=cell.settings.effect_size,
                    repeats=repeat_margins(cell, run) if run else ()),
        "plain_source": plain["source"],
        "plain_reused": plain.get("reused", False),
        "plain_fresh_why": "; ".join(fresh_why) if fresh_why and not plain.get("reused") else None,
        "plain_load_per_core": plain.get("load_per_core", _load_now()),
        "plain_age_s": age_s,
        "plain_config_hash": plain_hash,
        "plain_measured_at": plain.get("measured_at"),
        "plain_host": plain.get("host"),
        "plain_run_id": plain.get("run_id"),
        "plain_samples": plain.get("samples") or [],
        "spec_step_samples": [round(x, 4) for x in spec_step],
    }
    db_runs.update_run(cell.store, job.run_id, breakeven=result)
    d.update(result)


def repeat_margins(cell: Cell, run: Any) -> list[float]:
    """Break-even margins (fractions) of the completed runs of the same experiment as ``run``
    (:func:`dynocell.runbooks.run.context.same_experiment`): the margin's run-to-run variation
    (:func:`dynocell.engine.breakeven.margin`)."""
    return [float(o.breakeven["margin"]) for o in context.same_experiment(cell, run)
            if (o.breakeven or {}).get("margin") is not None]


def _age_s(when: Any) -> float | None:
    if not when:
        return None
    return round((now_utc() - datetime.fromisoformat(iso_utc(when) or "")).total_seconds(), 1)


def _load_now() -> float | None:
    return contention.read().load_per_core


def comparable(cell: Cell, measured_at: Any, load_then: Any, ctx_then: dict[str, Any], ctx_now: dict[str, Any],
               why: list[str], label: str) -> bool:
    """Whether a stored plain measurement may stand for this run's plain step (issue 33): younger than
    ``Settings.plain_reuse_max_age_s``, the host's load per core then and now within
    ``Settings.plain_reuse_load_band`` (when both are known), not contended, and the same engine version and
    dtype when both runs recorded them. Appends the reason to ``why`` when not (the report says why a plain
    step was measured fresh)."""
    s = cell.settings
    age = _age_s(measured_at)
    if age is None or age > s.plain_reuse_max_age_s:
        why.append(f"{label}: {'age unknown' if age is None else f'{age / 60:.0f} min old'} "
                   f"(reused below {s.plain_reuse_max_age_s / 60:.0f} min)")
        return False
    now = (ctx_now.get("contention") or {}).get("load_per_core", _load_now())
    # a row written before contention was recorded (load unknown) is judged by its age alone
    known = isinstance(load_then, (int, float)) and isinstance(now, (int, float))
    if known and abs(load_then - now) > s.plain_reuse_load_band:
        why.append(f"{label}: load {load_then:.2f} per core then vs {now:.2f} now")
        return False
    if contention.contended(ctx_then.get("contention")):
        why.append(f"{label}: measured under contention")
        return False
    for k in ("engine_version", "dtype"):
        if ctx_then.get(k) and ctx_now.get(k) and ctx_then.get(k) != ctx_now.get(k):
            why.append(f"{label}: {k} {ctx_then.get(k)} vs {ctx_now.get(k)}")
            return False
    return True


def _stored_plain(
    cell: Cell,
    plain_hash: str,
    run_id: str,
    workload_sha256: str | None = None,
    ctx: dict[str, Any] | None = None,
    why: list[str] | None = None,
) -> dict[str, Any] | None:
    """The newest plain twin measurement of ``plain_hash`` on this host, stored by an earlier run's break-even
    on the same workload (``workload_sha256``; None = any, for runs that predate the column), when
    :func:`comparable` to this run (``ctx``: its context; ``why`` collects the reasons one was not)."""
    import socket

    host = socket.gethostname()
    why = [] if why is None else why
    for r in db_runs.list_runs(cell.store, states=("completed", "failed"), limit=200):
        be = r.breakeven or {}
        if r.id == run_id or be.get("plain_config_hash") != plain_hash or be.get("plain_host") != host:
            continue
        if workload_sha256 and r.workload_sha256 and r.workload_sha256 != workload_sha256:
            continue
        if (
            be.get("plain_source") == "plain twin boot"
            and be.get("plain_run_id") == r.id
            and be.get("plain_step_ms")
        ):
            if not comparable(cell, be.get("plain_measured_at"), be.get("plain_load_per_core"), context.of_run(r),
                              ctx or {}, why, f"stored plain twin of run {r.id}"):
                return None  # the newest one is not comparable: measure fresh rather than reach further back
            return {
                "reused": True,
                "load_per_core": be.get("plain_load_per_core"),
                "step_ms": be["plain_step_ms"],
                "samples": be.get("plain_samples") or [],
                "source": f"stored plain twin measurement (run {r.id})",
                "measured_at": be.get("plain_measured_at"),
                "host": host,
                "run_id": r.id,
            }
    return None




def _plain_step_from_store(cell: Cell, plain_hash: str | None, workload_sha256: str | None = None,
                           ctx: dict[str, Any] | None = None, why: list[str] | None = None,
                           ) -> dict[str, Any] | None:
    """TPOT p50 at concurrency 1 of the plain config's own newest completed run on the same workload
    (``workload_sha256``; None = any), as a plain measurement, when :func:`comparable` to this run."""
    if not plain_hash:
        return None
    why = [] if why is None else why
    for r in db_runs.list_runs(cell.store, config_hash=plain_hash, states=("completed",), limit=5):
        if workload_sha256 and r.workload_sha256 and r.workload_sha256 != workload_sha256:
            continue
        p50s = [b.tpot_ms.get("p50") for b in db_runs.bench_rows(cell.store, r.id) if b.concurrency == 1 and b.tpot_ms]
        vals = [v for v in p50s if v]
        if vals:
            when = iso_utc(r.ended_at or r.started_at)
            rctx = context.of_run(r)
            load = (rctx.get("contention") or {}).get("load_per_core")
            if not comparable(cell, when, load, rctx, ctx or {}, why, f"plain run {r.id}"):
                return None
            return {
                "reused": True,
                "load_per_core": load,
                "step_ms": sorted(vals)[len(vals) // 2],
                "samples": vals,
                "source": f"plain run {r.id} (TPOT p50, c=1)",
                "measured_at": when,
                "run_id": r.id,
            }
    return None
