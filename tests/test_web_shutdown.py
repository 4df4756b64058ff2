"""`dynocell web` ended (SIGTERM, Ctrl-C) while a run it started is in flight: the run is recorded
`interrupted` and its engine stopped before the panel exits. Before, the panel exited at once, the run
stayed `running` and its engine up until a later command reconciled them (newcomer pass).

The real console script, the real reference engine, real HTTP on 127.0.0.1; the store is read directly
afterwards, so no other dynocell command reconciles anything first."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import psutil

from tests.test_web_fuzz import free_port

REPO = Path(__file__).resolve().parents[1]


def _rows(db: Path, sql: str) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(db)) as conn:
        return conn.execute(sql).fetchall()


def _wait(pred, timeout: float, what: str):  # noqa: ANN001, ANN202
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_panel_told_to_end_stops_the_engine_of_its_running_job(model_pair, cli_env, isolated_home):
    db = isolated_home / "dynocell.db"
    subprocess.run([sys.executable, "-m", "dynocell", "config", "add", str(REPO / "examples" / "tiny-plain.toml")],
                   env=cli_env, check=True, capture_output=True, timeout=120)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "dynocell", "web", "--port", str(port)], env=cli_env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    lines: list[str] = []
    threading.Thread(target=lambda: lines.extend(proc.stderr), daemon=True).start()
    engine = None
    try:
        login = _wait(lambda: next((m.group(1) for ln in list(lines)
                                    if (m := re.search(r"(http://127\.0\.0\.1:\d+/\?token=\S+)", ln))), None),
                      120, "the login URL")
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as web:
            _wait(lambda: web.get(login, follow_redirects=True).status_code == 200, 60, "the panel")
            csrf = re.search(r'name="csrf_token" value="([^"]+)"', web.get("/configs").text).group(1)
            assert web.post("/actions/run", data={"csrf_token": csrf, "config": "tiny-plain"}).status_code == 303
        boot_id, pid = _wait(lambda: next(((b, p) for b, s, p in _rows(db, "SELECT id, state, pid FROM boots")
                                           if s == "ready"), None), 180, "the run's boot to be ready")
        engine = psutil.Process(pid)
        run_id = _rows(db, "SELECT id FROM runs")[0][0]

        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=180)
        assert _rows(db, f"SELECT state FROM runs WHERE id = '{run_id}'") == [("interrupted",)], "".join(lines)
        assert _rows(db, f"SELECT state FROM boots WHERE id = '{boot_id}'") == [("stopped",)]
        assert not engine.is_running() or engine.status() == psutil.STATUS_ZOMBIE, "the engine was left running"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        if engine is not None and engine.is_running():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(os.getpgid(engine.pid), signal.SIGKILL)
