"""Import the evidence operators already hold, for engines dynocell did not start.

Procedures (each records one ``imports`` row, keyed by the source's sha256, so
importing the same file twice gives the first record back and writes nothing):

- :func:`import_log` — server logs → a boot of kind ``imported`` (several logs of
  one multi-node boot → one boot, each node's phases side by side as events with
  ``node_rank``), its failure signature, runtime events, and a run of kind
  ``import`` with the log's acceptance curve; config from ``--config`` or the
  log's own config line (stored ``observed``).
- :func:`import_trace` / :func:`trace_split` — a Chrome trace's profile split
  (stored, or only computed).
- :func:`import_metrics`, :func:`import_requests`, :func:`import_bench` in
  :mod:`dynocell.runbooks.evidence` (the non-log evidence).

Everything an importer stores is written in one transaction
(:func:`dynocell.db.imports.record_import`): a file it cannot read is refused
with the file, line and reason and leaves nothing behind.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, Sequence

from dynocell.clock import aware_utc, now_utc
from dynocell.db import imports as db_imports
from dynocell.engine.acceptance import Curve
from dynocell.engine.observed import ObservedConfig
from dynocell.errors import UserError, not_a_file
from dynocell.text import quoted_name
from dynocell.runbooks.cell import Cell

__all__ = ["IMPORT_KINDS", "MAX_UPLOAD_BYTES", "config_row", "digest_files", "import_log", "import_trace",
           "resolve_or_observe", "store_upload", "trace_split", "unknown_config"]

#: What ``dynocell import`` takes, and the file suffix an upload of each is stored with.
IMPORT_KINDS = {"log": ".log", "metrics": ".txt", "requests": ".jsonl", "bench": ".json", "trace": ".json.gz"}
#: The largest upload the web panel accepts (bytes).
MAX_UPLOAD_BYTES = 64 << 20


def store_upload(cell: Cell, kind: str, chunks: Any) -> Path:
    """Write an uploaded evidence file under ``<data dir>/uploads/`` and return its path.

    ``chunks``: an iterable of ``bytes``. The stored name is the content's sha256 plus the
    suffix of ``kind`` (never the uploader's file name). Raises UserError for an unknown
    kind or more than :data:`MAX_UPLOAD_BYTES`; nothing is left behind then.
    """
    if kind not in IMPORT_KINDS:
        raise UserError(f"kind: {kind!r} is not one of {', '.join(IMPORT_KINDS)}", "choose what the file is")
    folder = cell.settings.home / "uploads"
    folder.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    size = 0
    tmp = folder / f".upload-{_new_id()}"
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                size += len(chunk)
                if size > MAX_UPLOAD_BYTES:
                    raise UserError(f"file: more than {MAX_UPLOAD_BYTES >> 20} MiB", "import a file this large with "
                                    "the CLI (dynocell import …) on the machine holding it")
                h.update(chunk)
                f.write(chunk)
        if size == 0:
            raise UserError("file: the upload is empty", "choose the file to import")
        final = folder / f"{h.hexdigest()}{IMPORT_KINDS[kind]}"
        tmp.replace(final)
        return final
    finally:
        tmp.unlink(missing_ok=True)


def import_file(cell: Cell, kind: str, path: str | Path, *, config_ref: str | None = None) -> dict[str, Any]:
    """``dynocell import KIND FILE`` for one file (what the web panel's upload runs)."""
    from dynocell.runbooks import evidence

    if kind == "log":
        return import_log(cell, [path], config_ref=config_ref)
    if kind == "trace":
        return import_trace(cell, path, config_ref=config_ref)
    if kind == "metrics":
        return evidence.import_metrics(cell, [path], config_ref=config_ref)
    if kind == "requests":
        return evidence.import_requests(cell, path, config_ref=config_ref)
    if kind == "bench":
        return evidence.import_bench(cell, path, config_ref=config_ref)
    raise UserError(f"kind: {kind!r} is not one of {', '.join(IMPORT_KINDS)}")


def digest_files(paths: Sequence[str | Path]) -> tuple[list[dict[str, Any]], str]:
    """``([{path, size, sha256}], key)`` — ``key`` is the one file's sha256, or for several
    files the sha256 of their sorted sha256s joined by ``,`` (order-independent).

    Raises UserError naming a missing path.
    """
    files: list[dict[str, Any]] = []
    for p in paths:
        path = Path(p)
        if not path.is_file():
            raise UserError(f"{quoted_name(path)}: " + not_a_file(path),
                            "give the path of the file to import")
        h = hashlib.sha256()
        size = 0
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                h.update(chunk)
                size += len(chunk)
        files.append({"path": str(path.resolve()), "size": size, "sha256": h.hexdigest()})
    shas = sorted(f["sha256"] for f in files)
    key = shas[0] if len(shas) == 1 else hashlib.sha256(",".join(shas).encode()).hexdigest()
    return files, key


def config_row(cfg: Any) -> dict[str, Any]:
    """``configs`` columns for an :class:`ObservedConfig` (``observed`` True) or an EngineConfig."""
    if isinstance(cfg, ObservedConfig):
        return {"config_hash": cfg.config_hash, "engine": cfg.engine, "model_path": cfg.model_path,
                "canonical_json": cfg.canonical_json(), "source_toml": cfg.source_text(), "observed": True}
    from dynocell.engine.config import to_toml

    return {"config_hash": cfg.config_hash, "engine": cfg.engine, "model_path": cfg.model_path,
            "canonical_json": cfg.canonical_json(), "source_toml": to_toml(cfg), "observed": False}


def unknown_config(engine: str | None, what: str) -> ObservedConfig:
    """The observed config of evidence that reveals no setting (issue 35): no field known, only the engine
    (``"unknown"`` when not even that is known). Every such piece of evidence of one engine shares it — the
    same "we do not know" — and every rule reads its settings as unknown, never as defaults."""
    return ObservedConfig(engine or "unknown", {}, {}, f"{what}: no configuration revealed")


def resolve_or_observe(cell: Cell, config_ref: str | None, observed: ObservedConfig | None,
                       what: str, engine: str | None = None) -> tuple[str, dict[str, Any] | None]:
    """``(config_hash, config row to insert or None)``: the ``--config`` given, else the observed one, else
    the unknown config of ``engine`` (:func:`unknown_config`: a log of only the failing lines, a bench file,
    responses — evidence as operators hold it is recorded and classified anyway, issue 35).

    ``what`` names the evidence; raises UserError for a ``--config`` that does not resolve.
    """
    if config_ref:
        from dynocell.runbooks.configs import resolve_hash

        return resolve_hash(cell, config_ref), None
    if observed is None:
        observed = unknown_config(engine, Path(what).name)
    return observed.config_hash, config_row(observed)


def curve_row(curve: Curve, text_class: str, *, engine_tau: float | None = None,
              engine_source: str | None = None, completion_tokens: int = 0,
              warning: str | None = None) -> dict[str, Any]:
    """``acceptance_curves`` columns (+ ``points``) of one curve; unknown steps are stored as 0 with a warning."""
    from dynocell.engine.acceptance import relative_diff

    dis = relative_diff(curve.tau, engine_tau) if engine_tau else None
    if curve.steps is None:
        note = "verify steps unknown (summary figures only)"
        warning = f"{warning}; {note}" if warning else note
    return {"text_class": text_class, "num_drafts": curve.num_drafts, "steps": curve.steps or 0,
            "tau": curve.tau, "accept_rate": curve.accept_rate, "histogram": list(curve.histogram or []),
            "completion_tokens": completion_tokens, "engine_tau": engine_tau, "engine_source": engine_source,
            "disagreement_pct": None if dis is None else round(dis * 100, 3), "warning": warning,
            "points": [(i + 1, curve.p[i], curve.a[i]) for i in range(len(curve.p))]}


def _new_id() -> str:
    from dynocell.runbooks.boots import new_id

    return new_id()


# ---------------------------------------------------------------- logs

def import_log(cell: Cell, paths: Sequence[str | Path], *, config_ref: str | None = None,
               node_rank: int | Sequence[int] | None = None, engine: str | None = None,
               allow_mismatch: bool = False) -> dict[str, Any]:
    """Import one boot's server log(s) (one file per node); returns the import summary.

    ``node_rank``: one rank for a single file, or one rank per file in file order
    (``import log a.log --node-rank 0 b.log --node-rank 1``); left out, each log's
    own rank (SGLang ``node_rank=``), else the files' order. Several logs must agree that they are one
    boot (:func:`_not_one_boot`: server args, start time, node ranks, ``nnodes``); ``allow_mismatch``
    (``--allow-mismatch``) imports them as one boot anyway, the disagreement kept in the summary.
    Returns ``{import_id, created, boot_id, run_id, config_hash, observed, ...}``; a re-import returns the
    first record with ``created`` False. Raises LogReadError (file, line, reason) / UserError.
    """
    from dynocell.engine.logfile import read_log
    from dynocell.engine.rules import UNKNOWN

    if not paths:
        raise UserError("no log file given", "dynocell import log FILE [FILE…]")
    ranks_given = _given_ranks(node_rank, len(paths))
    files, key = digest_files(paths)
    found = db_imports.find_import(cell.store, "log", key)
    if found:
        _check_reimport(cell, found, config_ref=config_ref, ranks_given=ranks_given, engine=engine)
        return {**found.summary, "import_id": found.id, "created": False}
    reports = [read_log(p, engine=engine, node_rank=ranks_given[i] if ranks_given else None,
                        config_given=config_ref is not None) for i, p in enumerate(paths)]
    engines = {r.engine for r in reports}
    if len(engines) > 1:
        raise UserError(f"the logs are of different engines ({', '.join(sorted(engines))}): not one boot",
                        "import each engine's logs separately")
    disagree = _not_one_boot(reports, ranks_given) if len(reports) > 1 else []
    if disagree and not allow_mismatch:
        raise UserError("these logs are not one multi-node boot: " + "; ".join(disagree),
                        "import each log on its own (dynocell import log A.log, then B.log), or pass "
                        "--allow-mismatch to import them as one boot anyway (the disagreement is kept)")
    ranks = [r.node_rank if r.node_rank is not None else i for i, r in enumerate(reports)]
    if len(set(ranks)) != len(ranks):
        ranks = list(range(len(reports)))
    observed = next((r.config for r in reports if r.config is not None), None)
    config_hash, cfg_row = resolve_or_observe(cell, config_ref, observed, f"{reports[0].path}",
                                              engine=reports[0].engine)
    boot_id, run_id = _new_id(), _new_id()
    starts = [r.first_ts for r in reports if r.first_ts]
    t0 = min(starts) if starts else None
    lead = reports[ranks.index(min(ranks))]
    # never ready after reaching boot phases = a failed boot; a fragment without phases was serving
    failed = [r for r in reports if r.phases and not r.ready]
    sig = next((r.signature for r in reports if r.signature), None)
    state = _log_boot_state(reports, failed, sig)
    if state == "failed" and sig is None:
        sig = UNKNOWN.as_dict()
    # the log is copied under the data directory, so `dynocell logs BOOT` shows it
    boot_dir = cell.settings.boots_dir / boot_id
    copies = _copy_names(paths, ranks)
    events, node_phases = _log_events(boot_id, ranks, reports, t0)
    # the boot is ready when its last node is (offsets on the shared clock)
    ready_s = None if failed else max((per["ready"] for per in node_phases.values() if "ready" in per), default=None)
    mismatch = _config_mismatch([r.config for r in reports])
    skew = _phase_skew(node_phases)
    boot = {
        "id": boot_id, "config_hash": config_hash, "engine": lead.engine, "hostname": "", "host": "",
        "port": (observed.fields.get("port") if observed else None),
        "node_rank": None if len(reports) > 1 else ranks[0],
        "argv": "", "env": {}, "state": state, "last_phase": lead.last_phase,
        "log_path": str(boot_dir / copies[0]), "log_size": files[0]["size"],
        "log_sha256": files[0]["sha256"], "started_at": aware_utc(t0) or now_utc(), "ready_s": ready_s,
        "ended_at": aware_utc(max((r.last_ts for r in reports if r.last_ts), default=None)) or now_utc(),
        "failure_signature": sig["id"] if sig else None,
        "failure_detail": ({**sig, "node_rank": ranks[reports.index(failed[0])] if failed else None}
                           if sig else None),
        "kind": "imported", "source_sha256": key,
    }
    curves, acc_summary = _log_curves(run_id, ranks, reports)
    run = {"id": run_id, "kind": "import", "config_hash": config_hash, "boot_id": boot_id, "state": "completed",
           "step": "import", "started_at": boot["started_at"], "ended_at": boot["ended_at"],
           "options": {"source": "log", "files": [f["path"] for f in files]}}
    summary = {
        "kind": "log", "boot_id": boot_id, "run_id": run_id, "config_hash": config_hash,
        "observed": cfg_row is not None, "engine": lead.engine, "state": state,
        "files": [{"path": f["path"], "sha256": f["sha256"], "node_rank": r}
                  for f, r in zip(files, ranks, strict=False)],
        "nodes": {str(r): node_phases[r] for r in ranks}, "phase_skew_s": skew,
        "ready_s": ready_s, "signature": sig, "acceptance": acc_summary,
        "events": [{"node_rank": r, "kind": e.kind, "line": e.line, "text": e.text}
                   for r, rep in zip(ranks, reports, strict=False) for e in rep.events],
        "decode": lead.decode, "truncated": [r.path for r in reports if r.truncated],
        "warnings": [f"{Path(r.path).name}: {w}" for r in reports for w in r.warnings],
        "config_mismatch": mismatch, "not_one_boot": disagree,
        "config_fields": (observed.fields if (observed and cfg_row is not None) else None),
    }
    run["summary"] = {"import": "log", "acceptance": acc_summary, "signature": sig["id"] if sig else None}
    boot_dir.mkdir(parents=True, exist_ok=True)
    try:
        for p, name in zip(paths, copies, strict=True):
            shutil.copyfile(p, boot_dir / name)
        rec, created = db_imports.record_import(
            cell.store, kind="log", sha256=key, files=files, summary=summary, config=cfg_row,
            boots=[boot], events=events, run=run, curves=curves)
    except BaseException:
        shutil.rmtree(boot_dir, ignore_errors=True)
        raise
    if not created:
        shutil.rmtree(boot_dir, ignore_errors=True)
        return {**rec.summary, "import_id": rec.id, "created": False}
    return {**summary, "import_id": rec.id, "created": True}


def _copy_names(paths: Sequence[str | Path], ranks: list[int]) -> list[str]:
    """Names of the logs' copies in the boot's directory, in file order: each file's own name, or
    ``node<rank>-<name>`` for every file when two share a name (two nodes' ``server.log``: one copy
    used to overwrite the other, and the boot's log showed the other node's lines)."""
    names = [Path(p).name for p in paths]
    if len(set(names)) == len(names):
        return names
    return [f"node{rank}-{name}" for rank, name in zip(ranks, names, strict=True)]


def _check_reimport(cell: Cell, found: db_imports.ImportRow, *, config_ref: str | None, ranks_given: list[int],
                    engine: str | None) -> None:
    """Validate a re-import's options as a first import would, then refuse any that differ from the stored record's.

    The same file(s) are one record (keyed by sha256) whose options are those of the first import; a
    different ``--config``, ``--engine`` or ``--node-rank`` would be silently ignored, so it is refused
    (UserError naming the import id, the boot, the stored value and what to do). Raises LogReadError for an
    unknown ``engine``, NotFound / ConfigError for a ``config_ref`` that names no config.
    """
    from dynocell.engine.logfile import check_engine_name

    check_engine_name(engine)
    config_hash = None
    if config_ref:
        from dynocell.runbooks.configs import resolve_hash

        config_hash = resolve_hash(cell, config_ref)
    summ = found.summary
    stored_ranks = [f.get("node_rank") for f in summ.get("files") or []]
    differs = []
    if config_hash and config_hash != summ.get("config_hash"):
        differs.append(f"config {summ.get('config_hash', '')[:19]}"
                       + (" (observed from the log)" if summ.get("observed") else "")
                       + f", not --config {config_ref} ({config_hash[:19]})")
    if engine and engine != summ.get("engine"):
        differs.append(f"engine {summ.get('engine')}, not --engine {engine}")
    if ranks_given and stored_ranks and stored_ranks != ranks_given:
        differs.append(f"node ranks {stored_ranks}, not {ranks_given}")
    if differs:
        boot = summ.get("boot_id")
        raise UserError(f"these logs are already imported (import #{found.id}, boot {boot}) with "
                        + "; ".join(differs) + ": the options of a re-import are not applied",
                        f"see it with `dynocell show {boot}`; the same files are one record, kept with the options "
                        "of their first import — rerun without the differing option(s) to get that record, or "
                        "import them into another store (DYNOCELL_HOME=DIR dynocell import log …) to keep them "
                        "under other options")


#: The nodes of one multi-node boot are started together: their logs' first stamps lie within this (s).
START_WINDOW_S = 600.0


def _not_one_boot(reports: Sequence[Any], ranks_given: list[int]) -> list[str]:
    """Why several logs are not the nodes of one boot ([] when they agree).

    - server args: a field other than the per-node ones (``node_rank``, ``host``, ``port``,
      ``dist_init_addr``) differs between the logs' config lines (``engine_version`` included);
    - ``nnodes``: a config line states a node count other than the number of logs;
    - node ranks: two logs state the same ``node_rank`` (unless ``--node-rank`` names them);
    - start time: the first stamps are more than :data:`START_WINDOW_S` apart (logs without stamps
      are not judged).
    """
    why = []
    names = [r.path for r in reports]  # as given (two nodes' logs often share a file name)
    configs = [r.config for r in reports]
    for key in _config_mismatch(configs):
        vals = ", ".join(f"{n}: {c.fields.get(key) if c else '?'}" for n, c in zip(names, configs))
        why.append(f"their server args differ in {key} ({vals})")
    for n, c in zip(names, configs):
        nn = c.fields.get("nnodes") if c else None
        if isinstance(nn, int) and nn != len(reports):
            why.append(f"{n} says nnodes={nn}, not {len(reports)}")
    if not ranks_given:
        own = [(n, r.node_rank) for n, r in zip(names, reports) if r.node_rank is not None]
        seen: dict[int, str] = {}
        for n, rank in own:
            if rank in seen:
                why.append(f"{seen[rank]} and {n} both say node_rank={rank}")
            seen.setdefault(rank, n)
    starts = [(r.first_ts, n) for r, n in zip(reports, names) if r.first_ts]
    if len(starts) > 1:
        (t0, n0), (t1, n1) = min(starts), max(starts)
        gap = (t1 - t0).total_seconds()
        if gap > START_WINDOW_S:
            why.append(f"they start {gap / 60:.0f} min apart ({n0} {t0:%Y-%m-%d %H:%M:%S}, {n1} "
                       f"{t1:%Y-%m-%d %H:%M:%S}; one boot's nodes start within {START_WINDOW_S / 60:.0f} min)")
    return why


def _given_ranks(node_rank: int | Sequence[int] | None, n_files: int) -> list[int]:
    """The ``--node-rank`` values as a list (empty when none given), checked against the ``n_files`` logs.

    Raises UserError for a count other than one per file, or a rank given twice.
    """
    ranks_given = [] if node_rank is None else [node_rank] if isinstance(node_rank, int) else list(node_rank)
    if ranks_given and len(ranks_given) != n_files:
        raise UserError(f"--node-rank: {len(ranks_given)} rank(s) for {n_files} log file(s)",
                        "give one --node-rank per file, in file order (a.log --node-rank 0 b.log --node-rank 1), "
                        "or none to take each log's own rank")
    if len(set(ranks_given)) != len(ranks_given):
        raise UserError(f"--node-rank: rank {next(r for r in ranks_given if ranks_given.count(r) > 1)} given twice",
                        "each node of one boot has its own rank")
    return ranks_given


def _log_boot_state(reports: Sequence[Any], failed: Sequence[Any], sig: dict[str, Any] | None) -> str:
    """The imported boot's state: ``failed`` (a node never ready after its boot phases), ``crashed``, or ``stopped``.

    A scheduler exception, or a known failure in a log that never shows the boot's phases (an excerpt of the
    failing lines), is a crash.
    """
    crashed = any(e.kind == "scheduler_exception" for r in reports for e in r.events)
    return "failed" if failed else ("crashed" if crashed or (sig and not any(r.phases for r in reports))
                                    else "stopped")


def _log_events(boot_id: str, ranks: Sequence[int], reports: Sequence[Any],
                t0: Any) -> tuple[list[dict[str, Any]], dict[int, dict[str, float]]]:
    """The boot's event rows (phases and notes of every node, offsets on the shared clock from ``t0``).

    Returns ``(events, node_phases)``; ``node_phases``: {rank: {phase: offset (s)}}, a repeated phase at its
    last occurrence (:func:`dynocell.engine.rules.phase_marks`, the rule ``compare`` uses too).
    """
    from dynocell.engine.rules import phase_marks

    events: list[dict[str, Any]] = []
    node_phases: dict[int, dict[str, float]] = {}
    for rank, rep in zip(ranks, reports, strict=False):
        shift = (rep.first_ts - t0).total_seconds() if (rep.first_ts and t0) else 0.0
        offsets = []
        for ph in rep.phases:
            off = None if ph["offset_s"] is None else round(ph["offset_s"] + shift, 3)
            events.append({"boot_id": boot_id, "ts": aware_utc(rep.first_ts) or aware_utc(t0) or now_utc(),
                           "offset_s": off if off is not None else 0.0, "kind": "phase", "name": ph["name"],
                           "detail": {**ph["detail"], "node_rank": rank, "line": ph["line"],
                                      "occurrence": ph["occurrence"]}})
            offsets.append((ph["name"], off))
        node_phases[rank] = phase_marks(offsets)
        for ev in rep.events:
            off = None if ev.offset_s is None else round(ev.offset_s + shift, 3)
            events.append({"boot_id": boot_id, "ts": aware_utc(rep.first_ts) or now_utc(),
                           "offset_s": off if off is not None else 0.0, "kind": "note", "name": ev.kind,
                           "detail": {"node_rank": rank, "line": ev.line, "text": ev.text}})
    return events, node_phases


def _log_curves(run_id: str, ranks: Sequence[int],
                reports: Sequence[Any]) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """Acceptance-curve rows of the nodes whose log has one, and the summary of the last such curve; a log's
    acceptance windows (vLLM's per-interval ``SpecDecoding`` lines, each with τ and counts) are kept in the
    summary apart (``windows``: ``{line, offset_s, tau, accepted, drafted}``), for rules over time.

    Returns ``(curves, acceptance summary or None)``.
    """
    curves, acc_summary = [], None
    for rank, rep in zip(ranks, reports, strict=False):
        a = rep.acceptance
        if a and a.get("curve") is None and a.get("windows"):  # nothing accepted: no D, the windows still speak
            acc_summary = {"format": a["format"], "samples": a["samples"], "tau": None, "p": [], "num_drafts": None,
                           "windows": a["windows"], "node_rank": rank}
        if not a or a.get("curve") is None:
            continue
        label = "log" if len(reports) == 1 else f"log-node{rank}"
        taus = [t for t in a.get("engine_tau") or [] if t is not None]
        engine_tau = sum(taus) / len(taus) if taus and a["format"] != "sglang-decode" else None
        curves.append({**curve_row(a["curve"], label, engine_tau=engine_tau,
                                   engine_source=f"log:{a['format']}" if engine_tau else None,
                                   warning=None), "run_id": run_id})
        acc_summary = {"format": a["format"], "samples": a["samples"], "tau": round(a["curve"].tau, 4),
                       "p": [round(x, 4) for x in a["curve"].p], "num_drafts": a["curve"].num_drafts}
        if a.get("windows"):  # each logging interval apart (issue 35): acceptance over the server's life
            acc_summary |= {"windows": a["windows"], "node_rank": rank}
    return curves, acc_summary


def _config_mismatch(configs: list[ObservedConfig | None]) -> list[str]:
    """Fields (other than the per-node ones) whose value differs between the nodes' config lines."""
    seen = [c.fields for c in configs if c is not None]
    per_node = {"node_rank", "host", "port", "dist_init_addr"}
    keys = {k for f in seen for k in f} - per_node
    return sorted(k for k in keys if len({json.dumps(f.get(k), sort_keys=True, default=str) for f in seen}) > 1)


def _phase_skew(node_phases: dict[int, dict[str, float]]) -> dict[str, float]:
    """Per phase reached by ≥ 2 nodes: latest − earliest offset (s) — a rank that loaded late shows."""
    names: dict[str, list[float]] = {}
    for per in node_phases.values():
        for name, off in per.items():
            names.setdefault(name, []).append(off)
    return {n: round(max(v) - min(v), 3) for n, v in names.items() if len(v) > 1}


# ---------------------------------------------------------------- traces

def trace_split(path: str | Path, top: int = 20) -> dict[str, Any]:
    """The profile split of any Chrome trace (SGLang, vLLM, plain torch.profiler), stored nowhere.

    Uses :func:`dynocell.engine.trace.analyze_trace`; returns its ``as_dict()``
    plus ``path``. Raises TraceError for a file that is not a Chrome trace.
    """
    from dynocell.engine.trace import analyze_trace

    p = Path(path)
    if not p.is_file():
        raise UserError(f"{quoted_name(p)}: " + not_a_file(p),
                        "give the path of a Chrome trace (.json or .json.gz)")
    split = analyze_trace(p, top=top)
    return {"path": str(p), **split.as_dict()}


def import_trace(cell: Cell, path: str | Path, *, config_ref: str | None = None,
                 output_tokens: int | None = None) -> dict[str, Any]:
    """Store a Chrome trace's profile split as a profile (no boot); returns the import summary.

    ``output_tokens`` (when known) gives ms and launches per token. A trace with speculative-phase
    ranges (or of a speculative ``config_ref``) also gets its phase split
    (:mod:`dynocell.runbooks.phase_split`). A re-import of the same file returns the first record
    (``created`` False), with the phase split computed now if the first import predates it.
    """
    from dynocell.engine.trace import per_token, rank_of

    files, key = digest_files([path])
    found = db_imports.find_import(cell.store, "trace", key)
    from dynocell.runbooks import phase_split

    if found:
        return {**found.summary, "import_id": found.id, "profile_id": found.profile_id,
                "created": False, **phase_split.fill_import(cell, found, Path(path), output_tokens)}
    from dynocell.engine.trace import analyze_trace

    sp = analyze_trace(Path(path))
    if sp.source == "cpu_op" and sp.launches == 0 and sp.device_ms == 0:
        raise UserError(f"{path}: the trace holds neither GPU kernels nor CPU ops: nothing to store",
                        "give a torch profiler / Kineto trace of the engine's busy window (*.trace.json[.gz])")
    costs = per_token(sp, output_tokens) if output_tokens else {"ms_per_token": None, "launches_per_token": None}
    run: dict[str, Any] | None = None
    if config_ref:
        from dynocell.runbooks.configs import resolve_hash

        run = {"id": _new_id(), "kind": "import", "config_hash": resolve_hash(cell, config_ref),
               "state": "completed", "step": "import", "options": {"source": "trace", "files": [files[0]["path"]]},
               "ended_at": now_utc()}
    profile = {
        "run_id": run["id"] if run else None, "state": "completed", "trace_dir": str(Path(path).resolve().parent),
        "traces": [{"rank": rank_of(path), "path": files[0]["path"], "size": files[0]["size"],
                    "sha256": files[0]["sha256"]}],
        "source": sp.source, "num_ranks": 1, "device_ms": sp.device_ms, "window_ms": sp.window_ms,
        "busy_pct": sp.busy_pct, "launches": sp.launches, "graph_launches": sp.graph_launches,
        "output_tokens": output_tokens, "ms_per_token": costs["ms_per_token"],
        "launches_per_token": costs["launches_per_token"], "warnings": list(sp.warnings),
        "splits": [{"rank": -1, "category": c.category, "ms": c.ms, "pct": c.pct, "launches": c.launches}
                   for c in sp.categories],
        "kernels": [{"rank": -1, "name": k.name, "category": k.category, "ms": k.ms, "launches": k.launches}
                    for k in sp.top],
        "phase_split": phase_split.for_import(Path(path), run["config_hash"] if run else None, cell, output_tokens),
    }
    summary = {"kind": "trace", "file": files[0]["path"], "sha256": key, "run_id": run["id"] if run else None,
               "source": sp.source, "device_ms": sp.device_ms, "busy_pct": sp.busy_pct, "launches": sp.launches,
               "categories": [{"category": c.category, "ms": round(c.ms, 3), "pct": round(c.pct, 2)}
                              for c in sp.categories], "phase_split": profile["phase_split"]}
    rec, created = db_imports.record_import(cell.store, kind="trace", sha256=key, files=files, summary=summary,
                                            run=run, profile=profile)
    return {**(summary if created else rec.summary), "import_id": rec.id, "profile_id": rec.profile_id,
            "created": created}


def dumps(data: Any) -> str:
    """JSON for ``--json`` output (datetimes and paths as text)."""
    return json.dumps(data, indent=2, default=str, ensure_ascii=False)

