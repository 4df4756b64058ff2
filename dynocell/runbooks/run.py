"""The main job, ``dynocell run``: one config on the stand, a complete record in the store.

Steps, each a ``run_steps`` row written as it starts and ends (DESIGN.md,
"Data flow of the main job"):

    config → build → model → boot → health → bench → acceptance → lossless → profile
    → breakeven → diagnose → stop

(``model``: finding — or, for a seed that is not packaged, making — the built-in
reference pair, so its minutes are never counted as ``boot``.) Essential steps
(config, build, model, boot, health, bench) end the run when they
fail; the others are recorded as failed and the run goes on. Whatever
happens — a failed step, Ctrl-C, SIGTERM — the engine is stopped and the run
row says how it ended (``completed`` / ``failed`` / ``interrupted``) and at
which step. ``bench`` and ``profile`` are also offered alone against a boot
that is already up.
"""

from __future__ import annotations

import hashlib
import json
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from dynocell.db import boots as db_boots
from dynocell.db import runs as db_runs
from dynocell.engine import acceptance as acc
from dynocell.engine.client import EngineClient
from dynocell.engine.config import EngineConfig, injection_warning
from dynocell.engine.meta import check_generations
from dynocell.errors import DynocellError, EngineError, Interrupted, UserError
from dynocell.runbooks import boots, events, hosts
from dynocell.runbooks.cell import Cell

Progress = Callable[[str, dict[str, Any]], None]
DEFAULT_CONFIG = Path(__file__).parent / "data" / "embedded.toml"
ESSENTIAL = ("config", "build", "model", "boot", "health", "bench")
LOSSLESS_TOKENS = 48
PROFILE_REQUESTS = 2
PROFILE_TOKENS = 32


def _noop(_m: str, _d: dict[str, Any]) -> None:
    pass


@dataclass
class RunOptions:
    """Knobs of one main-job run.

    ``workload``: path of a workload TOML (None = bundled default);
    ``lossless``: compare greedy outputs with a plain boot of the same target;
    ``profile``: open a profiler window; ``boot_timeout_s``: overrides the
    engine's default; ``stop_grace_s``: overrides the settings' grace.
    """

    workload: str | None = None
    lossless: bool = True
    profile: bool = True
    diagnose: bool = True
    boot_timeout_s: float | None = None
    stop_grace_s: float | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain values, as stored on the run row."""
        return dict(self.__dict__)


class _StepFailed(Exception):
    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(f"{name}: {error}")
        self.name, self.error = name, error


class _Skip(Exception):
    """Raised inside a step to record it as ``skipped`` with a reason."""


@dataclass
class _Job:
    cell: Cell
    run_id: str
    progress: Progress
    failed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    concurrent: dict[str, str] = field(default_factory=dict)  # other live boot id → its warning
    env_warning: str | None = None  # "⚠ env sets LD_PRELOAD" for a config whose [env] injects code

    @contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        """Record a step: running → completed | skipped | failed | interrupted."""
        sid = db_runs.start_step(self.cell.store, self.run_id, name)
        events.publish("run.step_started", run_id=self.run_id, step=name)
        self.progress(f"{name} …", {"step": name, "state": "running"})
        detail: dict[str, Any] = {}
        t0 = time.monotonic()
        try:
            yield detail
        except _Skip as skip:
            detail["seconds"] = round(time.monotonic() - t0, 3)
            db_runs.end_step(self.cell.store, sid, "skipped", detail, str(skip))
            self._ended(name, "skipped", str(skip))
        except (KeyboardInterrupt, Interrupted):
            db_runs.end_step(self.cell.store, sid, "interrupted", detail, "interrupted by the operator")
            self._ended(name, "interrupted", "")
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is recorded, then re-raised or absorbed
            detail["seconds"] = round(time.monotonic() - t0, 3)
            db_runs.end_step(self.cell.store, sid, "failed", detail, _err(exc))
            self._ended(name, "failed", _err(exc))
            self.failed.append(name)
            if name in ESSENTIAL:
                raise _StepFailed(name, exc) from exc
        else:
            detail["seconds"] = round(time.monotonic() - t0, 3)
            db_runs.end_step(self.cell.store, sid, "completed", detail)
            self._ended(name, "completed", "")

    def _ended(self, name: str, state: str, error: str) -> None:
        events.publish("run.step_ended", run_id=self.run_id, step=name, state=state, error=error)
        self.progress(f"{name} {state}" + (f": {error}" if error else ""), {"step": name, "state": state})


def _err(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, DynocellError) else f"{type(exc).__name__}: {exc}"


# ---------------------------------------------------------------- the main job

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
    progress = progress or _noop
    cfg, config_hash = resolve_config(cell, str(config_ref or DEFAULT_CONFIG))
    # A bad workload file is the operator's mistake: refuse it now (UserError, nothing written),
    # not after a boot and a health check.
    workload = _load_workload(opts.workload)
    run_id = boots.new_id()
    db_runs.create_run(cell.store, id=run_id, kind="run", config_hash=config_hash, state="running",
                       step="config", options=opts.as_dict(), pid=_pid(), host_id=hosts.this_host_id(cell))
    events.publish("run.started", run_id=run_id, config_hash=config_hash)
    job = _Job(cell, run_id, progress)
    live: boots.LiveBoot | None = None
    state, error = "completed", None
    try:
        with job.step("config") as d:
            d.update(config_hash=config_hash, name=cfg.name, engine=cfg.engine)
            job.env_warning = injection_warning(cfg.env)
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
        _warn_concurrent(job, live.boot_id)
        with job.step("health") as d:
            verdict = _health(cell, live, d)
            if verdict != "healthy":
                raise EngineError(f"health verdict is {verdict}: {d.get('failed')}",
                                  f"see `dynocell health {live.boot_id}` and `dynocell logs {live.boot_id}`")
        db_runs.update_run(cell.store, run_id, workload=workload.name, workload_sha256=workload.sha256,
                           options={**opts.as_dict(), "temperature": workload.temperature, "draft_proposal": "top1"})
        client = live.client(cell.settings.http_timeout_s)
        context_length = _context_length(client, live.cfg)
        with job.step("bench") as d:
            workload = _calibrate(job, live, workload, context_length)
            d["tokens_per_byte"] = workload.tokens_per_byte
            _bench(job, live, workload, context_length, d)
        spec_on = live.cfg.speculative_enabled
        with job.step("acceptance") as d:
            if not spec_on:
                raise _Skip("no speculative decoding in this config")
            _acceptance(job, live, workload, context_length, d)
        plain: dict[str, Any] | None = None
        with job.step("lossless") as d:
            if not spec_on:
                if opts.lossless:
                    n = _record_goldens(job, live, workload)
                    raise _Skip(f"no speculative decoding; recorded {n} greedy golden(s) for later lossless checks")
                raise _Skip("no speculative decoding in this config")
            if not opts.lossless:
                raise _Skip("--no-lossless-check")
            plain = _lossless(job, live, cfg, workload, opts, d)
        with job.step("profile") as d:
            if not opts.profile:
                raise _Skip("--no-profile")
            _profile(job, live, workload, context_length, d)
        with job.step("breakeven") as d:
            if not spec_on:
                raise _Skip("no speculative decoding in this config")
            _breakeven(job, plain, d, cfg=cfg, workload=workload, opts=opts)
    except _StepFailed as f:
        state, error = "failed", f"{f.name}: {_err(f.error)}"
    except (KeyboardInterrupt, Interrupted):
        state, error = "interrupted", "interrupted by the operator"
    finally:
        if live is not None:
            _warn_concurrent(job, live.boot_id)  # one that started while this run measured
            with job.step("stop") as d:
                d.update(boots.stop_live(cell, live, opts.stop_grace_s, reason=f"run {run_id} {state}"))
        if state != "interrupted" and opts.diagnose:
            with job.step("diagnose") as d:
                _diagnose(job, d)
        if state == "completed" and job.failed:
            state, error = "failed", "steps failed: " + ", ".join(job.failed)
        db_runs.interrupt_running_steps(cell.store, run_id, "interrupted")
        db_runs.update_run(cell.store, run_id, state=state, error=error, ended_at=boots._now(),
                           summary=_summary(job))
        events.publish("run.ended", run_id=run_id, state=state, error=error)
        progress(f"run {run_id} {state}" + (f": {error}" if error else ""), {"run_id": run_id, "state": state})
    if state == "interrupted":
        raise Interrupted(f"run {run_id} interrupted; the engine was stopped and the steps done are recorded",
                          f"dynocell show {run_id}")
    return run_id


def _pid() -> int:
    import os

    return os.getpid()


def _build(cell: Cell, cfg: EngineConfig, d: dict[str, Any]) -> dict[str, Any] | None:
    if not cfg.patches:
        raise _Skip("no patches: the engine runs as installed")
    from dynocell.runbooks import builds

    build = builds.ensure_build(cell, cfg)
    d.update(build_hash=build["build_hash"], base_version=build.get("base_version"), patches=build.get("patches"))
    # A boot that would run unpatched code must fail loudly, before the engine starts.
    d["sglang_file"] = builds.check_import(cell, build, cfg)
    return build


def _model(job: _Job, cfg: EngineConfig, d: dict[str, Any]) -> None:
    """Find (or make) the built-in reference pair the config names, before the boot's clock starts."""
    resolved = boots.resolve_models(job.cell, cfg, progress=job.progress)
    if resolved is cfg:
        raise _Skip("no built-in model (dynocell:tiny) in this config")
    d.update(model_path=resolved.model_path, draft_model_path=resolved.speculative.draft_model_path)


def _load_workload(path: str | None):  # noqa: ANN202 - engine type
    from dynocell.engine.workloads import load_workload

    return load_workload(path)


def _context_length(client: EngineClient, cfg: EngineConfig) -> int:
    try:
        if cfg.api == "vllm":  # vLLM: /v1/models carries max_model_len
            models = (client.models().body or {}).get("data") or [{}]
            if models[0].get("max_model_len"):
                return int(models[0]["max_model_len"])
        info = client.server_info().body or {}
        value = info.get("context_length") or info.get("max_total_num_tokens")
        if value:
            return int(value)
    except Exception:  # noqa: BLE001 - fall back to the config
        pass
    return cfg.memory.context_length or 2048


# ---------------------------------------------------------------- health

def _health(cell: Cell, live: boots.LiveBoot, d: dict[str, Any]) -> str:
    """Run the health oracle (with the canary once the config has a golden) and store the verdict."""
    from dynocell.engine import health as engine_health

    client = live.client(cell.settings.http_timeout_s)
    golden = db_runs.get_golden(cell.store, live.config_hash, "canary", _sha(CANARY_PROMPT), CANARY_TOKENS)
    canary = engine_health.Canary(CANARY_PROMPT, golden["output_text"], CANARY_TOKENS) if golden else None
    verdict = engine_health.check_health(
        client, process_alive=live.supervisor.poll().value == "ready", stop_requested=False,
        expected=boots.expected_server(live.cfg), canary=canary, previous_progress=None,
        generate_timeout_s=cell.settings.health_generate_timeout_s,
        ranks=boots.rank_status_of(live.cfg, live.supervisor.pid, live.supervisor.pgid),
        api=engine_health.api_of(live.cfg),
    )
    boots.record_verdict(cell, live.boot_id, verdict)
    d.update(verdict=verdict.verdict, failed=list(verdict.failed), canary="checked" if canary else "none yet")
    if verdict.verdict == "healthy" and golden is None:
        # First qualification of this config: record the canary's greedy continuation.
        body = _greedy(client, CANARY_PROMPT, CANARY_TOKENS, cell.settings.request_timeout_s, live.cfg)
        db_runs.put_golden(cell.store, config_hash=live.config_hash, kind="canary",
                           prompt_sha256=_sha(CANARY_PROMPT), prompt=CANARY_PROMPT,
                           max_new_tokens=CANARY_TOKENS, output_text=body.get("text", ""),
                           output_ids=body.get("output_ids"))
        d["canary"] = "recorded"
    return verdict.verdict


CANARY_PROMPT = "The quick brown fox jumps over the lazy dog. The quick brown"
CANARY_TOKENS = 16


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------- bench

class _Calibrated:
    """A workload whose ``requests`` use the engine's own tokens per UTF-8 byte, per text class.

    Input-length targets are in engine tokens; the workload alone can only assume one token per
    byte (an upper bound). One 1-token generation per class (its ~1 KB material) gives the
    server's ``prompt_tokens`` / bytes (``bench.measure_tokens_per_byte``); classes whose
    calibration failed keep 1.0. Every other attribute is the wrapped workload's.
    """

    def __init__(self, workload: Any, tokens_per_byte: dict[str, float]) -> None:
        self._workload = workload
        self.tokens_per_byte = tokens_per_byte

    def __getattr__(self, name: str) -> Any:
        return getattr(self._workload, name)

    def requests(self, level: Any, context_length: int | None, tokens_per_byte: Any = None) -> list[Any]:
        return self._workload.requests(level, context_length, tokens_per_byte or self.tokens_per_byte)


def _calibrate(job: _Job, live: Any, workload: Any, context_length: int | None = None) -> Any:
    import asyncio

    from dynocell.engine.bench import measure_tokens_per_byte

    tpb = asyncio.run(measure_tokens_per_byte(live.base_url, workload.calibration_texts(context_length),
                                              timeout_s=job.cell.settings.request_timeout_s, **_api_kw(live.cfg)))
    job.progress("tokens per byte: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(tpb.items())),
                 {"step": "bench", "tokens_per_byte": tpb})
    return _Calibrated(workload, tpb)


def _run_level(job: _Job, live: Any, level: Any, requests: list[Any], warmup: int | None = None) -> Any:
    from dynocell.engine.bench import run_level_sync

    def tick(done: int, total: int) -> None:
        job.progress(f"{level.name}: {done}/{total}", {"step": "bench", "level": level.name,
                                                         "done": done, "total": total})

    return run_level_sync(live.base_url, requests, level.concurrency,
                          warmup=level.warmup if warmup is None else warmup, progress=tick,
                          timeout_s=job.cell.settings.request_timeout_s, **_api_kw(live.cfg))


def _pct(p: Any) -> dict[str, Any]:
    return {"p50": p.p50, "p90": p.p90, "p99": p.p99, "mean": p.mean, "n": p.n}


def _verify_step_ms(results: list[Any]) -> float | None:
    """Median decode time per verify step, ms: (e2e − TTFT) / (spec_verify_ct − 1) per request.

    The first verify step happens inside TTFT (prefill + first decode), hence − 1.
    """
    vals = []
    for r in results:
        vct = _count((r.meta_info or {}).get("spec_verify_ct"))
        if r.ok and r.ttft_s is not None and r.e2e_s is not None and vct > 1:
            vals.append((r.e2e_s - r.ttft_s) / (vct - 1) * 1000)
    return sorted(vals)[len(vals) // 2] if vals else None


SAMPLES_PER_LEVEL = 3


def _bench_row(job: _Job, live: Any, result: Any, text_class: str | None) -> dict[str, Any]:
    """Store one level (``engine.bench.LevelResult``) as a bench_runs row.

    ``extra.samples`` keeps a few generated texts (at the workload's sampling
    settings) so the doctor can judge the output itself, not only the numbers.
    """
    extra = {"failures": result.failures, "warmup_requests": result.warmup_requests,
             "warmup_failed": result.warmup_failed, "level": result.name,
             "verify_step_ms_p50": _verify_step_ms(result.results),
             "samples": [r.text for r in result.results if r.ok][:SAMPLES_PER_LEVEL]}
    return db_runs.add_bench(
        job.cell.store, run_id=job.run_id, boot_id=live.boot_id, text_class=text_class,
        concurrency=result.concurrency, num_requests=result.num_requests, num_failed=result.failed,
        length_mismatches=result.length_mismatches, duration_s=result.wall_s,
        prompt_tokens=result.prompt_tokens, completion_tokens=result.output_tokens,
        request_throughput=result.request_throughput, output_tok_s=result.output_throughput,
        total_tok_s=result.total_throughput, prefill_tok_s=result.prefill_tok_s, decode_tok_s=result.decode_tok_s,
        ttft_ms=_pct(result.ttft_ms), tpot_ms=_pct(result.tpot_ms), itl_ms=_pct(result.itl_ms),
        e2e_ms=_pct(result.e2e_ms), extra=extra,
    )


def _bench(job: _Job, live: boots.LiveBoot, workload: Any, context_length: int, d: dict[str, Any]) -> None:
    levels = [lv for lv in workload.levels() if lv.purpose == "throughput"]
    if not levels:
        raise _Skip("the workload has no throughput levels")
    out = []
    for level in levels:
        reqs = workload.requests(level.name, context_length)
        result = _run_level(job, live, level, reqs)
        row = _bench_row(job, live, result, None)
        out.append({"level": level.name, "concurrency": level.concurrency, "output_tok_s": row["output_tok_s"],
                    "failed": row["num_failed"]})
        if row["num_failed"] == row["num_requests"]:
            raise EngineError(f"every request of level {level.name} failed", "see the engine log")
    d["levels"] = out


def _acceptance(job: _Job, live: boots.LiveBoot, workload: Any, context_length: int, d: dict[str, Any]) -> None:
    from dynocell.engine import metrics as engine_metrics

    client = live.client(job.cell.settings.http_timeout_s)
    levels = [lv for lv in workload.levels() if lv.purpose == "acceptance"]
    if not levels:
        raise _Skip("the workload has no acceptance section")
    if live.cfg.api == "vllm":
        _acceptance_vllm(job, live, workload, context_length, levels, d)
        return
    per_class: dict[str, list[Any]] = {}
    curves_out = []
    for level in levels:
        reqs = workload.requests(level.name, context_length)
        by_class: dict[str, list[Any]] = {}
        for r in reqs:
            by_class.setdefault(r.text_class, []).append(r)
        for text_class, creqs in by_class.items():
            # No warm-up here: the bench step warmed the engine, and a warm-up request would
            # land in the engine's counters but not in the client's histogram.
            before = _metrics(client, engine_metrics)
            result = _run_level(job, live, level, creqs, warmup=0)
            after = _metrics(client, engine_metrics)
            _bench_row(job, live, result, text_class)
            metas = [r.meta_info for r in result.results if r.ok]
            per_class.setdefault(text_class, []).extend(metas)
            # A histogram that contradicts the rest of meta_info (Σ h ≠ spec_verify_ct …) is flagged, not
            # silently turned into a τ.
            problems = check_generations(metas)
            curve = acc.curve_from_meta_infos(metas)
            if curve is None:
                raise EngineError(f"class {text_class}: the engine returned no speculative histogram"
                                  + (f" ({problems[0]})" if problems else ""),
                                  "the engine's meta_info lacks spec_correct_drafts_histogram")
            engine_tau, source = _engine_tau(engine_metrics, before, after, metas)
            dis = acc.relative_diff(curve.tau, engine_tau) if engine_tau else None
            warning = None
            if dis is not None and dis > 0.02:
                warning = (f"client histogram τ {curve.tau:.3f} and engine {source} τ {engine_tau:.3f} "
                           f"differ by {dis * 100:.1f} % (> 2 %)")
                job.warnings.append(f"{text_class}: {warning}")
            if problems:
                lie = (f"the engine's meta_info contradicts itself ({len(problems)} problem(s)), so τ from its "
                       f"histogram is suspect: {problems[0]}")
                job.warnings.append(f"{text_class}: {lie}")
                warning = f"{warning}; {lie}" if warning else lie
            completion = sum(_count(_get(m, "completion_tokens")) for m in metas)
            db_runs.add_curve(
                job.cell.store,
                [(i + 1, curve.p[i], curve.a[i]) for i in range(len(curve.p))],
                run_id=job.run_id, text_class=text_class, num_drafts=curve.num_drafts, steps=curve.steps,
                tau=curve.tau, accept_rate=curve.accept_rate, histogram=list(curve.histogram or []),
                completion_tokens=completion, engine_tau=engine_tau, engine_source=source,
                disagreement_pct=None if dis is None else round(dis * 100, 3), warning=warning,
            )
            curves_out.append({"class": text_class, "tau": round(curve.tau, 4),
                               "p": [round(x, 4) for x in curve.p]})
    d["curves"] = curves_out


def _acceptance_vllm(job: _Job, live: boots.LiveBoot, workload: Any, context_length: int, levels: list[Any],
                     d: dict[str, Any]) -> None:
    """vLLM puts no speculative counts in a response: each class (one at a time) is measured by
    differencing ``/metrics`` counters around it (:mod:`dynocell.engine.vllm_acceptance`), and
    cross-checked with the engine's ``SpecDecoding metrics`` log lines of the same window."""
    from dynocell.engine import metrics as engine_metrics
    from dynocell.engine import vllm_acceptance as va

    client = live.client(job.cell.settings.http_timeout_s)
    curves_out = []
    for level in levels:
        by_class: dict[str, list[Any]] = {}
        for r in workload.requests(level.name, context_length):
            by_class.setdefault(r.text_class, []).append(r)
        for text_class, creqs in by_class.items():
            offset = _quiet_log(live.log_path, _log_interval_s(live.cfg))
            before = engine_metrics.parse_metrics(client.metrics_text().text)
            result = _run_level(job, live, level, creqs, warmup=0)
            after = engine_metrics.parse_metrics(client.metrics_text().text)
            _bench_row(job, live, result, text_class)
            cc = va.class_curve(before, after)
            if cc is None:
                raise EngineError(f"class {text_class}: the vLLM spec-decode counters did not move",
                                  "is speculative decoding on (vllm:spec_decode_num_drafts_total)?")
            samples = _log_window(live.log_path, offset, cc.figures["draft_tokens"])
            log_tau, dis, warning = va.cross_check(cc.curve.tau, samples, cc.k)
            if warning:
                job.warnings.append(f"{text_class}: {warning}")
            curve = cc.curve
            db_runs.add_curve(
                job.cell.store, [(i + 1, curve.p[i], curve.a[i]) for i in range(len(curve.p))],
                run_id=job.run_id, text_class=text_class, num_drafts=curve.num_drafts, steps=curve.steps,
                tau=curve.tau, accept_rate=curve.accept_rate, histogram=[],
                completion_tokens=int(result.output_tokens), engine_tau=log_tau,
                engine_source="vLLM log SpecDecoding lines" if log_tau is not None else None,
                disagreement_pct=None if dis is None else round(dis * 100, 3), warning=warning,
            )
            curves_out.append({"class": text_class, "tau": round(curve.tau, 4), "p": [round(x, 4) for x in curve.p],
                               "source": "vllm /metrics counter deltas"})
    d["curves"] = curves_out
    d["note"] = va.UNCONDITIONAL_NOTE


def _log_interval_s(cfg: Any) -> float:
    """Seconds between vLLM's stats lines (``VLLM_LOG_STATS_INTERVAL``, vLLM's default 10 s); the
    reference engine's vLLM surface logs the last interval as soon as it is idle."""
    if cfg.engine != "vllm":
        return 0.2
    try:
        return max(0.1, float(cfg.env.get("VLLM_LOG_STATS_INTERVAL", "10")))
    except ValueError:
        return 10.0


def _quiet_log(log_path: Path, interval_s: float, rounds: int = 3) -> int:
    """The log's size once one stats interval passed without a new line (at most ``rounds``
    intervals): a class window then starts on an interval boundary, so the ``SpecDecoding`` lines
    after it cover this class only (the last interval of earlier traffic is already printed)."""
    size = log_path.stat().st_size if log_path.exists() else 0
    for _ in range(rounds):
        time.sleep(interval_s + 0.1)
        now = log_path.stat().st_size if log_path.exists() else 0
        if now == size:
            break
        size = now
    return size


def _log_window(log_path: Path, offset: int, draft_tokens: float, wait_s: float = 10.0) -> list[Any]:
    """The ``SpecDecoding metrics`` lines written after byte ``offset``, waiting up to ``wait_s`` for
    their drafted tokens to reach the counters' (vLLM logs every ``VLLM_LOG_STATS_INTERVAL``)."""
    deadline = time.monotonic() + wait_s
    while True:
        with open(log_path, "rb") as f:
            f.seek(offset)
            samples = acc.parse_vllm_spec_lines(f.read().decode(errors="replace").splitlines())
        if sum(s.drafted or 0 for s in samples) >= draft_tokens or time.monotonic() > deadline:
            return samples
        time.sleep(0.2)


def _get(m: Any, key: str) -> Any:
    return m.get(key) if isinstance(m, dict) else getattr(m, key, None)


def _count(v: Any) -> int:
    """A token or step count as the engine reported it; 0 when it is not a whole number (a lie is flagged elsewhere)."""
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _metrics(client: EngineClient, engine_metrics: Any) -> Any:
    try:
        return engine_metrics.parse_metrics(client.metrics_text().text)
    except Exception:  # noqa: BLE001 - a broken /metrics must not lose the client-side curve
        return None


def _engine_tau(engine_metrics: Any, before: Any, after: Any, metas: list[Any]) -> tuple[float | None, str | None]:
    """The engine's own τ over the class: per-position counter deltas when exported, else meta averages."""
    if before is not None and after is not None:
        try:
            curve = engine_metrics.position_curve(engine_metrics.delta(before, after))
            if curve is not None and curve.steps:
                return curve.tau, "metrics per-position counters"
        except Exception:  # noqa: BLE001
            pass
    # Engine-reported averages in meta_info (completion / verify_ct, SGLang's definition).
    num = sum(_count(_get(m, "completion_tokens")) for m in metas)
    den = sum(_count(_get(m, "spec_verify_ct")) for m in metas)
    if den:
        return num / den, "meta_info completion_tokens / spec_verify_ct"
    return None, None


# ---------------------------------------------------------------- lossless

def _api_kw(cfg: Any) -> dict[str, Any]:
    """``run_level`` keywords for the engine's HTTP surface: vLLM's is OpenAI ``/v1/completions``
    with the served name (vLLM's default name: the model path given)."""
    if getattr(cfg, "api", "sglang") != "vllm":
        return {}
    return {"api": "openai", "model": cfg.served_model_name or cfg.model_path}


def _greedy(client: EngineClient, prompt: str, n: int, timeout_s: float = 600.0, cfg: Any = None) -> dict[str, Any]:
    """One greedy, non-streaming generation of ``n`` tokens; returns SGLang's body shape
    (``text``, ``meta_info.completion_tokens``; ``output_ids`` when the engine gives them).
    vLLM's surface (``cfg.api == "vllm"``): ``/v1/completions`` with ``ignore_eos``, normalised."""
    kw = _api_kw(cfg)
    if kw:
        resp = client.completions({"model": kw["model"], "prompt": prompt, "max_tokens": n, "temperature": 0,
                                   "ignore_eos": True}, timeout_s=timeout_s)
        if not resp.ok or not isinstance(resp.body, dict) or not resp.body.get("choices"):
            raise EngineError(f"/v1/completions answered {resp.status}: {resp.text[:200]}", None)
        usage = resp.body.get("usage") or {}
        return {"text": resp.body["choices"][0].get("text", ""),
                "meta_info": {"completion_tokens": usage.get("completion_tokens")}}
    resp = client.generate({"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": n,
                                                                 "ignore_eos": True}}, timeout_s=timeout_s)
    if not resp.ok:
        raise EngineError(f"/generate answered {resp.status}: {resp.text[:200]}", None)
    body = resp.body
    if isinstance(body, list):
        body = body[0]
    return body


def _divergence_margin(client: EngineClient, prompt: str, spec_ids: list[int], plain_ids: list[int], idx: int,
                       timeout_s: float, cfg: Any = None) -> dict[str, Any]:
    """Top-2 log-probability margin (nats) at a greedy mismatch's first divergent token (issue 22, shape 3).

    Asks the engine for ``idx + 1`` greedy tokens with log-probabilities (SGLang ``return_logprob`` +
    ``top_logprobs_num`` 2; vLLM ``logprobs`` 2) and returns ``{spec_token, plain_token, margin}``; a margin
    within bf16 rounding reads as a near-tie, a large one as corruption (the doctor decides). An engine
    that does not answer log-probabilities gives ``{margin: None}`` — never an error of the run.
    """
    out: dict[str, Any] = {"spec_token": spec_ids[idx] if idx < len(spec_ids) else None,
                           "plain_token": plain_ids[idx] if idx < len(plain_ids) else None, "margin": None}
    try:
        kw = _api_kw(cfg)
        if kw:
            resp = client.completions({"model": kw["model"], "prompt": prompt, "max_tokens": idx + 1, "temperature": 0,
                                       "ignore_eos": True, "logprobs": 2}, timeout_s=timeout_s)
            tops = (((resp.body or {}).get("choices") or [{}])[0].get("logprobs") or {}).get("top_logprobs") or []
            vals = sorted((tops[idx] or {}).values(), reverse=True) if idx < len(tops) else []
        else:
            resp = client.generate({"text": prompt, "sampling_params": {"temperature": 0, "max_new_tokens": idx + 1,
                                                                         "ignore_eos": True},
                                    "return_logprob": True, "top_logprobs_num": 2}, timeout_s=timeout_s)
            body = resp.body[0] if isinstance(resp.body, list) else resp.body
            tops = ((body or {}).get("meta_info") or {}).get("output_top_logprobs") or []
            vals = sorted((x[0] for x in (tops[idx] or [])), reverse=True) if idx < len(tops) else []
    except (DynocellError, OSError, ValueError, TypeError, AttributeError, IndexError, KeyError):
        return out
    if resp.ok and len(vals) >= 2:
        out["margin"] = round(float(vals[0]) - float(vals[1]), 6)
    return out


def _near_ties(mismatches: list[dict[str, Any]]) -> bool:
    """Every mismatch diverges where the top two tokens are within ``lossless_near_tie.margin_max`` nats
    (doctor_thresholds.toml): numerical near-ties, reported as ``lossless: near-tie (margin …)``."""
    from dynocell.runbooks.doctor import load_thresholds

    lim = load_thresholds()["lossless_near_tie"]["margin_max"]
    return bool(mismatches) and all(m.get("margin") is not None and m["margin"] <= lim for m in mismatches)


def _lossless_prompts(workload: Any) -> list[str]:
    return [tc.prompts[0] for tc in workload.classes.values()]


def _record_goldens(job: _Job, live: boots.LiveBoot, workload: Any) -> int:
    """A plain config records its greedy outputs on the lossless prompts (once per config)."""
    cell = job.cell
    client = live.client(cell.settings.http_timeout_s)
    n = 0
    for p in _lossless_prompts(workload):
        if db_runs.get_golden(cell.store, live.config_hash, "lossless", _sha(p), LOSSLESS_TOKENS) is None:
            body = _greedy(client, p, LOSSLESS_TOKENS, cell.settings.request_timeout_s, live.cfg)
            db_runs.put_golden(cell.store, config_hash=live.config_hash, kind="lossless", prompt_sha256=_sha(p),
                               prompt=p, max_new_tokens=LOSSLESS_TOKENS, output_text=body.get("text", ""),
                               output_ids=body.get("output_ids"))
            n += 1
    return n


def _plain_twin(cell: Cell, cfg: EngineConfig) -> tuple[EngineConfig, str]:
    """The config without speculative decoding (same model, engine, patches), stored; returns (config, hash)."""
    from dynocell.runbooks.configs import store_config

    plain_cfg = cfg.with_changes(speculative={}, meta={"name": None, "notes": "plain twin for the lossless check"})
    return plain_cfg, store_config(cell, plain_cfg)


def _boot_twin(job: _Job, plain_cfg: EngineConfig, plain_hash: str, prompts: list[str], opts: RunOptions,
               why: str) -> dict[str, Any]:
    """Boot the plain twin, run each lossless prompt greedily, record missing goldens, stop it.

    Returns the plain step measurement: ``{step_ms, samples, source, measured_at, host,
    run_id, twin_boot_id}`` (``step_ms``: p50 over prompts of wall time / completion tokens, ms).
    """
    import socket

    cell = job.cell
    job.progress(f"booting the plain twin {why}", {"step": "lossless"})
    twin = boots.start_boot(cell, plain_cfg, plain_hash, timeout_s=opts.boot_timeout_s)
    try:
        tclient = twin.client(cell.settings.http_timeout_s)
        step_ms = []
        for p in prompts:
            t0 = time.perf_counter()
            body = _greedy(tclient, p, LOSSLESS_TOKENS, cell.settings.request_timeout_s, twin.cfg)
            elapsed = (time.perf_counter() - t0) * 1000
            n = int(body.get("meta_info", {}).get("completion_tokens") or LOSSLESS_TOKENS)
            step_ms.append(elapsed / max(n, 1))
            if db_runs.get_golden(cell.store, plain_hash, "lossless", _sha(p), LOSSLESS_TOKENS) is None:
                db_runs.put_golden(cell.store, config_hash=plain_hash, kind="lossless", prompt_sha256=_sha(p),
                                   prompt=p, max_new_tokens=LOSSLESS_TOKENS, output_text=body.get("text", ""),
                                   output_ids=body.get("output_ids"))
    finally:
        boots.stop_live(cell, twin, opts.stop_grace_s, reason="plain twin done")
    return {"step_ms": sorted(step_ms)[len(step_ms) // 2], "samples": [round(x, 4) for x in step_ms],
            "source": "plain twin boot", "measured_at": boots._now().isoformat(), "host": socket.gethostname(),
            "run_id": job.run_id, "twin_boot_id": twin.boot_id}


def _lossless(job: _Job, live: boots.LiveBoot, cfg: EngineConfig, workload: Any, opts: RunOptions,
              d: dict[str, Any]) -> dict[str, Any] | None:
    """Greedy outputs of the speculative engine vs a plain boot of the same target.

    Returns the plain step measurement of :func:`_boot_twin` for the break-even step, or None
    when the plain outputs came from stored goldens (the twin did not boot).
    """
    cell = job.cell
    client = live.client(cell.settings.http_timeout_s)
    prompts = _lossless_prompts(workload)
    spec_out = [_greedy(client, p, LOSSLESS_TOKENS, cell.settings.request_timeout_s, live.cfg) for p in prompts]
    plain_cfg, plain_hash = _plain_twin(cell, cfg)
    goldens = [db_runs.get_golden(cell.store, plain_hash, "lossless", _sha(p), LOSSLESS_TOKENS) for p in prompts]
    plain = None
    if any(g is None for g in goldens):
        plain = _boot_twin(job, plain_cfg, plain_hash, prompts, opts, "for the lossless check")
        goldens = [db_runs.get_golden(cell.store, plain_hash, "lossless", _sha(p), LOSSLESS_TOKENS) for p in prompts]
        d["twin_boot_id"] = plain["twin_boot_id"]
    mismatches = []
    for p, s, g in zip(prompts, spec_out, goldens):
        a_ids, b_ids = s.get("output_ids"), (g or {}).get("output_ids")
        a_txt, b_txt = s.get("text", ""), (g or {}).get("output_text", "")
        if a_ids is not None and b_ids is not None:
            same = list(a_ids) == list(b_ids)
            idx = next((i for i, (x, y) in enumerate(zip(a_ids, b_ids)) if x != y), min(len(a_ids), len(b_ids)))
            unit = "token"
        else:
            same = a_txt == b_txt
            idx = next((i for i, (x, y) in enumerate(zip(a_txt, b_txt)) if x != y), min(len(a_txt), len(b_txt)))
            unit = "character"
        if not same:
            mm = {"prompt": p[:80], "first_diverging_index": idx, "unit": unit,
                  "speculative": a_txt[:200], "plain": b_txt[:200]}
            if unit == "token":
                mm.update(_divergence_margin(client, p, a_ids, b_ids, idx, cell.settings.request_timeout_s, live.cfg))
            mismatches.append(mm)
    lossless = "yes" if not mismatches else ("near-tie" if _near_ties(mismatches) else "no")
    detail = {"prompts": len(prompts), "max_new_tokens": LOSSLESS_TOKENS, "plain_config_hash": plain_hash,
              "mismatches": mismatches}
    if lossless == "near-tie":
        detail["max_margin"] = max(m["margin"] for m in mismatches)
    db_runs.update_run(cell.store, job.run_id, lossless=lossless, lossless_detail=detail)
    d.update(lossless=lossless, mismatches=len(mismatches))
    if plain is not None:
        d["plain_step_ms"] = round(plain["step_ms"], 4)
    return plain


# ---------------------------------------------------------------- profile

def _profile(job: _Job, live: boots.LiveBoot, workload: Any, context_length: int, d: dict[str, Any]) -> int:
    from dynocell.runbooks.profiles import profile_window

    prof = profile_window(job.cell, live, workload, context_length, run_id=job.run_id,
                          progress=job.progress)
    d.update(profile_id=prof["id"], busy_pct=prof.get("busy_pct"), source=prof.get("source"))
    return prof["id"]


# ---------------------------------------------------------------- break-even

#: Smallest noise band of a break-even margin: one unchanged config gave +3.1 % and −3.0 % on two
#: runs (issue 20), so a margin within ±5 % is not a verdict.
BREAKEVEN_MIN_BAND = 0.05


def median_noise(samples: list[float]) -> float:
    """Relative standard error of the median of ``samples`` (0 for fewer than two).

    σ is estimated robustly from the median absolute deviation (σ ≈ 1.4826·MAD, exact for a normal
    sample; one slow outlier on a loaded host barely moves it), and the median's standard error
    is ≈ 1.2533·σ/√n (its asymptotic efficiency against the mean); returned over the median.
    """
    import statistics

    vals = [v for v in samples if v]
    if len(vals) < 2:
        return 0.0
    med = statistics.median(vals)
    mad = statistics.median(abs(v - med) for v in vals)
    return 1.2533 * 1.4826 * mad / len(vals) ** 0.5 / med


def breakeven_verdict(margin: float, band: float) -> str:
    """``pays`` when ``margin`` > ``band``, ``does NOT pay`` when < −``band``, else ``within noise``."""
    if margin > band:
        return "pays"
    if margin < -band:
        return "does NOT pay"
    return "within noise"


def _breakeven(job: _Job, plain: dict[str, Any] | float | None, d: dict[str, Any], *,
               cfg: EngineConfig | None = None, workload: Any = None, opts: RunOptions | None = None) -> None:
    """Speculation pays while a speculative step costs less than τ × the plain step (DESIGN.md).

    The plain step time comes from, in order: the plain twin booted by this run's lossless
    check; the newest stored twin measurement of the same plain config (model, engine,
    patches) on this host, with its age; the plain config's own completed runs (TPOT p50 at
    concurrency 1); else a plain twin booted now (not with ``--no-lossless-check``, which opts out
    of the twin: then the step is skipped saying why). The margin carries a noise band
    (:data:`BREAKEVEN_MIN_BAND`, or the combined :func:`median_noise` of both step medians when
    wider) and a
    ``verdict`` (:func:`breakeven_verdict`); ``pays`` keeps its meaning: spec step < budget.
    ``plain`` may be a bare plain step time in ms (source ``given``); without ``cfg`` the plain
    config is the one the run's lossless check used and no twin is booted here.
    """
    cell = job.cell
    curves = db_runs.curves(cell.store, job.run_id)
    if not curves:
        raise _Skip("no acceptance curve")
    steps = sum(c["steps"] for c in curves)
    tau = sum(c["tau"] * c["steps"] for c in curves) / steps if steps else None
    rows = [r for r in db_runs.bench_rows(cell.store, job.run_id) if r["text_class"]]
    spec_step = [r["extra"].get("verify_step_ms_p50") for r in rows if r.get("extra") and r["extra"].get("verify_step_ms_p50")]
    spec_step_ms = sorted(spec_step)[len(spec_step) // 2] if spec_step else None
    if tau is None or spec_step_ms is None:
        raise _Skip("needs τ and the speculative step time")
    if isinstance(plain, (int, float)):
        plain = {"step_ms": float(plain), "samples": [], "source": "given", "measured_at": boots._now().isoformat()}
    if cfg is not None:
        plain_cfg, plain_hash = _plain_twin(cell, cfg)
    else:
        plain_cfg, plain_hash = None, ((db_runs.get_run(cell.store, job.run_id) or {}).get("lossless_detail") or {}).get("plain_config_hash")
    if plain is None and plain_hash:
        plain = _stored_plain(cell, plain_hash, job.run_id) or _plain_step_from_store(cell, plain_hash)
    if plain is None and plain_cfg is not None and plain_hash and (opts is None or opts.lossless):
        plain = _boot_twin(job, plain_cfg, plain_hash, _lossless_prompts(workload), opts or RunOptions(),
                           "to time the plain decode step for break-even")
    if plain is None:
        raise _Skip("no plain step time: none stored for this model, engine and host, and --no-lossless-check "
                    "boots no plain twin (run once with the lossless check to measure it)")
    plain_step_ms = plain["step_ms"]
    budget = tau * plain_step_ms
    margin = budget / spec_step_ms - 1.0
    band = max(BREAKEVEN_MIN_BAND, (median_noise(spec_step) ** 2 + median_noise(plain.get("samples") or []) ** 2) ** 0.5)
    age_s = None
    if plain.get("measured_at"):
        from datetime import datetime

        age_s = round((boots._now() - datetime.fromisoformat(_utc_iso(plain["measured_at"]) or "")).total_seconds(), 1)
    result = {"tau": round(tau, 4), "spec_step_ms": round(spec_step_ms, 4), "plain_step_ms": round(plain_step_ms, 4),
              "budget_ms": round(budget, 4), "margin": round(margin, 4), "pays": spec_step_ms < budget,
              "speedup_estimate": round(budget / spec_step_ms, 3),
              "noise_band": round(band, 4), "verdict": breakeven_verdict(margin, band),
              "plain_source": plain["source"], "plain_age_s": age_s, "plain_config_hash": plain_hash,
              "plain_measured_at": plain.get("measured_at"), "plain_host": plain.get("host"),
              "plain_run_id": plain.get("run_id"), "plain_samples": plain.get("samples") or [],
              "spec_step_samples": [round(x, 4) for x in spec_step]}
    db_runs.update_run(cell.store, job.run_id, breakeven=result)
    d.update(result)


def _stored_plain(cell: Cell, plain_hash: str, run_id: str) -> dict[str, Any] | None:
    """The newest plain twin measurement of ``plain_hash`` on this host, stored by an earlier run's break-even."""
    import socket

    host = socket.gethostname()
    for r in db_runs.list_runs(cell.store, states=("completed", "failed"), limit=200):
        be = r.get("breakeven") or {}
        if r["id"] == run_id or be.get("plain_config_hash") != plain_hash or be.get("plain_host") != host:
            continue
        if be.get("plain_source") == "plain twin boot" and be.get("plain_run_id") == r["id"] and be.get("plain_step_ms"):
            return {"step_ms": be["plain_step_ms"], "samples": be.get("plain_samples") or [],
                    "source": f"stored plain twin measurement (run {r['id']})", "measured_at": be.get("plain_measured_at"),
                    "host": host, "run_id": r["id"]}
    return None


def _utc_iso(t: Any) -> str | None:
    """A stored time (naive = UTC, as the store keeps them) as an ISO string with its offset."""
    from datetime import datetime, timezone

    if isinstance(t, str):
        t = datetime.fromisoformat(t)
    if t is None:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).isoformat()


def _plain_step_from_store(cell: Cell, plain_hash: str | None) -> dict[str, Any] | None:
    """TPOT p50 at concurrency 1 of the plain config's own newest completed run, as a plain measurement."""
    if not plain_hash:
        return None
    for r in db_runs.list_runs(cell.store, config_hash=plain_hash, states=("completed",), limit=5):
        vals = [b["tpot_ms"].get("p50") for b in db_runs.bench_rows(cell.store, r["id"])
                if b["concurrency"] == 1 and b["tpot_ms"]]
        vals = [v for v in vals if v]
        if vals:
            when = _utc_iso(r.get("ended_at") or r.get("started_at"))
            return {"step_ms": sorted(vals)[len(vals) // 2], "samples": vals,
                    "source": f"plain run {r['id']} (TPOT p50, c=1)", "measured_at": when, "run_id": r["id"]}
    return None


# ---------------------------------------------------------------- diagnose + summary

def _warn_concurrent(job: _Job, boot_id: str) -> None:
    """Warn (progress, and the run summary's ``concurrent_boots`` shown in its report) about each
    other live boot of this store on this host (issue 16, item 15)."""
    try:
        others = boots.other_live_boots(job.cell, boot_id)
    except DynocellError:  # a warning must not fail the run
        return
    for row in others:
        if row["id"] in job.concurrent:
            continue
        msg = job.concurrent[row["id"]] = boots.concurrent_boot_warning(row)
        job.progress(f"⚠ {msg}", {"warning": msg})


def _diagnose(job: _Job, d: dict[str, Any]) -> None:
    try:
        from dynocell.runbooks import doctor
    except ImportError:
        raise _Skip("the doctor is not installed") from None
    findings = doctor.diagnose(job.cell, job.run_id)
    d["findings"] = [f.rule if hasattr(f, "rule") else f.get("rule") for f in findings]


def _summary(job: _Job) -> dict[str, Any]:
    cell = job.cell
    curves = db_runs.curves(cell.store, job.run_id)
    steps = sum(c["steps"] for c in curves)
    return {
        "failed_steps": job.failed,
        "warnings": job.warnings,
        "concurrent_boots": list(job.concurrent.values()),
        "env_warning": job.env_warning,
        "tau": round(sum(c["tau"] * c["steps"] for c in curves) / steps, 4) if steps else None,
        "decode_tok_s": max((b["output_tok_s"] for b in db_runs.bench_rows(cell.store, job.run_id)
                             if not b["text_class"]), default=None),
    }


# ---------------------------------------------------------------- bench / profile on a running boot

def bench(cell: Cell, boot_ref: str, *, workload: str | None = None, progress: Progress | None = None) -> str:
    """Benchmark a ready boot with a workload's throughput levels (and acceptance when speculative).

    Returns the id of a ``bench`` run holding the rows.
    """
    return _on_boot(cell, boot_ref, "bench", workload, progress)


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
             profile_on: bool = True) -> str:
    progress = progress or _noop
    boot = boots.reconcile(cell, boots.resolve_boot(cell, boot_ref))
    if boot["state"] != "ready" or not boot["engine_alive"]:
        raise UserError(f"boot {boot['id']} is {boot['state']}, not ready", "boot it first: dynocell boot CONFIG")
    cfg = boots.resolve_models(cell, boots.config_of_boot(cell, boot))
    live = boots.AttachedBoot.from_row(boot, cfg)
    run_id = boots.new_id()
    db_runs.create_run(cell.store, id=run_id, kind=kind, config_hash=boot["config_hash"], boot_id=boot["id"],
                       state="running", step=kind, pid=_pid(), host_id=hosts.this_host_id(cell))
    job = _Job(cell, run_id, progress)
    state, error = "completed", None
    workload = _load_workload(workload_path)
    db_runs.update_run(cell.store, run_id, workload=workload.name, workload_sha256=workload.sha256)
    client = EngineClient(live.base_url, cell.settings.http_timeout_s)
    ctx = _context_length(client, cfg)
    try:
        if kind == "run":  # the main job on a boot that is already up (attached): health first
            with job.step("health") as d:
                verdict = boots.health(cell, boot["id"])
                d.update(verdict=verdict["verdict"], failed=verdict["failed"])
                if verdict["verdict"] != "healthy":
                    raise EngineError(f"health verdict is {verdict['verdict']}: {verdict['failed']}",
                                      f"see `dynocell health {boot['id']}`")
        workload = _calibrate(job, live, workload, ctx)
        if kind in ("bench", "run"):
            with job.step("bench") as d:
                d["tokens_per_byte"] = workload.tokens_per_byte
                _bench(job, live, workload, ctx, d)
            with job.step("acceptance") as d:
                if not cfg.speculative_enabled:
                    raise _Skip("no speculative decoding in this config")
                _acceptance(job, live, workload, ctx, d)
        if kind in ("profile", "run"):
            with job.step("profile") as d:
                if kind == "run" and not profile_on:
                    raise _Skip("--no-profile")
                _profile(job, live, workload, ctx, d)
        if kind == "run":
            with job.step("diagnose") as d:
                _diagnose(job, d)
    except _StepFailed as f:
        state, error = "failed", f"{f.name}: {_err(f.error)}"
    except (KeyboardInterrupt, Interrupted):
        state, error = "interrupted", "interrupted by the operator"
    if state == "completed" and job.failed:
        state, error = "failed", "steps failed: " + ", ".join(job.failed)
    db_runs.update_run(cell.store, run_id, state=state, error=error, ended_at=boots._now(), summary=_summary(job))
    if state == "interrupted":
        raise Interrupted(f"{kind} {run_id} interrupted", f"dynocell show {run_id}")
    return run_id


# ---------------------------------------------------------------- interrupted runs from dead processes

def _run_process_alive(run: dict[str, Any]) -> bool:
    """Whether the process that records ``run`` still runs (a pid recycled since the run started counts as dead)."""
    import psutil

    pid = run.get("pid")
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = run.get("started_at")
        if started is not None:
            from datetime import timezone

            if started.tzinfo is None:
                started = started.replace(tzinfo=timezone.utc)
            if proc.create_time() > started.timestamp() + 1.0:
                return False  # born after the run began: another process got the pid
        return True
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def reconcile_runs(cell: Cell) -> list[str]:
    """Settle runs whose process died (``kill -9``, a crash, a power cut); returns their ids.

    Each such run and its running step become ``interrupted`` (the error names
    the step), a profile window it left open becomes ``failed``, and the boots
    it supervised are reconciled (:func:`dynocell.runbooks.boots.reconcile`): an
    engine still running is stopped, never left orphaned. Every row the run
    wrote before it died is kept.
    """
    fixed = []
    mine = hosts.this_host_id(cell)
    for r in db_runs.list_runs(cell.store, states=("running",), limit=500):
        if r.get("host_id") not in (None, mine):
            continue  # another host's run: its pid means nothing here
        if _run_process_alive(r):
            continue
        # Re-read now that the process is known dead (it can write nothing more): a run that
        # finished between the listing and the liveness check keeps its real end.
        if (db_runs.get_run(cell.store, r["id"]) or {}).get("state") != "running":
            continue
        names = db_runs.interrupt_running_steps(cell.store, r["id"], "the dynocell process died")
        for prof in db_runs.profiles(cell.store, run_id=r["id"]):
            if prof["state"] == "running":
                db_runs.finish_profile(cell.store, prof["id"], state="failed",
                                       error="the dynocell process died during the profile window")
        db_runs.update_run(cell.store, r["id"], state="interrupted", ended_at=boots._now(),
                           error="the dynocell process died during step " + (", ".join(names) or str(r["step"])))
        events.publish("run.ended", run_id=r["id"], state="interrupted", error="the dynocell process died")
        fixed.append(r["id"])
    if fixed:
        boots.ps(cell)  # the dead runs' engines (the run's boot, a lossless twin) are stopped here
    return fixed


def resolve_run(cell: Cell, ref: str) -> dict[str, Any]:
    """A run row by id or unique prefix. Raises NotFound."""
    from dynocell.errors import NotFound

    matches = db_runs.find_runs(cell.store, ref.strip()) if ref.strip() else []
    exact = [m for m in matches if m["id"] == ref]
    if exact:
        return exact[0]
    if not matches:
        raise NotFound(f"no run matches {ref!r}", "see `dynocell runs` for run ids")
    if len(matches) > 1:
        raise NotFound(f"run prefix {ref!r} is ambiguous ({len(matches)} runs)", "give more characters")
    return matches[0]


def latest_run_json(cell: Cell) -> str:
    """The newest run id as JSON (for scripts)."""
    rows = db_runs.list_runs(cell.store, limit=1)
    return json.dumps(rows[0]["id"] if rows else None)
