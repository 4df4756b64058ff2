"""The ``bench`` step: the workload's throughput levels against the boot, one ``bench_runs`` row per level.
"""

from __future__ import annotations

from typing import Any

from dynocell.db import runs as db_runs
from dynocell.engine import breakeven as be
from dynocell.engine.workloads import Workload
from dynocell.errors import EngineError
from dynocell.runbooks import boots
from dynocell.runbooks.run.greedy import api_kw
from dynocell.runbooks.run.job import RunJob, SkipStep


def calibrate(job: RunJob, live: Any, workload: Workload, context_length: int | None = None) -> Workload:
    """``workload`` calibrated to the engine's own tokens per UTF-8 byte, per text class.

    Input-length targets are in engine tokens; the workload alone can only assume one token per
    byte (an upper bound). One 1-token generation per class (its ~1 KB material) gives the
    server's ``prompt_tokens`` / bytes (``bench.measure_tokens_per_byte``); classes whose
    calibration failed keep 1.0. Returns :meth:`Workload.calibrated` of those ratios.
    """
    import asyncio

    from dynocell.engine.bench import measure_tokens_per_byte

    tpb = asyncio.run(measure_tokens_per_byte(live.base_url, workload.calibration_texts(context_length),
                                              timeout_s=job.cell.settings.request_timeout_s, **api_kw(live.cfg)))
    job.progress("tokens per byte: " + ", ".join(f"{k} {v:.2f}" for k, v in sorted(tpb.items())),
                 {"step": "bench", "tokens_per_byte": tpb})
    return workload.calibrated(tpb)


def run_bench_level(job: RunJob, live: Any, level: Any, requests: list[Any], warmup: int | None = None) -> Any:
    """One level of ``requests`` at the level's concurrency (:func:`dynocell.engine.bench.run_level_sync`),
    progress reported per request; returns the engine's level result."""
    from dynocell.engine.bench import run_level_sync

    def tick(done: int, total: int) -> None:
        job.progress(f"{level.name}: {done}/{total}", {"step": "bench", "level": level.name,
                                                         "done": done, "total": total})

    return run_level_sync(live.base_url, requests, level.concurrency,
                          warmup=level.warmup if warmup is None else warmup, progress=tick,
                          timeout_s=job.cell.settings.request_timeout_s, **api_kw(live.cfg))


def _pct(p: Any) -> dict[str, Any]:
    return {"p50": p.p50, "p90": p.p90, "p99": p.p99, "mean": p.mean, "n": p.n}


SAMPLES_PER_LEVEL = 3


def bench_row(job: RunJob, live: Any, result: Any, text_class: str | None,
              verify_step_ms: float | None = None) -> db_runs.BenchRow:
    """Store one level (``engine.bench.LevelResult``) as a bench_runs row.

    ``extra.samples`` keeps a few generated texts (at the workload's sampling
    settings) so the doctor can judge the output itself, not only the numbers;
    ``extra.requests`` each request's ``decode_tok_s`` and ``tpot_ms`` (the intervals over requests, issue 33).
    ``verify_step_ms`` overrides the per-request figure (vLLM: from the counters of the window).
    """
    step_ms = verify_step_ms if verify_step_ms is not None else be.verify_step_ms(result.results)
    extra = {"failures": result.failures, "warmup_requests": result.warmup_requests,
             "warmup_failed": result.warmup_failed, "level": result.name,
             "verify_step_ms_p50": step_ms,
             "samples": [r.text for r in result.results if r.ok][:SAMPLES_PER_LEVEL],
             # each request's decode rate (tok/s) and TPOT (ms): the intervals of issue 33 are over requests
             "requests": {"decode_tok_s": [round(r.decode_tok_s, 3) for r in result.results
                                           if r.ok and r.decode_tok_s is not None],
                          "tpot_ms": [round(r.tpot_s * 1000, 3) for r in result.results
                                      if r.ok and r.tpot_s is not None]}}
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


def run_bench(job: RunJob, live: boots.LiveBoot | boots.AttachedBoot, workload: Any, context_length: int,
              d: dict[str, Any]) -> None:
    """The ``bench`` step: every throughput level of ``workload`` against ``live``, one bench row each.
    Raises SkipStep when the workload has none."""
    levels = [lv for lv in workload.levels() if lv.purpose == "throughput"]
    if not levels:
        raise SkipStep("the workload has no throughput levels")
    out = []
    for level in levels:
        reqs = workload.requests(level.name, context_length)
        result = run_bench_level(job, live, level, reqs)
        row = bench_row(job, live, result, None)
        out.append({"level": level.name, "concurrency": level.concurrency, "output_tok_s": row.output_tok_s,
                    "failed": row.num_failed})
        if row.num_failed == row.num_requests:
            said, hint = _engine_log_says(live)
            raise EngineError(f"every request of level {level.name} failed{said}", hint)
    d["levels"] = out


def _engine_log_says(live: Any, tail: int = 400) -> tuple[str, str]:
    """When every request failed, what the engine's own log names (a failure signature of
    ``engine/rules/signatures.toml``, e.g. a scheduler that died while serving): ``(": the
    engine log shows ID (title)", hint)``, or ``("", "see the engine log")`` when nothing matches."""
    from dynocell.engine.rules import classify_log

    try:
        lines = live.log_path.read_text(errors="replace").splitlines()
    except OSError:
        return "", "see the engine log"
    match, _, _ = classify_log(lines[-5000:], engine=live.cfg.engine, tail=tail)
    if match.id == "unknown":
        return "", "see the engine log"
    return f": the engine log shows {match.id} ({match.title})", match.hint
