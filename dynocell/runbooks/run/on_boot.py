"""``dynocell bench`` / ``dynocell profile``: the bench or profile steps alone against a boot that is already up.
"""

from __future__ import annotations

from typing import Any

from dynocell.clock import now_utc
from dynocell.db import runs as db_runs
from dynocell.engine import contention
from dynocell.engine.client import EngineClient
from dynocell.errors import EngineError, Interrupted, UserError
from dynocell.runbooks import boots, hosts
from dynocell.runbooks.cell import Cell
from dynocell.runbooks.run import context
from dynocell.runbooks.run.acceptance_step import run_acceptance
from dynocell.runbooks.run.bench_step import calibrate, run_bench
from dynocell.runbooks.run.job import (
    Progress, RunJob, SkipStep, StepFailed, engine_context_length, error_text, load_run_workload, noop_progress,
    sized_workload, this_pid,
)
from dynocell.runbooks.run.profile_step import run_profile
from dynocell.runbooks.run.summary_step import run_diagnose, summarize


def bench(cell: Cell, boot_ref: str, *, workload: str | None = None, progress: Progress | None = None,
          sizes: dict[str, Any] | None = None) -> str:
    """Benchmark a ready boot with a workload's throughput levels (and acceptance when speculative).

    Returns the id of a ``bench`` run holding the rows.
    """
    return _on_boot(cell, boot_ref, "bench", workload, progress, sizes=sizes)


def profile(cell: Cell, boot_ref: str, *, workload: str | None = None, progress: Progress | None = None) -> str:
    """Open a profiler window on a ready boot; returns the id of a ``profile`` run holding the rows."""
    return _on_boot(cell, boot_ref, "profile", workload, progress)


def run_on_boot(cell: Cell, boot_ref: str, *, workload: str | None = None, profile: bool = True,
                progress: Progress | None = None) -> str:
    """The main job on a boot that is already up (e.g. ``dynocell attach``): health → bench →
    acceptance → profile → diagnose; no boot, no lossless check (needs a plain boot), no stop.
    Returns the run id (kind ``run``)."""
    return _on_boot(cell, boot_ref, "run", workload, progress, profile_on=profile)


def _on_boot(cell: Cell, boot_ref: str, kind: str, workload_path: str | None, progress: Progress | None,
             profile_on: bool = True, sizes: dict[str, Any] | None = None) -> str:
    progress = progress or noop_progress
    boot = boots.reconcile(cell, boots.resolve_boot(cell, boot_ref))
    if boot["state"] != "ready" or not boot["engine_alive"]:
        if boot["state"] == "ready" and boot.get("kind") == "attached":
            raise UserError(f"boot {boot['id']} (attached) does not answer /health at {boot['host']}:{boot['port']}",
                            "start the engine again where it was started, then dynocell attach URL")
        raise UserError(f"boot {boot['id']} is {boot['state']}, not ready", "boot it first: dynocell boot CONFIG")
    cfg = boots.resolve_models(cell, boots.config_of_boot(cell, boot))
    live = boots.AttachedBoot.from_row(boot, cfg)
    run_id = boots.new_id()
    db_runs.create_run(cell.store, id=run_id, kind=kind, config_hash=boot["config_hash"], boot_id=boot["id"],
                       state="running", step=kind, pid=this_pid(), host_id=hosts.this_host_id(cell))
    job = RunJob(cell, run_id, progress)
    state, error = "completed", None
    workload = sized_workload(load_run_workload(workload_path), **(sizes or {}))
    db_runs.update_run(cell.store, run_id, workload=workload.name, workload_sha256=workload.sha256,
                       options={"temperature": workload.temperature, **(sizes or {})})
    client = EngineClient(live.base_url, cell.settings.http_timeout_s)
    ctx = engine_context_length(client, cfg)
    try:
        if kind == "run":  # the main job on a boot that is already up (attached): health first
            with job.step("health") as d:
                verdict = boots.health(cell, boot["id"])
                d.update(verdict=verdict.verdict, failed=verdict.failed)
                if verdict.verdict != "healthy":
                    raise EngineError(f"health verdict is {verdict.verdict}: {verdict.failed}",
                                      f"see `dynocell health {boot['id']}`")
        workload = calibrate(job, live, workload, ctx)
        if kind in ("bench", "run"):
            before = contention.read()
            try:
                with job.step("bench") as d:
                    d["tokens_per_byte"] = workload.tokens_per_byte
                    run_bench(job, live, workload, ctx, d)
                with job.step("acceptance") as d:
                    if not cfg.speculative_enabled:
                        raise SkipStep("no speculative decoding in this config")
                    run_acceptance(job, live, workload, ctx, d)
            finally:
                context.record_window(job, live, workload, ctx, before)
        if kind in ("profile", "run"):
            with job.step("profile") as d:
                if kind == "run" and not profile_on:
                    raise SkipStep("--no-profile")
                run_profile(job, live, workload, ctx, d)
        if kind == "run":
            with job.step("diagnose") as d:
                run_diagnose(job, d)
    except StepFailed as f:
        state, error = "failed", f"{f.name}: {error_text(f.error)}"
    except (KeyboardInterrupt, Interrupted):
        state, error = "interrupted", "interrupted by the operator"
    if state == "completed" and job.failed:
        state, error = "failed", "steps failed: " + ", ".join(job.failed)
    db_runs.update_run(cell.store, run_id, state=state, error=error, ended_at=now_utc(), summary=summarize(job))
    if state == "interrupted":
        raise Interrupted(f"{kind} {run_id} interrupted", f"dynocell show {run_id}")
    return run_id
