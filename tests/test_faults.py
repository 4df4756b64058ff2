"""Faults (issue 12, item 2): what dynocell leaves behind when things break under it.

- ``kill -9`` of ``dynocell run`` (the real CLI on the reference engine) in each step of the
  main job: boot, health, bench, acceptance, profile, stop. A fault point
  (tests/fault_points.py) pauses the process right after a known row is written, so the
  step in flight is certain; the test snapshots every row of the store, SIGKILLs the
  dynocell process (the engine runs in its own session and survives it), then "restarts":
  the next ``dynocell runs`` / ``show`` / ``ps`` must keep every row, mark the run and the
  step ``interrupted`` and stop the orphaned engine (nothing of the boot's process group
  may survive).
- Disk full while the engine writes a profile trace (a file-size limit on the engine
  process): the profile step fails with a clear error, every other row is intact.
- The engine's port taken by another process between pick and bind.
- An engine that closes connections mid-stream; a ``/metrics`` endpoint answering garbage.
- A store on a read-only path: one ``Error:`` line naming the path and the fix, exit 2.

Every test checks at its end that it left no process behind.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).parent
REPO = HERE.parent
FAULT_POINTS = HERE / "fault_points.py"
WORKLOAD = HERE / "data" / "experiments" / "tiny-workload.toml"  # 16-token outputs: a main job in ~20 s
FAKE_STREAM = HERE / "servers" / "fake_stream.py"
FAKE_ENGINE = HERE / "engines" / "fake_engine.py"


# ---------------------------------------------------------------- helpers

def dynocell(env: dict[str, str], *args: str, timeout: float = 180, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if check and proc.returncode != 0:
        raise AssertionError(f"dynocell {' '.join(args)} → {proc.returncode}\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def wait_for(pred, timeout: float, what: str, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


def db_path(home: Path) -> Path:
    return home / "dynocell.db"


def query(db: Path, sql: str, *params) -> list[tuple]:
    """A read-only query on the store (a separate sqlite3 connection, as another process would)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        return con.execute(sql, params).fetchall()
    finally:
        con.close()


def all_rows(db: Path) -> dict[str, set[tuple]]:
    """Every row's primary key, by table (the derived full-text index of the runbooks left out)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        tables = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                            "AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'runbook_fts%'")]
        out = {}
        for t in tables:
            pk = [r[1] for r in sorted(con.execute(f'PRAGMA table_info("{t}")'), key=lambda r: r[5]) if r[5]]
            cols = ", ".join(f'"{c}"' for c in pk) if pk else "rowid"
            out[t] = set(con.execute(f'SELECT {cols} FROM "{t}"').fetchall())
        return out
    finally:
        con.close()


def live_members(pid: int | None, pgid: int | None) -> list[psutil.Process]:
    """Live (non-zombie) processes of an engine: its main pid and every member of its process group."""
    procs: dict[int, psutil.Process] = {}
    if pid:
        with contextlib.suppress(psutil.NoSuchProcess):
            procs[pid] = psutil.Process(pid)
    if pgid:
        for p in psutil.process_iter():
            try:
                if os.getpgid(p.pid) == pgid:
                    procs[p.pid] = p
            except (ProcessLookupError, PermissionError, psutil.NoSuchProcess):
                continue
    alive = []
    for p in procs.values():
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def my_live_children() -> list[psutil.Process]:
    from tests.web_fill import live_children

    return live_children()


class Leftovers:
    """Kills (at teardown) whatever a test registered and failed to see stopped; reports it."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []
        self.groups: list[int] = []

    def cleanup(self) -> list[str]:
        found = []
        for pgid in self.groups:
            for p in live_members(None, pgid):
                found.append(f"pid {p.pid} of group {pgid}")
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
        for proc in self.procs:
            if proc.poll() is None:
                found.append(f"pid {proc.pid} {proc.args!r:.80}")
                proc.kill()
            proc.wait(timeout=30)
        return found


@pytest.fixture
def leftovers():
    lo = Leftovers()
    yield lo
    found = lo.cleanup()
    assert not found, f"processes left behind: {found}"
    assert not my_live_children(), f"children left behind: {my_live_children()}"


# ---------------------------------------------------------------- kill -9 during each step of the main job

KILL_POINTS = {
    # step in flight: the fault point (after this call returns, the dynocell process pauses)
    "boot": "dynocell.db.boots:update_boot:pid",            # engine spawned and loading, boot `starting`
    "health": "dynocell.db.boots:add_health",               # verdict stored, canary golden not yet
    "bench": "dynocell.db.runs:add_bench",                  # first level stored
    "acceptance": "dynocell.db.runs:add_curve",             # first class's curve stored, second in flight
    "profile": "dynocell.db.runs:create_profile",           # profile row written, window about to open
    "stop": "dynocell.runbooks.events:publish:new=stopping",  # boot `stopping`, engine not yet signalled
}


def _run_paused_at(step: str, cli_env: dict, tmp_path, leftovers) -> tuple[dict, subprocess.Popen]:
    """Start `dynocell run` (the fault-point wrapper) and wait until it pauses at ``step``'s fault point;
    returns (its environment, its process). Fails the test if it exits before getting there."""
    env = dict(cli_env, DYNOCELL_FAULT_PAUSE=KILL_POINTS[step], DYNOCELL_FAULT_MARKER=str(tmp_path / "paused"),
               DYNOCELL_STOP_GRACE_S="10")
    with open(tmp_path / "run.out", "wb") as out, open(tmp_path / "run.err", "wb") as err:
        proc = subprocess.Popen([sys.executable, str(FAULT_POINTS), "run", "--no-lossless-check", "-w", str(WORKLOAD)],
                                env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO)
    leftovers.procs.append(proc)

    def paused() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"dynocell run exited ({proc.returncode}) before the {step} fault point\n"
                                 + (tmp_path / "run.err").read_text()[-3000:])
        return (tmp_path / "paused").exists()

    wait_for(paused, 240, f"the {step} fault point")
    return env, proc


@pytest.mark.slow
@pytest.mark.parametrize("step", list(KILL_POINTS))
def test_kill_9_during_main_job_step(step, model_pair, cli_env, isolated_home, tmp_path, leftovers):
    env, proc = _run_paused_at(step, cli_env, tmp_path, leftovers)
    db = db_path(isolated_home)
    run_id, run_state = query(db, "SELECT id, state FROM runs ORDER BY started_at DESC LIMIT 1")[0]
    in_flight = query(db, "SELECT name FROM run_steps WHERE run_id = ? AND state = 'running'", run_id)
    assert run_state == "running" and in_flight == [(step,)], (run_state, in_flight)
    boot_id, pid, pgid = query(db, "SELECT id, pid, pgid FROM boots ORDER BY started_at DESC LIMIT 1")[0]
    leftovers.groups.append(pgid)
    assert live_members(pid, pgid), "the engine must be running when dynocell is killed"
    before = all_rows(db)

    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait(timeout=30) == -signal.SIGKILL
    assert live_members(pid, pgid), "the engine runs in its own session: it survives kill -9 of dynocell"

    # Restart: the next command (here `dynocell show RUN`) reconciles the store with reality.
    shown = json.loads(dynocell(env, "show", run_id, "--json").stdout)

    after = all_rows(db)
    for table, keys in before.items():
        missing = keys - after.get(table, set())
        assert not missing, f"{table}: rows written before the kill are gone: {sorted(missing)[:5]}"

    run = shown["run"]
    assert run["state"] == "interrupted" and step in (run["error"] or ""), run
    steps = {s["name"]: s for s in shown["steps"]}
    assert steps[step]["state"] == "interrupted" and "died" in steps[step]["error"], steps[step]
    assert not [s for s in shown["steps"] if s["state"] == "running"]
    assert all(s["state"] in ("completed", "skipped") for s in shown["steps"] if s["name"] != step), shown["steps"]
    if step == "profile":
        assert [p["state"] for p in query_profiles(db, run_id)] == ["failed"]

    boot = shown["boot"]["boot"]
    assert boot["id"] == boot_id and boot["state"] == "stopped", boot
    assert "supervisor" in (boot.get("failure_detail") or {}).get("reason", ""), boot
    assert not live_members(pid, pgid), "the engine of the killed run was left running (orphaned)"
    assert query(db, "SELECT id FROM boots WHERE state IN ('starting', 'ready', 'stopping')") == []


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM], ids=["SIGHUP", "SIGTERM"])
def test_a_hangup_or_term_of_dynocell_run_stops_its_engine_before_it_exits(sig, model_pair, cli_env, isolated_home,
                                                                         tmp_path, leftovers):
    """A closed terminal or a dropped SSH session sends SIGHUP: its default ended `dynocell run` at once, the run
    left `running` and the engine up until a later command reconciled them (newcomer pass). Like SIGTERM
    (`timeout`, `kill`) and Ctrl-C it now ends the run `interrupted` with its engine stopped — read straight from
    the store, before any other dynocell command could reconcile anything."""
    env, proc = _run_paused_at("bench", cli_env, tmp_path, leftovers)
    db = db_path(isolated_home)
    run_id = query(db, "SELECT id FROM runs ORDER BY started_at DESC LIMIT 1")[0][0]
    boot_id, pid, pgid = query(db, "SELECT id, pid, pgid FROM boots ORDER BY started_at DESC LIMIT 1")[0]
    leftovers.groups.append(pgid)
    assert live_members(pid, pgid), "the engine must be running when dynocell gets the signal"

    os.kill(proc.pid, sig)
    assert proc.wait(timeout=120) != 0
    assert query(db, "SELECT state FROM runs WHERE id = ?", run_id) == [("interrupted",)]
    assert query(db, "SELECT state FROM run_steps WHERE run_id = ? AND name = 'bench'", run_id) == [("interrupted",)]
    assert query(db, "SELECT state FROM boots WHERE id = ?", boot_id) == [("stopped",)]
    assert not live_members(pid, pgid), "the engine of the run was left running"


def query_profiles(db: Path, run_id: str) -> list[dict]:
    rows = query(db, "SELECT state, error FROM profile_runs WHERE run_id = ? ORDER BY id", run_id)
    return [{"state": s, "error": e} for s, e in rows]


# ---------------------------------------------------------------- disk full while the engine writes a trace

@pytest.mark.slow
def test_disk_full_while_writing_the_trace(model_pair, cli_env, isolated_home, tmp_path, leftovers):
    """The engine writes the trace (dynocell only reads it): it runs under a 64 KiB file-size limit
    (RLIMIT_FSIZE, SIGXFSZ ignored, so writes fail with EFBIG as on a full disk). The profile step
    fails with a clear error; every row of the other steps is intact and the run goes on to stop."""
    shim = tmp_path / "engine-python-fsize"
    shim.write_text(f"""#!{sys.executable}
import os, resource, signal, sys
resource.setrlimit(resource.RLIMIT_FSIZE, (64 * 1024, 64 * 1024))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
""")
    shim.chmod(0o755)
    env = dict(cli_env, DYNOCELL_ENGINE_PYTHON=str(shim), DYNOCELL_STOP_GRACE_S="10")
    with open(tmp_path / "run.out", "wb") as out, open(tmp_path / "run.err", "wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "dynocell", "run", "--no-lossless-check", "-w", str(WORKLOAD),
                                 "--json"], env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=REPO)
    leftovers.procs.append(proc)
    assert proc.wait(timeout=400) == 1, (tmp_path / "run.err").read_text()[-3000:]
    shown = json.loads((tmp_path / "run.out").read_text())
    leftovers.groups.append(shown["boot"]["boot"]["pgid"])

    steps = {s["name"]: s for s in shown["steps"]}
    assert steps["profile"]["state"] == "failed", steps["profile"]
    error = steps["profile"]["error"]
    assert "could not write the trace" in error and "disk full" in error, error
    assert shown["run"]["state"] == "failed" and shown["run"]["error"] == "steps failed: profile"
    prof = shown["profile"]
    assert prof["state"] == "failed" and "could not write the trace" in prof["error"], prof
    assert not list(Path(prof["trace_dir"]).glob("*.trace.json*")), "no truncated trace may be left to parse"
    # Everything before (and after) the profile step is intact.
    for name in ("boot", "health", "bench", "acceptance", "stop", "diagnose"):
        assert steps[name]["state"] == "completed", steps[name]
    assert shown["bench"] and all(b["num_failed"] == 0 for b in shown["bench"])
    assert {c["text_class"] for c in shown["curves"]} == {"prose", "repetition"}
    boot = shown["boot"]
    assert boot["boot"]["state"] == "stopped" and boot["health"][0]["verdict"] == "healthy"
    assert "Profiling failed: could not write the trace" in "\n".join(dynocell(env, "logs", boot["boot"]["id"],
                                                                                   "--tail", "400").stdout.splitlines())
    assert not live_members(boot["boot"]["pid"], boot["boot"]["pgid"])


# ---------------------------------------------------------------- engines on the SGLang adapter, faked

SHIM = """#!{python}
import os, sys
args = sys.argv[1:]
assert args[:2] == ["-m", "sglang.launch_server"], args
rest = args[2:]
def opt(name):
    return rest[rest.index(name) + 1]
kind = os.environ.get("FAULT_ENGINE", "fake_engine")
if kind == "fake_stream":
    argv = [sys.executable, {stream!r}, "--port", opt("--port")]
elif kind == "script":
    argv = [sys.executable, os.environ["FAULT_SCRIPT"], opt("--port")]
else:
    argv = [sys.executable, {engine!r}, "--port", opt("--port"), "--mode", "graceful",
            "--model-path", opt("--model-path")]
os.execv(sys.executable, argv)
"""


@pytest.fixture
def fake_sglang(tmp_path, monkeypatch):
    """Settings whose engine_python runs a fake in place of sglang.launch_server (chosen by the config's env)."""
    shim = tmp_path / "fake-python"
    shim.write_text(SHIM.format(python=sys.executable, stream=str(FAKE_STREAM), engine=str(FAKE_ENGINE)))
    shim.chmod(0o755)
    monkeypatch.setenv("DYNOCELL_ENGINE_PYTHON", str(shim))
    monkeypatch.setenv("DYNOCELL_STOP_GRACE_S", "2")
    monkeypatch.setenv("DYNOCELL_BOOT_TIMEOUT_SGLANG_S", "30")
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    return open_cell(load_settings())


def fake_config(cell, tmp_path: Path, name: str, *, port: int = 0, env: dict[str, str] | None = None):
    from dynocell.runbooks.configs import resolve_config

    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    lines = ['engine = "sglang"', f'model_path = "{model}"', f"port = {port}", "", "[env]"]
    lines += [f'{k} = "{v}"' for k, v in (env or {}).items()]
    lines += ["", "[meta]", f'name = "{name}"']
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return resolve_config(cell, str(path))


def squat(port: int) -> subprocess.Popen:
    """Another process listening on ``port`` (127.0.0.1) until its stdin closes."""
    proc = subprocess.Popen([sys.executable, "-c", "import socket, sys\n"
                             "s = socket.socket(); s.bind(('127.0.0.1', int(sys.argv[1]))); s.listen()\n"
                             "print('LISTENING', flush=True); sys.stdin.read()", str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "LISTENING"
    return proc


def release(proc: subprocess.Popen) -> None:
    proc.stdin.close()
    proc.wait(timeout=10)


# ---------------------------------------------------------------- the port taken between pick and bind

def test_port_taken_between_pick_and_bind_is_retried(fake_sglang, tmp_path, monkeypatch, leftovers):
    from dynocell.db import boots as db_boots
    from dynocell.engine.adapters import pick_free_port
    from dynocell.runbooks import boots

    cell = fake_sglang
    cfg, config_hash = fake_config(cell, tmp_path, "race")
    taken: list[int] = []

    def pick_then_lose_it(host: str = "127.0.0.1") -> int:
        port = pick_free_port(host)
        if not taken:  # the first pick: another process binds it before the engine does
            taken.append(port)
            leftovers.procs.append(squatter := squat(port))
            squatters.append(squatter)
        return port

    squatters: list[subprocess.Popen] = []
    monkeypatch.setattr(boots.start, "pick_free_port", pick_then_lose_it)  # start_boot looks it up there
    live = boots.start_boot(cell, cfg, config_hash)
    try:
        assert taken and live.spec.port != taken[0]
        row = db_boots.get_boot(cell.store, live.boot_id)
        assert row.state == "ready" and row.port == live.spec.port and f"--port {live.spec.port}" in row.argv
        notes = [e for e in db_boots.events(cell.store, live.boot_id) if e.kind == "note"]
        assert [(n.name, n.detail["port"], n.detail["new_port"]) for n in notes] == \
            [("port_retry", taken[0], live.spec.port)]
        assert "Address already in use" in "\n".join(boots.logs(cell, live.boot_id, 200))
    finally:
        boots.stop_live(cell, live)
        for s in squatters:
            release(s)
    assert db_boots.get_boot(cell.store, live.boot_id).state == "stopped"
    assert not live_members(live.supervisor.pid, live.supervisor.pgid)


def test_configured_port_taken_fails_with_a_clear_signature(fake_sglang, tmp_path, leftovers):
    from dynocell.db import boots as db_boots
    from dynocell.engine.adapters import pick_free_port
    from dynocell.errors import EngineError
    from dynocell.runbooks import boots

    cell = fake_sglang
    port = pick_free_port()
    squatter = squat(port)
    leftovers.procs.append(squatter)
    cfg, config_hash = fake_config(cell, tmp_path, "fixed-port", port=port)
    try:
        with pytest.raises(EngineError, match="port_in_use") as err:
            boots.start_boot(cell, cfg, config_hash)
    finally:
        release(squatter)
    assert "leftover engine" in (err.value.hint or "")
    row = db_boots.list_boots(cell.store)[0]
    assert row.state == "failed" and row.failure_signature == "port_in_use" and row.port == port
    assert not [e for e in db_boots.events(cell.store, row.id) if e.kind == "note"], "a set port is not retried"
    assert not live_members(row.pid, row.pgid)


# ---------------------------------------------------------------- an engine that closes connections mid-stream

CLOSING_WORKLOAD = """
name = "closing"
description = "Every other request asks the fake engine to drop the connection after 3 chunks."
seed = 3
ignore_eos = true
warmup = 0
context_margin = 8

[acceptance]
input_tokens = [32]
output_tokens = 16
requests_per_class = 1
concurrency = 1

[throughput]
input_tokens = [32]
output_tokens = 16
concurrency = [1, 2]
requests_per_level = 4

[classes.drops]
description = "Prompts for the fake engine."
material = "The quay was quiet before the ferry came in."
prompts = ["Go on with the story. #fake:close_at=3", "Go on with the story."]
"""


def test_engine_closing_connections_mid_stream(fake_sglang, tmp_path, leftovers):
    from dynocell.db import runs as db_runs
    from dynocell.runbooks import boots, run

    cell = fake_sglang
    workload = tmp_path / "closing.toml"
    workload.write_text(CLOSING_WORKLOAD)
    fake_config(cell, tmp_path, "closer", env={"FAULT_ENGINE": "fake_stream"})
    boot_id = boots.boot(cell, "closer", detach=False)
    live = boots.live_boot(boot_id)
    try:
        run_id = run.bench(cell, boot_id, workload=str(workload))
    finally:
        boots.stop_live(cell, live)
    levels = db_runs.bench_rows(cell.store, run_id)
    assert [b.concurrency for b in levels] == [1, 2], "the bench goes on to the next level"
    for b in levels:
        assert b.num_requests == 4 and b.num_failed == 2, b
        assert b.extra["failures"] == {"connection_closed": 2}, b.extra
        assert b.completion_tokens == 2 * 16 and b.output_tok_s > 0, "the good requests are measured"
    steps = {s.name: s.state for s in db_runs.steps(cell.store, run_id)}
    assert steps["bench"] == "completed"
    assert not live_members(live.supervisor.pid, live.supervisor.pgid)


# ---------------------------------------------------------------- a /metrics endpoint answering garbage

GARBAGE_ENGINE = """
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GARBAGE = open(sys.argv[0] + ".metrics", "rb").read()  # the /metrics body, written by the test


class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def _send(self, code, body, ctype="application/json"):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def do_GET(self):
        if self.path == "/metrics":
            return self._send(200, GARBAGE, "text/plain; version=0.0.4")
        if self.path == "/get_server_info":
            return self._send(200, b'{"model_path": "MODEL", "tp_size": 1}')
        return self._send(200, b"{}")


print("The server is fired up and ready to roll!", flush=True)
ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

GARBAGE = {
    "html": b"<html><body><h1>502 Bad Gateway</h1></body></html>",
    "binary": bytes(range(256)) * 4,
    "bad_value": b'# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{tp_rank="0"} lots\n',
    "bare_type": b"# HELP sglang:x x\n# TYPE ",
    "truncated": b'sglang:generation_tokens_total{model_name="m",tp_rank="0',
}


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_metrics_garbage_is_a_clear_degraded_check(kind, fake_sglang, tmp_path, leftovers):
    from dynocell.runbooks import boots

    cell = fake_sglang
    model = tmp_path / "model"
    script = tmp_path / "garbage_engine.py"
    script.write_text(GARBAGE_ENGINE.replace("MODEL", str(model)))
    (tmp_path / "garbage_engine.py.metrics").write_bytes(GARBAGE[kind])
    fake_config(cell, tmp_path, "garbage", env={"FAULT_ENGINE": "script", "FAULT_SCRIPT": str(script)})
    boot_id = boots.boot(cell, "garbage", detach=False)
    live = boots.live_boot(boot_id)
    try:
        row = boots.health(cell, boot_id)
    finally:
        boots.stop_live(cell, live)
    checks = {c["name"]: c for c in row.checks}
    assert row.verdict == "degraded" and row.failed == "progress", row
    reason = checks["progress"]["reason"]
    assert reason.isprintable() and "()" not in reason, reason
    assert reason.startswith("/metrics unparsable: not Prometheus text (") and "it starts with" in reason, reason
    assert all(checks[n]["ok"] for n in ("process", "health", "health_generate", "server_info")), checks
    assert not live_members(live.supervisor.pid, live.supervisor.pgid)


# ---------------------------------------------------------------- a store on a read-only path

@pytest.fixture
def read_only():
    """``read_only(*paths)`` makes paths unwritable for this user until the test ends.

    chmod does not stop root (CAP_DAC_OVERRIDE), so as root the paths are made immutable with
    ``chattr +i``, which stops root too; where that is refused the test is skipped (the
    ``mode=ro`` URL case does not need it)."""
    undo: list[tuple[str, list[Path]]] = []

    def make(*paths: Path) -> None:
        if os.geteuid() != 0:
            for p in paths:
                p.chmod(0o555 if p.is_dir() else 0o444)
            undo.append(("chmod", list(paths)))
            return
        try:
            res = subprocess.run(["chattr", "+i", *map(str, paths)], capture_output=True, text=True)
        except FileNotFoundError:
            pytest.skip("running as root (chmod does not stop root) and chattr is not installed")
        if res.returncode != 0:
            pytest.skip(f"running as root (chmod does not stop root) and chattr +i is refused: {res.stderr.strip()}")
        undo.append(("chattr", list(paths)))

    yield make
    for how, paths in reversed(undo):
        if how == "chattr":
            subprocess.run(["chattr", "-i", *map(str, paths)], check=True)
        else:
            for p in paths:
                p.chmod(0o755 if p.is_dir() else 0o644)


def assert_clear_error(proc: subprocess.CompletedProcess, *names: str) -> None:
    """Exit code 2, one ``Error:`` line naming one of ``names``, a ``hint:`` saying what to make writable."""
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith("Error: ") and any(n in lines[0] for n in names), proc.stderr
    assert len(lines) == 2 and lines[1].startswith("hint: ") and ("writable" in lines[1] or "mode=ro" in lines[1]), \
        proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


def test_read_only_data_directory(cli_env, tmp_path, read_only):
    home = tmp_path / "ro-home"
    home.mkdir()
    read_only(home)
    env = dict(cli_env, DYNOCELL_HOME=str(home))
    for args in (("runs",), ("config", "add", str(REPO / "examples" / "tiny.toml")), ("init",)):
        proc = dynocell(env, *args, check=False)
        assert_clear_error(proc, str(home))
    assert not (home / "dynocell.db").exists()


def test_read_only_store_file(cli_env, isolated_home, read_only):
    dynocell(cli_env, "config", "add", str(REPO / "examples" / "tiny.toml"))
    db = db_path(isolated_home)
    before = all_rows(db)
    read_only(isolated_home, *sorted(isolated_home.glob("dynocell.db*")))
    for args in (("note", "config:tiny", "written on a read-only store"),
                 ("config", "add", str(REPO / "examples" / "tiny-ngram.toml"))):
        proc = dynocell(cli_env, *args, check=False)
        assert_clear_error(proc, str(db), str(isolated_home))
    # A read works when SQLite can still open the file, else it is the same clear error.
    proc = dynocell(cli_env, "runs", check=False)
    if proc.returncode != 0:
        assert_clear_error(proc, str(db), str(isolated_home))
    assert all_rows(db) == before


def test_a_store_on_read_only_media_is_read(cli_env, tmp_path, read_only):
    """A store whose file and folder nobody may write (read-only media; here chattr +i): a WAL store's
    reader needs its -shm file, so every command failed ("cannot open the store … unable to open database
    file"). Now reading commands open it read-only (mode=ro, else immutable=1) and show what is stored;
    a write is refused naming the store and what to make writable. A copy of a real store of H200 runs
    (tests/data/sglang-0.5.17/dynocell-h200, see its README)."""
    home = tmp_path / "media"
    home.mkdir()
    real = HERE / "data" / "sglang-0.5.17" / "dynocell-h200" / "dynocell.db"
    (home / "dynocell.db").write_bytes(real.read_bytes())
    env = dict(cli_env, DYNOCELL_HOME=str(home))
    runs = json.loads(dynocell(env, "runs", "--json").stdout)  # read from a migrated copy (never migrated)
    assert "2d8a3ffa5459" in {r["id"] for r in runs}
    assert not (home / "dynocell.db-shm").exists()  # the last reader left no -shm behind

    def rows_now() -> dict[str, set[tuple]]:  # read from a copy: a reader here would leave a -shm file
        copy = tmp_path / f"copy-{len(list(tmp_path.glob('copy-*')))}.db"
        copy.write_bytes((home / "dynocell.db").read_bytes())
        return all_rows(copy)

    before = rows_now()
    read_only(home, *sorted(home.glob("dynocell.db*")))
    assert json.loads(dynocell(env, "runs", "--json").stdout) == runs
    assert "top kernels" in dynocell(env, "show", "2d8a3ffa5459").stdout
    assert len(json.loads(dynocell(env, "ps", "--all", "--json").stdout)) >= 6
    proc = dynocell(env, "note", "run:2d8a3ffa5459", "written on read-only media", check=False)
    assert_clear_error(proc, str(home / "dynocell.db"))
    assert rows_now() == before


def test_read_only_database_url(cli_env, isolated_home):
    dynocell(cli_env, "config", "add", str(REPO / "examples" / "tiny.toml"))
    db = db_path(isolated_home)
    env = dict(cli_env, DYNOCELL_DATABASE_URL=f"sqlite:///file:{db}?mode=ro&uri=true")
    assert "tiny" in dynocell(env, "config", "list").stdout, "reads work on a read-only store"
    proc = dynocell(env, "note", "config:tiny", "written through a mode=ro URL", check=False)
    assert_clear_error(proc, str(db))
    assert "mode=ro" in proc.stderr
    assert query(db, "SELECT count(*) FROM notes") == [(0,)]
