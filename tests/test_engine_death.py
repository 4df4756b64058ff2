"""An engine that dies under a run (``kill -9`` of the engine, not of dynocell): the run must say so.

Before: the bench step failed with "every request of level c4 failed (see the engine log)", the
stop step then marked the dead engine's boot ``stopped`` as if it had been asked to stop, and
nothing named the death. Now the boot is ``crashed`` with the engine's exit code and the run's
error starts with "engine was killed by SIGKILL while ready".
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_faults import WORKLOAD, db_path, dynocell, leftovers, live_members, query, wait_for  # noqa: F401

REPO = Path(__file__).parent.parent


@pytest.mark.slow
def test_engine_killed_during_the_bench_is_a_crash_not_a_stop(model_pair, cli_env, isolated_home, tmp_path,
                                                               leftovers):  # noqa: F811
    db = db_path(isolated_home)
    with open(tmp_path / "run.out", "wb") as out, open(tmp_path / "run.err", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "dynocell", "run", "--no-lossless-check", "--no-profile",
                                 "-w", str(WORKLOAD)], env=cli_env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL, cwd=REPO)
    leftovers.procs.append(proc)

    def bench_running() -> bool:
        if proc.poll() is not None:
            raise AssertionError("dynocell run ended before its bench step\n" + (tmp_path / "run.err").read_text())
        try:
            return bool(query(db, "SELECT 1 FROM run_steps WHERE name = 'bench'"))
        except sqlite3.OperationalError:  # the store is not there or not migrated yet
            return False

    wait_for(bench_running, 240, "the bench step")
    boot_id, pid, pgid = query(db, "SELECT id, pid, pgid FROM boots ORDER BY started_at DESC LIMIT 1")[0]
    leftovers.groups.append(pgid)
    os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=240)  # a failed run is still a recorded run; what it recorded is checked below

    shown = json.loads(dynocell(cli_env, "show", query(db, "SELECT id FROM runs")[0][0], "--json").stdout)
    run, boot = shown["run"], shown["boot"]["boot"]
    assert run["state"] == "failed", run
    assert (run["error"] or "").startswith("engine was killed by SIGKILL while ready"), run["error"]
    assert boot["id"] == boot_id and boot["state"] == "crashed" and boot["exit_code"] == -signal.SIGKILL, boot
    assert "engine was killed by SIGKILL" in (tmp_path / "run.out").read_text() + (tmp_path / "run.err").read_text()
    assert not live_members(pid, pgid), "the dead engine's group left processes behind"
    # `show BOOT` says how it ended (before: only "failure signature: unknown Unknown failure")
    assert "ended: the engine was killed by SIGKILL" in dynocell(cli_env, "show", boot_id).stdout
