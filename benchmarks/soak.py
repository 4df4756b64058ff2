"""Soak of the boot procedures: many boot → health → stop cycles, then full `dynocell run` jobs.

Issue 12, item 1. Bounded in count (``--cycles``, ``--runs``) and in time
(``--max-minutes``: the soak stops cleanly at the bound — between cycles, or by
interrupting the run in flight — and prints what it did). Loopback only; a
temporary data directory unless ``--home`` is given.

Part 1 — cycles. Small test engines (``tests/engines/fake_engine.py`` behind an
``engine_python`` shim, as in tests/test_boot_procedures.py) go through the
real procedures of ``dynocell.runbooks.boots`` in this process:
``start_boot`` → ``health`` → ``stop_live`` (or ``record_crash`` when the
engine dies by itself). Modes, round-robin: graceful, SIGTERM-ignoring, dying
at boot, dying after ready, spawning grandchildren (one escaping the process
group with setsid). Every ``--detached-every``-th round of the five modes
(default 10: a tenth of the cycles) takes the ``dynocell boot --detach`` path
instead: ``boots.boot(detach=True)`` (a
separate supervisor process) → ``boots.health`` → ``boots.stop`` (SIGTERM to
that supervisor, wait for the store).

Part 2 — runs. ``--runs`` × ``dynocell run`` (the console script, default
config: the reference engine on the made-locally pair; the pair is taken from
DYNOCELL_MODEL_CACHE, default ``<repo>/.cache/models``, seeded from
the package's own pair, ``dynocell/engine/reference/pair/``, for the default seed).

Figures printed at the end (measured in this one run):

- cycles (by mode and path) and runs done;
- orphan processes: every process dynocell spawned — engine and supervisor
  pids from the store rows, psutil children scans while they ran, the
  grandchildren's pid file, and a psutil scan of every process carrying this
  soak's marker in its environment — still alive at the end (pid reuse is
  ruled out with create times);
- zombies left among those processes;
- boots whose final state disagrees with reality (a terminal state whose
  engine or descendants live, a live state at the end) or with what the mode
  must produce (e.g. an engine that ignores SIGTERM recorded as a graceful stop);
- store rows missing or inconsistent (boot row, state-event chain, phase
  events, health rows per probe, log size/sha256 vs the file; per run: run row,
  every step ended, bench rows, acceptance curves, profile, its boot stopped);
- wall time.

Goal: 0 orphans, 0 zombies left, 0 wrong states, 0 lost rows; any of them makes the exit code 1.

Usage::

    python benchmarks/soak.py                                  # 1000 cycles, 20 runs, ≤ 150 min
    python benchmarks/soak.py --cycles 60 --runs 1 --json soak.json
    python benchmarks/soak.py --cycles 200 --runs 0 --detached-every 5 --max-minutes 10
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import psutil

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "engines" / "fake_engine.py"
sys.path.insert(0, str(REPO / "tests"))
from engines.shim import write_shim  # noqa: E402 - the same engine_python stand-in as the boot tests
MODES = ("graceful", "ignore_term", "die_at_boot", "die_after_ready", "grandchildren")
FAKE_MODE = {"graceful": "graceful", "ignore_term": "ignore_term", "die_at_boot": "signature",
             "die_after_ready": "die_after_ready", "grandchildren": "grandchildren"}
# What each mode must leave in the store: (state, stop_how or None = any, signature required).
EXPECTED = {
    "graceful": ("stopped", "graceful", False),
    "ignore_term": ("stopped", "killed", False),
    "die_at_boot": ("failed", None, True),
    "die_after_ready": ("crashed", None, True),
    "grandchildren": ("stopped", None, False),
}
READY_MODES = ("graceful", "ignore_term", "die_after_ready", "grandchildren")
MARK_VAR = "SOAK_MARK"
OOM_LINE = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"
RUN_STEPS = ("config", "build", "boot", "health", "bench", "acceptance", "lossless", "profile", "breakeven",
             "stop", "diagnose")


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _ts(t: datetime | None) -> float | None:
    if t is None:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).timestamp()


# ---------------------------------------------------------------- process tracking

@dataclass
class Tracked:
    pid: int
    create_time: float | None  # None: known only from a store row (bounded by ``not_after``)
    origin: str
    not_after: float | None = None  # a process with this pid created later is another one (pid reuse)
    boot: str | None = None  # the boot it belongs to, when known


class Tracker:
    """Every process the soak saw dynocell spawn, keyed by (pid, create time)."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.procs: dict[tuple[int, float | None], Tracked] = {}

    def add(self, pid: int | None, origin: str, *, not_after: float | None = None, boot: str | None = None) -> None:
        if not pid or pid == os.getpid():
            return
        if not_after is not None:
            self.procs.setdefault((pid, None), Tracked(pid, None, origin, not_after, boot))
            return
        try:
            ct = psutil.Process(pid).create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return  # already gone: nothing can leak from it
        self.procs.setdefault((pid, round(ct, 2)), Tracked(pid, ct, origin, boot=boot))

    def add_tree(self, pid: int | None, origin: str, boot: str | None = None) -> None:
        if not pid:
            return
        self.add(pid, origin, boot=boot)
        try:
            for c in psutil.Process(pid).children(recursive=True):
                self.add(c.pid, origin + " descendant", boot=boot)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass

    def alive_by_boot(self) -> dict[str, list[int]]:
        """Boot id → its tracked processes that still run (zombies excluded)."""
        out: dict[str, list[int]] = {}
        for t in self.procs.values():
            if t.boot and (p := self._match(t)) is not None:
                try:
                    if p.status() != psutil.STATUS_ZOMBIE:
                        out.setdefault(t.boot, []).append(t.pid)
                except psutil.NoSuchProcess:
                    pass
        return out

    def _match(self, t: Tracked) -> psutil.Process | None:
        try:
            p = psutil.Process(t.pid)
            ct = p.create_time()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return None
        if t.create_time is not None and abs(ct - t.create_time) > 0.05:
            return None
        if t.not_after is not None and ct > t.not_after + 1.0:
            return None
        return p

    def scan_marked(self) -> None:
        """Add every live process whose environment carries this soak's marker, and every child of
        this process (the soak spawns only through dynocell: an unreaped one is a zombie it left)."""
        for c in psutil.Process().children(recursive=True):
            self.add(c.pid, "child of the soak process")
        for p in psutil.process_iter():
            if p.pid == os.getpid():
                continue
            try:
                if p.environ().get(MARK_VAR) == self.marker:
                    self.add(p.pid, "marker scan: " + " ".join(p.cmdline())[:80])
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError):
                continue

    def leftovers(self) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(orphans: tracked processes still running, zombies: tracked processes dead but unreaped)."""
        orphans, zombies = [], []
        seen: set[int] = set()
        for t in self.procs.values():
            p = self._match(t)
            if p is None or t.pid in seen:
                continue
            seen.add(t.pid)
            try:
                status, ppid, cmd = p.status(), p.ppid(), " ".join(p.cmdline())[:120]
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                status, ppid, cmd = psutil.STATUS_ZOMBIE, None, ""
            row = {"pid": t.pid, "origin": t.origin, "status": status, "ppid": ppid, "cmdline": cmd}
            (zombies if status == psutil.STATUS_ZOMBIE else orphans).append(row)
        return orphans, zombies

    def live_now(self, pids: list[int]) -> list[int]:
        """Those of ``pids`` (tracked) that still run, not zombies."""
        out = []
        for t in self.procs.values():
            if t.pid in pids and (p := self._match(t)) is not None:
                try:
                    if p.status() != psutil.STATUS_ZOMBIE:
                        out.append(t.pid)
                except psutil.NoSuchProcess:
                    pass
        return out


# ---------------------------------------------------------------- setup

def seed_model_cache(cache: Path) -> None:
    """Find the reference pair (the packaged one for the default seed; made into ``cache`` otherwise)."""
    from dynocell.engine.reference.nets import ensure_pair

    ensure_pair(cache, progress=lambda m: print(f"  model: {m}", flush=True))


def write_configs(soak_dir: Path, marker: str, ready_delay: float) -> dict[str, Path]:
    model = soak_dir / "model"
    model.mkdir(exist_ok=True)
    oom = soak_dir / "oom.log"
    oom.write_text(OOM_LINE + "\n")
    pids = soak_dir / "grandchildren.pids"
    args = {
        "graceful": f"--ready-delay {ready_delay}",
        "ignore_term": f"--ready-delay {ready_delay}",
        "die_at_boot": f"--log-file {oom} --exit-code 1",
        "die_after_ready": f"--ready-delay {ready_delay} --die-after 1.5 --log-file {oom} --exit-code 1",
        "grandchildren": f"--ready-delay {max(ready_delay, 0.3)} --pid-file {pids}",
    }
    out = {}
    for mode in MODES:
        p = soak_dir / f"soak-{mode}.toml"
        p.write_text(f"""engine = "sglang"
model_path = "{model}"
host = "127.0.0.1"

[env]
FAKE_MODE = "{FAKE_MODE[mode]}"
FAKE_ARGS = "{args[mode]}"
{MARK_VAR} = "{marker}"

[meta]
name = "soak-{mode.replace('_', '-')}"
""")
        out[mode] = p
    return out


# ---------------------------------------------------------------- one cycle

@dataclass
class Cycle:
    n: int
    mode: str
    path: str  # in-process | detached
    boot_id: str | None = None
    health_calls: int = 0
    verdicts: list[str] = field(default_factory=list)
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)  # procedure misbehaving (errors, leaks, verdicts)
    state_issues: list[str] = field(default_factory=list)  # final state vs what the mode must produce
    row_issues: list[str] = field(default_factory=list)  # store rows missing or inconsistent
    pids: list[int] = field(default_factory=list)


def _wait(pred, timeout_s: float, interval_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(interval_s)
    return bool(pred())


CURRENT: dict[str, Any] = {"live": None}  # the in-process LiveBoot of the cycle in flight


def stop_leftovers(cell) -> int:
    """After Ctrl-C / SIGTERM: stop every boot still live in the store (the in-process one through
    its supervisor). Returns how many were stopped."""
    from dynocell.db import boots as db_boots
    from dynocell.runbooks import boots

    n = 0
    live = CURRENT.get("live")
    for row in db_boots.list_boots(cell.store, db_boots.LIVE_STATES, limit=1000):
        try:
            if live is not None and live.boot_id == row.id:
                boots.stop_live(cell, live, reason="soak interrupted")
            else:
                boots.stop(cell, row.id)
            n += 1
        except Exception as exc:  # noqa: BLE001 - keep stopping the others
            print(f"  could not stop boot {row.id}: {exc}", flush=True)
    return n


def cycle_in_process(cell, c: Cycle, cfg, config_hash: str, tracker: Tracker) -> None:
    from dynocell.errors import EngineError, UserError
    from dynocell.runbooks import boots

    c.boot_id = boots.new_id()
    try:
        live = boots.start_boot(cell, cfg, config_hash, boot_id=c.boot_id)
    except EngineError as exc:
        if c.mode != "die_at_boot":
            c.problems.append(f"boot failed unexpectedly: {exc}")
        _refuses_health(cell, c, boots, UserError)
        return
    CURRENT["live"] = live
    pid = live.supervisor.pid
    c.pids.append(pid)
    tracker.add_tree(pid, f"engine {c.mode} {c.boot_id}", c.boot_id)
    if c.mode == "die_at_boot":
        c.problems.append("an engine that dies at boot was recorded ready")
    _health(cell, c, boots)
    if c.mode == "die_after_ready":
        if not _wait(lambda: live.supervisor.poll().value in ("crashed", "failed"), 15.0):
            c.problems.append("the engine did not die within 15 s of ready")
            boots.stop_live(cell, live, reason="soak: did not die")
        else:
            boots.record_crash(cell, live)
        boots.stop(cell, c.boot_id)  # on a crashed boot: must be a no-op that returns the row
        return
    if c.mode == "grandchildren":
        _wait(lambda: _children_count(pid) >= 2, 5.0)
        time.sleep(0.1)
    tracker.add_tree(pid, f"engine {c.mode} {c.boot_id}", c.boot_id)
    c.pids.extend(_descendants(pid))
    boots.stop_live(cell, live, reason="soak cycle")


def cycle_detached(cell, c: Cycle, ref: str, tracker: Tracker) -> None:
    from dynocell.db import boots as db_boots
    from dynocell.errors import EngineError, UserError
    from dynocell.runbooks import boots

    before = {b.id for b in db_boots.list_boots(cell.store, limit=5)}
    try:
        c.boot_id = boots.boot(cell, ref, detach=True)
    except EngineError as exc:
        new = [b for b in db_boots.list_boots(cell.store, limit=5) if b.id not in before]
        c.boot_id = new[0].id if new else None
        if c.boot_id is None:
            c.row_issues.append(f"detached boot left no boot row: {exc}")
            return
        tracker.add(new[0].supervisor_pid, f"supervisor {c.mode} {c.boot_id}")
        if c.mode != "die_at_boot":
            c.problems.append(f"boot failed unexpectedly: {exc}")
        _refuses_health(cell, c, boots, UserError)
        return
    row = db_boots.get_boot(cell.store, c.boot_id)
    if row is None:
        c.row_issues.append(f"boot row {c.boot_id} missing after its boot")
        return
    tracker.add(row.supervisor_pid, f"supervisor {c.mode} {c.boot_id}")
    tracker.add_tree(row.pid, f"engine {c.mode} {c.boot_id}", c.boot_id)
    c.pids += [p for p in (row.supervisor_pid, row.pid) if p]
    if c.mode == "die_at_boot":
        c.problems.append("an engine that dies at boot was recorded ready")
    _health(cell, c, boots)
    if c.mode == "die_after_ready":
        if not _wait(lambda: getattr(db_boots.get_boot(cell.store, c.boot_id), "state", None) == "crashed", 15.0, 0.1):
            c.problems.append("the supervisor did not record the crash within 15 s")
            boots.stop(cell, c.boot_id)
        return
    if c.mode == "grandchildren":
        _wait(lambda: _children_count(row.pid) >= 2, 5.0)
        time.sleep(0.1)
    tracker.add_tree(row.pid, f"engine {c.mode} {c.boot_id}", c.boot_id)
    c.pids.extend(_descendants(row.pid))
    final = boots.stop(cell, c.boot_id)
    if final.get("state") in db_boots.LIVE_STATES:
        c.state_issues.append(f"stop returned a live state: {final.get('state')}")


def _refuses_health(cell, c: Cycle, boots, user_error) -> None:
    try:
        boots.health(cell, c.boot_id)
    except user_error:
        return
    c.problems.append("health on a failed boot did not refuse")


def _health(cell, c: Cycle, boots) -> None:
    c.health_calls += 1
    row = boots.health(cell, c.boot_id)
    c.verdicts.append(row.verdict)
    if c.mode != "die_after_ready" and row.verdict != "healthy":
        c.problems.append(f"health verdict {row.verdict} (failed: {row.failed}) on a ready engine")


def _children_count(pid: int | None) -> int:
    try:
        return len(psutil.Process(pid).children()) if pid else 0
    except psutil.NoSuchProcess:
        return 0


def _descendants(pid: int | None) -> list[int]:
    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)] if pid else []
    except psutil.NoSuchProcess:
        return []


# ---------------------------------------------------------------- store checks

def legal_chain(states: list[str]) -> bool:
    from dynocell.engine.supervisor import check_transition

    old = "starting"
    try:
        for s in states:
            check_transition(old, s)
            old = s
    except Exception:  # noqa: BLE001 - IllegalTransition or an unknown state
        return False
    return True


def check_boot_rows(cell, c: Cycle) -> None:
    """What the store must hold for one cycle's boot (fills ``c.state_issues`` and ``c.row_issues``)."""
    from dynocell.db import boots as db_boots

    if c.boot_id is None:
        c.row_issues.append("no boot id")
        return
    row = db_boots.get_boot(cell.store, c.boot_id)
    if row is None:
        c.row_issues.append(f"boot row {c.boot_id} missing")
        return
    out = c.row_issues
    state, how, needs_sig = EXPECTED[c.mode]
    if row.state != state:
        c.state_issues.append(f"state {row.state} (expected {state})")
    if how and row.stop_how != how:
        c.state_issues.append(f"stop_how {row.stop_how} (expected {how})")
    if needs_sig and (not row.failure_signature or row.failure_signature == "unknown"):
        c.state_issues.append(f"failure signature {row.failure_signature!r}")
    if row.ended_at is None:
        out.append("ended_at missing")
    if not row.pid:
        out.append("pid missing")
    evs = db_boots.events(cell.store, c.boot_id)
    chain = [e.name for e in evs if e.kind == "state"]
    if not chain or chain[-1] != row.state or not legal_chain(chain):
        out.append(f"state events {chain} do not lead to {row.state}")
    phases = [e.name for e in evs if e.kind == "phase"]
    if c.mode in READY_MODES and not {"weights_begin", "kv_cache_allocated", "ready"} <= set(phases):
        out.append(f"phase events {phases}")
    health = db_boots.health_history(cell.store, c.boot_id, limit=100)
    if len(health) != c.health_calls:
        out.append(f"{len(health)} health rows for {c.health_calls} probes")
    if row.log_size is None or not row.log_sha256:
        out.append("log size/sha256 missing")
    else:
        p = Path(row.log_path)
        data = p.read_bytes() if p.exists() else b""
        if len(data) != row.log_size or hashlib.sha256(data).hexdigest() != row.log_sha256:
            out.append(f"log digest {row.log_size} B differs from the file ({len(data)} B)")


def check_run_rows(cell, run_id: str, expect_state: str = "completed") -> list[str]:
    from dynocell.db import boots as db_boots
    from dynocell.db import runs as db_runs

    run = db_runs.get_run(cell.store, run_id)
    if run is None:
        return [f"run row {run_id} missing"]
    out = []
    if run.state != expect_state:
        out.append(f"run state {run.state} (expected {expect_state}): {run.error}")
    if run.ended_at is None:
        out.append("run ended_at missing")
    steps = db_runs.steps(cell.store, run_id)
    names = [s.name for s in steps]
    if any(s.state == "running" for s in steps):
        out.append("a step is still running")
    if len(names) != len(set(names)):
        out.append(f"duplicate steps {names}")
    need = RUN_STEPS if expect_state == "completed" else ("config", "boot", "stop")
    missing = [n for n in need if n not in names]
    if missing:
        out.append(f"steps missing: {missing}")
    if expect_state == "completed":
        bad = {s.name: s.state for s in steps if s.state not in ("completed", "skipped")}
        if bad:
            out.append(f"steps not completed: {bad}")
        bench = db_runs.bench_rows(cell.store, run_id)
        if not [b for b in bench if not b.text_class]:
            out.append("no throughput bench rows")
        if not db_runs.curves(cell.store, run_id):
            out.append("no acceptance curves")
        if not db_runs.profiles(cell.store, run_id=run_id):
            out.append("no profile row")
    boot = db_boots.get_boot(cell.store, run.boot_id) if run.boot_id else None
    if boot is None:
        out.append("run has no boot row")
    else:
        if boot.state != "stopped":
            out.append(f"run's boot is {boot.state}")
        if expect_state == "completed" and not db_boots.health_history(cell.store, boot.id, limit=5):
            out.append("run's boot has no health row")
    return out


def reality_check(cell, tracker: Tracker) -> list[dict[str, Any]]:
    """Every boot row against the processes: terminal → nothing of it runs (engine, its descendants
    seen while it ran); live at the end → wrong."""
    from dynocell.db import boots as db_boots

    wrong = []
    alive = tracker.alive_by_boot()
    for row in db_boots.list_boots(cell.store, limit=1_000_000):
        ended = _ts(row.ended_at) or time.time()
        started = _ts(row.started_at) or 0.0
        tracker.add(row.pid, f"engine of boot {row.id} (row)", not_after=ended)
        tracker.add(row.supervisor_pid, f"supervisor of boot {row.id} (row)", not_after=started + 5)
        if row.state in db_boots.LIVE_STATES:
            wrong.append({"boot": row.id, "state": row.state, "why": "live state after the soak stopped it"})
            continue
        if row.pid and _alive_before(row.pid, ended):
            wrong.append({"boot": row.id, "state": row.state, "why": f"engine pid {row.pid} still runs"})
        elif alive.get(row.id):
            wrong.append({"boot": row.id, "state": row.state,
                          "why": f"processes of its engine still run: {alive[row.id]}"})
    return wrong


def _alive_before(pid: int, not_after: float) -> bool:
    try:
        p = psutil.Process(pid)
        return p.create_time() <= not_after + 1.0 and p.status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


# ---------------------------------------------------------------- runs

def do_run(i: int, env: dict[str, str], deadline: float, tracker: Tracker, cell) -> dict[str, Any]:
    from dynocell.db import runs as db_runs

    before = {r.id for r in db_runs.list_runs(cell.store, limit=1000)}
    t0 = time.monotonic()
    log = Path(env["DYNOCELL_HOME"]) / f"soak-run-{i}.out"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "dynocell", "run"], env=env, stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    tracker.add(proc.pid, f"dynocell run #{i}")
    interrupted = False
    try:
        while proc.poll() is None:
            tracker.add_tree(proc.pid, f"dynocell run #{i}")
            if time.monotonic() > deadline and not interrupted:
                print(f"  run {i}: time bound reached, interrupting it (SIGINT)", flush=True)
                proc.send_signal(signal.SIGINT)
                interrupted = True
            time.sleep(0.5)
    except KeyboardInterrupt:
        # The soak itself is stopped: the run must stop its engine and record itself interrupted.
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise
    seconds = time.monotonic() - t0
    new = [r for r in db_runs.list_runs(cell.store, limit=1000) if r.id not in before]
    res: dict[str, Any] = {"n": i, "exit_code": proc.returncode, "seconds": round(seconds, 1),
                           "interrupted": interrupted, "run_id": new[0].id if new else None}
    if not new:
        res["problems"] = [f"no run row (exit {proc.returncode}): "
                           + log.read_text(errors="replace")[-400:].strip().replace("\n", " | ")]
        return res
    res["state"] = new[0].state
    expect = "interrupted" if interrupted else "completed"
    res["problems"] = check_run_rows(cell, new[0].id, expect)
    if interrupted and new[0].state == "completed":
        res["problems"] = check_run_rows(cell, new[0].id, "completed")  # finished before the signal landed
    if not interrupted and proc.returncode != 0:
        res["problems"].append(f"exit code {proc.returncode}")
    return res


# ---------------------------------------------------------------- main

def _fmt_s(s: float) -> str:
    return f"{int(s // 60)}m{s % 60:04.1f}s"


def one_cycle(cell: Any, n: int, detached_every: int, resolved: dict[str, Any], tracker: Tracker) -> Cycle:
    """Cycle ``n``: its mode (round-robin over MODES), in-process or, every ``detached_every``-th
    round, detached; afterwards nothing of it may be alive and its boot row must be whole."""
    mode = MODES[n % len(MODES)]
    rnd = n // len(MODES)  # rounds of the five modes; every N-th round goes detached
    detached = detached_every > 0 and rnd % detached_every == detached_every - 1
    c = Cycle(n, mode, "detached" if detached else "in-process")
    t0 = time.monotonic()
    try:
        if detached:
            cycle_detached(cell, c, f"soak-{mode.replace('_', '-')}", tracker)
        else:
            cycle_in_process(cell, c, *resolved[mode], tracker)
    except Exception as exc:  # noqa: BLE001 - a procedure error is a finding, not the end of the soak
        c.problems.append(f"{type(exc).__name__}: {exc}")
    c.seconds = time.monotonic() - t0
    # Everything of the cycle must be gone now; a detached supervisor may take a moment to
    # exit after writing the end of its boot.
    _wait(lambda pids=c.pids: not tracker.live_now(pids), 5.0 if c.path == "detached" else 1.0)
    leaked = tracker.live_now(c.pids)
    if leaked:
        c.problems.append(f"processes alive right after the cycle: {leaked}")
    check_boot_rows(cell, c)
    issues = c.problems + c.state_issues + c.row_issues
    if issues:
        print(f"  cycle {n} {mode} {c.path} boot {c.boot_id}: " + "; ".join(issues), flush=True)
    return c


def do_runs(runs: list[dict[str, Any]], asked: int, run_env: dict[str, str], deadline: float, tracker: Tracker,
            cell: Any) -> bool:
    """Up to ``asked`` full runs appended to ``runs``; True when the time bound stopped them (no time
    left for another run of the mean length, or a run was interrupted)."""
    for i in range(asked):
        left = deadline - time.monotonic()
        mean = statistics.mean(r["seconds"] for r in runs) if runs else 0.0
        if left <= 0 or (runs and left < 0.5 * mean):
            return True
        r = do_run(i, run_env, deadline, tracker, cell)
        runs.append(r)
        print(f"[runs {len(runs)}/{asked}] run {r.get('run_id')} {r.get('state')} in {r['seconds']} s"
              + (f" — problems: {'; '.join(r['problems'])}" if r.get("problems") else ""), flush=True)
        if r["interrupted"]:
            return True
    return False


def _data_home(home: Path | None) -> tuple[Path, str | None]:
    """``(data directory, the temporary directory made for it or None)``: ``home`` when given."""
    if home is None:
        tmp = tempfile.mkdtemp(prefix="dynocell-soak-")
        return Path(tmp), tmp
    home = home.expanduser().resolve()
    home.mkdir(parents=True, exist_ok=True)
    return home, None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cycles", type=int, default=1000, help="boot → health → stop cycles of test engines")
    ap.add_argument("--runs", type=int, default=20, help="full `dynocell run` jobs on the reference engine")
    ap.add_argument("--max-minutes", type=float, default=150.0, help="time bound of the whole soak")
    ap.add_argument("--home", type=Path, default=None, help="data directory (default: a temporary one, removed)")
    ap.add_argument("--detached-every", type=int, default=10,
                    help="every N-th round of the five modes takes the detached-supervisor path (0: never)")
    ap.add_argument("--grace", type=float, default=0.5, help="stop grace (DYNOCELL_STOP_GRACE_S) of the cycles, s")
    ap.add_argument("--ready-delay", type=float, default=0.05, help="test engines' delay before ready, s")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures as JSON here")
    ap.add_argument("--keep", action="store_true", help="keep the temporary data directory")
    args = ap.parse_args()

    t_start = time.monotonic()
    deadline = t_start + args.max_minutes * 60
    marker = uuid.uuid4().hex
    home, tmp = _data_home(args.home)
    soak_dir = home / "soak"
    soak_dir.mkdir(exist_ok=True)
    cache = Path(os.environ.get("DYNOCELL_MODEL_CACHE") or REPO / ".cache" / "models").resolve()
    shim = soak_dir / "fake-python"
    write_shim(shim)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("DYNOCELL_")}
    base_env.update(DYNOCELL_HOME=str(home), DYNOCELL_MODEL_CACHE=str(cache), PYTHONUNBUFFERED="1",
                    **{MARK_VAR: marker})
    cycle_env = dict(base_env, DYNOCELL_ENGINE_PYTHON=str(shim), DYNOCELL_STOP_GRACE_S=str(args.grace),
                     DYNOCELL_BOOT_TIMEOUT_SGLANG_S="20", DYNOCELL_HTTP_TIMEOUT_S="3",
                     DYNOCELL_HEALTH_GENERATE_TIMEOUT_S="5")
    # This process (in-process cycles) and the detached supervisors it spawns read these.
    os.environ.clear()
    os.environ.update(cycle_env)

    sys.path.insert(0, str(REPO))
    from dynocell.runbooks import configs
    from dynocell.runbooks.cell import init, open_cell
    from dynocell.settings import load_settings

    cell = open_cell(load_settings())
    init(cell)

    def _on_term(_signo: int, _frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_term)
    tracker = Tracker(marker)
    cfg_files = write_configs(soak_dir, marker, args.ready_delay)
    resolved = {m: configs.resolve_config(cell, str(p)) for m, p in cfg_files.items()}
    print(f"soak: {args.cycles} cycles, {args.runs} runs, ≤ {args.max_minutes:g} min, home {home}", flush=True)

    cycles: list[Cycle] = []
    stopped_by_time = False
    interrupted = False
    last_print = time.monotonic()
    t_cycles = time.monotonic()
    try:
        for n in range(args.cycles):
            if time.monotonic() >= deadline:
                stopped_by_time = True
                break
            c = one_cycle(cell, n, args.detached_every, resolved, tracker)
            cycles.append(c)
            if time.monotonic() - last_print > 15 or n + 1 == args.cycles:
                last_print = time.monotonic()
                bad = sum(1 for x in cycles if x.problems or x.state_issues or x.row_issues)
                print(f"[cycles {len(cycles)}/{args.cycles}] {_fmt_s(time.monotonic() - t_start)}  "
                      f"with problems: {bad}", flush=True)
    except KeyboardInterrupt:
        interrupted = True
        print("interrupted: stopping what is left", flush=True)
        print(f"  stopped {stop_leftovers(cell)} live boot(s)", flush=True)
    t_cycles = time.monotonic() - t_cycles
    pid_file = soak_dir / "grandchildren.pids"
    for pid_line in pid_file.read_text().split() if pid_file.exists() else []:
        tracker.add(int(pid_line), "grandchildren pid file")

    runs: list[dict[str, Any]] = []
    t_runs = time.monotonic()
    if args.runs and not interrupted:
        seed_model_cache(cache)
        try:
            stopped_by_time = do_runs(runs, args.runs, dict(base_env), deadline, tracker, cell) or stopped_by_time
        except KeyboardInterrupt:
            interrupted = True
    t_runs = time.monotonic() - t_runs

    # ---- the final scan
    time.sleep(0.5)
    tracker.scan_marked()
    wrong = reality_check(cell, tracker)
    orphans, zombies = tracker.leftovers()
    def brief(c: Cycle, issues: list[str]) -> dict[str, Any]:
        return {"cycle": c.n, "mode": c.mode, "path": c.path, "boot": c.boot_id, "issues": issues}

    wrong_outcome = [brief(c, c.state_issues) for c in cycles if c.state_issues]
    row_problems = [brief(c, c.row_issues) for c in cycles if c.row_issues]
    run_problems = [r for r in runs if r.get("problems")]
    other = [brief(c, c.problems) for c in cycles if c.problems]
    wall = time.monotonic() - t_start
    from dynocell.db import boots as db_boots

    all_boots = db_boots.list_boots(cell.store, limit=1_000_000)
    boot_rows = len(all_boots)
    zombies_at_stop = sum(int(b.zombies or 0) for b in all_boots)
    ready_s = [b.ready_s for b in all_boots if b.ready_s]
    figures = {
        "cycles": len(cycles),
        "cycles_requested": args.cycles,
        "cycles_by_mode": dict(Counter(c.mode for c in cycles)),
        "cycles_by_path": dict(Counter(c.path for c in cycles)),
        "cycles_with_problems": sum(1 for c in cycles if c.problems or c.state_issues or c.row_issues),
        "cycle_procedure_problems": len(other),
        "cycle_seconds_mean": round(statistics.mean(c.seconds for c in cycles), 3) if cycles else None,
        "cycle_seconds_max": round(max((c.seconds for c in cycles), default=0.0), 3),
        "ready_s_p50": round(statistics.median(ready_s), 3) if ready_s else None,
        "cycles_wall_s": round(t_cycles, 1),
        "runs": len(runs),
        "runs_requested": args.runs,
        "runs_completed": sum(1 for r in runs if r.get("state") == "completed"),
        "run_seconds": [r["seconds"] for r in runs],
        "runs_wall_s": round(t_runs, 1),
        "processes_tracked": len(tracker.procs),
        "orphans": len(orphans),
        "zombies_left": len(zombies),
        "zombies_seen_at_stop": zombies_at_stop,
        "wrong_states": len(wrong) + len(wrong_outcome),
        "store_rows_missing_or_inconsistent": len(row_problems) + len(run_problems),
        "boot_rows": boot_rows,
        "stopped_by_time_bound": stopped_by_time,
        "interrupted": interrupted,
        "wall_s": round(wall, 1),
        "details": {"orphans": orphans[:50], "zombies": zombies[:50], "state_vs_reality": wrong[:50],
                    "state_vs_mode": wrong_outcome[:50], "rows": row_problems[:50], "runs": run_problems[:20],
                    "cycle_problems": other[:100]},
    }
    print()
    print("soak figures")
    print(f"  cycles                       {figures['cycles']} / {args.cycles}  "
          f"({', '.join(f'{k} {v}' for k, v in figures['cycles_by_mode'].items())}; "
          f"{', '.join(f'{k} {v}' for k, v in figures['cycles_by_path'].items())})")
    print(f"  cycle time mean / max        {figures['cycle_seconds_mean']} s / {figures['cycle_seconds_max']} s "
          f"(ready p50 {figures['ready_s_p50']} s); cycles wall {_fmt_s(t_cycles)}")
    print(f"  runs completed               {figures['runs_completed']} / {len(runs)} done / {args.runs} asked "
          f"(s each: {figures['run_seconds']}); runs wall {_fmt_s(t_runs)}")
    print(f"  processes tracked            {figures['processes_tracked']}")
    print(f"  orphan processes             {figures['orphans']}   (goal 0)")
    print(f"  zombies left                 {figures['zombies_left']}   (seen and reported at stop: {zombies_at_stop})")
    print(f"  wrong states                 {figures['wrong_states']}   (goal 0; vs reality {len(wrong)}, "
          f"vs mode {len(wrong_outcome)})")
    print(f"  store rows missing/inconsistent {figures['store_rows_missing_or_inconsistent']}   (goal 0; "
          f"boot rows {boot_rows}, cycles {len(row_problems)}, runs {len(run_problems)})")
    print(f"  cycles with any problem      {figures['cycles_with_problems']}")
    print(f"  stopped by the time bound    {stopped_by_time}"
          + ("  (interrupted by the operator)" if interrupted else ""))
    print(f"  wall time                    {_fmt_s(wall)}")
    for key in ("orphans", "zombies", "state_vs_reality", "state_vs_mode", "rows", "runs", "cycle_problems"):
        items = figures["details"][key]
        for it in items[:5]:
            print(f"    {key}: {it}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2, default=str))
        print(f"  figures written to {args.json}")
    # Any leftover fails the soak: an orphan, a zombie left unreaped, a wrong state or a lost row.
    failed = (figures["orphans"] or figures["zombies_left"] or figures["wrong_states"]
              or figures["store_rows_missing_or_inconsistent"])
    if tmp and not args.keep and not failed:
        shutil.rmtree(tmp, ignore_errors=True)
    elif tmp:
        print(f"  data directory kept: {home}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
