"""Bisect plans: which knobs differ between a GOOD and a BAD config, and the configs that isolate the responsible one.

Strategy (issue 7 part 5):

- ``one-at-a-time`` when 1–3 knobs differ: each step is GOOD with one knob
  (group) taken from BAD; the step whose verdict flips is the knob. If none
  flips alone, the knobs interact.
- ``halving`` when more differ: the knobs are ordered (grouped by table so
  coupled fields such as ``speculative.*`` stay adjacent) and step *i* is GOOD
  with the first *i* knob groups taken from BAD. GOOD = prefix 0, BAD = prefix n;
  a binary search over the prefixes finds the first prefix that turns bad in
  ⌈log2 n⌉ runs; its last group is the responsible knob.

Knobs whose single change makes an invalid config (e.g. ``num_draft_tokens``
below ``num_steps + 1``) are merged with the next knob of the same table until
the step validates. Fields that do not change what the engine computes (host,
port, ``meta``) are not knobs.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from pydantic import ValidationError

from dynocell.errors import UserError

IGNORED = ("host", "port", "served_model_name")
MAX_ONE_AT_A_TIME = 3


@dataclass(frozen=True)
class KnobDiff:
    """One differing field: dotted ``field`` (``parallel.dcp_size``, ``env.NAME``), ``good`` and ``bad`` values."""

    field: str
    good: Any
    bad: Any


@dataclass(frozen=True)
class BisectStep:
    """One intermediate config: GOOD with ``knobs`` (fields) taken from BAD.

    ``config`` is the validated EngineConfig, ``config_hash`` its hash;
    ``tests`` names the knob group this step isolates (one-at-a-time) or the
    group added last (halving).
    """

    index: int
    knobs: tuple[str, ...]
    tests: tuple[str, ...]
    config: Any
    config_hash: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (the config as its canonical dict)."""
        return {"index": self.index, "knobs": list(self.knobs), "tests": list(self.tests),
                "config_hash": self.config_hash, "config": self.config.canonical()}


@dataclass
class BisectPlan:
    """The plan: ``diffs`` (every differing knob), ``groups`` (knobs moved together), ``steps`` and ``strategy``.

    ``expected_runs`` is how many steps a run needs at most (all for
    one-at-a-time, ⌈log2(groups)⌉ for halving, 0 when nothing differs).
    """

    good_hash: str
    bad_hash: str
    strategy: str
    diffs: list[KnobDiff]
    groups: list[tuple[str, ...]]
    steps: list[BisectStep] = field(default_factory=list)
    expected_runs: int = 0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of the whole plan."""
        return {"good_hash": self.good_hash, "bad_hash": self.bad_hash, "strategy": self.strategy,
                "diffs": [{"field": d.field, "good": d.good, "bad": d.bad} for d in self.diffs],
                "groups": [list(g) for g in self.groups], "steps": [s.to_dict() for s in self.steps],
                "expected_runs": self.expected_runs, "notes": self.notes}

    def render(self) -> str:
        """Human-readable plan (what ``dynocell bisect plan`` prints)."""
        lines = [f"good {self.good_hash[:19]}  bad {self.bad_hash[:19]}"]
        if not self.diffs:
            return lines[0] + "\nthe two configs do not differ in any knob: nothing to bisect"
        lines.append(f"{len(self.diffs)} knob(s) differ:")
        w = max(len(d.field) for d in self.diffs)
        for d in self.diffs:
            lines.append(f"  {d.field:<{w}}  {_fmt(d.good)} → {_fmt(d.bad)}")
        lines.append(f"strategy: {self.strategy} ({self.expected_runs} run(s) at most)")
        lines.append("steps (GOOD with these knobs set as in BAD):")
        for s in self.steps:
            what = ", ".join(s.knobs if self.strategy == "halving" else s.tests)
            lines.append(f"  step {s.index} [{s.config_hash[7:19]}]: {what}")
        if self.strategy == "halving":
            lines.append("  search: run the middle step; bad → search the lower half, good → the upper half; "
                         "the first bad step's last-added knobs are responsible")
        lines.extend(f"note: {n}" for n in self.notes)
        return "\n".join(lines)


def _fmt(v: Any) -> str:
    return "(unset)" if v is None else repr(v) if isinstance(v, str) else str(v)


def knob_diffs(good: Any, bad: Any) -> list[KnobDiff]:
    """Differing knobs of two EngineConfigs (:func:`dynocell.engine.config.diff_configs`, host/port left out)."""
    from dynocell.engine.config import diff_configs

    return [KnobDiff(f, a, b) for f, a, b in diff_configs(good, bad) if f.split(".")[0] not in IGNORED]


def _apply(good: Any, bad: Any, fields: tuple[str, ...]) -> Any:
    """GOOD with ``fields`` taken from BAD (dotted paths; ``env.NAME`` set or removed)."""
    from dynocell.engine.config import EngineConfig

    data = good.model_dump(mode="json")
    src = bad.model_dump(mode="json")
    for f in fields:
        parts = f.split(".")
        if parts[0] == "env":
            name = f[4:]
            env = dict(data.get("env") or {})
            if name in (src.get("env") or {}):
                env[name] = src["env"][name]
            else:
                env.pop(name, None)
            data["env"] = env
            continue
        s, d = src, data
        for p in parts[:-1]:
            s = s.get(p) or {}
            d = d.setdefault(p, {})
        d[parts[-1]] = copy.deepcopy(s.get(parts[-1]))
    data["meta"] = {"name": None, "notes": "bisect step: good + " + ", ".join(fields)}
    return EngineConfig.model_validate(data)


def _valid(good: Any, bad: Any, fields: tuple[str, ...]) -> bool:
    try:
        _apply(good, bad, fields)
        return True
    except ValidationError:
        return False


def _groups(good: Any, bad: Any, diffs: list[KnobDiff], cumulative: bool) -> list[tuple[str, ...]]:
    """Knob groups in order, table by table; an invalid single change is merged with the next knob of its
    table, and a table whose knobs never validate one by one moves as one group."""
    tables: dict[str, list[str]] = {}
    for f in sorted(d.field for d in diffs):
        tables.setdefault(f.split(".")[0], []).append(f)
    groups: list[tuple[str, ...]] = []
    for fields in tables.values():
        tgroups: list[tuple[str, ...]] = []
        pending: tuple[str, ...] = ()
        for f in fields:
            pending = pending + (f,)
            base = tuple(x for g in groups + tgroups for x in g) if cumulative else ()
            if _valid(good, bad, base + pending):
                tgroups.append(pending)
                pending = ()
        if pending:
            tgroups = [tuple(fields)]
        groups.extend(tgroups)
    return groups


def plan(good: Any, bad: Any) -> BisectPlan:
    """The bisect plan from GOOD to BAD (two EngineConfigs).

    Raises UserError when a step config cannot be made valid (the message names
    the knobs). See the module docstring for the strategies.
    """
    diffs = knob_diffs(good, bad)
    p = BisectPlan(good.config_hash, bad.config_hash, "none", diffs, [])
    if not diffs:
        return p
    single = _groups(good, bad, diffs, cumulative=False)
    if len(single) <= MAX_ONE_AT_A_TIME:
        p.strategy, p.groups = "one-at-a-time", single
        for i, g in enumerate(single, start=1):
            p.steps.append(_step(good, bad, i, g, g))
        p.expected_runs = len(p.steps)
        if len(single) < len(diffs):
            p.notes.append("some knobs are only valid together and move as one group: "
                           + "; ".join(", ".join(g) for g in single if len(g) > 1))
        return p
    groups = _groups(good, bad, diffs, cumulative=True)
    p.strategy, p.groups = "halving", groups
    applied: tuple[str, ...] = ()
    for i, g in enumerate(groups[:-1], start=1):  # prefix n = BAD itself, already measured
        applied = applied + g
        p.steps.append(_step(good, bad, i, applied, g))
    p.expected_runs = math.ceil(math.log2(len(groups))) if len(groups) > 1 else 0
    return p


def _step(good: Any, bad: Any, index: int, fields: tuple[str, ...], tests: tuple[str, ...]) -> BisectStep:
    try:
        cfg = _apply(good, bad, fields)
    except ValidationError as exc:
        raise UserError(f"bisect step {index} (good + {', '.join(fields)}) is not a valid config: "
                        f"{exc.errors()[0]['msg']}",
                        "change those knobs together by hand, or narrow the configs") from None
    return BisectStep(index, tuple(fields), tuple(tests), cfg, cfg.config_hash)


def bisect_search(p: BisectPlan, is_bad: Callable[[BisectStep], bool]) -> dict[str, Any]:
    """Drive a plan with a verdict function (``is_bad(step)`` runs the step and says if it is bad).

    One-at-a-time: every step is run; ``responsible`` are the groups whose step
    is bad. Halving: binary search for the first bad prefix. Returns
    ``{strategy, tried: [{index, bad}], responsible: [fields…] | None}``.
    """
    tried: list[dict[str, Any]] = []
    if p.strategy == "one-at-a-time":
        bad_groups: list[Any] = []
        for s in p.steps:
            b = bool(is_bad(s))
            tried.append({"index": s.index, "bad": b})
            if b:
                bad_groups.extend(s.tests)
        return {"strategy": p.strategy, "tried": tried, "responsible": bad_groups or None,
                "interaction": not bad_groups and bool(p.steps)}
    if p.strategy != "halving":
        return {"strategy": p.strategy, "tried": [], "responsible": None}
    lo, hi = 0, len(p.groups)  # prefix lo is good, prefix hi is bad
    by_prefix = {s.index: s for s in p.steps}
    while hi - lo > 1:
        mid = (lo + hi) // 2
        b = bool(is_bad(by_prefix[mid]))
        tried.append({"index": mid, "bad": b})
        if b:
            hi = mid
        else:
            lo = mid
    return {"strategy": p.strategy, "tried": tried, "responsible": list(p.groups[hi - 1])}


def run_bisect(cell: Any, good_ref: str, bad_ref: str, *, tau_drop: float = 0.1,
               progress: Callable[[str, dict[str, Any]], None] | None = None,
               options: Any = None) -> dict[str, Any]:
    """Run the main job on GOOD, BAD and the plan's steps; report which knob flips the verdict.

    A step is bad when its τ is more than ``tau_drop`` (relative) below GOOD's τ
    or its lossless check failed. ``options`` (a :class:`~dynocell.runbooks.run.job.RunOptions`,
    default: the main job's defaults) applies to every run, e.g. a shorter workload or
    no profiler window. Returns ``{plan, good_run, bad_run, runs, result}``; the
    experiment is recorded as a note on the BAD config. Raises UserError when GOOD is
    not better than BAD (nothing to bisect).
    """
    from dynocell.db import knowledge as dbk, runs as db_runs
    from dynocell.runbooks.configs import resolve_config, store_config
    from dynocell.runbooks.run import run_job

    say = progress or (lambda _m, _d: None)
    good, _ = resolve_config(cell, good_ref)
    bad, bad_hash = resolve_config(cell, bad_ref)
    p = plan(good, bad)

    def measure(cfg: Any, label: str) -> dict[str, Any]:
        h = store_config(cell, cfg)
        say(f"bisect: running {label}", {"config_hash": h})
        rid = run_job(cell, h, options=options, progress=progress)
        run = db_runs.get_run(cell.store, rid)
        return {"label": label, "run_id": rid, "config_hash": h,
                "tau": ((run.summary if run else None) or {}).get("tau"),
                "lossless": run.lossless if run else None, "state": run.state if run else None}

    g, b = measure(good, "good"), measure(bad, "bad")
    runs = [g, b]

    def verdict_bad(r: dict[str, Any]) -> bool:
        if r["lossless"] == "no" or r["state"] != "completed":
            return True
        return r["tau"] is not None and g["tau"] is not None and r["tau"] < g["tau"] * (1 - tau_drop)

    if not verdict_bad(b) or verdict_bad(g):
        raise UserError(f"the verdicts do not differ: good τ {g['tau']} ({g['lossless']}), "
                        f"bad τ {b['tau']} ({b['lossless']})",
                        "bisect needs a good config that is good and a bad config that is bad")

    def is_bad(step: BisectStep) -> bool:
        r = measure(step.config, f"step {step.index}")
        runs.append(r)
        return verdict_bad(r)

    result = bisect_search(p, is_bad)
    text = (f"bisect {p.good_hash[:19]} → {p.bad_hash[:19]}: responsible "
            + (", ".join(result["responsible"]) if result.get("responsible") else "not isolated (knobs interact)")
            + "; runs " + ", ".join(f"{r['label']}={r['run_id']} τ {r['tau']}" for r in runs))
    dbk.add_note(cell.store, "config", bad_hash, text)
    return {"plan": p.to_dict(), "good_run": g, "bad_run": b, "runs": runs, "result": result}
