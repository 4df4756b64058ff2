"""Read/write functions for runs and what hangs under them: steps, bench levels,
acceptance curves and points, profiles (splits, top kernels, phase split) and goldens.

Each write is its own short transaction, so a crash half way leaves every row
written before it. Plain values in, records out (each a frozen :class:`rows.Record` whose fields are the
columns of one table): :class:`RunRow` (``tables.Run``), :class:`RunStepRow` (``RunStep``),
:class:`BenchRow` (``BenchRun``), :class:`CurveRow` (``AcceptanceCurve``, with its :class:`PointRow` rows),
:class:`ProfileRow` (``ProfileRun``, with its :class:`SplitRow` and :class:`KernelRow` rows),
:class:`PhasesRow` (``ProfilePhases``), :class:`GoldenRow` (``Golden``). Nested rows are tuples of records,
never the ORM's lists; ``to_dict()`` gives them back as lists of dicts (the JSON shape).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Iterable

from sqlalchemy import select

from dynocell.db.tables import (
    AcceptanceCurve, AcceptancePoint, BenchRun, Golden, ProfileKernel, ProfilePhases, ProfileRun, ProfileSplit,
    Run, RunStep, utcnow,
)
from dynocell.db import rows
from dynocell.db.session import Store


@dataclass(frozen=True)
class RunRow(rows.Record):
    """One row of ``runs`` (see ``tables.Run``): ``kind`` run | bench | profile; ``state`` running |
    completed | failed | interrupted; ``step`` the step in flight or the one that failed; ``options`` the
    run's options; ``lossless`` / ``lossless_detail``, ``breakeven``, ``summary`` what the steps found (dicts
    as the steps wrote them); datetimes in UTC."""

    id: str
    kind: str
    config_hash: str
    boot_id: str | None
    build_hash: str | None
    host_id: str | None
    state: str
    step: str | None
    error: str | None
    pid: int | None
    workload: str | None
    workload_sha256: str | None
    options: dict[str, Any] | None
    lossless: str | None
    lossless_detail: dict[str, Any] | None
    breakeven: dict[str, Any] | None
    summary: dict[str, Any] | None
    started_at: datetime
    ended_at: datetime | None


@dataclass(frozen=True)
class RunStepRow(rows.Record):
    """One row of ``run_steps``: step ``name`` (boot, health, bench, acceptance, …), ``state`` running |
    completed | failed | skipped | interrupted, ``detail`` (dict the step wrote), ``error``; datetimes in UTC."""

    id: int
    run_id: str
    name: str
    state: str
    started_at: datetime
    ended_at: datetime | None
    detail: dict[str, Any] | None
    error: str | None


@dataclass(frozen=True)
class BenchRow(rows.Record):
    """One row of ``bench_runs``: one benchmark level (a ``concurrency``, optionally one ``text_class``).
    ``ttft_ms`` / ``tpot_ms`` / ``itl_ms`` / ``e2e_ms``: ``{p50, p90, p99, …}`` in ms; throughputs in req/s
    and tok/s; ``duration_s`` in seconds."""

    id: int
    run_id: str
    boot_id: str | None
    text_class: str | None
    concurrency: int
    num_requests: int
    num_failed: int
    length_mismatches: int
    duration_s: float  # wall time of the level, s
    prompt_tokens: int
    completion_tokens: int
    request_throughput: float  # completed requests / duration_s
    output_tok_s: float  # completion tokens / duration_s (aggregate)
    total_tok_s: float  # (prompt + completion tokens) / duration_s
    prefill_tok_s: float | None  # mean over requests of prompt tokens / TTFT
    decode_tok_s: float | None  # mean over requests of (completion tokens − 1) / (E2E − TTFT)
    ttft_ms: dict[str, Any]
    tpot_ms: dict[str, Any]
    itl_ms: dict[str, Any]
    e2e_ms: dict[str, Any]
    extra: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True)
class PointRow(rows.Record):
    """One row of ``acceptance_points``: draft ``position`` i (1-based), unconditional ``p_uncond`` = p_i
    and conditional ``a_cond`` = a_i = p_i / p_{i−1}."""

    id: int
    curve_id: int
    position: int
    p_uncond: float
    a_cond: float


@dataclass(frozen=True)
class CurveRow(rows.Record):
    """One row of ``acceptance_curves`` (one text class of one run) with its ``points`` by position.
    ``histogram`` h[k], k = 0..D (``num_drafts``) over ``steps`` verify steps; ``tau`` = 1 + Σ k·h[k] / N;
    ``engine_tau`` the engine's own figure (from ``engine_source``) when known, ``disagreement_pct`` their
    relative difference."""

    id: int
    run_id: str
    text_class: str
    num_drafts: int
    steps: int
    tau: float
    accept_rate: float
    histogram: list[Any]
    completion_tokens: int
    engine_tau: float | None
    engine_source: str | None
    disagreement_pct: float | None
    warning: str | None
    requests: list[Any] | None  # each request's record (engine.request_acceptance; migration 0009), None before
    points: tuple[PointRow, ...]


@dataclass(frozen=True)
class SplitRow(rows.Record):
    """One row of ``profile_splits``: time of one kernel (or CPU op) ``category`` in ms, its ``pct`` of the
    window's device time and ``launches``; ``rank`` −1 = all ranks combined."""

    id: int
    profile_id: int
    rank: int
    category: str
    ms: float
    pct: float
    launches: int


@dataclass(frozen=True)
class KernelRow(rows.Record):
    """One row of ``profile_kernels``: one top kernel ``name`` with its ``category``, ``ms`` and
    ``launches``; ``rank`` −1 = all ranks combined."""

    id: int
    profile_id: int
    rank: int
    name: str
    category: str
    ms: float
    launches: int


@dataclass(frozen=True)
class ProfileRow(rows.Record):
    """One row of ``profile_runs`` (a profiler window on a boot) with its ``splits`` and ``kernels`` (each
    ordered by rank, then ms descending). ``state`` running | completed | failed; ``traces``
    ``[{rank, path, size, sha256}]``; ``source`` kernel | cpu_op; times in ms, ``busy_pct`` in %."""

    id: int
    run_id: str | None
    boot_id: str | None
    host_id: str | None
    state: str
    error: str | None
    trace_dir: str | None
    traces: list[Any] | None
    source: str | None
    num_ranks: int | None
    device_ms: float | None
    window_ms: float | None
    busy_pct: float | None
    launches: int | None
    graph_launches: int | None
    output_tokens: int | None
    ms_per_token: float | None
    launches_per_token: float | None
    rank_skew: float | None
    warnings: list[Any] | None
    created_at: datetime
    splits: tuple[SplitRow, ...] = ()
    kernels: tuple[KernelRow, ...] = ()


@dataclass(frozen=True)
class PhasesRow(rows.Record):
    """One row of ``profile_phases``: the speculative step's phase split of one profile
    (:func:`dynocell.engine.spec_phases.phase_report`). ``state`` split | unavailable (``reason`` says why);
    ``source`` gpu | cpu | mixed; ``total_ms`` in ms; ``phases`` ``[{phase, label, ms, pct, …}]``;
    ``ranks`` ``[{rank, total_ms, phases}]`` or ``[]``."""

    id: int
    profile_id: int
    state: str
    source: str | None
    total_ms: float | None
    phases: list[Any]
    ranks: list[Any]
    reason: str | None
    created_at: datetime


@dataclass(frozen=True)
class GoldenRow(rows.Record):
    """One row of ``goldens``: the recorded greedy continuation of ``prompt`` (``prompt_sha256``) by a config,
    ``kind`` canary | lossless, ``max_new_tokens`` long; ``output_ids`` token ids when the engine gave them."""

    id: int
    config_hash: str
    kind: str
    prompt_sha256: str
    prompt: str
    max_new_tokens: int
    output_text: str
    output_ids: list[Any] | None
    created_at: datetime


RUN_LIVE_STATES = ("running",)


def create_run(store: Store, **values: Any) -> RunRow:
    """Insert a run row (``id``, ``config_hash``, ``state`` … as in ``tables.Run``); returns it."""
    return RunRow(**rows.insert(store, Run, **values))


def update_run(store: Store, run_id: str, **values: Any) -> RunRow:
    """Set columns of one run; returns the updated row. Raises KeyError if absent."""
    return rows.update_as(store, Run, run_id, RunRow.of, **values)


def get_run(store: Store, run_id: str) -> RunRow | None:
    """One run row or None."""
    return rows.get_as(store, Run, run_id, RunRow.of)


def list_runs(store: Store, *, config_hash: str | None = None, boot_id: str | None = None,
              states: tuple[str, ...] | None = None, limit: int = 100,
              host_ids: list[str] | None = None) -> list[RunRow]:
    """Runs, newest first, filtered by config hash, boot, state or host ids."""
    with store.session() as s:
        q = select(Run).order_by(Run.started_at.desc()).limit(limit)
        if host_ids is not None:
            q = q.where(Run.host_id.in_(host_ids))
        if config_hash:
            q = q.where(Run.config_hash == config_hash)
        if boot_id:
            q = q.where(Run.boot_id == boot_id)
        if states:
            q = q.where(Run.state.in_(states))
        return [RunRow.of(r) for r in s.scalars(q).all()]


def start_step(store: Store, run_id: str, name: str) -> int:
    """Record that step ``name`` of a run began (state running); also sets ``runs.step``. Returns the step id."""
    with store.session() as s:
        step = RunStep(run_id=run_id, name=name, state="running", started_at=utcnow())
        s.add(step)
        run = s.get(Run, run_id)
        if run is not None:
            run.step = name
        s.flush()
        return step.id


def end_step(store: Store, step_id: int, state: str, detail: dict[str, Any] | None = None,
             error: str | None = None) -> None:
    """Finish a step: ``state`` completed | failed | skipped | interrupted."""
    with store.session() as s:
        step = s.get(RunStep, step_id)
        if step is None:
            raise KeyError(step_id)
        step.state, step.ended_at, step.error = state, utcnow(), error
        if detail is not None:
            step.detail = detail


def steps(store: Store, run_id: str) -> list[RunStepRow]:
    """The steps of a run in order."""
    with store.session() as s:
        q = select(RunStep).where(RunStep.run_id == run_id).order_by(RunStep.id)
        return [RunStepRow.of(x) for x in s.scalars(q).all()]


def interrupt_running_steps(store: Store, run_id: str, error: str) -> list[str]:
    """Mark every still-running step of a run ``interrupted``; returns their names."""
    with store.session() as s:
        running = s.scalars(select(RunStep).where(RunStep.run_id == run_id, RunStep.state == "running")).all()
        for r in running:
            r.state, r.ended_at, r.error = "interrupted", utcnow(), error
        return [r.name for r in running]


def add_bench(store: Store, **values: Any) -> BenchRow:
    """Insert one bench level row (``tables.BenchRun`` columns); returns it."""
    return BenchRow(**rows.insert(store, BenchRun, **values))


def bench_rows(store: Store, run_id: str) -> list[BenchRow]:
    """Bench rows of a run in insertion order."""
    with store.session() as s:
        q = select(BenchRun).where(BenchRun.run_id == run_id).order_by(BenchRun.id)
        return [BenchRow.of(x) for x in s.scalars(q).all()]


def _curve(c: AcceptanceCurve) -> CurveRow:
    return CurveRow.of(c, points=tuple(PointRow.of(p) for p in c.points))


def add_curve(store: Store, points: Iterable[tuple[int, float, float]], **values: Any) -> CurveRow:
    """Insert an acceptance curve (``tables.AcceptanceCurve`` columns) and its per-position points
    ``(position, p_uncond, a_cond)``; returns it with its points."""
    with store.session() as s:
        curve = AcceptanceCurve(**values)
        s.add(curve)
        s.flush()
        for pos, p, a in points:
            s.add(AcceptancePoint(curve_id=curve.id, position=pos, p_uncond=p, a_cond=a))
        s.flush()
        s.refresh(curve)
        return _curve(curve)


def curves(store: Store, run_id: str) -> list[CurveRow]:
    """Acceptance curves of a run in insertion order, each with its ``points`` by position."""
    with store.session() as s:
        q = select(AcceptanceCurve).where(AcceptanceCurve.run_id == run_id).order_by(AcceptanceCurve.id)
        return [_curve(c) for c in s.scalars(q).all()]


def create_profile(store: Store, **values: Any) -> ProfileRow:
    """Insert a profile run row (state running) before the window opens; returns it (no splits or kernels
    yet)."""
    return ProfileRow(**rows.insert(store, ProfileRun, **values))


def finish_profile(store: Store, profile_id: int, splits: Iterable[dict[str, Any]] = (),
                   kernels: Iterable[dict[str, Any]] = (), **values: Any) -> None:
    """Set a profile's totals and add its category splits and top kernels (dicts of column values)."""
    with store.session() as s:
        rows.get_or_raise(s, ProfileRun, profile_id, **values)
        for sp in splits:
            s.add(ProfileSplit(profile_id=profile_id, **sp))
        for kn in kernels:
            s.add(ProfileKernel(profile_id=profile_id, **kn))


def profiles(store: Store, *, run_id: str | None = None, boot_id: str | None = None) -> list[ProfileRow]:
    """Profile runs of a run or boot, oldest first, with their ``splits`` and ``kernels``."""
    with store.session() as s:
        q = select(ProfileRun).order_by(ProfileRun.id)
        if run_id:
            q = q.where(ProfileRun.run_id == run_id)
        if boot_id:
            q = q.where(ProfileRun.boot_id == boot_id)
        out = []
        for p in s.scalars(q).all():
            splits = s.scalars(select(ProfileSplit).where(ProfileSplit.profile_id == p.id)
                               .order_by(ProfileSplit.rank, ProfileSplit.ms.desc())).all()
            kernels = s.scalars(select(ProfileKernel).where(ProfileKernel.profile_id == p.id)
                                .order_by(ProfileKernel.rank, ProfileKernel.ms.desc())).all()
            out.append(ProfileRow.of(p, splits=tuple(SplitRow.of(x) for x in splits),
                                     kernels=tuple(KernelRow.of(x) for x in kernels)))
        return out


def put_phases(store: Store, profile_id: int, report: dict[str, Any]) -> PhasesRow:
    """Store (or replace) the phase split of profile ``profile_id``: ``report`` as
    :func:`dynocell.engine.spec_phases.phase_report` returns it. Returns the row. Raises KeyError for
    an unknown profile."""
    with store.session() as s:
        if s.get(ProfileRun, profile_id) is None:
            raise KeyError(profile_id)
        row = s.scalars(select(ProfilePhases).where(ProfilePhases.profile_id == profile_id)).first()
        values = {"state": report["state"], "source": report.get("source"), "total_ms": report.get("total_ms"),
                  "phases": list(report.get("phases") or []), "ranks": list(report.get("ranks") or []),
                  "reason": report.get("reason"), "created_at": utcnow()}
        if row is None:
            row = ProfilePhases(profile_id=profile_id, **values)
            s.add(row)
        else:
            for k, v in values.items():
                setattr(row, k, v)
        s.flush()
        return PhasesRow.of(row)


def get_phases(store: Store, profile_id: int) -> PhasesRow | None:
    """The stored phase split of a profile, or None (never computed, or nothing to say)."""
    with store.session() as s:
        row = s.scalars(select(ProfilePhases).where(ProfilePhases.profile_id == profile_id)).first()
        return PhasesRow.of(row) if row else None


def get_golden(store: Store, config_hash: str, kind: str, prompt_sha256: str,
               max_new_tokens: int) -> GoldenRow | None:
    """The recorded golden continuation for (config, kind, prompt, length), or None."""
    with store.session() as s:
        g = s.scalars(select(Golden).where(
            Golden.config_hash == config_hash, Golden.kind == kind,
            Golden.prompt_sha256 == prompt_sha256, Golden.max_new_tokens == max_new_tokens,
        ).order_by(Golden.id)).first()
        return GoldenRow.of(g) if g else None


def goldens(store: Store, config_hash: str, kind: str = "lossless") -> list[GoldenRow]:
    """Every recorded continuation of ``kind`` (canary | lossless) by a config, in insertion order."""
    with store.session() as s:
        q = select(Golden).where(Golden.config_hash == config_hash, Golden.kind == kind).order_by(Golden.id)
        return [GoldenRow.of(g) for g in s.scalars(q)]


def put_golden(store: Store, **values: Any) -> GoldenRow:
    """Record a golden continuation (``tables.Golden`` columns); returns it."""
    return GoldenRow(**rows.insert(store, Golden, **values))
