"""Read/write functions for experiments, their schedule slots (``experiment_runs``) and production pins.

Each function is one short transaction on a :class:`~dynocell.db.session.Store`
and takes/returns plain dicts with the columns of ``models.Experiment``,
``models.ExperimentRun`` and ``models.Pin``.
"""

from __future__ import annotations

from typing import Any, Sequence

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from dynocell.db.boots import _row
from dynocell.db.tables import Experiment, ExperimentRun, Pin
from dynocell.db import rows
from dynocell.db.session import Store


def create_experiment(store: Store, *, name: str, incumbent_hash: str, arms: list[Any], workload: str | None,
                      repeats: int, slots: Sequence[tuple[str, str, int]]) -> dict[str, Any] | None:
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
            return _row(exp)
    except IntegrityError:
        return None


def get_experiment(store: Store, name: str) -> dict[str, Any] | None:
    """One experiment row or None."""
    with store.session() as s:
        exp = s.get(Experiment, name)
        return _row(exp) if exp else None


def list_experiments(store: Store, limit: int = 200) -> list[dict[str, Any]]:
    """Experiments, newest first."""
    with store.session() as s:
        return [_row(e) for e in s.scalars(select(Experiment).order_by(Experiment.created_at.desc()).limit(limit))]


def update_experiment(store: Store, name: str, **values: Any) -> dict[str, Any]:
    """Set columns (``state``, ``verdicts`` …) of one experiment. Raises KeyError if absent."""
    return rows.update(store, Experiment, name, **values)


def slots(store: Store, name: str) -> list[dict[str, Any]]:
    """The schedule of an experiment in run order (``seq``)."""
    with store.session() as s:
        q = select(ExperimentRun).where(ExperimentRun.experiment == name).order_by(ExperimentRun.seq)
        return [_row(x) for x in s.scalars(q)]


def update_slot(store: Store, slot_id: int, **values: Any) -> dict[str, Any]:
    """Set ``state`` / ``run_id`` of one slot. Raises KeyError if absent."""
    return rows.update(store, ExperimentRun, slot_id, **values)


def experiments_of_config(store: Store, config_hash: str) -> list[dict[str, Any]]:
    """Experiments whose schedule includes ``config_hash`` (as incumbent or arm), newest first."""
    with store.session() as s:
        names = set(s.scalars(select(ExperimentRun.experiment).where(ExperimentRun.config_hash == config_hash)))
        if not names:
            return []
        q = select(Experiment).where(Experiment.name.in_(names)).order_by(Experiment.created_at.desc())
        return [_row(e) for e in s.scalars(q)]


def add_pin(store: Store, *, config_hash: str, build_hash: str | None, note: str,
            evidence: dict[str, Any]) -> dict[str, Any]:
    """Append a pin (the newest row is what serves production); returns it."""
    with store.session() as s:
        pin = Pin(config_hash=config_hash, build_hash=build_hash, note=note, evidence=evidence)
        s.add(pin)
        s.flush()
        return _row(pin)


def list_pins(store: Store, limit: int = 200) -> list[dict[str, Any]]:
    """Pins, newest first (index 0 is current)."""
    with store.session() as s:
        return [_row(p) for p in s.scalars(select(Pin).order_by(Pin.id.desc()).limit(limit))]


def boots_of_config_between(store: Store, config_hash: str, start: Any, end: Any | None) -> list[dict[str, Any]]:
    """Boots of ``config_hash`` started within ``[start, end]`` (``end`` None = open), oldest first.

    Used to find the boot of a run whose boot failed before the run row got its ``boot_id``.
    """
    from dynocell.db.tables import Boot

    with store.session() as s:
        q = select(Boot).where(Boot.config_hash == config_hash, Boot.started_at >= start)
        if end is not None:
            q = q.where(Boot.started_at <= end)
        return [_row(b) for b in s.scalars(q.order_by(Boot.started_at))]


def get_build(store: Store, build_hash: str) -> dict[str, Any] | None:
    """One engine build row or None."""
    from dynocell.db.tables import EngineBuild

    with store.session() as s:
        b = s.get(EngineBuild, build_hash)
        return _row(b) if b else None
