"""Boot from the CLI / web: start a detached or foreground supervisor and wait for ready, failure or
the supervisor's death, saying which.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from typing import Any

from dynocell.db import boots as db_boots
from dynocell.engine.config import trust_warning
from dynocell.errors import EngineError
from dynocell.runbooks.boots.live import Progress, default_boot_timeout, supervised_here, noop_progress, new_id
from dynocell.runbooks.boots.reconcile import reconcile, supervisor_alive
from dynocell.runbooks.boots.start import start_boot
from dynocell.runbooks.cell import Cell
from dynocell.settings import dynocell_child_env


def boot(
    cell: Cell,
    config_ref: str,
    *,
    detach: bool = True,
    timeout_s: float | None = None,
    progress: Progress = noop_progress,
) -> str:
    """Boot a config and return the boot id once it is ready (raises EngineError on failure).

    ``detach=True`` hands supervision to a separate supervisor process
    (``python -m dynocell.runbooks.supervise``) that outlives this call;
    ``detach=False`` supervises in this process (the caller then watches and
    stops it, e.g. ``dynocell boot`` in the foreground).
    """
    from dynocell.runbooks.configs import resolve_config

    cfg, config_hash = resolve_config(cell, config_ref)
    warning = trust_warning(cfg)
    if warning:
        progress(warning, {"warning": warning})
    if not detach:
        live = start_boot(cell, cfg, config_hash, timeout_s=timeout_s, progress=progress)
        supervised_here[live.boot_id] = live
        return live.boot_id
    boot_id = new_id()
    timeout = timeout_s or default_boot_timeout(cell.settings, cfg.engine)
    # -P (Python >= 3.11, as dynocell needs) and the boot directory as cwd: a module planted where
    # the operator runs `dynocell boot` is never imported by the supervisor (nor, see the supervisor,
    # by the engine)
    argv = [sys.executable, "-P", "-m", "dynocell.runbooks.supervise", config_hash, "--boot-id", boot_id,
            "--timeout", str(timeout)]
    log = cell.settings.boots_dir / boot_id
    log.mkdir(parents=True, exist_ok=True)
    with open(log / "supervisor.log", "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, cwd=log, env=dynocell_child_env(cell.settings))
    # A long-lived caller (web panel, TUI) is the supervisor's parent: reap it when it exits,
    # or every stopped detached boot leaves a zombie behind until the next Popen.
    threading.Thread(target=proc.wait, name=f"reap-supervisor-{boot_id}", daemon=True).start()
    return wait_for_boot(cell, boot_id, timeout_s=timeout, supervisor=proc, progress=progress)


#: How often a wait on a boot reads its row and checks its supervisor (s).
WAIT_POLL_S = 0.2
#: Beyond the boot timeout, how long a wait gives the supervisor to record the end itself (s):
#: its own start, the stop discipline (grace + SIGKILL wait) and a margin.
WAIT_SLACK_S = 30.0


def wait_for_boot(
    cell: Cell,
    boot_id: str,
    *,
    timeout_s: float,
    supervisor: subprocess.Popen[bytes] | None = None,
    progress: Progress = noop_progress,
) -> str:
    """Wait until boot ``boot_id`` (supervised by another process) is ``ready``; returns its id.

    Each poll (:data:`WAIT_POLL_S`) reads the row, reports new phases, and
    checks the supervisor with :func:`supervisor_alive` (``supervisor``, the
    Popen when this process started it, is checked before the row exists).
    Raises EngineError when the boot ends (``failed`` …, with its reason); when
    the supervisor dies first (the row is reconciled, the engine stopped — so
    within a poll or two of the death); and when the supervisor's own timeout
    (``timeout_s``, honoured by the supervisor, model making included) plus
    :data:`WAIT_SLACK_S` has passed: the supervisor is then asked to stop
    (SIGTERM) and the error says either that the boot was stopped or, if it
    still has not ended, plainly that it goes on in the background and how to
    stop it — never "failed" while it runs.
    """
    seen_phases: set[str] = set()
    log = cell.settings.boots_dir / boot_id / "supervisor.log"
    grace = cell.settings.stop_grace_s
    deadline = time.monotonic() + timeout_s + grace + WAIT_SLACK_S
    row: db_boots.BootRow | None = None
    while time.monotonic() < deadline:
        row = db_boots.get_boot(cell.store, boot_id)
        if row:
            for ev in db_boots.events(cell.store, boot_id):
                if ev.kind == "phase" and ev.name not in seen_phases:
                    seen_phases.add(ev.name)
                    progress(f"{ev.offset_s:7.1f} s  {ev.name}", {"phase": ev.name, "boot_id": boot_id})
            _raise_if_ended(row)
            if row.state == "ready":
                return boot_id
            if not supervisor_alive(row):
                _supervisor_died(cell, boot_id)
        elif supervisor is not None and supervisor.poll() is not None:
            if db_boots.get_boot(cell.store, boot_id):
                continue  # it recorded the boot just before exiting: read it
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise EngineError(f"the supervisor process exited ({supervisor.returncode}) before recording the boot",
                              tail.strip().splitlines()[-1] if tail.strip() else None)
        time.sleep(WAIT_POLL_S)
    return _timed_out(cell, boot_id, timeout_s, supervisor)


def _raise_if_ended(row: db_boots.BootRow) -> None:
    if row.state in db_boots.TERMINAL_STATES:
        det = row.failure_detail or {}
        raise EngineError(
            f"boot {row.id} {row.state}: {det.get('reason') or row.failure_signature}"
            + (f" — {row.failure_signature}: {det.get('title')}" if det.get("title") else ""),
            det.get("hint") or f"see `dynocell logs {row.id}`",
        )


def _supervisor_died(cell: Cell, boot_id: str) -> None:
    """The supervisor of a live-looking boot is gone: settle the row (reconcile) and raise."""
    row = db_boots.get_boot(cell.store, boot_id)
    if row is None or row.state == "ready":
        return
    _raise_if_ended(row)  # it recorded the end just before exiting
    settled = reconcile(cell, row)
    raise EngineError(
        f"boot {boot_id}: its supervisor (pid {row.supervisor_pid}) died while it was "
        f"{row.state}; the boot is now {settled['state']}"
        + (" (its engine was stopped)" if settled["state"] == "stopped" else ""),
        f"see `dynocell logs {boot_id}` and {cell.settings.boots_dir / boot_id / 'supervisor.log'}",
    )


def _timed_out(cell: Cell, boot_id: str, timeout_s: float, supervisor: subprocess.Popen[bytes] | None) -> str:
    """The wait outlived the supervisor's own timeout: ask it to stop, then say how the boot ended."""
    row = db_boots.get_boot(cell.store, boot_id)
    pid = row.supervisor_pid if row else (supervisor.pid if supervisor is not None else None)
    if row is None or supervisor_alive(row) or (supervisor is not None and supervisor.poll() is None):
        if pid:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + cell.settings.stop_grace_s + WAIT_SLACK_S
        while time.monotonic() < deadline:
            row = db_boots.get_boot(cell.store, boot_id)
            gone = (row is not None and not supervisor_alive(row)) or (
                supervisor is not None and supervisor.poll() is not None)
            if (row and row.state not in db_boots.LIVE_STATES) or gone:
                break
            time.sleep(WAIT_POLL_S)
    stored = db_boots.get_boot(cell.store, boot_id)
    end: dict[str, Any] | None = stored.to_dict() if stored else None
    if stored and stored.state in db_boots.LIVE_STATES and not supervisor_alive(stored):
        end = reconcile(cell, stored)
    if end is None or end["state"] not in db_boots.LIVE_STATES:
        raise EngineError(f"boot {boot_id} timed out after {timeout_s:.0f} s"
                          + (f" and was {end['state']}" if end else "; no engine was started"),
                          f"see `dynocell logs {boot_id}`; give a longer --timeout if the engine is slow")
    if end["state"] == "ready":
        return boot_id
    raise EngineError(
        f"boot {boot_id} is not ready after {timeout_s:.0f} s and still running in the background "
        f"({end['state']}, supervisor pid {end['supervisor_pid']})",
        f"stop it with `dynocell stop {boot_id}`, or follow it with `dynocell ps` / `dynocell logs {boot_id} -f`",
    )
