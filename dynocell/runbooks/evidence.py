"""Import the non-log evidence: ``/metrics`` scrapes, per-request responses, benchmark result files.

Each import records a run of kind ``import`` (no boot: the engine was not seen
booting) linked to the config given with ``--config`` or, when the evidence names
its engine and model, an observed config with only those fields; one ``imports``
row keyed by the file(s)' sha256 (a re-import returns the first record). All
rows of one import are written in one transaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from dynocell.clock import now_utc
from dynocell.db import imports as db_imports
from dynocell.engine.observed import ObservedConfig
from dynocell.errors import UserError
from dynocell.runbooks.cell import Cell
from dynocell.runbooks.boots import new_id
from dynocell.runbooks.imports import curve_row, digest_files, resolve_or_observe

__all__ = ["import_bench", "import_metrics", "import_requests"]

MAX_SCRAPE_BYTES = 64 << 20
#: Imported responses keep at most this many generated texts (each cut to MAX_SAMPLE_CHARS) for the doctor.
MAX_SAMPLES, MAX_SAMPLE_CHARS = 32, 4000


def _run_row(
    run_id: str,
    config_hash: str,
    source: str,
    files: list[dict[str, Any]],
    summary: dict[str, Any],
) -> dict[str, Any]:
    now = now_utc()
    return {"id": run_id, "kind": "import", "config_hash": config_hash, "state": "completed", "step": "import",
            "started_at": now, "ended_at": now, "options": {"source": source, "files": [f["path"] for f in files]},
            "summary": summary}


def _found(kind: str, cell: Cell, key: str) -> dict[str, Any] | None:
    rec = db_imports.find_import(cell.store, kind, key)
    return {**rec.summary, "import_id": rec.id, "created": False} if rec else None


# ---------------------------------------------------------------- metrics

def _scrape(path: Path) -> Any:
    from dynocell.engine.metrics import MetricsError, parse_metrics

    size = path.stat().st_size
    if size > MAX_SCRAPE_BYTES:
        raise UserError(f"{path}: {size >> 20} MiB is more than a /metrics scrape ({MAX_SCRAPE_BYTES >> 20} MiB)")
    raw = path.read_bytes()
    nul = raw.find(b"\x00")
    if nul >= 0:
        line_no = raw[:nul].count(b"\n") + 1
        raise UserError(f"{path}: line {line_no}: binary content, not a Prometheus text scrape",
                        "save the body of GET /metrics (curl -s URL/metrics > scrape.txt)")
    try:
        snap = parse_metrics(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        line_no = raw[:exc.start].count(b"\n") + 1
        raise UserError(f"{path}: line {line_no}: not UTF-8 text") from None
    except MetricsError as exc:
        raise UserError(f"{path}: line {_first_bad_line(raw.decode('utf-8'))}: {exc.message}", exc.hint) from None
    if not snap.samples:
        raise UserError(f"{path}: no metric sample in the file", "save the body of GET /metrics")
    return snap


def _check_positions(where: str, snap: Any) -> None:
    """The per-position counters of one scrape (or of the window between two) readable: a ``position`` label
    that is no integer, or more accepted than drafted, is bad input (UserError, exit 2) naming ``where``."""
    from dynocell.engine.metrics import MetricsError, position_curve, vllm_position_curve

    try:
        vllm_position_curve(snap)
        position_curve(snap)
    except MetricsError as exc:
        raise UserError(f"{where}: {exc.message}",
                        exc.hint or 'every per-position series needs position="0", "1", … and at most as many '
                        "accepted as drafted: give the unedited body of GET /metrics "
                        "(curl -s URL/metrics > scrape.txt)") from None


def _first_bad_line(text: str) -> int:
    """The first line the Prometheus parser refuses on its own (1-based; 1 when none alone does)."""
    from dynocell.engine.metrics import MetricsError, parse_metrics

    for i, line in enumerate(text.splitlines(), start=1):
        if line.strip() and not line.startswith("#"):
            try:
                parse_metrics(line + "\n")
            except MetricsError:
                return i
    return 1


def _observed_from_labels(snap: Any, source: str) -> ObservedConfig | None:
    """Engine and served model from the metric families' own names and ``model_name`` labels."""
    names = snap.names()
    engine = ("vllm" if any(n.startswith("vllm:") for n in names)
              else "sglang" if any(n.startswith("sglang:") for n in names)
              else None)
    if engine is None:
        return None
    model = None
    for n in names:
        for s in snap.samples[n]:
            model = s.label_dict.get("model_name")
            if model:
                break
        if model:
            break
    fields = {"served_model_name": model} if model else {}
    return ObservedConfig(engine, fields, {"metric_families": len(names)}, source)


def import_metrics(cell: Cell, paths: Sequence[str | Path], *, config_ref: str | None = None) -> dict[str, Any]:
    """Import Prometheus text scrapes of one engine, in time order; returns the import summary.

    One scrape: counters since the engine started. Two or more: the deltas from the
    first to the last scrape (every scrape checked against the one before: a counter
    that went down, or a changed ``*_created`` stamp, is refused with the file, the
    series and both values — a restart or another engine in between makes deltas
    meaningless). vLLM's ``spec_decode_num_accepted_tokens_per_pos_total`` gives the
    per-position curve (p_i = accepted_i / drafts, τ = 1 + accepted / drafts); SGLang's
    per-position counters (reference engine, patched SGLang) likewise.
    """
    from dynocell.engine import metrics as m

    if not paths:
        raise UserError("no scrape given", "dynocell import metrics BEFORE.txt AFTER.txt")
    files, key = digest_files(paths)
    found = _found("metrics", cell, key)
    if found:
        return found
    shas = [f["sha256"] for f in files]
    if len(set(shas)) < len(shas):
        twice = next(f["path"] for i, f in enumerate(files) if f["sha256"] in shas[:i])
        raise UserError(f"{twice}: the same scrape given twice: a window between a scrape and itself is empty",
                        "give scrapes taken at different times (before and after the traffic), oldest first")
    snaps = [_scrape(Path(p)) for p in paths]
    pairs = list(zip(paths, snaps, strict=False))
    for (pa, a), (pb, b) in zip(pairs, pairs[1:], strict=False):
        restarted = m.restarted_between(a, b)
        if restarted:
            raise UserError(f"{pb}: {restarted[0]} changed since {pa}: the engine restarted between the scrapes "
                            "(or they are of two engines); counter deltas would be meaningless",
                            "import the scrapes of one engine process, in the order they were taken")
        down = m.counter_decreases(a, b)
        if down:
            name, labels, before, after = down[0]
            lab = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            raise UserError(f"{pb}: counter {name}{{{lab}}} went down from {before:g} (in {pa}) to {after:g}: "
                            f"not monotonic ({len(down)} series)",
                            "give the scrapes of one engine process in the order they were taken")
    for p, snap in pairs:
        _check_positions(str(p), snap)
    window = m.delta(snaps[0], snaps[-1]) if len(snaps) > 1 else snaps[0]
    if len(snaps) > 1:
        _check_positions(f"{paths[0]} → {paths[-1]}", window)
    last = snaps[-1]
    observed = _observed_from_labels(last, Path(paths[-1]).name)
    config_hash, cfg_row = resolve_or_observe(cell, config_ref, observed, str(paths[-1]))
    run_id = new_id()
    curves, acc = [], None
    vc = m.vllm_position_curve(window)
    if vc is not None and len(snaps) > 1 and not vc[1]["drafts"]:
        raise UserError(f"{paths[-1]}: no speculative draft between {paths[0]} and {paths[-1]} "
                        "(vllm:spec_decode_num_drafts_total did not move): an empty window has no curve",
                        "scrape before and after the traffic whose acceptance you want")
    if vc is not None:
        curve, figs = vc
        curves.append({**curve_row(curve, "metrics", engine_tau=figs["engine_tau"], engine_source="metrics:vllm"),
                       "run_id": run_id})
        acc = {"source": "vllm per-position counters", "tau": round(curve.tau, 4), "engine_tau": figs["engine_tau"],
               "p": [round(x, 4) for x in curve.p], "drafts": figs["drafts"],
               "accepted_tokens": figs["accepted_tokens"]}
    else:
        sc = m.position_curve(window)
        if sc is not None:
            curves.append({**curve_row(sc, "metrics", engine_tau=m.tokens_per_verify(window),
                                       engine_source="metrics:sglang"), "run_id": run_id})
            acc = {"source": "sglang per-position counters", "tau": round(sc.tau, 4),
                   "p": [round(x, 4) for x in sc.p], "drafts": sc.steps}
    gauges = {
        "running": (last.sum("vllm:num_requests_running")
                    if last.sum("vllm:num_requests_running") is not None
                    else m.num_running_reqs(last)),
        "waiting": (last.sum("vllm:num_requests_waiting")
                    if last.sum("vllm:num_requests_waiting") is not None
                    else m.num_queue_reqs(last)),
        "kv_usage": (last.mean("vllm:kv_cache_usage_perc")
                     if last.mean("vllm:kv_cache_usage_perc") is not None
                     else last.mean("sglang:token_usage")),
    }
    gen = window.sum("vllm:generation_tokens_total")
    summary = {"kind": "metrics", "run_id": run_id, "config_hash": config_hash, "observed": cfg_row is not None,
               "scrapes": len(snaps),
               "window": "delta first→last scrape" if len(snaps) > 1 else "since the engine started",
               "generation_tokens": gen if gen is not None else m.generation_tokens(window),
               "acceptance": acc, "gauges_last": gauges,
               "files": [{"path": f["path"], "sha256": f["sha256"]} for f in files]}
    rec, created = db_imports.record_import(
        cell.store, kind="metrics", sha256=key, files=files, summary=summary, config=cfg_row,
        run=_run_row(run_id, config_hash, "metrics", files, {"import": "metrics", "acceptance": acc}), curves=curves)
    return {**(summary if created else rec.summary), "import_id": rec.id, "created": created}


# ---------------------------------------------------------------- per-request responses

def _pcts(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"p50": None, "p90": None, "p99": None, "mean": None, "n": 0}
    v = sorted(values)

    def q(f: float) -> float:  # linear interpolation, numpy's default
        x = f * (len(v) - 1)
        lo = int(x)
        hi = min(lo + 1, len(v) - 1)
        return v[lo] + (v[hi] - v[lo]) * (x - lo)
    return {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "mean": sum(v) / len(v), "n": len(v)}


def import_requests(cell: Cell, path: str | Path, *, config_ref: str | None = None) -> dict[str, Any]:
    """Import per-request responses (JSON lines) as a bench run with one level and, where the
    responses carry it, the acceptance curve summed over requests; returns the import summary."""
    from dynocell.engine.results import read_requests

    files, key = digest_files([path])
    found = _found("requests", cell, key)
    if found:
        return found
    rep = read_requests(path)
    observed = None
    if rep.model:
        observed = ObservedConfig("openai", {"served_model_name": str(rep.model)}, {}, Path(path).name)
    config_hash, cfg_row = resolve_or_observe(cell, config_ref, observed, str(path))
    run_id = new_id()
    ok = rep.requests - rep.failed
    e2e = _pcts(rep.e2e_ms)
    dur = sum(rep.e2e_ms) / 1000 if rep.e2e_ms else 0.0  # sequential sum: the file has no wall clock
    bench = [{"run_id": run_id, "text_class": "imported", "concurrency": 0, "num_requests": rep.requests,
              "num_failed": rep.failed, "duration_s": dur, "prompt_tokens": rep.prompt_tokens,
              "completion_tokens": rep.completion_tokens, "request_throughput": ok / dur if dur else 0.0,
              "output_tok_s": rep.completion_tokens / dur if dur else 0.0,
              "total_tok_s": (rep.prompt_tokens + rep.completion_tokens) / dur if dur else 0.0,
              "ttft_ms": _pcts([]), "tpot_ms": _pcts([]), "itl_ms": _pcts([]), "e2e_ms": e2e,
              "extra": {"source": rep.format, "per_request_tau": rep.per_request_tau,
                        # what the engine served, judged by the doctor like a bench level's samples
                        "samples": [t[:MAX_SAMPLE_CHARS] for t in rep.texts[:MAX_SAMPLES]],
                        "note": "concurrency unknown (0); duration = sum of request "
                        "latencies; TTFT/TPOT/ITL not in the responses"}}]
    curves, acc = [], None
    if rep.curve is not None:
        curves.append({**curve_row(rep.curve, "requests", engine_tau=rep.engine_tau,
                                   engine_source="requests" if rep.engine_tau else None,
                                   completion_tokens=rep.completion_tokens), "run_id": run_id})
        acc = {"tau": round(rep.curve.tau, 4), "p": [round(x, 4) for x in rep.curve.p], "steps": rep.curve.steps}
    summary = {"kind": "requests", "run_id": run_id, "config_hash": config_hash, "observed": cfg_row is not None,
               "format": rep.format, "requests": rep.requests, "failed": rep.failed,
               "completion_tokens": rep.completion_tokens, "e2e_ms_p50": e2e["p50"], "acceptance": acc}
    rec, created = db_imports.record_import(
        cell.store, kind="requests", sha256=key, files=files, summary=summary, config=cfg_row,
        run=_run_row(run_id, config_hash, "requests", files, {"import": "requests", "acceptance": acc}),
        bench=bench, curves=curves)
    return {**(summary if created else rec.summary), "import_id": rec.id, "created": created}


# ---------------------------------------------------------------- benchmark tools

def _config_drafts(cell: Cell, config_hash: str) -> int | None:
    """Draft tokens per verify step D of a stored config (vLLM's k, SGLang's chain length), or None
    when the config has no speculation or does not say (an observed config)."""
    from dynocell.errors import DynocellError
    from dynocell.runbooks.configs import config_by_hash

    try:
        return config_by_hash(cell, config_hash).speculative.num_speculative_tokens
    except (DynocellError, ValueError):  # an observed config may not make a runtime config
        return None


def import_bench(cell: Cell, path: str | Path, *, config_ref: str | None = None) -> dict[str, Any]:
    """Import a benchmark tool's result file (SGLang bench_serving, vLLM bench serve, AIPerf,
    GuideLLM) as one bench row per level; returns the import summary with, per level,
    the fields the tool wrote that dynocell keeps no column for (``lost``)."""
    from dynocell.engine.results import read_bench

    files, key = digest_files([path])
    found = _found("bench", cell, key)
    if found:
        return found
    tool, levels = read_bench(path)
    observed = None
    label = next((lv.label for lv in levels if lv.label), None)
    if tool in ("vllm-bench-serve",) and label:
        observed = ObservedConfig("vllm", {"served_model_name": label}, {}, Path(path).name)
    engine = {"vllm-bench-serve": "vllm", "sglang-bench-serving": "sglang"}.get(tool)
    config_hash, cfg_row = resolve_or_observe(cell, config_ref, observed, str(path), engine=engine)
    run_id = new_id()
    bench, curves = [], []
    drafts = _config_drafts(cell, config_hash)
    from dynocell.engine.acceptance import Curve

    for lv in levels:
        # A level that carries acceptance gets a curve with its own class, paired with its bench row
        # (so the doctor sees its prompt length): per-position rates, else the tool's accept length
        # with the config's draft count D (a summary curve: τ only).
        curve = None
        if lv.position_rates:
            curve = Curve.from_positions(lv.position_rates, steps=lv.spec_drafts)
        elif lv.accept_length is not None and lv.accept_length >= 1.0 and drafts:
            curve = Curve.from_summary(lv.accept_length, None, drafts)
        cls = f"{tool}-c{lv.concurrency}" if curve is not None else tool
        bench.append({"run_id": run_id, "text_class": cls, "concurrency": lv.concurrency,
                      "num_requests": lv.num_requests, "num_failed": lv.num_failed, "duration_s": lv.duration_s,
                      "prompt_tokens": lv.prompt_tokens, "completion_tokens": lv.completion_tokens,
                      "request_throughput": lv.request_throughput, "output_tok_s": lv.output_tok_s,
                      "total_tok_s": lv.total_tok_s, "ttft_ms": lv.ttft_ms, "tpot_ms": lv.tpot_ms,
                      "itl_ms": lv.itl_ms, "e2e_ms": lv.e2e_ms,
                      "extra": {"tool": tool, "label": lv.label, "accept_length": lv.accept_length, "lost": lv.lost}})
        if curve is not None:
            curves.append({**curve_row(curve, cls, engine_tau=lv.accept_length, engine_source=tool),
                           "run_id": run_id})
    summary = {"kind": "bench", "tool": tool, "run_id": run_id, "config_hash": config_hash,
               "observed": cfg_row is not None,
               "levels": [{"concurrency": lv.concurrency, "requests": lv.num_requests, "failed": lv.num_failed,
                           "output_tok_s": lv.output_tok_s, "ttft_ms_p50": lv.ttft_ms["p50"],
                           "accept_length": lv.accept_length, "lost": lv.lost} for lv in levels]}
    rec, created = db_imports.record_import(
        cell.store, kind="bench", sha256=key, files=files, summary=summary, config=cfg_row,
        run=_run_row(run_id, config_hash, "bench", files, {"import": "bench", "tool": tool}),
        bench=bench, curves=curves)
    return {**(summary if created else rec.summary), "import_id": rec.id, "created": created}
