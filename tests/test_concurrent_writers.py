"""Concurrent writers (issue 12, item 3): the CLI, the web panel and the TUI writing to one SQLite
store at once, while a main job runs — no "database is locked" reaches anyone, no write is lost.

Processes, all started together on one data directory:

1. the CLI: the real Typer app called 500 times in one process (every 5th a note, the others move a
   label between two configs: a label row each) — tests/concurrent_writers.py ``cli``;
2. the web panel: a real ``dynocell web`` (uvicorn) on 127.0.0.1, written to by a client process
   through its HTTP API (500 ``POST /api/notes`` in an anonymous loopback session with its CSRF
   token) — ``web``;
3. the TUI path: the runbooks calls the dashboard's keys make — boot a (fake) engine detached,
   500 health checks (each a stored verdict) with the dashboard's poll in between, stop — ``tui``;
4. ``dynocell run`` on the reference engine (boot, health, bench, acceptance, profile, stop: every
   step and row written as it goes).

Afterwards every write is counted in the store.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

HERE = Path(__file__).parent
REPO = HERE.parent
WRITERS = HERE / "concurrent_writers.py"
WORKLOAD = HERE / "data" / "experiments" / "tiny-workload.toml"
FAKE_ENGINE = HERE / "engines" / "fake_engine.py"
N = 500

pytestmark = pytest.mark.slow


def dynocell(env, *args, timeout=120):
    proc = subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, f"dynocell {' '.join(args)} → {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def count(db: Path, sql: str, *params) -> int:
    import sqlite3

    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return int(con.execute(sql, params).fetchone()[0])
    finally:
        con.close()


@pytest.mark.timeout(1200)  # 90 s quiet; 600 s was reached once beside a parallel suite
def test_cli_web_tui_and_a_main_job_write_one_store_at_once(model_pair, cli_env, isolated_home, tmp_path):
    env = dict(cli_env, DYNOCELL_STOP_GRACE_S="10")
    db = isolated_home / "dynocell.db"
    config_hash = json.loads(dynocell(env, "config", "add", str(REPO / "examples" / "tiny.toml"),
                                      "--json").stdout)["hash"]
    cfg_a, cfg_b = tmp_path / "moving-a.toml", tmp_path / "moving-b.toml"
    for path, ctx in ((cfg_a, 1024), (cfg_b, 2048)):
        path.write_text(f'engine = "reference"\nmodel_path = "dynocell:tiny"\n\n[memory]\ncontext_length = {ctx}\n')
    # The TUI's engine: the fake SGLang engine behind a shim interpreter (fast to boot, cheap to probe).
    model = tmp_path / "model"
    model.mkdir()
    fake_cfg = tmp_path / "fake.toml"
    fake_cfg.write_text(f'engine = "sglang"\nmodel_path = "{model}"\n\n[meta]\nname = "fake"\n')
    dynocell(env, "config", "add", str(fake_cfg))
    shim = tmp_path / "fake-python"
    shim.write_text(f"""#!{sys.executable}
import os, sys
rest = sys.argv[3:]
port = rest[rest.index("--port") + 1]
os.execv(sys.executable, [sys.executable, {str(FAKE_ENGINE)!r}, "--port", port, "--mode", "graceful",
                          "--model-path", rest[rest.index("--model-path") + 1]])
""")
    shim.chmod(0o755)

    procs: dict[str, subprocess.Popen] = {}
    logs = tmp_path / "logs"
    logs.mkdir()

    def start(name: str, argv: list[str], penv: dict[str, str]) -> None:
        with open(logs / f"{name}.out", "wb") as out, open(logs / f"{name}.err", "wb") as err:
            procs[name] = subprocess.Popen(argv, env=penv, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO)

    port = free_port()
    try:
        start("web-panel", [sys.executable, "-m", "dynocell", "web", "--port", str(port)], env)
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert procs["web-panel"].poll() is None, (logs / "web-panel.err").read_text()
            assert time.monotonic() < deadline, "the web panel did not come up"
            time.sleep(0.2)

        t0 = time.monotonic()
        start("main-job", [sys.executable, "-m", "dynocell", "run", "--no-lossless-check", "-w", str(WORKLOAD),
                           "--json"], env)
        start("cli", [sys.executable, str(WRITERS), "cli", str(N), str(logs / "cli.json"), str(cfg_a), str(cfg_b)], env)
        login = re.search(r"http://127\.0\.0\.1:\d+/\?token=\S+", (logs / "web-panel.err").read_text()).group(0)
        start("web", [sys.executable, str(WRITERS), "web", str(N), str(logs / "web.json"), login, config_hash], env)
        start("tui", [sys.executable, str(WRITERS), "tui", str(N), str(logs / "tui.json"), "fake"],
              dict(env, DYNOCELL_ENGINE_PYTHON=str(shim), DYNOCELL_STOP_GRACE_S="2"))
        for name in ("cli", "web", "tui", "main-job"):
            procs[name].wait(timeout=580 - (time.monotonic() - t0))
        wall = time.monotonic() - t0
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    texts = {n: (logs / f"{n}.out").read_text(errors="replace") + (logs / f"{n}.err").read_text(errors="replace")
             for n in procs}
    for name in ("cli", "web", "tui"):
        assert procs[name].returncode == 0, f"{name} writer exited {procs[name].returncode}:\n{texts[name][-3000:]}"
    summaries = {n: json.loads((logs / f"{n}.json").read_text()) for n in ("cli", "web", "tui")}
    run_out = json.loads((logs / "main-job.out").read_text())

    # What the store holds, per writer.
    found = {
        "cli": count(db, "SELECT count(*) FROM notes WHERE text LIKE 'cli %'")
        + count(db, "SELECT count(*) FROM config_labels WHERE name = 'cli-moving'"),
        "web": count(db, "SELECT count(*) FROM notes WHERE text LIKE 'web %'"),
        "tui": count(db, "SELECT count(*) FROM health_checks WHERE boot_id = ?", summaries["tui"]["boot_id"]),
    }
    distinct = count(db, "SELECT count(DISTINCT text) FROM notes")
    locked = {n: s["locked"] for n, s in summaries.items()}
    locked_in_output = {n: t.lower().count("database is locked") for n, t in texts.items()}
    figures = {n: {"writes": s["writes"], "ok": s["ok"], "stored": found[n], "lost": s["writes"] - found[n],
                   "locked": s["locked"], "seconds": s["seconds"]} for n, s in summaries.items()}
    figures["main-job"] = {"state": run_out["run"]["state"], "bench_rows": len(run_out["bench"]),
                           "steps": len(run_out["steps"])}
    print(f"\nconcurrent writers: wall {wall:.1f} s, {json.dumps(figures)}")

    assert locked == {"cli": 0, "web": 0, "tui": 0} and not any(locked_in_output.values()), \
        (locked, locked_in_output)
    for name, s in summaries.items():
        assert not s["errors"], f"{name}: {s['errors'][:5]}"
        assert s["ok"] == N and found[name] == N, (name, figures[name])
    assert distinct == N + N // 5, "every note is stored exactly once"
    assert summaries["tui"]["verdicts"] == {"healthy": N} and summaries["tui"]["final_state"] == "stopped"
    assert procs["main-job"].returncode == 0, texts["main-job"][-3000:]
    assert run_out["run"]["state"] == "completed" and run_out["bench"] and run_out["curves"]
    assert procs["web-panel"].returncode is not None  # terminated above
    from tests.web_fill import live_children

    left = live_children()
    assert not left, f"processes left behind: {left}"



def test_boot_transition_is_a_compare_and_set_between_two_writers(backend_settings):
    """Two writers (two engines on one store, as two processes have) finish the same boot: the one
    that read ``ready`` first but writes second must lose — a read-then-write let both win (two
    state events, the first winner's stop detail overwritten). On SQLite and on PostgreSQL."""
    from sqlalchemy import event

    from dynocell.db import boots as db_boots
    from dynocell.db.session import Store
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config

    settings = backend_settings
    cell = open_cell(settings)
    config_hash = add_config(cell, REPO / "examples" / "tiny.toml", None).hash
    db_boots.create_boot(cell.store, id="race", config_hash=config_hash, engine="reference", hostname="h",
                         host="127.0.0.1", argv="", env={}, state="ready", log_path="/dev/null")
    other = Store(settings.db_url)  # a second writer with its own connections
    raced = []

    def other_writer_first(conn, cursor, statement, params, context, executemany):
        if statement.lstrip().upper().startswith("UPDATE BOOTS") and not raced:
            raced.append(db_boots.transition(other, "race", ("ready",), "stopped", stop_how="other"))

    event.listen(cell.store.engine, "before_cursor_execute", other_writer_first)
    try:
        won = db_boots.transition(cell.store, "race", ("ready",), "stopped", stop_how="first")
    finally:
        event.remove(cell.store.engine, "before_cursor_execute", other_writer_first)
        other.engine.dispose()
    assert raced == [True] and won is False
    row = db_boots.get_boot(cell.store, "race")
    assert row.state == "stopped" and row.stop_how == "other"
    assert [e.name for e in db_boots.events(cell.store, "race") if e.kind == "state"] == ["stopped"]
