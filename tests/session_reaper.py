"""The test session's process sweep: nothing a test started outlives the run, however the run ends.

Every pytest session of this suite (the controller, when pytest-xdist runs workers) makes one private
temporary directory, the *session root*, and exports it as ``TMPDIR`` and as :data:`SESSION_ENV` before
any test or worker starts (``tests/conftest.py``). Every process a test starts inherits them — test
engines (``tests/engines/``), reference engines, the servers of ``tests/servers/``, ``dynocell``
subprocesses, their supervisors — and engines spawned by dynocell keep ``TMPDIR`` too
(``dynocell.settings.child_base_env``). A process is the session's when ``/proc/PID/environ`` (its
environment at exec, psutil ``Process.environ()``) carries the root in either variable.

:func:`sweep` stops those processes: SIGTERM, then SIGKILL to what is left after the grace. The session
sweeps at its end (``pytest_unconfigure``), and this module, run as a detached process
(``python tests/session_reaper.py PID CREATE_TIME ROOT``), waits for the session's pytest to be gone —
a ``kill -9`` of pytest included — and sweeps then: a SIGTERM-ignoring stand-in engine is not left with
parent 1 (issue 38).
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import suppress

import psutil

#: The variable naming the session root (TMPDIR carries it too, for children given a trimmed environment).
SESSION_ENV = "DYNOCELL_TEST_SESSION"


def session_processes(root: str) -> list[psutil.Process]:
    """Processes (of any parent) whose environment at exec names ``root`` as :data:`SESSION_ENV` or
    ``TMPDIR``; this process excluded. Processes that cannot be read (another user's) are skipped."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        try:
            env = proc.environ()
            if root in (env.get(SESSION_ENV), env.get("TMPDIR")) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
            continue
    return found


def sweep(root: str, grace_s: float = 5.0) -> list[str]:
    """Stop every process of the session ``root``: SIGTERM, ``grace_s`` to exit, then SIGKILL.

    Returns ``"PID CMDLINE"`` of each process found (for the session's stderr: a leak is seen)."""
    procs = session_processes(root)
    names = []
    for proc in procs:
        with suppress(psutil.Error):
            names.append(f"{proc.pid} {' '.join(proc.cmdline())[:200]}")
        with suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with suppress(psutil.Error):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return names


def _session_alive(pid: int, create_time: float) -> bool:
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - create_time) < 0.01 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def main(argv: list[str]) -> int:
    """``PID CREATE_TIME ROOT``: wait (polling once a second) until pytest ``PID`` is gone, then sweep."""
    pid, create_time, root = int(argv[0]), float(argv[1]), argv[2]
    while _session_alive(pid, create_time):
        time.sleep(1.0)
    for name in sweep(root):
        print(f"[dynocell tests] reaper: stopped {name}", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
