"""The ``breakeven`` step: where the plain step time comes from (twin, stored measurement, the plain
config's runs) and the stored verdict; the maths is :mod:`dynocell.engine.breakeven`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dynocell.clock import iso_utc, now_utc
from dynocell.db import runs as db_runs
from dynocell.engine import breakeven as be
from dynocell.engine.config import EngineConfig
from dynocell.runbooks.cell import Cell
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
    spec_step = [r.extra.get("verify_step_ms_p50") for r in rows if r.extra and r.extra.get("verify_step_ms_p50")]
    spec_step_ms = sorted(spec_step)[len(spec_step) // 2] if spec_step else None
    if tau is None or spec_step_ms is None:
        raise SkipStep("needs τ and the speculative step time")
    if isinstance(plain, (int, float)):
        plain = {"step_ms": float(plain), "samples": [], "source": "given", "measured_at": now_utc().isoformat()}
    run = db_runs.get_run(cell.store, job.run_id)
    if cfg is not None:
        plain_cfg, plain_hash = plain_twin(cell, cfg)
    else:
        plain_cfg, plain_hash = None, ((run.lossless_detail if run else None) or {}).get("plain_config_hash")
    if plain is None and plain_hash:
        # a plain step is only reused from the same workload (prompt and output lengths set the step)
        wl = run.workload_sha256 if run else None
        plain = _stored_plain(cell, plain_hash, job.run_id, wl) or _plain_step_from_store(cell, plain_hash, wl)
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
        )
    age_s = None
    if plain.get("measured_at"):
        age_s = round((now_utc() - datetime.fromisoformat(iso_utc(plain["measured_at"]) or "")).total_seconds(), 1)
    result = {
        **be.margin(tau, spec_step_ms, plain["step_ms"], spec_step, plain.get("samples") or []),
        "plain_source": plain["source"],
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


def _stored_plain(
    cell: Cell,
    plain_hash: str,
    run_id: str,
    workload_sha256: str | None = None,
) -> dict[str, Any] | None:
    """The newest plain twin measurement of ``plain_hash`` on this host, stored by an earlier run's break-even
    on the same workload (``workload_sha256``; None = any, for runs that predate the column)."""
    import socket

    host = socket.gethostname()
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
            return {
                "step_ms": be["plain_step_ms"],
                "samples": be.get("plain_samples") or [],
                "source": f"stored plain twin measurement (run {r.id})",
                "measured_at": be.get("plain_measured_at"),
                "host": host,
                "run_id": r.id,
            }
    return None




def _plain_step_from_store(cell: Cell, plain_hash: str | None, workload_sha256: str | None = None,
                           ) -> dict[str, Any] | None:
    """TPOT p50 at concurrency 1 of the plain config's own newest completed run on the same workload
    (``workload_sha256``; None = any), as a plain measurement."""
    if not plain_hash:
        return None
    for r in db_runs.list_runs(cell.store, config_hash=plain_hash, states=("completed",), limit=5):
        if workload_sha256 and r.workload_sha256 and r.workload_sha256 != workload_sha256:
            continue
        vals = [b.tpot_ms.get("p50") for b in db_runs.bench_rows(cell.store, r.id) if b.concurrency == 1 and b.tpot_ms]
        vals = [v for v in vals if v]
        if vals:
            when = iso_utc(r.ended_at or r.started_at)
            return {
                "step_ms": sorted(vals)[len(vals) // 2],
                "samples": vals,
                "source": f"plain run {r.id} (TPOT p50, c=1)",
                "measured_at": when,
                "run_id": r.id,
            }
    return None
