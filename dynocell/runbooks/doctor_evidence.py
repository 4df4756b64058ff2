"""The store → :class:`~dynocell.runbooks.doctor_model.DoctorInputs` part of issue 22's rules.

:func:`add_run_evidence` fills what the new rules read for a stored run: the engine log of its boot
(:func:`dynocell.engine.log_signs.scan_lines`), the gauges of an imported ``/metrics`` scrape, its
profile window, recorded runs of the same config and workload (``baselines``), other configs of the
same model and speculation (``others``), throughput per concurrency with the plain twin's, and the
lossless mismatches. :func:`boot_inputs` gives the inputs of a boot (its config and log) for the
runtime rules. Reads only; the log is read from its start up to :data:`MAX_LOG_READ` bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynocell.runbooks.doctor_model import (
    Baseline, ConcurrencyPoint, DoctorInputs, Mismatch, Sibling, differing_knobs, headline_tok_s,
)

#: Bytes of an engine log the doctor reads (boot lines are at the start; a longer log is read head + tail).
MAX_LOG_READ = 16 << 20

if TYPE_CHECKING:  # pragma: no cover
    from dynocell.db.runs import RunRow


def log_lines(path: str | None) -> list[str]:
    """The lines of a boot's log (head and tail of a very long one); [] when there is none."""
    if not path or not Path(path).is_file():
        return []
    p = Path(path)
    size = p.stat().st_size
    with open(p, "rb") as fh:
        if size <= MAX_LOG_READ:
            data = fh.read()
        else:
            head = fh.read(MAX_LOG_READ // 2)
            fh.seek(size - MAX_LOG_READ // 2)
            data = head + b"\n" + fh.read()
    from dynocell.engine.logfile import split_lines

    return split_lines(data.decode("utf-8", "replace"))


def _log_signs(store: Any, boot_id: str | None) -> dict[str, Any]:
    from dynocell.db import boots as db_boots
    from dynocell.db import imports as dbi
    from dynocell.engine.log_signs import scan_lines

    if not boot_id:
        return {}
    boot = db_boots.get_boot(store, boot_id)
    signs = scan_lines(log_lines(boot.log_path if boot else None))
    for rec in dbi.list_imports(store, limit=1000):
        if rec.boot_id == boot_id:
            skew = (rec.summary or {}).get("phase_skew_s") or {}
            if skew.get("weights_end") is not None:
                signs["phase_skew_s"] = skew["weights_end"]
    return signs


def boot_inputs(cell: Any, boot: Any) -> DoctorInputs:
    """Inputs of a boot (its ``db.boots.BootRow``) for the runtime rules: its config's knobs and its
    log's runtime signs."""
    inp = DoctorInputs()
    inp.knobs = knobs_of(cell.store, boot.config_hash) if boot.config_hash else {}
    inp.log = _log_signs(cell.store, boot.id)
    inp.windows = model_windows(inp.knobs)
    inp.draft_model = draft_model_info(inp.knobs)
    return inp


def model_windows(knobs: dict[str, Any]) -> dict[str, Any]:
    """The context the target serves with and the draft model's window, in tokens (issue 22, shape 8).

    Target: the config's ``memory.context_length`` (SGLang ``--context-length``, vLLM ``--max-model-len``)
    when set, else its folder's ``config.json`` window; draft: ``speculative.draft_model_path``'s
    ``config.json`` window (:func:`dynocell.engine.model_window.model_window`, read as the config's engine
    reads it). {} without a draft model; a folder that is not on this host (a hub id, ``dynocell:`` ids)
    leaves its side unknown with the reason.
    """
    from dynocell.engine.model_window import model_window

    draft = knobs.get("speculative.draft_model_path")
    if not draft or str(draft).startswith("dynocell:"):
        return {}
    engine = knobs.get("engine")
    out: dict[str, Any] = {}
    d, why = model_window(draft, engine)
    if d is None:
        out["draft_unknown"] = why
    else:
        out["draft_window"], out["draft_source"] = d, why
    ctx = knobs.get("memory.context_length")
    if isinstance(ctx, int) and ctx > 0:
        out["target_context"], out["target_source"] = ctx, "the config's memory.context_length"
    elif not str(knobs.get("model_path") or "").startswith("dynocell:"):
        t, why = model_window(knobs.get("model_path"), engine)
        if t is None:
            out["target_unknown"] = why
        else:
            out["target_context"], out["target_source"] = t, why
    return out


def draft_model_info(knobs: dict[str, Any]) -> dict[str, Any]:
    """What the draft folder's ``config.json`` says of its head (issue 35 item 4): ``{head, architectures,
    source}`` (``head``: :func:`dynocell.engine.model_window.draft_head_kind`), ``{unknown: why}`` when the
    folder is not on this host, {} without a draft model path."""
    from dynocell.engine.model_window import draft_head_kind, read_model_config

    draft = knobs.get("speculative.draft_model_path")
    if not draft or str(draft).startswith("dynocell:"):
        return {}
    cfg, where = read_model_config(draft)
    if cfg is None:
        return {"unknown": where}
    archs = cfg.get("architectures")
    return {"head": draft_head_kind(cfg), "architectures": [str(a) for a in archs] if isinstance(archs, list) else [],
            "source": where}


def _gauges(store: Any, run_id: str) -> dict[str, Any]:
    from dynocell.db import imports as dbi

    for rec in dbi.list_imports(store, limit=1000):
        if rec.run_id == run_id and rec.kind == "metrics":
            return dict((rec.summary or {}).get("gauges_last") or {})
    return {}


def _profile(store: Any, run_id: str) -> dict[str, Any]:
    from dynocell.db import runs as dbr
    from dynocell.runbooks.profiles import window_refused

    profs = dbr.profiles(store, run_id=run_id)
    if not profs:
        return {}
    p = profs[-1]
    # a window the engine refused to open owes no trace (the profile step's own error says why)
    return {"requested": not window_refused(p.state, p.error),
            "traces": p.traces or [], "graph_launches": p.graph_launches,
            "launches": p.launches, "source": p.source, "trace_dir": p.trace_dir, "state": p.state}


def knobs_of(store: Any, config_hash: str) -> dict[str, Any]:
    """The flattened knobs of a stored config (``{}`` when the store has no such config)."""
    from dynocell.db import configs as db_configs
    from dynocell.runbooks.doctor import flatten_config

    row = db_configs.get_config(store, config_hash)
    return flatten_config(row.canonical_json) if row else {}


def completed_others(store: Any, run_id: str, limit: int = 500) -> list[tuple[RunRow, dict[str, Any]]]:
    """The completed runs other than ``run_id`` among the newest ``limit`` completed ones, newest first, each
    with its config's flattened knobs (read once per config): what siblings, baselines, oracles and plain
    twins are chosen from."""
    from dynocell.db import runs as db_runs

    knobs: dict[str, dict[str, Any]] = {}
    out = []
    for r in db_runs.list_runs(store, states=("completed",), limit=limit):
        if r.id == run_id:
            continue
        if r.config_hash not in knobs:
            knobs[r.config_hash] = knobs_of(store, r.config_hash)
        out.append((r, knobs[r.config_hash]))
    return out


def _curves_by_class(store: Any, run_id: str) -> dict[str, Any]:
    from dynocell.db import runs as db_runs
    from dynocell.runbooks.doctor import curve_of

    return {c.text_class: curve_of(c) for c in db_runs.curves(store, run_id)}


def full_context(store: Any, run: Any) -> dict[str, Any]:
    """A run's comparability context with its stored evidence (:func:`dynocell.runbooks.run.context.full_context`)."""
    from dynocell.runbooks.run.context import full_context as _full

    return _full(store, run)


def requests_by_class(store: Any, run_id: str) -> dict[str, tuple[dict[str, Any], ...]]:
    """``{text_class: request records}`` of a stored run's acceptance curves (classes without records left out)."""
    from dynocell.db import runs as db_runs

    return {c.text_class: tuple(c.requests) for c in db_runs.curves(store, run_id) if c.requests}


def _speculation(knobs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in knobs.items() if k.startswith("speculative.") or k == "model_path"}


#: Knobs that select a serving mode of the same model (graphs, overlap / spec-v2, parallel sizes): outputs
#: that differ between such runs point at the mode (corrupt_output).
MODE_KNOBS = ("cuda_graph.", "serving.spec_v2", "serving.disable_overlap_schedule", "parallel.")
def run_samples(store: Any, run_id: str) -> list[str]:
    """The generations a run's bench step kept (``bench_runs.extra.samples``, every level), in order."""
    from dynocell.db import runs as db_runs

    return [t for b in db_runs.bench_rows(store, run_id) for t in ((b.extra or {}).get("samples") or [])]


def _mode(knobs: dict[str, Any], keys: list[str]) -> str:
    return ", ".join(f"{k}={knobs.get(k)!r}" for k in keys)


def _comparisons(cell: Any, run: RunRow, inp: DoctorInputs, others: list[tuple[RunRow, dict[str, Any]]]) -> None:
    """Baselines (same config and workload), others (same model, speculation and workload, other knobs) and
    the outputs of runs that differ only in a serving mode (``mode_texts``)."""
    store = cell.store
    seen: set[str] = set()
    for other, knobs in others:
        if other.workload_sha256 != run.workload_sha256 or other.kind != run.kind:
            continue
        curves = _curves_by_class(store, other.id)
        tok_s = headline_tok_s(other.summary)
        if other.config_hash == run.config_hash:
            build = (other.summary or {}).get("build") or str(other.started_at or "")[:10] or None
            if curves:
                inp.baselines.append(Baseline(other.id, build, curves, tok_s, requests_by_class(store, other.id),
                                              full_context(store, other)))
            continue
        if other.config_hash in seen or not inp.knobs:
            continue
        if _speculation(knobs) != _speculation(inp.knobs):
            seen.add(other.config_hash)
            continue
        _add_mode(store, other.id, inp, knobs)
        if curves:  # the newest run OF THIS CONFIG WITH curves: a newer one without them shadows nothing
            seen.add(other.config_hash)
            w = [c.steps or 1 for c in curves.values()]
            tau = sum(c.tau * wi for c, wi in zip(curves.values(), w)) / sum(w)
            recs = tuple(x for rs in requests_by_class(store, other.id).values() for x in rs)
            inp.others.append(Sibling(other.id, knobs, tau, {k: c.tau for k, c in curves.items()}, tok_s,
                                      requests=recs, context=full_context(store, other)))


def _add_mode(store: Any, other_id: str, inp: DoctorInputs, knobs: dict[str, Any]) -> None:
    """Outputs of another run whose config differs from this one only in serving-mode knobs."""
    diff = differing_knobs(inp.knobs, knobs)
    if not diff or not all(k.startswith(MODE_KNOBS) for k in diff) or not inp.output_texts:
        return
    theirs = run_samples(store, other_id)
    if theirs:
        inp.mode_texts.setdefault(_mode(inp.knobs, diff), list(inp.output_texts))
        inp.mode_texts.setdefault(_mode(knobs, diff), theirs)


def _plain_twin_runs(run: RunRow, knobs: dict[str, Any], others: list[tuple[RunRow, dict[str, Any]]]) -> list[RunRow]:
    """The runs of the plain twin, newest first: the lossless step's plain config, else the config equal to
    this one with speculation off (an imported plain arm of the same model)."""
    plain_hash = (run.lossless_detail or {}).get("plain_config_hash")
    mine = {k: v for k, v in knobs.items() if not k.startswith("speculative.")}
    def twin(o: RunRow, theirs: dict[str, Any]) -> bool:
        if plain_hash:
            return o.config_hash == plain_hash
        plain = {k: v for k, v in theirs.items() if not k.startswith("speculative.")}
        return bool(knobs.get("speculative.algorithm") and o.config_hash != run.config_hash
                    and not theirs.get("speculative.algorithm") and not differing_knobs(mine, plain))

    return [o for o, theirs in others if twin(o, theirs)]


def _concurrency(store: Any, run: RunRow, knobs: dict[str, Any],
                 others: list[tuple[RunRow, dict[str, Any]]]) -> list[ConcurrencyPoint]:
    """Spec vs plain at each concurrency both measured: the plain side from the newest plain twin run that
    has a throughput ladder (a newer one without shadows nothing, issue 35 item 7)."""
    from dynocell.db import runs as db_runs

    def by_c(run_id: str) -> dict[int, tuple[float, tuple[float, ...]]]:
        """``{concurrency: (output tok/s, each request's decode tok/s)}`` of a run's throughput ladder."""
        rows = [b for b in db_runs.bench_rows(store, run_id) if b.concurrency and b.output_tok_s]
        ladder = [b for b in rows if not b.text_class or (b.extra or {}).get("tool")]
        return {b.concurrency: (b.output_tok_s,
                                tuple(((b.extra or {}).get("requests") or {}).get("decode_tok_s") or ()))
                for b in ladder}

    mine = by_c(run.id)
    if not mine:
        return []
    for plain_run in _plain_twin_runs(run, knobs, others):
        plain = by_c(plain_run.id)
        if plain:
            return [ConcurrencyPoint(c, mine[c][0], plain[c][0], mine[c][1], plain[c][1])
                    for c in sorted(set(mine) & set(plain))]
    return []


def add_run_evidence(cell: Any, run: RunRow, inp: DoctorInputs,
                     others: list[tuple[RunRow, dict[str, Any]]] | None = None) -> None:
    """Fill ``log``, ``gauges``, ``profile``, ``windows``, ``baselines``, ``others``, ``concurrency`` and
    ``mismatches`` of stored run ``run``; ``others`` is :func:`completed_others` of the run (read here when
    the caller has not)."""
    store = cell.store
    if others is None:
        others = completed_others(store, run.id)
    inp.log = _log_signs(store, run.boot_id)
    inp.gauges = _gauges(store, run.id)
    inp.profile = _profile(store, run.id)
    inp.windows = model_windows(inp.knobs)
    inp.draft_model = draft_model_info(inp.knobs)
    _comparisons(cell, run, inp, others)
    inp.concurrency = _concurrency(store, run, inp.knobs, others)
    if inp.concurrency and inp.plain_decode_tok_s is None:
        low = inp.concurrency[0]  # no plain twin measured by a run: the lowest shared concurrency speaks
        inp.spec_decode_tok_s, inp.plain_decode_tok_s = low.spec_tok_s, low.plain_tok_s
    if not inp.curves:
        inp.curves, inp.accept_lengths = _bench_tau_curves(store, run.id, inp.knobs)
    for i, m in enumerate((run.lossless_detail or {}).get("mismatches") or []):
        if m.get("first_diverging_index") is None:
            continue
        if m.get("unit", "token") == "token":
            inp.mismatches.append(Mismatch(i, int(m["first_diverging_index"]), m.get("spec_token"),
                                           m.get("plain_token"), m.get("margin"), m.get("margin_unknown")))
        elif m.get("margin_unknown"):  # found in characters: no token, no margin — said, never guessed
            inp.mismatches.append(Mismatch(i, int(m["first_diverging_index"]), margin_unknown=m["margin_unknown"]))


def _bench_tau_curves(store: Any, run_id: str, knobs: dict[str, Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """``(curves, accept_lengths)`` of a run with no acceptance curve, from its imported bench levels that
    reported an accept length (bench tools print τ, not a histogram): a summary curve (τ only) per level
    when the config says the draft count D, else the bare τ (``{text_class, tau, source}``) — D unknown,
    which ``pinned_near_one`` still judges when τ − 1 is near zero (issue 35)."""
    from dynocell.db import runs as db_runs
    from dynocell.engine.acceptance import AcceptanceError, Curve
    from dynocell.runbooks.doctor_model import ClassCurve

    out: list[Any] = []
    bare: list[dict[str, Any]] = []
    steps, ndt = knobs.get("speculative.num_steps"), knobs.get("speculative.num_draft_tokens")
    d = (ndt - 1) if ndt else steps
    for b in db_runs.bench_rows(store, run_id):
        tau = (b.extra or {}).get("accept_length")
        if tau is None:
            continue
        cls = f"{b.text_class or 'bench'}-c{b.concurrency}"
        if not d:
            if isinstance(tau, (int, float)) and tau >= 1.0:
                bare.append({"text_class": cls, "tau": float(tau),
                             "source": f"{(b.extra or {}).get('tool') or 'bench'} accept_length"})
            continue
        try:
            curve = Curve.from_summary(float(tau), None, d)
        except (AcceptanceError, ValueError, TypeError):
            continue
        prompt = b.prompt_tokens / b.num_requests if b.prompt_tokens and b.num_requests else None
        out.append(ClassCurve(cls, curve, prompt, engine_source="bench accept_length"))
    return out, bare
