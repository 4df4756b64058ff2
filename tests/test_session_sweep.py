"""Issue 38: a test run killed mid-way leaves no process behind (``tests/session_reaper.py``).

Before: a SIGTERM-ignoring stand-in engine (``tests/engines/fake_engine.py --mode ignore_term``) started
by a test outside any supervisor ran on with parent 1 for three hours after the run was interrupted;
the session-end sweep only knew dynocell supervisors. Here a real inner pytest session starts such an
engine in its own session (``start_new_session``: no signal to pytest's group reaches it), the inner
pytest is killed with SIGKILL (nothing of it runs after), and the engine must be gone: the inner
session's detached reaper saw its pytest die and swept every process carrying the session's root.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path

import psutil

from tests.session_reaper import SESSION_ENV

ENGINES = Path(__file__).parent / "engines"

INNER = '''
import subprocess, sys, time
from pathlib import Path

def test_starts_a_stubborn_engine_and_hangs(tmp_path):
    eng = subprocess.Popen([sys.executable, {fake!r}, "--port", "0", "--mode", "ignore_term"],
                           start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    Path({pid_file!r}).write_text(str(eng.pid))
    time.sleep(3600)  # the outer test kills this session with SIGKILL long before
'''


def _wait(pred, timeout_s: float, what: str) -> None:
    """Poll ``pred`` every 0.1 s; fail naming ``what`` when ``timeout_s`` passes first (a bound on a wait
    for an event, not on how fast anything runs)."""
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_a_run_killed_with_sigkill_leaves_no_test_engine_behind(tmp_path):
    pid_file = tmp_path / "engine.pid"
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_inner.py").write_text(INNER.format(fake=str(ENGINES / "fake_engine.py"), pid_file=str(pid_file)))
    # the suite's own session hooks (root, reaper, sweep), nothing else of its conftest
    (inner / "conftest.py").write_text("from tests.conftest import pytest_configure, pytest_unconfigure  # noqa\n")
    # a fresh session of its own: not this session's root, its own TMPDIR under tmp_path
    env = {k: v for k, v in os.environ.items() if k != SESSION_ENV}
    env.update(TMPDIR=str(tmp_path), PYTHONPATH=str(Path(__file__).parents[1]))
    proc = subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider",
                             "--rootdir", str(inner), str(inner / "test_inner.py")],
                            cwd=inner, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        _wait(lambda: pid_file.is_file() and pid_file.read_text().strip(), 120, "the inner test's engine")
        engine = int(pid_file.read_text())
        assert not _gone(engine)
        root = psutil.Process(engine).environ()[SESSION_ENV]
        assert root.startswith(str(tmp_path)) and root != os.environ.get(SESSION_ENV)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        # the reaper polls once a second, then SIGTERM (ignored), 5 s of grace, SIGKILL
        _wait(lambda: _gone(engine), 60, f"the SIGTERM-ignoring engine {engine} to be stopped by the reaper")
    finally:
        if proc.poll() is None:
            proc.kill()
        if pid_file.is_file():
            with suppress(psutil.Error, ValueError):
                psutil.Process(int(pid_file.read_text())).kill()
