"""Read/write functions for experiments, their schedule slots (``experiment_runs``) and production pins.

Each function is one short transaction on a :class:`~dynocell.db.session.Store`;
values in are plain columns, rows come back as records (:class:`ExperimentRow`, :class:`SlotRow`,
:class:`PinRow`: the columns of ``tables.Experiment``, ``tables.ExperimentRun``, ``tables.Pin``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from dynocell.db import rows
from dynocell.db.session import Store
from dynocell.db.tables import Experiment, ExperimentRun, Pin


@dataclass(frozen=True)
class ExperimentRow(rows.Record):
    """One row of ``experiments``: ``name``, the incumbent's config hash, ``arms``
    (``[{role, config_hash, label, options[, boot_id]}]``), ``workload``, ``repeats``, ``state``
    (created, running, interrupted, done), the stored ``verdicts`` (or None) and ``created_at`` (UTC)."""

    name: str
    incumbent_hash: str
    arms: list[Any]
    workload: str | None
    repeats: int
    state: str
    verdicts: dict[str, Any] | None
    created_at: datetime


@dataclass(frozen=True)
class SlotRow(rows.Record):
    """One row of ``experiment_runs``: slot ``seq`` of ``experiment`` runs ``config_hash`` as ``role``
    (incumbent or arm), repeat ``repeat``; ``run_id`` once its run exists; ``state`` (pending, running,
    completed, failed, interrupted)."""

    id: int
    experiment: str
    seq: int
    config_hash: str
    role: str
    repeat: int
    run_id: str | None
    state: str


@dataclass(frozen=True)
class PinRow(rows.Record):
    """One row of ``pins``: the config (and build) that serves production from ``created_at`` on, the
    operator's ``note`` and the ``evidence`` gathered when pinning."""

    id: int
    config_hash: str
    build_hash: str | None
    note: str
    evidence: dict[str, Any]
    created_at: datetime


def create_experiment(store: Store, *, name: str, incumbent_hash: str, arms: list[Any], workload: str | None,
                      repeats: int, slots: Sequence[tuple[str, str, int]]) -> ExperimentRow | None:
    """Insert an experiment (state ``created``) and its schedule in one transaction.

    ``slots``: ``(config_hash, role, repeat)`` in run order; ``seq`` is their
    index, state ``pending``. Returns the experiment row, or None when the
    name is already taken (nothing written).
    """
    try:
        with store.session() as s:
            if s.get(Experiment, name) is not None:
                return None
            exp = Experiment(name=name, incumbent_hash=incumbent_hash, arms=arms, workload=workload,
                             repeats=repeats, state="created")
            s.add(exp)
            s.flush()
            for seq, (h, role, rep) in enumerate(slots):
                s.add(ExperimentRun(experiment=name, seq=seq, config_hash=h, role=role, repeat=rep,
                                    state="pending"))
            s.flush()
            return ExperimentRow.of(exp)
    except IntegrityError:
        return None


def get_experiment(store: Store, name: str) -> ExperimentRow | None:
    """One experiment row or None."""
    return rows.get_as(store, Experiment, name, ExperimentRow.of)


def list_experiments(store: Store, limit: int = 200) -> list[ExperimentRow]:
    """Experiments, newest first."""
    with store.session() as s:
        q = select(Experiment).order_by(Experiment.created_at.desc()).limit(limit)
        return [ExperimentRow.of(e) for e in s.scalars(q)]


def update_experiment(store: Store, name: str, **values: Any) -> ExperimentRow:
    """Set columns (``state``, ``verdicts`` …) of one experiment; returns it. Raises KeyError if absent."""
    return rows.update_as(store, Experiment, name, ExperimentRow.of, **values)


def slots(store: Store, name: str) -> list[SlotRow]:
    """The schedule of an experiment in run order (``seq``)."""
    with store.session() as s:
        q = select(ExperimentRun).where(ExperimentRun.experiment == name).order_by(ExperimentRun.seq)
        return [SlotRow.of(x) for x in s.scalars(q)]


def update_slot(store: Store, slot_id: int, **values: Any) -> SlotRow:
    """Set ``state`` / ``run_id`` of one slot; returns it. Raises KeyError if absent."""
    return rows.update_as(store, ExperimentRun, slot_id, SlotRow.of, **values)


def experiments_of_config(store: Store, config_hash: str) -> list[ExperimentRow]:
    """Experiments whose schedule includes ``config_hash`` (as incumbent or arm), newest first."""
    with store.session() as s:
        names = set(s.scalars(select(ExperimentRun.experiment).where(ExperimentRun.config_hash == config_hash)))
        if not names:
            return []
        q = select(Experiment).where(Experiment.name.in_(names)).order_by(Experiment.created_at.desc())
        return [ExperimentRow.of(e) for e in s.scalars(q)]


def add_pin(store: Store, *, config_hash: str, build_hash: str | None, note: str,
            evidence: dict[str, Any]) -> PinRow:
    """Append a pin (the newest row is what serves production); returns it."""
    with store.session() as s:
        pin = Pin(config_hash=config_hash, build_hash=build_hash, note=note, evidence=evidence)
        s.add(pin)
        s.flush()
        return PinRow.of(pin)


def list_pins(store: Store, limit: int = 200) -> list[PinRow]:
    """Pins, newest first (index 0 is current)."""
    with store.session() as s:
        return [PinRow.of(p) for p in s.scalars(select(Pin).order_by(Pin.id.desc()).limit(limit))]
