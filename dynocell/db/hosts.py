"""Read/write functions for ``hosts``: the machines that write to the store.

Plain values in, :class:`HostRow` records (the columns of ``tables.Host``) out.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import select, update

from dynocell.db import rows
from dynocell.db.session import Store
from dynocell.db.tables import Host, utcnow

INVENTORY = ("hostname", "os", "cpu", "cpu_count", "memory_bytes", "gpus", "cuda", "engine_versions")


@dataclass(frozen=True)
class HostRow(rows.Record):
    """One row of ``hosts``: machine ``id``, inventory (``gpus``: ``[{index, name, memory_mib, driver,
    uuid}]``, ``engine_versions``: ``{distribution: version}``, ``memory_bytes`` in bytes), first/last seen (UTC)."""

    id: str
    hostname: str
    os: str
    cpu: str
    cpu_count: int
    memory_bytes: int
    gpus: list[Any]
    cuda: str | None
    engine_versions: dict[str, Any]
    first_seen_at: datetime
    last_seen_at: datetime


def upsert_host(store: Store, host_id: str, inventory: dict[str, Any]) -> HostRow:
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
                return HostRow.of(h)
        except IntegrityError:
            continue  # another process inserted it first: update it instead
    raise RuntimeError(f"could not record host {host_id}")


def touch_host(store: Store, host_id: str) -> None:
    """Set ``last_seen_at`` of ``host_id`` to now (a heartbeat; no-op for an unknown id)."""
    with store.session() as s:
        s.execute(update(Host).where(Host.id == host_id).values(last_seen_at=utcnow()))


def get_host(store: Store, host_id: str) -> HostRow | None:
    """One host row or None."""
    return rows.get_as(store, Host, host_id, HostRow.of)


def list_hosts(store: Store) -> list[HostRow]:
    """Every host, by hostname then id."""
    with store.session() as s:
        return [HostRow.of(h) for h in s.scalars(select(Host).order_by(Host.hostname, Host.id))]
