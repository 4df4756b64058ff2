"""Runs whose dynocell process died (settled as ``interrupted``, their engines stopped), and runs by reference.
"""

from __future__ import annotations

import json
from dynocell.clock import aware_utc, now_utc
from dynocell.db import refs
from dynocell.db import runs as db_runs
from dynocell.runbooks import boots, events, hosts
from dynocell.runbooks.cell import Cell


def _run_process_alive(run: db_runs.RunRow) -> bool:
    """Whether the process that records ``run`` still runs (a pid recycled since the run started counts as dead)."""
    import psutil

    pid = run.pid
    if not pid:
        return False
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        started = aware_utc(run.started_at)
        # born after the run began: another process got the pid
        return started is None or proc.create_time() <= started.timestamp() + 1.0
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def reconcile_runs(cell: Cell) -> list[str]:
    """Settle runs whose process died (``kill -9``, a crash, a power cut); returns their ids.

    Each such run and its running step become ``interrupted`` (the error names
    the step), a profile window it left open becomes ``failed``, and the boots
    it supervised are reconciled (:func:`dynocell.runbooks.boots.reconcile`): an
    engine still running is stopped, never left orphaned. Every row the run
    wrote before it died is kept.
    """
    fixed = []
    mine = hosts.this_host_id(cell)
    for r in db_runs.list_runs(cell.store, states=("running",), limit=500):
        if r.host_id not in (None, mine):
            continue  # another host's run: its pid means nothing here
        if _run_process_alive(r):
            continue
        # Re-read now that the process is known dead (it can write nothing more): a run that
        # finished between the listing and the liveness check keeps its real end.
        current = db_runs.get_run(cell.store, r.id)
        if current is None or current.state != "running":
            continue
        names = db_runs.interrupt_running_steps(cell.store, r.id, "the dynocell process died")
        for prof in db_runs.profiles(cell.store, run_id=r.id):
            if prof.state == "running":
                db_runs.finish_profile(cell.store, prof.id, state="failed",
                                       error="the dynocell process died during the profile window")
        db_runs.update_run(cell.store, r.id, state="interrupted", ended_at=now_utc(),
                           error="the dynocell process died during step " + (", ".join(names) or str(r.step)))
        events.publish("run.ended", run_id=r.id, state="interrupted", error="the dynocell process died")
        fixed.append(r.id)
    if fixed:
        boots.reconcile_and_list(cell)  # the dead runs' engines (the run's boot, a lossless twin) are stopped here
    return fixed


def resolve_run(cell: Cell, ref: str) -> db_runs.RunRow:
    """A run (:class:`~dynocell.db.runs.RunRow`) by id or unique prefix (the one resolver,
    :mod:`dynocell.db.refs`). Raises NotFound."""
    row = db_runs.get_run(cell.store, refs.resolve_key(cell.store, ref, "run"))
    assert row is not None  # resolved just now; runs are never deleted
    return row


def latest_run_json(cell: Cell) -> str:
    """The newest run id as JSON (for scripts)."""
    rows = db_runs.list_runs(cell.store, limit=1)
    return json.dumps(rows[0].id if rows else None)
