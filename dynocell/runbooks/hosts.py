"""Host identity in a shared store: which machine wrote a row, and whether it is still heard from.

Every dynocell process registers its machine once per store (:func:`this_host_id`):
the ``hosts`` row gets the inventory of :func:`dynocell.engine.hostinfo.probe`
and a fresh ``last_seen_at``. Boots, runs and profile runs carry that id.

The machine id is, in order: the ``machine_id`` setting (to simulate several
hosts on one machine), ``/etc/machine-id``, or an id generated once and kept in
``<home>/machine-id`` (where that cannot be written: one derived from the hostname).
"""

from __future__ import annotations

import socket
import threading
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from dynocell.clock import aware_utc, now_utc
from dynocell.db import hosts as db_hosts
from dynocell.engine import hostinfo
from dynocell.errors import StoreUnavailable
from dynocell.runbooks.cell import Cell
from dynocell.settings import child_base_env

_lock = threading.Lock()
_registered: dict[tuple[str, str], str] = {}  # (db_url, machine id) → host id, once per process
ID_FILE = "machine-id"


def machine_id(cell: Cell, system_files: tuple[Path, ...] = hostinfo.MACHINE_ID_FILES) -> str:
    """This machine's id (see the module docstring); generates and keeps one in the data directory if
    none of ``system_files`` holds one."""
    s = cell.settings
    if s.machine_id:
        return s.machine_id
    found = hostinfo.read_machine_id(system_files)
    if found:
        return found
    path = Path(s.home) / ID_FILE
    kept = hostinfo.read_machine_id((path,))
    if kept:
        return kept
    new = uuid.uuid4().hex
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{uuid.uuid4().hex[:6]}")
        tmp.write_text(new + "\n")
        tmp.replace(path)
    except OSError:
        # An unwritable data directory (its own clear error comes from the store): an id derived
        # from the hostname is stable for this machine, if not unique across identically named ones.
        return uuid.uuid5(uuid.NAMESPACE_DNS, socket.gethostname()).hex
    return hostinfo.read_machine_id((path,)) or new


def this_host_id(cell: Cell) -> str:
    """Register this machine in the cell's store (once per process and store) and return its id.

    A store that cannot take the write (opened read-only, say) does not stop readers: the id is
    returned unregistered and registration is tried again on the next call.
    """
    mid = machine_id(cell)
    key = (cell.settings.db_url, mid)
    with _lock:
        if key in _registered:
            return _registered[key]
    try:
        db_hosts.upsert_host(cell.store, mid, hostinfo.probe(cell.settings.engine_python, child_base_env()))
    except StoreUnavailable:
        return mid
    with _lock:
        _registered[key] = mid
    return mid


def heartbeat(cell: Cell) -> str:
    """Mark this machine as heard from now (``ps`` and the panels' polls call it); returns its id."""
    hid = this_host_id(cell)
    db_hosts.touch_host(cell.store, hid)
    return hid


def heartbeat_quietly(cell: Cell) -> bool:
    """:func:`heartbeat`, but a store that cannot take it (down, locked) is not this caller's problem:
    a supervisor keeps watching its engine. Returns whether the heartbeat was stored."""
    try:
        heartbeat(cell)
        return True
    except Exception:  # noqa: BLE001 - a missed heartbeat only makes this host look quiet a little sooner
        return False


def hosts(cell: Cell) -> list[dict[str, Any]]:
    """Every host of the store, each with ``label`` (see :func:`label`) and ``this`` (True for this machine)."""
    mine = this_host_id(cell)
    out = []
    for h in _rows(cell):
        out.append({**h, "label": label(h), "this": h["id"] == mine})
    return out


def label(host: dict[str, Any] | None) -> str:
    """A short human name: ``hostname (first 8 of the machine id)``; ``?`` for rows without a host."""
    if not host:
        return "?"
    return f"{host['hostname']} ({host['id'][:8]})"


def _rows(cell: Cell) -> list[dict[str, Any]]:
    """Every host row of the store as a plain dict (``HostRow.to_dict``), by hostname then id."""
    return [h.to_dict() for h in db_hosts.list_hosts(cell.store)]


def by_id(cell: Cell) -> dict[str, dict[str, Any]]:
    """``{host id: host row}`` of every host of the store."""
    return {h["id"]: h for h in _rows(cell)}


def labels(cell: Cell) -> dict[str, str]:
    """``{host id: label}`` of every host of the store."""
    return {h["id"]: label(h) for h in _rows(cell)}


def resolve(cell: Cell, ref: str) -> list[str]:
    """Host ids matching ``ref``: a hostname (exact) or a machine id prefix. Raises NotFound for none."""
    from dynocell.errors import NotFound

    ref = ref.strip()
    rows = _rows(cell)
    ids = [h["id"] for h in rows if h["hostname"] == ref] or [h["id"] for h in rows if ref and h["id"].startswith(ref)]
    if not ids:
        known = ", ".join(label(h) for h in rows) or "none yet"
        raise NotFound(f"host: no host named or with a machine id starting {ref!r}",
                       f"known hosts: {known}")
    return ids


def get(cell: Cell, host_id: str) -> dict[str, Any] | None:
    """The host row ``host_id`` (a plain dict) or None."""
    row = db_hosts.get_host(cell.store, host_id)
    return row.to_dict() if row is not None else None


def ago(host: dict[str, Any]) -> str:
    """How long ago ``host`` was last heard from, in words (``42 s ago``, ``3 min ago``, ``2.5 h ago``)."""
    s = seen_ago_s(host)
    if s < 120:
        return f"{s:.0f} s ago"
    if s < 7200:
        return f"{s / 60:.0f} min ago"
    return f"{s / 3600:.1f} h ago"


def seen_ago_s(host: dict[str, Any], now: datetime | None = None) -> float:
    """Seconds since ``host`` was last heard from."""
    return max(0.0, ((now or now_utc()) - aware_utc(host["last_seen_at"])).total_seconds())


def different_hardware(hosts_by_id: dict[str, dict[str, Any]], host_ids: list[str | None]) -> list[str]:
    """Labels of the distinct hardware among ``host_ids`` when there is more than one kind, else ``[]``.

    Hardware is :func:`dynocell.engine.hostinfo.hardware_key` (CPU, GPU names/memory/driver, CUDA);
    two machines of the same kind compare fine.
    """
    kinds: dict[tuple[Any, ...], str] = {}
    for hid in host_ids:
        h = hosts_by_id.get(hid or "")
        if h is None:
            continue
        kinds.setdefault(hostinfo.hardware_key(h), label(h))
    return list(kinds.values()) if len(kinds) > 1 else []
