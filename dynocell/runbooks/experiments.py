"""Experiments against the incumbent, production pins and rollback.

An *experiment* compares arms (configs) with the incumbent config (what
serves production) on one workload, ``repeats`` times each, in a
counterbalanced interleaved order (I A1 A2 A2 A1 I …, see
:func:`dynocell.engine.verdicts.interleaved_schedule`). Every slot of the
schedule is an ``experiment_runs`` row pointing at a main-job run
(:func:`dynocell.runbooks.run.run_job`). Running is resumable: slots whose run
ended (``completed`` or ``failed`` — a failed boot is that arm's result) are
skipped; pending, interrupted and orphaned slots are (re)done.

Judging reads each slot's run from the store, turns it into samples
(decode/prefill tok/s, TTFT p50/p99, TPOT p50 per concurrency level; τ at
level ``acceptance``) and correctness gates (failed boot/health/bench,
lossless mismatch, the doctor's ``garbage_output``), and hands them to
:mod:`dynocell.engine.verdicts` (Welch t on the ratio of means, noise floor
from the incumbent's spread).

The ``experiments.arms`` column holds the incumbent first, then the arms:
``[{role: incumbent|arm, config_hash, label, options[, boot_id]}]``; ``options`` are the
main-job options every run of the experiment uses (workload, lossless,
profile, diagnose, boot_timeout_s).

An arm (or the incumbent) given as ``boot:ID`` is a boot that is already up — typically
one registered with ``dynocell attach`` (an engine dynocell did not start). Its slots run
the main job on that boot (:func:`dynocell.runbooks.run.run_on_boot`: health → bench →
acceptance → profile → diagnose; no boot, no stop, no lossless check), and its config is
the boot's (the observed one for an attached boot). If the boot is gone when its slot
comes, that slot fails (a gate, as a failed boot is for a booted arm).
"""

from __future__ import annotations

import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

from dynocell.clock import now_utc
from dynocell.db import builds as db_builds
from dynocell.db import configs as db_configs
from dynocell.db import experiments as db
from dynocell.db import runs as db_runs
from dynocell.db import refs
from dynocell.engine import verdicts as V
from dynocell.errors import DynocellError, Interrupted, NotFound, UserError
from dynocell.runbooks import events
from dynocell.runbooks.cell import Cell

Progress = Callable[[str, dict[str, Any]], None]
DONE_SLOT_STATES = ("completed", "failed")
GATE_STEPS = ("config", "build", "model", "boot", "health", "bench")
GARBAGE_RULES = ("garbage_output",)
METRIC_BY_KEY = V.METRIC_BY_KEY  # for the faces: metric key → label, unit, direction


def _noop(_m: str, _d: dict[str, Any]) -> None:
    pass


# ---------------------------------------------------------------- create

def _label_of(cell: Cell, config_hash: str, ref: str) -> str:
    names = [n for n, h in db_configs.current_labels(cell.store).items() if h == config_hash]
    if ref in names:
        return ref
    if names:
        return sorted(names)[0]
    from dynocell.runbooks.configs import short_hash

    return short_hash(config_hash)


BOOT_PREFIX = "boot:"


def _resolve(cell: Cell, ref: str) -> tuple[str, str]:
    from dynocell.runbooks.configs import add_config, resolve_hash

    p = Path(ref)
    if ref.endswith(".toml") and p.is_file():
        rec = add_config(cell, p)
        return rec.hash, rec.name
    h = resolve_hash(cell, ref)
    return h, _label_of(cell, h, ref)


def _resolve_arm(cell: Cell, ref: str) -> tuple[str, str, str | None]:
    """``(config_hash, label, boot_id)`` of an arm ref; ``boot_id`` for ``boot:ID`` (a live boot), else None.

    Raises NotFound for an unknown boot, UserError for a boot that is not ready now.
    """
    if not ref.startswith(BOOT_PREFIX):
        return (*_resolve(cell, ref), None)
    from dynocell.runbooks import boots

    boot = boots.reconcile(cell, boots.resolve_boot(cell, ref[len(BOOT_PREFIX):]))
    if boot["state"] != "ready" or not boot.get("engine_alive"):
        raise UserError(f"{ref}: boot {boot['id']} is {boot['state']}, not ready",
                        "attach the running engine again (dynocell attach URL) or give a config")
    kind = boot.get("kind") or "boot"
    return boot["config_hash"], f"{kind} {boot['id']}", boot["id"]


def create_experiment(
    cell: Cell,
    name: str,
    incumbent: str,
    arms: list[str],
    *,
    workload: str | None = None,
    repeats: int = 3,
    lossless: bool = True,
    profile: bool = False,
    diagnose: bool = True,
    boot_timeout_s: float | None = None,
) -> dict[str, Any]:
    """Create experiment ``name``: the incumbent config, arms (config refs: name, hash, prefix or .toml path;
    or ``boot:ID`` for a boot already up, e.g. an attached engine — see the module docstring).

    ``workload``: a workload TOML path or bundled name (None = bundled
    ``default``), validated now and stored as an absolute path. ``repeats``:
    runs per config (≥ 1; 2 is the least that gives a verdict). The
    interleaved schedule is written at once (state ``pending`` per slot).
    Returns :func:`show_experiment`'s dict. Raises UserError for a bad or
    taken name, no arms, an arm equal to the incumbent or to another arm,
    repeats < 1; NotFound/ConfigError for a bad config ref; UserError for a
    bad workload file.
    """
    from dynocell.runbooks.configs import check_name

    check_name(name, kind="experiment")
    if repeats < 1:
        raise UserError(f"--repeats must be at least 1 (got {repeats})",
                        "use 2 or more: one run per side gives no spread to judge against")
    if not arms:
        raise UserError("an experiment needs at least one --arm", "e.g. --arm examples/tiny.toml")
    if db.get_experiment(cell.store, name) is not None:
        raise UserError(f"experiment {name!r} already exists",
                        f"run it with `dynocell experiment run {name}` or pick another name")
    wl_path: str | None = None
    if workload is not None:
        from dynocell.engine.workloads import load_workload

        load_workload(workload)  # validate now, not at the first run
        wl_path = str(Path(workload).resolve()) if Path(workload).exists() else workload
    inc_hash, inc_label, inc_boot = _resolve_arm(cell, incumbent)
    resolved = [_resolve_arm(cell, a) for a in arms]
    seen = {inc_hash: "the incumbent"}
    for (h, _label, _b), ref in zip(resolved, arms, strict=False):
        if h in seen:
            raise UserError(f"arm {ref!r} is the same config as {seen[h]} ({h[:19]})",
                            "each arm must be a different config from the incumbent and the other arms")
        seen[h] = f"arm {ref!r}"
    options = {"workload": wl_path, "lossless": lossless, "profile": profile, "diagnose": diagnose,
               "boot_timeout_s": boot_timeout_s}
    arm_rows = [{"role": "incumbent", "config_hash": inc_hash, "label": inc_label, "options": options,
                 **({"boot_id": inc_boot} if inc_boot else {})}]
    arm_rows += [{"role": "arm", "config_hash": h, "label": label, "options": options, **({"boot_id": b} if b else {})}
                 for h, label, b in resolved]
    schedule = V.interleaved_schedule(inc_hash, [h for h, _, _ in resolved], repeats)
    slots = [(h, "incumbent" if h == inc_hash else "arm", rep) for h, rep in schedule]
    row = db.create_experiment(cell.store, name=name, incumbent_hash=inc_hash, arms=arm_rows, workload=wl_path,
                               repeats=repeats, slots=slots)
    if row is None:
        raise UserError(f"experiment {name!r} already exists", "pick another name")
    events.publish("experiment.created", name=name)
    return show_experiment(cell, name)


def _get(cell: Cell, name: str) -> db.ExperimentRow:
    exp = db.get_experiment(cell.store, name)
    if exp is None:
        raise NotFound(f"no experiment named {name!r}", "see `dynocell experiment list`")
    return exp


def _options_of(exp: db.ExperimentRow) -> dict[str, Any]:
    for a in exp.arms or []:
        if isinstance(a, dict) and a.get("options"):
            return dict(a["options"])
    return {"workload": exp.workload, "lossless": True, "profile": False, "diagnose": True,
            "boot_timeout_s": None}


def _labels(exp: db.ExperimentRow) -> dict[str, str]:
    return {a["config_hash"]: a.get("label") or a["config_hash"][:19] for a in exp.arms or []}


def _boot_ids(exp: db.ExperimentRow) -> dict[str, str]:
    """``{config_hash: boot_id}`` of the arms given as ``boot:ID`` (run on that boot, not booted)."""
    return {a["config_hash"]: a["boot_id"] for a in exp.arms or [] if isinstance(a, dict) and a.get("boot_id")}


# ---------------------------------------------------------------- run (resumable)

def _reconcile(cell: Cell, exp_name: str) -> None:
    """Mark dead runs interrupted, and slots left ``running`` by a dead process ``interrupted``.

    Raises UserError when a slot's run is still alive (another process runs the experiment).
    """
    from dynocell.runbooks.run import reconcile_runs

    reconcile_runs(cell)
    for slot in db.slots(cell.store, exp_name):
        if slot.state != "running":
            continue
        run = db_runs.get_run(cell.store, slot.run_id) if slot.run_id else None
        if run is not None and run.state == "running" and run.pid != os.getpid():
            raise UserError(f"experiment {exp_name!r} is being run by process {run.pid} (run {run.id})",
                            "wait for it, or stop that process (Ctrl-C) and run again to resume")
        db.update_slot(cell.store, slot.id, state="interrupted")


def run_experiment(cell: Cell, name: str, *, progress: Progress | None = None) -> dict[str, Any]:
    """Run every slot of experiment ``name`` that has not ended, in schedule order, then judge it.

    Each slot is a main job (:func:`dynocell.runbooks.run.run_job`) with the
    experiment's options; the slot records the run id as soon as the run row
    exists, then ``completed`` or ``failed`` (a failed boot, health or bench
    is the arm's result and the experiment goes on). Ctrl-C: the current run
    is recorded ``interrupted`` (engine stopped), the slot ``interrupted``,
    and :class:`~dynocell.errors.Interrupted` is raised; running again
    resumes (ended slots are kept, the interrupted one is redone).
    Returns :func:`show_experiment`'s dict. Raises NotFound for an unknown
    name, UserError when another process is running it.
    """
    from dynocell.runbooks.run import RunOptions, run_job, run_on_boot

    progress = progress or _noop
    exp = _get(cell, name)
    _reconcile(cell, name)
    opts = _options_of(exp)
    labels = _labels(exp)
    on_boot = _boot_ids(exp)
    slots = db.slots(cell.store, name)
    todo = [s for s in slots if s.state not in DONE_SLOT_STATES]
    db.update_experiment(cell.store, name, state="running")
    events.publish("experiment.started", name=name, todo=len(todo))
    progress(f"experiment {name}: {len(slots) - len(todo)} of {len(slots)} runs done, {len(todo)} to go",
             {"experiment": name, "done": len(slots) - len(todo), "total": len(slots)})
    errors: dict[str, str] = dict(((exp.verdicts or {}).get("slot_errors") or {}))
    for slot in todo:
        label = labels.get(slot.config_hash, slot.config_hash[:19])
        progress(f"[{slot.seq + 1}/{len(slots)}] {slot.role} {label} (repeat {slot.repeat + 1})",
                 {"experiment": name, "seq": slot.seq, "config_hash": slot.config_hash, "state": "running"})
        db.update_slot(cell.store, slot.id, state="running", run_id=None)
        captured: dict[str, str] = {}

        def on_event(ev: dict[str, Any], _slot_id: int = slot.id, _h: str = slot.config_hash,
                     _cap: dict[str, str] = captured) -> None:
            if ev.get("event") == "run.started" and ev.get("config_hash") == _h and "run_id" not in _cap:
                _cap["run_id"] = ev["run_id"]
                db.update_slot(cell.store, _slot_id, run_id=ev["run_id"])

        unsubscribe = events.subscribe(on_event)
        run_opts = RunOptions(workload=opts.get("workload"), lossless=bool(opts.get("lossless", True)),
                              profile=bool(opts.get("profile", False)), diagnose=bool(opts.get("diagnose", True)),
                              boot_timeout_s=opts.get("boot_timeout_s"))
        try:
            if slot.config_hash in on_boot:
                run_id = run_on_boot(cell, on_boot[slot.config_hash], workload=run_opts.workload,
                                     profile=run_opts.profile, progress=progress)
            else:
                run_id = run_job(cell, slot.config_hash, options=run_opts, progress=progress)
        except (KeyboardInterrupt, Interrupted):
            db.update_slot(cell.store, slot.id, state="interrupted", run_id=captured.get("run_id"))
            db.update_experiment(cell.store, name, state="interrupted")
            events.publish("experiment.interrupted", name=name, seq=slot.seq)
            raise Interrupted(f"experiment {name} interrupted at run {slot.seq + 1} of {len(slots)}; "
                              "finished runs are kept",
                              f"resume with `dynocell experiment run {name}`") from None
        except DynocellError as exc:
            # Raised before/around the run (e.g. the config cannot be resolved): the slot's result.
            errors[str(slot.seq)] = str(exc)
            db.update_slot(cell.store, slot.id, state="failed", run_id=captured.get("run_id"))
            progress(f"  run failed: {exc}", {"experiment": name, "seq": slot.seq, "state": "failed"})
            continue
        finally:
            unsubscribe()
        run = db_runs.get_run(cell.store, run_id)
        state = "completed" if run is not None and run.state == "completed" else "failed"
        db.update_slot(cell.store, slot.id, state=state, run_id=run_id)
        events.publish("experiment.slot_ended", name=name, seq=slot.seq, state=state, run_id=run_id)
        error = run.error if run else None
        progress(f"  run {run_id} {run.state if run else None}" + (f": {error}" if error else ""),
                 {"experiment": name, "seq": slot.seq, "run_id": run_id, "state": state})
    if errors:
        cur = db.get_experiment(cell.store, name)
        db.update_experiment(cell.store, name, verdicts={**((cur.verdicts if cur else None) or {}),
                                                         "slot_errors": errors})
    judge(cell, name, store=True)
    events.publish("experiment.ended", name=name)
    return show_experiment(cell, name)


# ---------------------------------------------------------------- judging

def run_samples(detail: dict[str, Any], speculative: bool | None = None) -> dict[tuple[str, str], float]:
    """Samples of one run (``views.run_detail`` dict): ``{(metric key, level): value}``.

    Levels are ``"c=<concurrency>"`` from the throughput bench rows
    (``text_class`` NULL): decode tok/s (``decode_tok_s``, else
    ``output_tok_s``), prefill tok/s, TTFT p50/p99 (ms), TPOT p50 (ms); and
    ``"acceptance"`` for τ (step-weighted over text classes). A run without
    speculative decoding (``speculative`` False) has τ = 1 by definition: one
    forward step, one token.
    """
    out: dict[tuple[str, str], float] = {}
    for b in detail.get("bench") or []:
        if b.get("text_class"):
            continue
        lvl = f"c={b['concurrency']}"
        dec = b.get("decode_tok_s")
        vals = {
            "decode_tok_s": dec if dec is not None else b.get("output_tok_s"),
            "prefill_tok_s": b.get("prefill_tok_s"),
            "ttft_p50_ms": (b.get("ttft_ms") or {}).get("p50"),
            "ttft_p99_ms": (b.get("ttft_ms") or {}).get("p99"),
            "tpot_ms": (b.get("tpot_ms") or {}).get("p50"),
        }
        for k, v in vals.items():
            if v is not None:
                out[(k, lvl)] = float(v)
    curves = detail.get("curves") or []
    steps = sum(c.get("steps") or 0 for c in curves)
    if curves and steps:
        out[("tau", "acceptance")] = sum(c["tau"] * (c.get("steps") or 0) for c in curves) / steps
    elif not curves and speculative is False and out:
        out[("tau", "acceptance")] = 1.0
    return out


def run_gates(cell: Cell, detail: dict[str, Any]) -> list[str]:
    """Correctness-gate failures of one run (short reasons, run id included); empty when it passed.

    Gates: an essential step (config, build, model, boot, health, bench) failed —
    for a boot, with the boot's failure signature; ``runs.lossless`` is
    ``no``; a doctor finding ``garbage_output``.
    """
    run = detail["run"]
    rid = run["id"]
    out: list[str] = []
    for st in detail.get("steps") or []:
        if st["name"] in GATE_STEPS and st["state"] == "failed":
            if st["name"] == "boot":
                sig = _boot_signature(cell, run)
                out.append(f"boot failed ({sig or 'no signature'}) in run {rid}")
            elif st["name"] == "health":
                out.append(f"health check failed in run {rid}: {(st.get('error') or '')[:120]}")
            else:
                out.append(f"{st['name']} failed in run {rid}: {(st.get('error') or '')[:120]}")
    if run.get("lossless") == "no":
        n = len(((run.get("lossless_detail") or {}).get("mismatches")) or [])
        out.append(f"lossless check failed ({n} mismatching prompt(s)) in run {rid}")
    for f in detail.get("findings") or []:
        if f.get("rule") in GARBAGE_RULES:
            out.append(f"garbage output (doctor) in run {rid}: {(f.get('message') or '')[:120]}")
    return out


def _boot_signature(cell: Cell, run: dict[str, Any]) -> str | None:
    from dynocell.db import boots as db_boots

    if run.get("boot_id"):
        b = db_boots.get_boot(cell.store, run["boot_id"])
        return b.failure_signature if b else None
    boots = db_boots.boots_of_config_between(cell.store, run["config_hash"], run["started_at"], run.get("ended_at"))
    failed = [b for b in boots if b.state in ("failed", "crashed")]
    return failed[0].failure_signature if failed else None


def _is_speculative(cell: Cell, config_hash: str) -> bool | None:
    from dynocell.engine.config import config_from_canonical

    row = db_configs.get_config(cell.store, config_hash)
    if row is None:
        return None
    try:
        return bool(config_from_canonical(row.canonical_json).speculative_enabled)
    except Exception:  # noqa: BLE001 - an old canonical form: unknown
        return None


def judge(cell: Cell, name: str, *, store: bool = True, min_floor: float = V.MIN_FLOOR) -> dict[str, Any]:
    """Verdicts of experiment ``name`` from the runs stored so far.

    Returns ``{experiment, method, confidence, min_floor, complete,
    incumbent: {config_hash, label, runs, gates}, arms: [ArmVerdict dict +
    config_hash, label, runs], levels, judged_at}``; every arm's
    ``comparisons`` hold (metric, level, direction, verdict, means, rel_diff,
    CI, noise floor, more_repeats). With ``store`` the result goes to
    ``experiments.verdicts`` and the state becomes ``done`` once every slot
    has ended. Raises NotFound for an unknown experiment.
    """
    from dynocell.runbooks import views

    exp = _get(cell, name)
    labels = _labels(exp)
    slots = db.slots(cell.store, name)
    per_cfg_samples: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    per_cfg_gates: dict[str, list[str]] = defaultdict(list)
    per_cfg_runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    spec_cache: dict[str, bool | None] = {}
    levels: set[str] = set()
    for slot in slots:
        h = slot.config_hash
        if slot.state not in DONE_SLOT_STATES or not slot.run_id:
            if slot.state == "failed":
                err = ((exp.verdicts or {}).get("slot_errors") or {}).get(str(slot.seq))
                per_cfg_gates[h].append(f"run {slot.seq + 1} could not start: {err or 'unknown error'}")
            continue
        try:
            detail = views.run_detail(cell, slot.run_id)
        except NotFound:
            continue
        if h not in spec_cache:
            spec_cache[h] = _is_speculative(cell, h)
        samples = run_samples(detail, spec_cache[h])
        for k, v in samples.items():
            per_cfg_samples[h][k].append(v)
            levels.add(k[1])
        per_cfg_gates[h].extend(run_gates(cell, detail))
        per_cfg_runs[h].append({"run_id": slot.run_id, "seq": slot.seq, "repeat": slot.repeat,
                                "state": detail["run"]["state"], "error": detail["run"].get("error")})
    inc = exp.incumbent_hash
    inc_samples = {k: list(v) for k, v in per_cfg_samples[inc].items()}
    arms_out = []
    for a in exp.arms or []:
        if a.get("role") != "arm":
            continue
        h = a["config_hash"]
        av = V.judge_arm(labels.get(h, h), inc_samples, {k: list(v) for k, v in per_cfg_samples[h].items()},
                         rejections=_dedupe(per_cfg_gates[h]), min_floor=min_floor)
        d = av.as_dict()
        d.update(config_hash=h, label=labels.get(h, h), runs=per_cfg_runs[h],
                 samples={f"{k[0]}@{k[1]}": v for k, v in per_cfg_samples[h].items()})
        arms_out.append(d)
    complete = bool(slots) and all(s.state in DONE_SLOT_STATES for s in slots)
    result = {
        "experiment": name,
        "method": V.METHOD,
        "confidence": V.CONFIDENCE,
        "min_floor": min_floor,
        "complete": complete,
        "slots_done": sum(1 for s in slots if s.state in DONE_SLOT_STATES),
        "slots_total": len(slots),
        "incumbent": {"config_hash": inc, "label": labels.get(inc, inc), "runs": per_cfg_runs[inc],
                      "gates": _dedupe(per_cfg_gates[inc]),
                      "samples": {f"{k[0]}@{k[1]}": v for k, v in inc_samples.items()}},
        "arms": arms_out,
        "levels": sorted(levels, key=V._level_key),
        "judged_at": now_utc().isoformat(),
    }
    slot_errors = (exp.verdicts or {}).get("slot_errors")
    if slot_errors:
        result["slot_errors"] = slot_errors
    if store:
        values: dict[str, Any] = {"verdicts": result}
        if complete:
            values["state"] = "done"
        db.update_experiment(cell.store, name, **values)
    return result


def _dedupe(xs: list[str]) -> list[str]:
    return list(dict.fromkeys(xs))


# ---------------------------------------------------------------- views

def show_experiment(cell: Cell, name: str) -> dict[str, Any]:
    """One experiment: ``{experiment, arms, options, slots, verdicts}``.

    ``slots``: schedule rows with ``label`` and the run's ``run_state``;
    ``verdicts``: the stored judgement, or a fresh one (not stored) when
    runs exist but none was stored yet; None before any run.
    """
    exp = _get(cell, name)
    labels = _labels(exp)
    slots = []
    for s in db.slots(cell.store, name):
        run = db_runs.get_run(cell.store, s.run_id) if s.run_id else None
        slots.append({**s.to_dict(), "label": labels.get(s.config_hash, s.config_hash[:19]),
                      "run_state": run.state if run else None})
    verdicts = exp.verdicts
    if (not verdicts or "arms" not in verdicts) and any(s["run_id"] for s in slots):
        verdicts = judge(cell, name, store=False)
    elif verdicts and "arms" not in verdicts:
        verdicts = None
    return {"experiment": {k: getattr(exp, k) for k in ("name", "incumbent_hash", "workload", "repeats", "state",
                                                          "created_at")},
            "arms": exp.arms, "options": _options_of(exp), "slots": slots, "verdicts": verdicts}


def list_experiments(cell: Cell) -> list[dict[str, Any]]:
    """Experiments newest first: ``{name, state, repeats, incumbent, arms (labels), done, total, verdicts
    ({arm label: verdict label} when judged), created_at}``."""
    out = []
    for exp in db.list_experiments(cell.store):
        labels = _labels(exp)
        slots = db.slots(cell.store, exp.name)
        v = exp.verdicts or {}
        out.append({
            "name": exp.name, "state": exp.state, "repeats": exp.repeats,
            "incumbent": labels.get(exp.incumbent_hash, exp.incumbent_hash[:19]),
            "arms": [a.get("label") for a in exp.arms or [] if a.get("role") == "arm"],
            "done": sum(1 for s in slots if s.state in DONE_SLOT_STATES), "total": len(slots),
            "verdicts": {a["label"]: a["verdict_label"] for a in v.get("arms", [])},
            "created_at": exp.created_at,
        })
    return out


# ---------------------------------------------------------------- pins and rollback

def _resolve_build(cell: Cell, ref: str | None) -> str | None:
    if not ref:
        return None
    return refs.resolve_key(cell.store, ref, "build")


def pin(cell: Cell, config: str, *, note: str, build: str | None = None,
        evidence: dict[str, Any] | None = None) -> dict[str, Any]:
    """Pin ``config`` (+ optional ``build``) as what serves production; the previous pins stay in history.

    ``evidence`` (default: gathered) names the experiments that included this
    config with the verdict it got there, its newest completed runs, and the
    pin it replaces. Returns the pin row with ``label``. Raises UserError for
    an empty note, NotFound for an unknown config or build.
    """
    if not note or not note.strip():
        raise UserError("a pin needs --note", 'say why, e.g. --note "qualified by experiment spec-vs-plain"')
    h, label = _resolve(cell, config)
    bh = _resolve_build(cell, build)
    if evidence is None:
        evidence = _evidence(cell, h)
    pins = db.list_pins(cell.store, limit=1)
    evidence = {**evidence, "replaces_pin": pins[0].id if pins else None, "label": label}
    row = db.add_pin(cell.store, config_hash=h, build_hash=bh, note=note.strip(), evidence=evidence)
    events.publish("pin.added", pin_id=row.id, config_hash=h)
    return {**row.to_dict(), "label": label}


def _evidence(cell: Cell, config_hash: str) -> dict[str, Any]:
    exps = []
    for e in db.experiments_of_config(cell.store, config_hash):
        v = e.verdicts or {}
        role = "incumbent" if e.incumbent_hash == config_hash else "arm"
        verdict = next((a.get("verdict_label") for a in v.get("arms", []) if a.get("config_hash") == config_hash),
                       None)
        exps.append({"name": e.name, "role": role, "verdict": verdict, "state": e.state})
    runs = [r.id for r in db_runs.list_runs(cell.store, config_hash=config_hash, states=("completed",), limit=5)]
    return {"experiments": exps, "runs": runs}


def list_pins(cell: Cell) -> list[dict[str, Any]]:
    """Every pin, newest (current) first, each with ``label`` and ``current`` (bool).

    ``label`` is the name the config was pinned by while that name still points at it (a config can have
    several names), else its first current name, else its short hash."""
    labels = db_configs.current_labels(cell.store)
    by_hash: dict[str, list[str]] = defaultdict(list)
    for n, h in labels.items():
        by_hash[h].append(n)
    out = []
    for i, p in enumerate(db.list_pins(cell.store)):
        from dynocell.runbooks.configs import short_hash

        names = sorted(by_hash.get(p.config_hash, []))
        pinned_as = (p.evidence or {}).get("label")
        label = pinned_as if pinned_as in names else names[0] if names else short_hash(p.config_hash)
        out.append({**p.to_dict(), "label": label, "current": i == 0})
    return out


def boot_recipe(cell: Cell, config_hash: str, build_hash: str | None) -> dict[str, Any]:
    """What it takes to boot a pinned config again: ``{config_hash, source_toml, canonical_toml, argv,
    env (the config's own), pythonpath (the build's, or None), build, boot_command}``; secret
    env values are shown as ``***`` (``boot_command`` boots the stored config by hash).

    ``argv`` is rendered by the engine's adapter with the settings' engine
    Python; a port of 0 in the config is shown as the one picked now (a boot
    picks its own). Raises NotFound when the config is not stored.
    """
    from dynocell.engine.adapters import render
    from dynocell.engine.config import config_from_canonical, to_toml

    row = db_configs.get_config(cell.store, config_hash)
    if row is None:
        raise NotFound(f"config {config_hash} is not stored", "the store lost it; re-add its TOML")
    cfg = config_from_canonical(row.canonical_json)
    build = db_builds.get_build(cell.store, build_hash) if build_hash else None
    pythonpath = build.path if build else None
    argv: str | None
    try:
        spec = render(cfg, python=cell.settings.engine_python, base_env={}, build_pythonpath=pythonpath)
        argv = spec.argv_string if hasattr(spec, "argv_string") else " ".join(spec.argv)
    except DynocellError as exc:
        argv = f"(cannot render: {exc})"
    from dynocell.engine.config import redact_config
    from dynocell.runbooks.configs import redact_source, short_hash

    shown = redact_config(cfg)  # secrets as *** (the hash boots it)
    source = redact_source(row.source_toml, cfg)
    return {"config_hash": config_hash,
            "source_toml": source if source is not None else to_toml(shown),
            "canonical_toml": to_toml(shown), "argv": argv, "env": dict(shown.env), "pythonpath": pythonpath,
            "build": {k: getattr(build, k) for k in ("build_hash", "base_dist", "base_version", "patches", "path")}
            if build else None,
            "boot_command": f"dynocell boot {short_hash(config_hash, 16)}"}


def rollback(cell: Cell, *, apply: bool = False) -> dict[str, Any]:
    """The previous pin (the one before the current), with :func:`boot_recipe` ready to boot it.

    Returns ``{current, previous, recipe, applied}``; with ``apply`` a new pin
    row re-pins the previous config/build (note ``rollback from pin N``), so
    history keeps both. Raises NotFound when there are fewer than two pins.
    """
    pins = list_pins(cell)
    if not pins:
        raise NotFound("nothing is pinned", 'pin what serves production: dynocell pin CONFIG --note "…"')
    if len(pins) < 2:
        raise NotFound(f"only one pin (#{pins[0]['id']}, {pins[0]['label']}): there is no previous pin",
                       "see `dynocell pin --list`")
    cur, prev = pins[0], pins[1]
    recipe = boot_recipe(cell, prev["config_hash"], prev["build_hash"])
    applied = None
    if apply:
        applied = db.add_pin(cell.store, config_hash=prev["config_hash"], build_hash=prev["build_hash"],
                             note=f"rollback from pin {cur['id']} to pin {prev['id']}: {prev['note']}",
                             evidence={"rollback_of": cur["id"], "restores": prev["id"], "label": prev["label"],
                                       **{k: v for k, v in (prev.get("evidence") or {}).items()
                                          if k in ("experiments", "runs")}})
    return {"current": cur, "previous": prev, "recipe": recipe,
            "applied": applied.to_dict() if applied is not None else None}
