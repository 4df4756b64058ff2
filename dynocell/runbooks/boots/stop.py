"""Stop a boot: the stop discipline on a live boot of this process, the stop-request file a supervisor
watches for, and ``dynocell stop`` by reference (asks the supervisor, or stops itself when it is gone).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any, Callable

from dynocell.clock import now_utc
from dynocell.db import boots as db_boots
from dynocell.engine.supervisor import (
    stop_marked, stop_process_group,
)
from dynocell.runbooks import events, hosts
from dynocell.runbooks.boots.live import (
    BOOT_MARKER, LiveBoot, finish_log, resolve_boot,
)
from dynocell.runbooks.boots.reconcile import (
    refuse_foreign, reconcile, supervisor_alive,
)
from dynocell.runbooks.boots.start import describe_exit, record_crash
from dynocell.runbooks.boots.wait import WAIT_POLL_S
from dynocell.runbooks.cell import Cell


def stop_live(cell: Cell, live: LiveBoot, grace_s: float | None = None,
              reason: str = "stop requested") -> dict[str, Any]:
    """Stop a boot this process supervises: ``stopping`` → TERM, grace, KILL, verify → ``stopped``.

    Returns ``{exit_code, how, seconds, survivors, zombies}``; survivors (which
    should be none) are also recorded as a failure detail. An engine that already died on its
    own is not "stopped": it is recorded ``crashed`` (:func:`record_crash`, with its signature)
    and the result carries ``crashed`` ("engine was killed by SIGKILL while ready").
    """
    if live.supervisor.poll().value in ("crashed", "failed"):
        row = record_crash(cell, live)
        code = row.exit_code if row else live.supervisor.exit_code
        sig = row.failure_signature if row else None
        return {"exit_code": code, "how": row.stop_how if row else None, "seconds": 0.0,
                "survivors": ((row.failure_detail if row else None) or {}).get("survivors") or [], "zombies": [],
                "crashed": f"engine {describe_exit(code)} while ready"
                           + (f" ({sig})" if sig not in (None, "unknown") else "")}
    grace = cell.settings.stop_grace_s if grace_s is None else grace_s
    db_boots.transition(cell.store, live.boot_id, ("starting", "ready"), "stopping")
    events.publish("boot.state_changed", boot_id=live.boot_id, old="ready", new="stopping", reason=reason)
    res = live.supervisor.stop(grace)
    finish_log(cell, live.boot_id, live.log_path)
    detail = {"survivors": [str(x) for x in res.survivors]} if res.survivors else None
    db_boots.transition(
        cell.store, live.boot_id, ("stopping", "ready", "starting"), "stopped", ended_at=now_utc(),
        exit_code=res.exit_code, stop_how=res.how, stop_s=res.seconds, zombies=len(res.zombies),
        **({"failure_detail": detail} if detail else {}),
    )
    events.publish("boot.state_changed", boot_id=live.boot_id, old="stopping", new="stopped", reason=reason)
    return {"exit_code": res.exit_code, "how": res.how, "seconds": res.seconds,
            "survivors": [str(x) for x in res.survivors], "zombies": [str(x) for x in res.zombies]}


def stop(cell: Cell, boot_ref: str, grace_s: float | None = None, wait_s: float = 60.0,
         pid: int | None = None) -> dict[str, Any]:
    """Stop a boot by reference, from any process.

    If its supervisor lives, it is asked (SIGTERM) and this waits for the store
    to show the end (at most grace + ``wait_s`` seconds). Otherwise this process
    applies the stop discipline to the engine's process group and records it.
    Returns the final boot's columns (a dict: the :func:`reconcile` shape, or ``BootRow.to_dict()``).
    A boot already ended is returned unchanged.
    An ``attached`` boot is refused unless ``pid`` is the process listening on its
    port (:func:`dynocell.runbooks.attach.stop_attached`).
    """
    boot = reconcile(cell, resolve_boot(cell, boot_ref))
    if boot["state"] not in db_boots.LIVE_STATES:
        return boot
    refuse_foreign(boot, "stop it")
    grace = cell.settings.stop_grace_s if grace_s is None else grace_s
    if boot.get("kind") == "attached":
        from dynocell.runbooks.attach import stop_attached

        return stop_attached(cell, boot, pid, grace)
    if boot["supervised"] and boot["supervisor_pid"] != os.getpid():
        if grace_s is not None:
            (Path(boot["log_path"]).parent / STOP_REQUEST).write_text(json.dumps({"grace_s": grace}))
        os.kill(boot["supervisor_pid"], signal.SIGTERM)
        deadline = time.monotonic() + grace + wait_s
        while time.monotonic() < deadline:
            row = db_boots.get_boot(cell.store, boot["id"])
            if row and row.state not in db_boots.LIVE_STATES:
                return row.to_dict()
            if row and not supervisor_alive(row):
                break  # it died instead of finishing: reconcile and stop it here, now
            time.sleep(WAIT_POLL_S)
        fresh = db_boots.get_boot(cell.store, boot["id"])
        boot = reconcile(cell, fresh) if fresh else boot
        if boot["state"] not in db_boots.LIVE_STATES:
            return boot
    # Unsupervised (or the supervisor did not finish): do it here.
    db_boots.transition(cell.store, boot["id"], ("starting", "ready"), "stopping")
    res = (stop_process_group(boot["pid"], boot["pgid"] or boot["pid"], grace) if boot["pid"]
           else stop_marked(BOOT_MARKER, boot["id"], grace))  # no pid on record: find it by its marker
    finish_log(cell, boot["id"], Path(boot["log_path"]))
    db_boots.transition(
        cell.store, boot["id"], db_boots.LIVE_STATES, "stopped", ended_at=now_utc(),
        exit_code=res.exit_code if res else None, stop_how=res.how if res else "gone",
        stop_s=res.seconds if res else 0.0, zombies=len(res.zombies) if res else 0,
    )
    events.publish("boot.state_changed", boot_id=boot["id"], old=boot["state"], new="stopped", reason="stop")
    return final_row(cell, boot)


def final_row(cell: Cell, boot: dict[str, Any]) -> dict[str, Any]:
    """The stored columns of ``boot`` (a :func:`reconcile` row) read again now, as a dict; ``boot`` if absent."""
    row = db_boots.get_boot(cell.store, boot["id"])
    return row.to_dict() if row else boot


STOP_REQUEST = "stop-request.json"


def requested_grace(live: LiveBoot) -> float | None:
    """The grace (s) a `dynocell stop --grace S` asked for, if any (read from the boot dir)."""
    try:
        return float(json.loads((live.boot_dir / STOP_REQUEST).read_text())["grace_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def watch(cell: Cell, live: LiveBoot, *, should_stop: Callable[[], bool], interval_s: float = 0.5) -> str:
    """Watch a ready boot until ``should_stop()`` (→ stop it, ``stopped``) or it dies (``crashed``).

    Returns the final state. Marks this host as heard from every ``host_stale_s / 4`` seconds (a
    shared store shows other hosts a quiet host's boots as unknown).
    """
    beat_s, last_beat = cell.settings.host_stale_s / 4, time.monotonic()
    while True:
        if should_stop():
            stop_live(cell, live, requested_grace(live))
            return "stopped"
        if live.supervisor.poll().value in ("crashed", "failed"):
            record_crash(cell, live)
            return "crashed"
        if time.monotonic() - last_beat >= beat_s:
            hosts.heartbeat_quietly(cell)
            last_beat = time.monotonic()
        time.sleep(interval_s)
