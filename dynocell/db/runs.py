"""Read/write functions for runs and what hangs under them: steps, bench levels,
acceptance curves and points, profiles (splits, top kernels) and goldens.

Each write is its own short transaction, so a crash half way leaves every row
written before it. Values in and out are plain dicts.
"""

from __future__ import annotations

from typing import Any, Iterable

from sqlalchemy import select

from dynocell.db.rows import row_dict as _row
from dynocell.db.tables import (
    AcceptanceCurve, AcceptancePoint, BenchRun, Golden, ProfileKernel, ProfilePhases, ProfileRun, ProfileSplit,
    Run, RunStep, utcnow,
)
from dynocell.db import rows
from dynocell.db.session import Store

RUN_LIVE_STATES = ("running",)


def create_run(store: Store, **values: Any) -> dict[str, Any]:
    """Insert a run row (``id``, ``config_hash``, ``state`` … as in ``models.Run``)."""
    return rows.insert(store, Run, **values)


def update_run(store: Store, run_id: str, **values: Any) -> dict[str, Any]:
    """Set columns of one run; returns the row. Raises KeyError if absent."""
    return rows.update(store, Run, run_id, **values)


def get_run(store: Store, run_id: str) -> dict[str, Any] | None:
    """One run row or None."""
    with store.session() as s:
        run = s.get(Run, run_id)
        return _row(run) if run else None


def list_runs(store: Store, *, config_hash: str | None = None, boot_id: str | None = None,
              states: tuple[str, ...] | None = None, limit: int = 100,
              host_ids: list[str] | None = None) -> list[dict[str, Any]]:
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
        return [_row(r) for r in s.scalars(q).all()]


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


def steps(store: Store, run_id: str) -> list[dict[str, Any]]:
    """The steps of a run in order."""
    with store.session() as s:
        return [_row(x) for x in s.scalars(select(RunStep).where(RunStep.run_id == run_id).order_by(RunStep.id)).all()]


def interrupt_running_steps(store: Store, run_id: str, error: str) -> list[str]:
    """Mark every still-running step of a run ``interrupted``; returns their names."""
    with store.session() as s:
        rows = s.scalars(select(RunStep).where(RunStep.run_id == run_id, RunStep.state == "running")).all()
        for r in rows:
            r.state, r.ended_at, r.error = "interrupted", utcnow(), error
        return [r.name for r in rows]


def add_bench(store: Store, **values: Any) -> dict[str, Any]:
    """Insert one bench level row (``models.BenchRun`` columns)."""
    return rows.insert(store, BenchRun, **values)


def bench_rows(store: Store, run_id: str) -> list[dict[str, Any]]:
    """Bench rows of a run in insertion order."""
    with store.session() as s:
        q = select(BenchRun).where(BenchRun.run_id == run_id).order_by(BenchRun.id)
        return [_row(x) for x in s.scalars(q).all()]


def add_curve(store: Store, points: Iterable[tuple[int, float, float]], **values: Any) -> dict[str, Any]:
    """Insert an acceptance curve and its per-position points ``(position, p_uncond, a_cond)``."""
    with store.session() as s:
        curve = AcceptanceCurve(**values)
        s.add(curve)
        s.flush()
        for pos, p, a in points:
            s.add(AcceptancePoint(curve_id=curve.id, position=pos, p_uncond=p, a_cond=a))
        return _row(curve)


def curves(store: Store, run_id: str) -> list[dict[str, Any]]:
    """Acceptance curves of a run, each with ``points`` (list of dicts by position)."""
    with store.session() as s:
        out = []
        q = select(AcceptanceCurve).where(AcceptanceCurve.run_id == run_id).order_by(AcceptanceCurve.id)
        for c in s.scalars(q).all():
            row = _row(c)
            row["points"] = [_row(p) for p in c.points]
            out.append(row)
        return out


def create_profile(store: Store, **values: Any) -> dict[str, Any]:
    """Insert a profile run row (state running) before the window opens."""
    return rows.insert(store, ProfileRun, **values)


def finish_profile(store: Store, profile_id: int, splits: Iterable[dict[str, Any]] = (),
                   kernels: Iterable[dict[str, Any]] = (), **values: Any) -> None:
    """Set a profile's totals and add its category splits and top kernels (dicts of column values)."""
    with store.session() as s:
        rows.get_or_raise(s, ProfileRun, profile_id, **values)
        for sp in splits:
            s.add(ProfileSplit(profile_id=profile_id, **sp))
        for kn in kernels:
            s.add(ProfileKernel(profile_id=profile_id, **kn))


def profiles(store: Store, *, run_id: str | None = None, boot_id: str | None = None) -> list[dict[str, Any]]:
    """Profile runs of a run or boot with ``splits`` and ``kernels`` lists."""
    with store.session() as s:
        q = select(ProfileRun).order_by(ProfileRun.id)
        if run_id:
            q = q.where(ProfileRun.run_id == run_id)
        if boot_id:
            q = q.where(ProfileRun.boot_id == boot_id)
        out = []
        for p in s.scalars(q).all():
            row = _row(p)
            row["splits"] = [_row(x) for x in s.scalars(
                select(ProfileSplit).where(ProfileSplit.profile_id == p.id)
                .order_by(ProfileSplit.rank, ProfileSplit.ms.desc())).all()]
            row["kernels"] = [_row(x) for x in s.scalars(
                select(ProfileKernel).where(ProfileKernel.profile_id == p.id)
                .order_by(ProfileKernel.rank, ProfileKernel.ms.desc())).all()]
            out.append(row)
        return out


def put_phases(store: Store, profile_id: int, report: dict[str, Any]) -> dict[str, Any]:
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
        return _row(row)


def get_phases(store: Store, profile_id: int) -> dict[str, Any] | None:
    """The stored phase split of a profile, or None (never computed, or nothing to say)."""
    with store.session() as s:
        row = s.scalars(select(ProfilePhases).where(ProfilePhases.profile_id == profile_id)).first()
        return _row(row) if row else None


def get_golden(store: Store, config_hash: str, kind: str, prompt_sha256: str,
               max_new_tokens: int) -> dict[str, Any] | None:
    """The recorded golden continuation for (config, kind, prompt, length), or None."""
    with store.session() as s:
        g = s.scalars(select(Golden).where(
            Golden.config_hash == config_hash, Golden.kind == kind,
            Golden.prompt_sha256 == prompt_sha256, Golden.max_new_tokens == max_new_tokens,
        ).order_by(Golden.id)).first()
        return _row(g) if g else None


def put_golden(store: Store, **values: Any) -> dict[str, Any]:
    """Record a golden continuation (``models.Golden`` columns)."""
    with store.session() as s:
        g = Golden(**values)
        s.add(g)
        s.flush()
        return _row(g)
