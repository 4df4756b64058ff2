"""The main job, ``dynocell run``: one config on the stand, a complete record in the store.

Steps, each a ``run_steps`` row written as it starts and ends (docs/DESIGN.md,
"Data flow of the main job"):

    config → build → model → boot → health → bench → acceptance → lossless → profile
    → breakeven → diagnose → stop

(``model``: finding — or, for a seed that is not packaged, making — the built-in
reference pair, so its minutes are never counted as ``boot``.) Essential steps
(config, build, model, boot, health, bench) end the run when they
fail; the others are recorded as failed and the run goes on. Whatever
happens — a failed step, Ctrl-C, SIGTERM — the engine is stopped and the run
row says how it ended (``completed`` / ``failed`` / ``interrupted``) and at
which step. This module is the orchestration; each step's body is its own module.
"""

from __future__ import annotations

from typing import Any

from dynocell.clock import now_utc
from dynocell.db import runs as db_runs
from dynocell.engine import contention
from dynocell.engine.config import EngineConfig, trust_warning
from dynocell.errors import EngineError, Interrupted
from dynocell.runbooks import boots, events, hosts
from dynocell.runbooks.cell import Cell
from dynocell.runbooks.run import context
from dynocell.runbooks.run.acceptance_step import run_acceptance
from dynocell.runbooks.run.bench_step import calibrate, run_bench
from dynocell.runbooks.run.breakeven_step import run_breakeven
from dynocell.runbooks.run.health_step import run_health
from dynocell.runbooks.run.job import (
    DEFAULT_CONFIG, Progress, RunJob, RunOptions, SkipStep, StepFailed, engine_context_length, error_text,
    load_run_workload, noop_progress, sized_workload, this_pid,
)
from dynocell.runbooks.run.lossless_step import record_goldens, run_lossless
from dynocell.runbooks.run.profile_step import run_profile
from dynocell.runbooks.run.summary_step import run_diagnose, summarize, warn_concurrent


def run_job(
    cell: Cell,
    config_ref: str | None = None,
    *,
    options: RunOptions | None = None,
    progress: Progress | None = None,
) -> str:
    """Run the main job on ``config_ref`` (name, hash, prefix or TOML path; None = embedded default).

    Returns the run id. Rows are written as each step finishes. Raises
    :class:`~dynocell.errors.Interrupted` after recording an interrupted run
    (the engine is stopped first); other failures are recorded and the run id
    is returned with state ``failed``. A bad config or workload file raises
    ConfigError / UserError before any row is written or engine started.
    """
    from dynocell.runbooks.configs import resolve_config

    opts = options or RunOptions()
    progress = progress or noop_progress
    cfg, config_hash = resolve_config(cell, str(config_ref or DEFAULT_CONFIG))
    # A bad workload file is the operator's mistake: refuse it now (UserError, nothing written),
    # not after a boot and a health check.
    workload = sized_workload(load_run_workload(opts.workload), opts.requests)
    run_id = boots.new_id()
    db_runs.create_run(cell.store, id=run_id, kind="run", config_hash=config_hash, state="running",
                       step="config", options=opts.as_dict(), pid=this_pid(), host_id=hosts.this_host_id(cell))
    events.publish("run.started", run_id=run_id, config_hash=config_hash)
    job = RunJob(cell, run_id, progress)
    live: boots.LiveBoot | None = None
    before: contention.Reading | None = None
    context_length: int | None = None
    state, error = "completed", None
    crashed: str | None = None  # "engine was killed by SIGKILL while ready" when it died under the run
    try:
        with job.step("config") as d:
            d.update(config_hash=config_hash, name=cfg.name, engine=cfg.engine)
            job.env_warning = trust_warning(cfg)
            if job.env_warning:
                d["warning"] = job.env_warning
                progress(job.env_warning, {"warning": job.env_warning})
        build: dict[str, Any] | None = None
        with job.step("build") as d:
            build = _build(cell, cfg, d)
        with job.step("model") as d:
            _model(job, cfg, d)
        with job.step("boot") as d:
            boot_id = boots.new_id()
            d["boot_id"] = boot_id
            # The boot row is created by start_boot; link the run first so a failed boot stays linked.
            start = boots.start_boot
            live = start(cell, cfg, config_hash, timeout_s=opts.boot_timeout_s, build=build, boot_id=boot_id,
                         progress=progress, on_created=lambda: db_runs.update_run(
                             cell.store, run_id, boot_id=boot_id, build_hash=(build or {}).get("build_hash")))
            d.update(boot_id=live.boot_id, ready_s=live.ready_s, port=live.spec.port)
        warn_concurrent(job, live.boot_id)
        with job.step("health") as d:
            verdict = run_health(cell, live, d)
            if verdict != "healthy":
                raise EngineError(f"health verdict is {verdict}: {d.get('failed')}",
                                  f"see `dynocell health {live.boot_id}` and `dynocell logs {live.boot_id}`")
        db_runs.update_run(cell.store, run_id, workload=workload.name, workload_sha256=workload.sha256,
                           options={**opts.as_dict(), "temperature": workload.temperature, "draft_proposal": "top1"})
        client = live.client(cell.settings.http_timeout_s)
        context_length = engine_context_length(client, live.cfg)
        before = contention.read()
        with job.step("bench") as d:
            workload = calibrate(job, live, workload, context_length)
            d["tokens_per_byte"] = workload.tokens_per_byte
            run_bench(job, live, workload, context_length, d)
        spec_on = live.cfg.speculative_enabled
        with job.step("acceptance") as d:
            if not spec_on:
                raise SkipStep("no speculative decoding in this config")
            run_acceptance(job, live, workload, context_length, d)
        context.record_window(job, live, workload, context_length, before)
        plain: dict[str, Any] | None = None
        with job.step("lossless") as d:
            if not spec_on:
                if opts.lossless:
                    n = record_goldens(job, live, workload)
                    raise SkipStep(f"no speculative decoding; recorded {n} greedy golden(s) for later lossless checks")
                raise SkipStep("no speculative decoding in this config")
            if not opts.lossless:
                raise SkipStep("--no-lossless-check")
            plain = run_lossless(job, live, cfg, workload, opts, d)
        with job.step("profile") as d:
            if not opts.profile:
                raise SkipStep("--no-profile")
            run_profile(job, live, workload, context_length, d)
        with job.step("breakeven") as d:
            if not spec_on:
                raise SkipStep("no speculative decoding in this config")
            run_breakeven(job, plain, d, cfg=cfg, workload=workload, opts=opts)
    except StepFailed as f:
        state, error = "failed", f"{f.name}: {error_text(f.error)}"
        if before is not None and live is not None:
            context.record_window(job, live, workload, context_length, before)
    except (KeyboardInterrupt, Interrupted):
        state, error = "interrupted", "interrupted by the operator"
    finally:
        if live is not None:
            warn_concurrent(job, live.boot_id)  # one that started while this run measured
            with job.step("stop") as d:
                d.update(boots.stop_live(cell, live, opts.stop_grace_s, reason=f"run {run_id} {state}"))
            crashed = d.get("crashed")
        if state != "interrupted" and opts.diagnose:
            with job.step("diagnose") as d:
                run_diagnose(job, d)
        state, error = _outcome(state, error, job.failed, crashed)
        db_runs.interrupt_running_steps(cell.store, run_id, "interrupted")
        db_runs.update_run(cell.store, run_id, state=state, error=error, ended_at=now_utc(),
                           summary=summarize(job))
        events.publish("run.ended", run_id=run_id, state=state, error=error)
        progress(f"run {run_id} {state}" + (f": {error}" if error else ""), {"run_id": run_id, "state": state})
    if state == "interrupted":
        raise Interrupted(f"run {run_id} interrupted; the engine was stopped and the steps done are recorded",
                          f"dynocell show {run_id}")
    return run_id


def _outcome(state: str, error: str | None, failed: list[str], crashed: str | None) -> tuple[str, str | None]:
    """The run's final ``(state, error)``: a run whose steps failed is ``failed``; an engine that
    died under it (``crashed``: "engine was killed by SIGKILL while ready") fails it too, and its
    death comes first in the error — the steps' errors are only its symptoms."""
    if state == "completed" and failed:
        state, error = "failed", "steps failed: " + ", ".join(failed)
    if crashed:
        state = "failed" if state == "completed" else state
        error = crashed + (f"; {error}" if error else "")
    return state, error


def _build(cell: Cell, cfg: EngineConfig, d: dict[str, Any]) -> dict[str, Any] | None:
    if not cfg.patches:
        raise SkipStep("no patches: the engine runs as installed")
    from dynocell.runbooks import builds

    build = builds.ensure_build(cell, cfg)
    d.update(build_hash=build["build_hash"], base_version=build.get("base_version"), patches=build.get("patches"))
    # A boot that would run unpatched code must fail loudly, before the engine starts.
    d["sglang_file"] = builds.check_import(cell, build, cfg)
    return build


def _model(job: RunJob, cfg: EngineConfig, d: dict[str, Any]) -> None:
    """Find (or make) the built-in reference pair the config names, before the boot's clock starts."""
    resolved = boots.resolve_models(job.cell, cfg, progress=job.progress)
    if resolved is cfg:
        raise SkipStep("no built-in model (dynocell:tiny) in this config")
    d.update(model_path=resolved.model_path, draft_model_path=resolved.speculative.draft_model_path)
