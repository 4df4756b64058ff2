"""Reconcile, a named operation: a live-looking boot is checked against reality and settled — engine
gone → ``lost``; an engine that outlived its supervisor → stopped. Listings that reconcile say so
(:func:`reconcile_and_list`); only a boot's own host judges its processes.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from pathlib import Path
from typing import Any

import psutil

from dynocell.clock import aware_utc, now_utc
from dynocell.db import boots as db_boots
from dynocell.engine.supervisor import (
    process_alive, stop_marked, stop_process_group,
)
from dynocell.errors import UserError
from dynocell.runbooks import events, hosts
from dynocell.runbooks.boots.live import BOOT_MARKER, SPAWN_SETTLE_S, finish_log
from dynocell.runbooks.cell import Cell


def _is_our_process(pid: int | None, marker: str) -> bool:
    if not pid:
        return False
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return marker in " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def supervisor_alive(row: db_boots.BootRow) -> bool:
    """Whether the process that supervises a boot (``row``: its stored row) still runs.

    The one liveness check every wait uses (CLI, web jobs, TUI): a wait on a boot
    polls this each time it reads the row and ends when it turns False.

    The supervisor's create time (recorded with the boot) guards against a
    recycled pid; rows written before it was recorded fall back to a
    ``dynocell`` command-line check.
    """
    pid = row.supervisor_pid
    if not pid:
        return False
    if pid == os.getpid():
        return True
    ctime = row.supervisor_create_time
    if ctime is not None:
        return process_alive(pid, ctime)
    return _is_our_process(pid, "dynocell")


def reconcile(cell: Cell, boot: db_boots.BootRow) -> dict[str, Any]:
    """Check a live-looking boot against reality: no engine is ever left orphaned.

    A boot whose supervisor process died (``kill -9`` of ``dynocell run``, a
    killed ``--detach`` supervisor) is settled here, by whichever process looks
    next (``ps``, ``runs``, ``show``, the TUI and web polls):

    - engine gone too → ``lost``;
    - engine still running on this host (its pid and recorded create time
      match) → stopped now (SIGTERM, grace, SIGKILL on its process group) and
      recorded ``stopped`` with the reason. Its log pipe died with the
      supervisor, so nothing could capture its output or watch it any more: it
      is not reattached.

    A store opened read-only is never written: its live-looking boots keep their recorded state, with the
    note ``not checked (the store is opened read-only)``.

    Only boots of this host are judged (a process check means nothing for another
    machine's pids): a live boot of another host keeps its recorded state; when
    that host has not been heard from for ``host_stale_s`` the row's
    ``state_note`` says ``unknown (host B last seen … ago)``.

    Returns the boot's columns (``boot.to_dict()``, a view shape for the faces) with ``supervised``
    (bool), ``engine_alive`` (bool, None for another host's boot) and ``state_note`` (str or None) added.
    """
    row = boot.to_dict()
    row["state_note"] = None
    if row["state"] not in db_boots.LIVE_STATES:
        row["supervised"], row["engine_alive"] = False, False
        return row
    if cell.store.read_only:  # a store read read-only (--store PATH, an old schema, a read-only file): never settled
        row["supervised"], row["engine_alive"] = False, None
        row["state_note"] = "not checked (the store is opened read-only)"
        return row
    if row.get("host_id") and row["host_id"] != hosts.this_host_id(cell):
        return _foreign(cell, row)
    if row.get("kind") == "attached":  # no process of ours: alive = answers /health; never signalled here
        from dynocell.runbooks.attach import attached_alive

        row["supervised"], row["engine_alive"] = False, attached_alive(boot)
        if not row["engine_alive"]:  # kept ready (it may come back), but never shown as if it answered
            row["state_note"] = "not answering /health (attached: stopped where it was started?)"
        return row
    supervised = supervisor_alive(boot)
    ctime = row.get("engine_create_time")
    engine_alive = bool(row["pid"]) and process_alive(row["pid"], ctime)
    row["supervised"], row["engine_alive"] = supervised, engine_alive
    if not supervised and engine_alive and ctime is not None and row.get("hostname") == socket.gethostname():
        # Only an engine positively identified (same host, pid with the recorded create time) is
        # signalled: a recycled pid, or a row from before create times were kept, is left alone.
        return _stop_orphan(cell, row)
    if not supervised and not engine_alive and row.get("hostname") == socket.gethostname():
        # No live pid on record (the supervisor died between the spawn and the pid write, or the
        # engine's children outlived it): the processes carrying this boot's marker are its engine.
        res = stop_marked(BOOT_MARKER, row["id"], cell.settings.stop_grace_s)
        if res is None and not row["pid"]:
            # A child forked just before the supervisor died may not have exec'd the engine yet
            # (its environment is the marker's only from exec on): look once more, a moment later.
            time.sleep(SPAWN_SETTLE_S)
            res = stop_marked(BOOT_MARKER, row["id"], cell.settings.stop_grace_s)
        if res is not None:
            return _record_orphan_stop(cell, row, res, "found by its DYNOCELL_BOOT_ID marker "
                                                       f"(pids {', '.join(map(str, res.signalled)) or '-'})")
    if not supervised and not engine_alive and db_boots.transition(
            cell.store, row["id"], db_boots.LIVE_STATES, "lost", ended_at=now_utc(),
            failure_detail={"reason": "supervisor and engine gone", "last_state": row["state"]}):
        row["state"] = "lost"
        events.publish("boot.state_changed", boot_id=row["id"], old=boot.state, new="lost", reason="supervisor gone")
    return row


def refuse_foreign(boot: dict[str, Any], what: str) -> None:
    """Raise UserError when ``boot`` (a :func:`reconcile` row) is a live boot of another host."""
    if boot["state"] in db_boots.LIVE_STATES and boot.get("engine_alive") is None:
        raise UserError(f"boot {boot['id']} runs on host {boot.get('hostname') or boot.get('host_id')}: "
                        f"this host cannot {what}",
                        f"run the command on {boot.get('hostname') or 'that host'} (same store)")


def refuse_foreign_files(cell: Cell, boot: db_boots.BootRow) -> None:
    """Raise UserError when ``boot``'s files live on another host."""
    if boot.host_id and boot.host_id != hosts.this_host_id(cell):
        raise UserError(f"boot {boot.id}'s log lives on host {boot.hostname or boot.host_id} "
                        f"under {Path(boot.log_path).parent}, not on this host",
                        "run `dynocell logs` on that host (the store is shared)")


def _foreign(cell: Cell, row: dict[str, Any]) -> dict[str, Any]:
    """A live boot of another host: never judged here; noted ``unknown`` when that host went quiet."""
    row["supervised"], row["engine_alive"] = None, None
    other = hosts.get(cell, row["host_id"])
    if other is None or hosts.seen_ago_s(other) > cell.settings.host_stale_s:
        seen = f"last seen {hosts.ago(other)}" if other else "never seen"
        row["state_note"] = f"unknown (host {row.get('hostname') or '?'} {seen})"
    return row


def _stop_orphan(cell: Cell, row: dict[str, Any]) -> dict[str, Any]:
    """Stop the engine of a boot whose supervisor died and record ``stopped`` with the reason."""
    grace = cell.settings.stop_grace_s
    db_boots.transition(cell.store, row["id"], ("starting", "ready"), "stopping")
    res = stop_process_group(row["pid"], row["pgid"] or row["pid"], grace)
    marked = stop_marked(BOOT_MARKER, row["id"], grace)  # children that left the group, if any
    if marked is not None:
        res = dataclasses.replace(res, survivors=res.survivors + marked.survivors)
    return _record_orphan_stop(cell, row, res)


def _record_orphan_stop(cell: Cell, row: dict[str, Any], res: Any, found: str | None = None) -> dict[str, Any]:
    """Record ``stopped`` for a boot whose orphaned engine reconciliation just stopped (``res``)."""
    db_boots.transition(cell.store, row["id"], ("starting", "ready"), "stopping")
    finish_log(cell, row["id"], Path(row["log_path"]))
    detail = {**(row.get("failure_detail") or {}), "last_state": row["state"],
              "reason": f"supervisor (pid {row['supervisor_pid']}) died; the orphaned engine"
                        + (f" ({found})" if found else "") + " was stopped by reconciliation"}
    if res.survivors:
        detail["survivors"] = [str(x) for x in res.survivors]
    if db_boots.transition(cell.store, row["id"], db_boots.LIVE_STATES, "stopped", ended_at=now_utc(),
                           exit_code=res.exit_code, stop_how=res.how, stop_s=res.seconds,
                           zombies=len(res.zombies), failure_detail=detail):
        events.publish("boot.state_changed", boot_id=row["id"], old=row["state"], new="stopped",
                       reason="supervisor gone: orphaned engine stopped")
    now = db_boots.get_boot(cell.store, row["id"])
    out = now.to_dict() if now else dict(row)
    out["supervised"], out["engine_alive"] = False, bool(res.survivors)
    return out


def reconcile_and_list(cell: Cell, all: bool = False, host: str | None = None) -> list[dict[str, Any]]:
    """Boots (live ones unless ``all``; of the hosts matching ``host`` if given, see
    :func:`hosts.resolve`), reconciled against reality, each with its last health verdict and
    ``host_label``. Marks this host as heard from (when the store takes writes)."""
    hosts.heartbeat_quietly(cell)
    rows = db_boots.list_boots(cell.store, None if all else db_boots.LIVE_STATES,
                               host_ids=hosts.resolve(cell, host) if host else None)
    names = hosts.labels(cell)
    out = []
    for b in rows:
        r = reconcile(cell, b)
        if not all and r["state"] not in db_boots.LIVE_STATES:
            continue
        last = db_boots.health_history(cell.store, r["id"], limit=1)
        # Only a ready boot can be healthy now: a stopped one keeps its last verdict apart.
        r["last_health"] = last[0].verdict if last else None
        r["health"] = r["last_health"] if r["state"] == "ready" else None
        if r["state"] == "ready" and r.get("engine_alive") is False:
            r["health"] = "down"  # probed just now (an attached engine not answering): never the stale light
        r["uptime_s"] = _uptime(r)
        r["host_label"] = names.get(r.get("host_id") or "", r.get("hostname") or "?")
        out.append(r)
    return out


def other_live_boots(cell: Cell, boot_id: str | None = None) -> list[dict[str, Any]]:
    """Live boots of this store on this host other than ``boot_id`` (each reconciled first, so a
    dead one is not counted): engines that share the machine with it and disturb its measurements."""
    host = socket.gethostname()
    out = []
    for stored in db_boots.list_boots(cell.store, db_boots.LIVE_STATES):
        if stored.id == boot_id or stored.hostname != host:
            continue
        row = reconcile(cell, stored)
        if row["state"] in db_boots.LIVE_STATES:
            out.append(row)
    return out


def concurrent_boot_warning(row: dict[str, Any]) -> str:
    """The warning for another live boot ``row`` on this host (one line, for output and reports)."""
    return (f"another boot of this store is live on this host: boot {row['id']} ({row['engine']}, "
            f"{row['state']}, port {row['port']}, config {row['config_hash'].removeprefix('sha256:')[:12]}); "
            "engines measured side by side disturb each other's numbers")


def _uptime(row: dict[str, Any]) -> float | None:
    start = row.get("ready_at") or row.get("started_at")
    if start is None:
        return None
    end = aware_utc(row.get("ended_at")) or now_utc()
    return max(0.0, (end - aware_utc(start)).total_seconds())
