"""Read/write functions for boots, their events and health verdicts.

Each function opens one short transaction on the given :class:`~dynocell.db.session.Store`
and takes/returns plain values (dicts with the columns of ``models.Boot`` etc.).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from dynocell.boot_states import FAILED_STATES, LIVE_STATES, TERMINAL_STATES  # noqa: F401 - the one definition, re-exported
from dynocell.db import rows
from dynocell.db.tables import Boot, BootEvent, HealthCheck, utcnow
from dynocell.db.session import Store



_row = rows.row_dict


def create_boot(store: Store, **values: Any) -> dict[str, Any]:
    """Insert a boot row (``values`` are ``Boot`` columns; ``id`` required); returns it."""
    return rows.insert(store, Boot, **values)


def update_boot(store: Store, boot_id: str, **values: Any) -> dict[str, Any]:
    """Set columns of one boot; returns the updated row. Raises KeyError if absent."""
    return rows.update(store, Boot, boot_id, **values)


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
            if moved.rowcount == 1:
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
    started = boot.started_at
    if started.tzinfo is None:
        from datetime import timezone
        started = started.replace(tzinfo=timezone.utc)
    return round((utcnow() - started).total_seconds(), 3)


def get_boot(store: Store, boot_id: str) -> dict[str, Any] | None:
    """One boot row or None."""
    with store.session() as s:
        boot = s.get(Boot, boot_id)
        return _row(boot) if boot else None


def list_boots(store: Store, states: tuple[str, ...] | None = None, limit: int = 200,
               host_ids: list[str] | None = None) -> list[dict[str, Any]]:
    """Boots, newest first, optionally only those in ``states`` and of the hosts ``host_ids``."""
    with store.session() as s:
        q = select(Boot).order_by(Boot.started_at.desc()).limit(limit)
        if states:
            q = q.where(Boot.state.in_(states))
        if host_ids is not None:
            q = q.where(Boot.host_id.in_(host_ids))
        return [_row(b) for b in s.scalars(q).all()]


def add_event(store: Store, boot_id: str, kind: str, name: str, offset_s: float,
              detail: dict[str, Any] | None = None, ts: datetime | None = None) -> None:
    """Append one boot event (``kind``: phase | state | note)."""
    with store.session() as s:
        s.add(BootEvent(boot_id=boot_id, ts=ts or utcnow(), offset_s=offset_s, kind=kind, name=name, detail=detail))


def events(store: Store, boot_id: str) -> list[dict[str, Any]]:
    """The events of a boot in order."""
    with store.session() as s:
        rows = s.scalars(select(BootEvent).where(BootEvent.boot_id == boot_id).order_by(BootEvent.id)).all()
        return [_row(e) for e in rows]


def add_health(
    store: Store, boot_id: str, verdict: str, checks: list[dict[str, Any]], failed: str = ""
) -> dict[str, Any]:
    """Store one health verdict with its checks (``[{name, ok, latency_ms, reason, …}]``)."""
    with store.session() as s:
        h = HealthCheck(boot_id=boot_id, ts=utcnow(), verdict=verdict, checks=checks, failed=failed)
        s.add(h)
        s.flush()
        return _row(h)


def health_history(store: Store, boot_id: str, limit: int = 50) -> list[dict[str, Any]]:
    """Health verdicts of a boot, newest first."""
    with store.session() as s:
        q = select(HealthCheck).where(HealthCheck.boot_id == boot_id).order_by(HealthCheck.id.desc()).limit(limit)
        return [_row(h) for h in s.scalars(q).all()]
