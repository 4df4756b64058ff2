"""Read/write functions for boots, their events and health verdicts.

Each function opens one short transaction on the given :class:`~dynocell.db.session.Store`;
plain values in, records out: :class:`BootRow` (the columns of ``tables.Boot``), :class:`BootEventRow`
(``tables.BootEvent``), :class:`HealthRow` (``tables.HealthCheck``), each a frozen :class:`rows.Record`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from dynocell.boot_states import FAILED_STATES, LIVE_STATES, TERMINAL_STATES  # noqa: F401 - the one definition, re-exported
from dynocell.clock import aware_utc
from dynocell.db import rows
from dynocell.db.tables import Boot, BootEvent, HealthCheck, utcnow
from dynocell.db.session import Store


@dataclass(frozen=True)
class BootRow(rows.Record):
    """One row of ``boots`` (see ``tables.Boot``): one start of one config on one host. ``state`` one of
    :mod:`dynocell.boot_states`; ``argv`` the engine command line; ``env`` with secrets redacted;
    ``*_create_time`` psutil create times (s since the epoch); ``ready_s`` / ``stop_s`` in seconds;
    ``log_size`` in bytes; ``kind`` started | attached | imported; datetimes in UTC."""

    id: str
    config_hash: str
    build_hash: str | None
    engine: str
    hostname: str
    host: str
    host_id: str | None
    port: int | None
    node_rank: int | None
    argv: str
    env: dict[str, Any]
    pid: int | None
    pgid: int | None
    supervisor_pid: int | None
    supervisor_create_time: float | None
    engine_create_time: float | None
    state: str
    last_phase: str | None
    log_path: str
    log_size: int | None
    log_sha256: str | None
    started_at: datetime
    ready_at: datetime | None
    ready_s: float | None
    ended_at: datetime | None
    exit_code: int | None
    stop_how: str | None
    stop_s: float | None
    zombies: int | None
    failure_signature: str | None
    failure_detail: dict[str, Any] | None
    kind: str
    source_sha256: str | None


@dataclass(frozen=True)
class BootEventRow(rows.Record):
    """One row of ``boot_events``: ``kind`` phase | state | note, its ``name``, ``offset_s`` (seconds
    since the boot started), ``detail`` (dict or None), ``ts`` (UTC)."""

    id: int
    boot_id: str
    ts: datetime
    offset_s: float
    kind: str
    name: str
    detail: dict[str, Any] | None


@dataclass(frozen=True)
class HealthRow(rows.Record):
    """One row of ``health_checks``: ``verdict`` healthy | degraded | down, ``failed`` (comma-joined
    check names), ``checks`` (``[{name, ok, latency_ms, reason, …}]``), ``ts`` (UTC)."""

    id: int
    boot_id: str
    ts: datetime
    verdict: str
    failed: str
    checks: list[Any]


def create_boot(store: Store, **values: Any) -> BootRow:
    """Insert a boot row (``values`` are ``Boot`` columns; ``id`` required); returns it."""
    return BootRow(**rows.insert(store, Boot, **values))


def update_boot(store: Store, boot_id: str, **values: Any) -> BootRow:
    """Set columns of one boot; returns the updated row. Raises KeyError if absent."""
    return rows.update_as(store, Boot, boot_id, BootRow.of, **values)


def transition(store: Store, boot_id: str, old: tuple[str, ...] | str, new: str, **values: Any) -> bool:
    """Compare-and-set the state: move to ``new`` only if the state is in ``old``.

    Returns False (and writes nothing) when another writer moved the boot first —
    the guard that keeps two processes from both finishing one boot.
    """
    olds = (old,) if isinstance(old, str) else old
    with store.session() as s:
        # A conditional UPDATE (state still what was read) is the compare-and-set: a plain
        # read-then-write lets two processes that read the same state both "win". After the
        # first UPDATE this transaction holds the write lock, so a re-read is current.
        for _attempt in range(5):
            boot = s.get(Boot, boot_id, populate_existing=True)
            if boot is None or boot.state not in olds:
                return False
            previous = boot.state
            moved = s.execute(update(Boot).where(Boot.id == boot_id, Boot.state == previous)
                              .values(state=new, **values).execution_options(synchronize_session=False))
            if moved.rowcount == 1:  # type: ignore[attr-defined]  # an UPDATE's CursorResult; execute() is typed Result
                break
        else:
            return False
        s.refresh(boot)
        detail: dict[str, Any] = {"from": previous}
        if values.get("failure_signature"):
            detail["signature"] = values["failure_signature"]
        s.add(BootEvent(boot_id=boot_id, ts=utcnow(), offset_s=_offset(boot), kind="state",
                        name=new, detail=detail))
        return True


def _offset(boot: Boot) -> float:
    return round((utcnow() - aware_utc(boot.started_at)).total_seconds(), 3)


def get_boot(store: Store, boot_id: str) -> BootRow | None:
    """One boot row or None."""
    return rows.get_as(store, Boot, boot_id, BootRow.of)


def list_boots(store: Store, states: tuple[str, ...] | None = None, limit: int = 200,
               host_ids: list[str] | None = None) -> list[BootRow]:
    """Boots, newest first, optionally only those in ``states`` and of the hosts ``host_ids``."""
    with store.session() as s:
        q = select(Boot).order_by(Boot.started_at.desc()).limit(limit)
        if states:
            q = q.where(Boot.state.in_(states))
        if host_ids is not None:
            q = q.where(Boot.host_id.in_(host_ids))
        return [BootRow.of(b) for b in s.scalars(q).all()]


def add_event(store: Store, boot_id: str, kind: str, name: str, offset_s: float,
              detail: dict[str, Any] | None = None, ts: datetime | None = None) -> None:
    """Append one boot event (``kind``: phase | state | note)."""
    with store.session() as s:
        s.add(BootEvent(boot_id=boot_id, ts=ts or utcnow(), offset_s=offset_s, kind=kind, name=name, detail=detail))


def events(store: Store, boot_id: str) -> list[BootEventRow]:
    """The events of a boot in order."""
    with store.session() as s:
        found = s.scalars(select(BootEvent).where(BootEvent.boot_id == boot_id).order_by(BootEvent.id)).all()
        return [BootEventRow.of(e) for e in found]


def add_health(
    store: Store, boot_id: str, verdict: str, checks: list[dict[str, Any]], failed: str = ""
) -> HealthRow:
    """Store one health verdict with its checks (``[{name, ok, latency_ms, reason, …}]``)."""
    with store.session() as s:
        h = HealthCheck(boot_id=boot_id, ts=utcnow(), verdict=verdict, checks=checks, failed=failed)
        s.add(h)
        s.flush()
        return HealthRow.of(h)


def health_history(store: Store, boot_id: str, limit: int = 50) -> list[HealthRow]:
    """Health verdicts of a boot, newest first."""
    with store.session() as s:
        q = select(HealthCheck).where(HealthCheck.boot_id == boot_id).order_by(HealthCheck.id.desc()).limit(limit)
        return [HealthRow.of(h) for h in s.scalars(q).all()]


def boots_of_config_between(store: Store, config_hash: str, start: datetime,
                            end: datetime | None) -> list[BootRow]:
    """Boots of ``config_hash`` started within ``[start, end]`` (``end`` None = open), oldest first: how the
    boot of a run whose boot failed before the run row got its ``boot_id`` is found."""
    with store.session() as s:
        q = select(Boot).where(Boot.config_hash == config_hash, Boot.started_at >= start)
        if end is not None:
            q = q.where(Boot.started_at <= end)
        return [BootRow.of(b) for b in s.scalars(q.order_by(Boot.started_at))]
