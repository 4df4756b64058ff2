"""A measurement's comparability context (issue 33): what must match for two measurements to be "the same
experiment", stored on the run row (``options["context"]``) and shown in every face.

``{workload: {name, sha256, temperature, requests_per_class, acceptance_input_tokens, output_tokens,
concurrency, requests}, engine, engine_version, dtype, host, contention: {load_per_core, cores, steal,
gpu_util_pct, other_boots, contended}, at}``. The workload's sha256 covers its prompts, lengths, sampling
parameters (temperature included) and request counts (:attr:`dynocell.engine.workloads.Workload.sha256`);
contention is read by :mod:`dynocell.engine.contention` around the bench and acceptance windows.

:func:`differences` names what differs between two contexts (context length, k, workload, temperature,
engine version, dtype, host, contention) — the doctor says that instead of "the build changed".
"""

from __future__ import annotations

import contextlib
import socket
from typing import Any

from dynocell.clock import now_utc
from dynocell.db import hosts as db_hosts
from dynocell.db import runs as db_runs
from dynocell.engine import contention
from dynocell.errors import DynocellError
from dynocell.runbooks import boots

#: Context fields compared for "same experiment", in the order the doctor names them.
COMPARED = ("workload.sha256", "workload.temperature", "workload.acceptance_input_tokens", "workload.output_tokens",
            "workload.requests_per_class", "workload.concurrency", "k", "context_length", "engine",
            "engine_version", "dtype", "host")


def workload_identity(workload: Any) -> dict[str, Any]:
    """What a workload says about the experiment: name, sha256 (prompts, lengths, sampling, counts),
    temperature, acceptance input lengths (tokens), output tokens, requests per class, throughput concurrency
    list and the number of requests of its acceptance levels."""
    acc = workload.acceptance
    thr = workload.throughput
    return {"name": workload.name, "sha256": workload.sha256, "temperature": workload.temperature,
            "requests_per_class": acc.requests_per_class if acc else None,
            "acceptance_input_tokens": list(acc.input_tokens) if acc else None,
            "output_tokens": acc.output_tokens if acc else (thr.output_tokens if thr else None),
            "concurrency": list(thr.concurrency) if thr else None}


def _engine_version(cell: Any, host_id: str | None, engine: str) -> str | None:
    if engine == "reference":
        import dynocell

        return f"dynocell {dynocell.__version__}"
    try:
        row = db_hosts.get_host(cell.store, host_id) if host_id else None
    except DynocellError:
        return None
    versions = (row.engine_versions if row else None) or {}
    return versions.get(engine)


def run_context(cell: Any, cfg: Any, workload: Any, host_id: str | None, context_length: int | None,
                window: dict[str, Any] | None) -> dict[str, Any]:
    """The context stored with a run (see the module docstring); ``window``: a
    :func:`dynocell.engine.contention.window` dict, or None when not measured."""
    spec = getattr(cfg, "speculative", None)
    return {"workload": workload_identity(workload), "engine": cfg.engine,
            "engine_version": _engine_version(cell, host_id, cfg.engine), "dtype": getattr(cfg, "dtype", None),
            "k": getattr(spec, "num_steps", None) if spec is not None and cfg.speculative_enabled else None,
            "context_length": context_length, "host": socket.gethostname(), "host_id": host_id,
            "contention": window, "at": now_utc().isoformat()}


def other_boot_count(cell: Any, boot_id: str | None) -> int:
    """Other live boots of this store on this host (0 when the store cannot say)."""
    try:
        return len(boots.other_live_boots(cell, boot_id))
    except DynocellError:
        return 0


def record(cell: Any, run_id: str, ctx: dict[str, Any]) -> None:
    """Store ``ctx`` as the run's ``options["context"]`` (other options kept)."""
    run = db_runs.get_run(cell.store, run_id)
    opts = dict((run.options if run else None) or {})
    opts["context"] = ctx
    db_runs.update_run(cell.store, run_id, options=opts)


def of_run(run: Any) -> dict[str, Any]:
    """A stored run's context (``{}`` for runs that predate it)."""
    return dict(((getattr(run, "options", None) or {}).get("context")) or {})


#: Relative difference of two mean lengths (tokens) beyond which two measurements are not one workload.
LENGTH_TOLERANCE = 0.15


def evidence_of(store: Any, run_id: str) -> dict[str, Any]:
    """What a run's stored rows say about its workload, for runs with no recorded context (imports: a log, a
    bench file): ``{input_tokens_mean, output_tokens_mean, concurrency, k}`` — mean prompt and completion
    tokens per request over its bench rows, the concurrencies measured, the drafts per step of its curves
    (D); a field the evidence does not carry is absent (unknown), never guessed."""
    rows = db_runs.bench_rows(store, run_id)
    n = sum(b.num_requests or 0 for b in rows)
    out: dict[str, Any] = {}
    if n and any(b.prompt_tokens for b in rows):
        out["input_tokens_mean"] = round(sum(b.prompt_tokens or 0 for b in rows) / n, 1)
    if n and any(b.completion_tokens for b in rows):
        out["output_tokens_mean"] = round(sum(b.completion_tokens or 0 for b in rows) / n, 1)
    conc = sorted({b.concurrency for b in rows if b.concurrency})
    if conc:
        out["concurrency"] = conc
    ks = sorted({c.num_drafts for c in db_runs.curves(store, run_id) if c.num_drafts})
    if ks:
        out["k"] = ks
    return out


def full_context(store: Any, run: Any) -> dict[str, Any]:
    """A run's stored context (:func:`of_run`) with ``evidence`` (:func:`evidence_of`) beside it."""
    ctx = of_run(run)
    with contextlib.suppress(DynocellError):  # a report shows what it can
        ctx["evidence"] = evidence_of(store, run.id)
    return ctx


def _evidence_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    out = []
    for k, what in (("input_tokens_mean", "input length"), ("output_tokens_mean", "output length")):
        va, vb = a.get(k), b.get(k)
        if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and max(va, vb) > 0 \
                and abs(va - vb) / max(va, vb) > LENGTH_TOLERANCE:
            out.append(f"{what} {va:.0f} vs {vb:.0f} tokens per request")
    for k, what in (("k", "drafts per step (k)"), ("concurrency", "concurrency")):
        va, vb = a.get(k), b.get(k)
        if va and vb and va != vb:
            out.append(f"{what} {', '.join(map(str, va))} vs {', '.join(map(str, vb))}")
    return out


def _flat(ctx: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in ctx.items() if not isinstance(v, dict) and k != "evidence"}
    out.update({f"workload.{k}": v for k, v in (ctx.get("workload") or {}).items()})
    return out


def differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """What differs between two contexts, in words (``workload.output_tokens 64 vs 256``, ``contention: load 3.1
    per core vs 0.4``); fields unknown on either side are not named. Where a side recorded no workload (an
    import), the ``evidence`` (:func:`evidence_of`) is compared: mean input/output length beyond
    :data:`LENGTH_TOLERANCE`, drafts per step, concurrency. Empty when they match."""
    fa, fb = _flat(a), _flat(b)
    out = []
    for k in COMPARED:
        va, vb = fa.get(k), fb.get(k)
        if va is None or vb is None or va == vb:
            continue
        if k == "workload.sha256":
            if not any(fa.get(x) != fb.get(x) for x in COMPARED[1:6] if fa.get(x) is not None):
                out.append("workload (prompts or sampling)")
            continue
        out.append(f"{k} {va} vs {vb}")
    if not (fa.get("workload.sha256") and fb.get("workload.sha256")):
        # no recorded workload on a side (an import): what the evidence says is compared instead
        out += _evidence_differences(a.get("evidence") or {}, b.get("evidence") or {})
    ca, cb = contention.contended(a.get("contention")), contention.contended(b.get("contention"))
    if bool(ca) != bool(cb):
        out.append(f"contention: {ca or 'quiet'} vs {cb or 'quiet'}")
    return out


def same_experiment(cell: Any, run: Any, *, limit: int = 50) -> list[Any]:
    """The other completed runs of the same experiment as ``run`` (a ``RunRow``), newest first: same config
    hash, kind, workload sha256 and host, and no :func:`differences` between their contexts (engine version,
    dtype, lengths, contention …). Their spread is the run-to-run variation of a figure (issue 33)."""
    ctx = of_run(run)
    out = []
    for o in db_runs.list_runs(cell.store, config_hash=run.config_hash, states=("completed",), limit=limit):
        if (o.id != run.id and o.kind == run.kind and o.workload_sha256 == run.workload_sha256
                and o.host_id == run.host_id and not differences(ctx, of_run(o))):
            out.append(o)
    return out


def contended(ctx: dict[str, Any]) -> str | None:
    """Why the run's measurement window counts as contended, or None."""
    return contention.contended(ctx.get("contention"))


def record_window(job: Any, live: Any, workload: Any, context_length: int | None, before: contention.Reading) -> None:
    """Store the run's context (:func:`run_context`) with the contention of its bench and acceptance windows
    (``before``: a :func:`dynocell.engine.contention.read` at their start; the end is read now); a contended
    window is said in the progress and kept in the run's warnings."""
    from dynocell.runbooks import hosts

    window = contention.window(before, contention.read(), other_boots=other_boot_count(job.cell, live.boot_id),
                               gpu=contention.gpu_utilisation())
    ctx = run_context(job.cell, live.cfg, workload, hosts.this_host_id(job.cell), context_length, window)
    record(job.cell, job.run_id, ctx)
    if window["contended"]:
        msg = f"⚠ measured under contention: {window['contended']}"
        job.warnings.append(msg)
        job.progress(msg, {"warning": msg})
