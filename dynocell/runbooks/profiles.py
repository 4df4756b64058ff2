"""The profile window: ``/start_profile`` → a fixed decode workload → ``/stop_profile`` → split.

The window is opened and closed explicitly around the workload (no
``num_steps``), so the output tokens in the window are exactly the workload's
completion tokens. Traces (one per rank, ``…-TP-<rank>…trace.json.gz``; vLLM:
``rank<N>.<id>.pt.trace.json.gz`` into the directory fixed at boot by ``--profiler-config``,
:func:`dynocell.runbooks.boots.engine_profile_dir`, only the files new in this window counting)
are written by the engine into the boot's artifact directory and parsed
streaming (:func:`dynocell.engine.trace.analyze_ranks`); a speculative window's phase split
(draft, draft extend, verify, sampling, glue: :mod:`dynocell.runbooks.phase_split`) is stored with
it. The profile row is
written before the window opens and completed (or marked failed with the
reason) after — a bad trace loses nothing else.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

from dynocell.db import runs as db_runs
from dynocell.errors import EngineError
from dynocell.runbooks import hosts
from dynocell.runbooks.cell import Cell

PROFILE_REQUESTS = 2
PROFILE_TOKENS = 32
TRACE_WAIT_S = 60.0
TRACE_GLOB = "*.trace.json*"
#: How a profile's error starts when the engine refused ``/start_profile``: no window was opened.
START_REFUSED = "/start_profile answered"


def window_refused(state: str | None, error: str | None) -> bool:
    """Whether a stored profile (its ``state`` and ``error``) failed because the engine refused to open
    the window (``/start_profile`` answered an error status), so no window ran and no trace was due."""
    return state == "failed" and (error or "").startswith(START_REFUSED)


def _traces(trace_dir: Path, exclude: frozenset[Path]) -> list[Path]:
    return sorted(p for p in trace_dir.glob(TRACE_GLOB) if p.is_file() and p not in exclude)


def _wait_for_traces(trace_dir: Path, timeout_s: float, exclude: frozenset[Path] = frozenset()) -> list[Path]:
    """Trace files in ``trace_dir`` (not in ``exclude``: earlier windows) once their sizes stop
    changing (or [] after ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    last: dict[Path, int] = {}
    while time.monotonic() < deadline:
        files = _traces(trace_dir, exclude)
        sizes = {p: p.stat().st_size for p in files}
        if files and sizes == last and all(sizes.values()):
            return files
        last = sizes
        time.sleep(0.5)
    return _traces(trace_dir, exclude)


def profile_window(
    cell: Cell,
    live: Any,
    workload: Any,
    context_length: int,
    *,
    run_id: str | None = None,
    progress: Callable[[str, dict[str, Any]], None] | None = None,
) -> db_runs.ProfileRow:
    """Profile ``live`` (a LiveBoot or AttachedBoot) over a fixed decode workload; store the split.

    Returns the stored profile (:class:`~dynocell.db.runs.ProfileRow`, with ``splits`` and ``kernels``). Raises
    :class:`~dynocell.errors.EngineError` / ``TraceError`` after marking the
    row ``failed`` with the reason.
    """
    from dynocell.engine.bench import run_level_sync
    from dynocell.engine.trace import analyze_ranks, per_token

    from dynocell.runbooks.boots import engine_profile_dir

    progress = progress or (lambda _m, _d: None)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    cfg = getattr(live, "cfg", None)
    fixed = engine_profile_dir(cfg, live.boot_dir)  # vLLM: the directory given at boot
    trace_dir = fixed or Path(live.boot_dir) / "profiles" / (run_id or stamp)
    trace_dir.mkdir(parents=True, exist_ok=True)
    earlier = frozenset(_traces(trace_dir, frozenset())) if fixed else frozenset()
    # vLLM serves OpenAI routes only; the model is its served name (vLLM's default: the path given).
    api_kw = {"api": "openai", "model": cfg.served_model_name or cfg.model_path} if fixed and cfg is not None else {}
    row = db_runs.create_profile(cell.store, run_id=run_id, boot_id=live.boot_id, state="running",
                                 trace_dir=str(trace_dir), host_id=hosts.this_host_id(cell))
    client = live.client(cell.settings.http_timeout_s)
    try:
        level = next(lv for lv in workload.levels() if lv.purpose == "throughput")
        reqs = [dataclasses.replace(r, max_new_tokens=PROFILE_TOKENS, ignore_eos=True)
                for r in workload.requests(level.name, context_length)[:PROFILE_REQUESTS]]
        resp = client.start_profile({"output_dir": str(trace_dir), "activities": ["CPU", "GPU"],
                                     "with_stack": False, "record_shapes": False,
                                     "profile_id": run_id or stamp})
        if not resp.ok:
            raise EngineError(f"{START_REFUSED} {resp.status}: {_answer(resp)}",
                              "vLLM serves it only when started with --profiler-config (dynocell boots add it)"
                              if fixed else
                              f"start the engine with profiling allowed and its profile directory covering "
                              f"{trace_dir} (SGLANG_TORCH_PROFILER_DIR), or leave the profile out "
                              "(dynocell run --no-profile)")
        progress("profiling a fixed decode workload", {"step": "profile"})
        result = run_level_sync(live.base_url, reqs, 1, warmup=0, **api_kw)
        stop = client.stop_profile()
        if not stop.ok:
            raise EngineError(f"/stop_profile answered {stop.status}: {_answer(stop)}",
                              f"the engine could not write its trace: free space on the disk holding {trace_dir} "
                              "(df -h) or lift the engine's file-size limit (ulimit -f)"
                              if stop.status == 507 else "see the engine log (dynocell logs BOOT)")
        files = _wait_for_traces(trace_dir, TRACE_WAIT_S, earlier)
        if not files:
            raise EngineError(f"no trace file appeared in {trace_dir} within {TRACE_WAIT_S:.0f} s",
                              "SGLang with speculative decoding and CUDA graphs may not write a trace; "
                              "try --no-profile or profile a plain config")
        ranked = analyze_ranks(files)
        tokens = int(result.output_tokens)
        combined = ranked.combined
        costs = per_token(combined, tokens)
        ms_tok, launches_tok = costs["ms_per_token"], costs["launches_per_token"]
        warnings = list(combined.warnings)
        graphs_expected = cfg is not None and cfg.engine in ("sglang", "vllm") and not cfg.cuda_graph.disable
        if graphs_expected and combined.graph_launches == 0:
            warnings.append("CUDA graphs are on in the config but the trace holds no cudaGraphLaunch: "
                            "the window ran eager (or graphs were not captured for this batch size)")
        traces = []
        from dynocell.engine.supervisor import file_digest

        for f in files:
            dg = file_digest(f)
            traces.append({"rank": _rank(f), "path": str(f), "size": dg.size_bytes, "sha256": dg.sha256})
        splits = [{"rank": -1, "category": c.category, "ms": c.ms, "pct": c.pct, "launches": c.launches}
                  for c in combined.categories]
        kernels = [{"rank": -1, "name": k.name, "category": k.category, "ms": k.ms, "launches": k.launches}
                   for k in combined.top]
        if len(ranked.ranks) > 1:
            for r in ranked.ranks:
                rank = r.rank if r.rank is not None else -2
                splits += [{"rank": rank, "category": c.category, "ms": c.ms, "pct": c.pct, "launches": c.launches}
                           for c in r.categories]
                kernels += [{"rank": rank, "name": k.name, "category": k.category, "ms": k.ms,
                             "launches": k.launches} for k in r.top[:10]]
        db_runs.finish_profile(
            cell.store, row.id, splits, kernels, state="completed", traces=traces, source=combined.source,
            num_ranks=len(ranked.ranks), device_ms=combined.device_ms, window_ms=combined.window_ms,
            busy_pct=combined.busy_pct, launches=combined.launches, graph_launches=combined.graph_launches,
            output_tokens=tokens, ms_per_token=ms_tok, launches_per_token=launches_tok,
            rank_skew=ranked.rank_skew if len(ranked.ranks) > 1 else None, warnings=warnings,
        )
        from dynocell.runbooks.phase_split import record as record_phases

        record_phases(cell, row.id, files, cfg, tokens)
    except BaseException as exc:
        error = (str(exc) or type(exc).__name__) + _disk_note(trace_dir)
        db_runs.finish_profile(cell.store, row.id, state="failed", error=error)
        raise
    return db_runs.profiles(cell.store, run_id=run_id)[-1] if run_id else dataclasses.replace(row, state="completed")


def _answer(resp: Any) -> str:
    """The engine's error message from an HTTP answer (the JSON ``message`` when there is one)."""
    body = resp.body
    if isinstance(body, dict):
        err = body.get("error")
        msg = body.get("message") or (err.get("message") if isinstance(err, dict) else err)
        if msg:
            return str(msg)[:500]
    return resp.text[:300]


def _disk_note(trace_dir: Path, low_bytes: int = 64 << 20) -> str:
    """`` (the disk holding DIR has only N MiB free)`` when under ``low_bytes`` are free there, else ``""``.

    A real full disk leaves a truncated trace behind whose parse error alone would hide the cause.
    """
    import shutil

    try:
        free = shutil.disk_usage(trace_dir).free
    except OSError:
        return ""
    return f" (the disk holding {trace_dir} has only {free >> 20} MiB free)" if free < low_bytes else ""


def _rank(path: Path) -> int | None:
    from dynocell.engine.trace import rank_of

    return rank_of(path)
