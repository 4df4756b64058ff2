"""Read/write functions for ``hosts``: the machines that write to the store.

Plain values in and out (dicts with the columns of ``models.Host``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update

from dynocell.db.tables import Host, utcnow
from dynocell.db.session import Store

INVENTORY = ("hostname", "os", "cpu", "cpu_count", "memory_bytes", "gpus", "cuda", "engine_versions")


def _row(h: Host) -> dict[str, Any]:
    return {c.key: getattr(h, c.key) for c in Host.__table__.columns}


def upsert_host(store: Store, host_id: str, inventory: dict[str, Any]) -> dict[str, Any]:
    """Insert the host ``host_id`` or refresh its inventory (keys of :data:`INVENTORY`) and ``last_seen_at``.

    Two processes of one machine registering at once both succeed (the loser of the insert race updates).
    """
    values = {k: inventory[k] for k in INVENTORY}
    from sqlalchemy.exc import IntegrityError

    for _attempt in range(2):
        try:
            with store.session() as s:
                h = s.get(Host, host_id)
                now = utcnow()
                if h is None:
                    h = Host(id=host_id, first_seen_at=now, last_seen_at=now, **values)
                    s.add(h)
                else:
                    for k, v in values.items():
                        setattr(h, k, v)
                    h.last_seen_at = now
                s.flush()
                return _row(h)
        except IntegrityError:
            continue  # another process inserted it first: update it instead
    raise RuntimeError(f"could not record host {host_id}")


def touch_host(store: Store, host_id: str) -> None:
    """Set ``last_seen_at`` of ``host_id`` to now (a heartbeat; no-op for an unknown id)."""
    with store.session() as s:
        s.execute(update(Host).where(Host.id == host_id).values(last_seen_at=utcnow()))


def get_host(store: Store, host_id: str) -> dict[str, Any] | None:
    """One host row or None."""
    with store.session() as s:
        h = s.get(Host, host_id)
        return _row(h) if h else None


def list_hosts(store: Store) -> list[dict[str, Any]]:
    """Every host, by hostname then id."""
    with store.session() as s:
        return [_row(h) for h in s.scalars(select(Host).order_by(Host.hostname, Host.id))]
