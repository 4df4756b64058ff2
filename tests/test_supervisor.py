"""Supervisor with real subprocesses on 127.0.0.1: phases, readiness, signatures, stop discipline."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from dynocell.engine.adapters import LaunchSpec, pick_free_port
from dynocell.engine.client import EngineClient
from dynocell.engine.health import check_health
from dynocell.engine.supervisor import (
    BootState,
    IllegalTransition,
    PhaseReached,
    StateChanged,
    Supervisor,
    check_transition,
    file_digest,
    group_members,
    parse_log_line,
    process_alive,
    process_create_time,
    stop_process_group,
)
from dynocell.errors import EngineError

HERE = Path(__file__).parent
FAKE = HERE / "engines" / "fake_engine.py"
LOGS = HERE / "data" / "logs"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"}


def fake_spec(mode: str, *extra: str) -> LaunchSpec:
    port = pick_free_port("127.0.0.1")
    argv = [sys.executable, str(FAKE), "--port", str(port), "--mode", mode, *extra]
    return LaunchSpec(argv=argv, env=dict(ENV), port=port, host="127.0.0.1", engine="sglang")


class Recorder:
    def __init__(self):
        self.events = []
        self.lock = threading.Lock()

    def __call__(self, ev):
        with self.lock:
            self.events.append(ev)

    def states(self):
        return [(e.old, e.new) for e in self.events if isinstance(e, StateChanged)]

    def phases(self):
        return [e.name for e in self.events if isinstance(e, PhaseReached)]


def boot(tmp_path, mode, *extra, timeout_s=20.0):
    rec = Recorder()
    sup = Supervisor("sglang", on_event=rec)
    sup.start(fake_spec(mode, *extra), tmp_path / "boot.log")
    return sup, rec


def gone(pid: int) -> bool:
    return not process_alive(pid)


def test_graceful_boot_phases_log_and_stop(tmp_path):
    seen_in_log = []

    def on_event(ev):
        if isinstance(ev, PhaseReached):  # the line is on disk before anyone parses it
            seen_in_log.append(ev.line in (tmp_path / "boot.log").read_text())
        rec(ev)

    rec = Recorder()
    sup = Supervisor("sglang", on_event=on_event)
    pid = sup.start(fake_spec("graceful"), tmp_path / "boot.log")
    assert sup.pgid == pid == os.getpgid(pid) and os.getsid(pid) == pid
    res = sup.wait_ready(timeout_s=20, probe_interval_s=0.1)
    assert res.ok and res.state == "ready" and 0 < res.ready_s < 20 and sup.ready_s == res.ready_s
    assert rec.phases()[:4] == ["weights_begin", "weights_end", "kv_cache_allocated", "memory_pool_end"]
    assert "http_listening" in rec.phases()
    kv = next(e for e in rec.events if isinstance(e, PhaseReached) and e.name == "kv_cache_allocated")
    assert kv.detail["tokens"] == "4096" and kv.offset_s >= 0
    stop = sup.stop(grace_s=10)
    assert stop.how == "graceful" and stop.exit_code == 0 and stop.clean and pid in stop.signalled
    assert rec.states() == [("starting", "ready"), ("ready", "stopping"), ("stopping", "stopped")]
    assert sup.state is BootState.STOPPED and gone(pid)
    assert all(seen_in_log) and seen_in_log
    text = (tmp_path / "boot.log").read_text().splitlines()
    stamp, line = parse_log_line(text[0])
    assert stamp is not None and "Load weight begin." in line
    assert any("ready to roll" in ln for ln in text)
    d = sup.log_digest()
    assert d == file_digest(tmp_path / "boot.log") and d.size_bytes == (tmp_path / "boot.log").stat().st_size
    assert len(d.sha256) == 64


def test_sigterm_ignoring_engine_is_stopping_never_healthy_then_killed(tmp_path):
    sup, rec = boot(tmp_path, "ignore_term")
    assert sup.wait_ready(timeout_s=20, probe_interval_s=0.1).ok
    pid = sup.pid
    result = {}
    t = threading.Thread(target=lambda: result.setdefault("stop", sup.stop(grace_s=1.5)))
    t.start()
    try:
        deadline = time.monotonic() + 5
        while sup.state is not BootState.STOPPING and time.monotonic() < deadline:
            time.sleep(0.01)
        assert sup.state is BootState.STOPPING
        with EngineClient(sup.spec.base_url, 2.0) as client:
            assert client.health().status == 200  # the engine still claims health…
            v = check_health(client, process_alive=process_alive(pid), stop_requested=sup.stop_requested)
        assert v.verdict == "down" and "stop requested" in v.reason  # …the oracle does not believe it
        assert sup.state is BootState.STOPPING
    finally:
        t.join(30)
    stop = result["stop"]
    assert stop.how == "killed" and stop.exit_code == -9 and stop.clean and stop.seconds >= 1.5
    assert gone(pid) and not [p for p in group_members(pid) if p.status() != psutil.STATUS_ZOMBIE]
    assert rec.states()[-1] == ("stopping", "stopped")


def test_grandchildren_all_gone_after_stop(tmp_path):
    pidfile = tmp_path / "pids"
    sup, _ = boot(tmp_path, "grandchildren", "--pid-file", str(pidfile))
    assert sup.wait_ready(timeout_s=20, probe_interval_s=0.1).ok
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        pids = [int(x) for x in pidfile.read_text().split()] if pidfile.exists() else []
        if len(pids) == 4:
            break
        time.sleep(0.05)
    assert len(pids) == 4 and all(process_alive(p) for p in pids)
    escaped = [p for p in pids if os.getpgid(p) != sup.pgid]
    assert escaped  # one child left the process group with setsid (and its grandchild with it)
    stop = sup.stop(grace_s=5)
    assert stop.clean and set(pids) <= set(stop.signalled)
    assert all(gone(p) for p in pids + [sup.pid])


def test_hang_before_ready_times_out_with_last_phase(tmp_path):
    sup, rec = boot(tmp_path, "hang")
    t0 = time.monotonic()
    res = sup.wait_ready(timeout_s=2.0, probe_interval_s=0.1)
    assert time.monotonic() - t0 > 1.5  # it waited out the timeout (no upper bound: a loaded host is slow)
    assert not res.ok and res.state == "failed" and res.signature.id == "boot.timeout"
    assert res.last_phase == "cuda_graph_begin" and res.signature.groups["last_phase"] == "cuda_graph_begin"
    assert "cuda_graph_begin" in res.reason
    assert res.stop is not None and res.stop.clean and gone(sup.pid)  # leftover engine cleaned up
    assert rec.states() == [("starting", "failed")]
    failed = [e for e in rec.events if isinstance(e, StateChanged)][0]
    assert failed.reason == "boot.timeout" and failed.signature.id == "boot.timeout"


def test_dies_after_ready_is_crashed_with_signature(tmp_path):
    sup, rec = boot(tmp_path, "die_after_ready", "--die-after", "0.3", "--exit-code", "134",
                    "--log-file", str(LOGS / "nccl_timeout_serving.log"))
    assert sup.wait_ready(timeout_s=20, probe_interval_s=0.1).ok
    assert sup.wait_exit(10) == 134
    deadline = time.monotonic() + 5
    while sup.poll() is not BootState.CRASHED and time.monotonic() < deadline:
        time.sleep(0.02)
    assert sup.state is BootState.CRASHED
    assert sup.failure.id == "nccl_timeout_serving"
    crash = [e for e in rec.events if isinstance(e, StateChanged)][-1]
    assert (crash.old, crash.new) == ("ready", "crashed") and crash.signature.id == "nccl_timeout_serving"
    stop = sup.stop(grace_s=1)  # cleaning up a crashed boot keeps its state
    assert stop.how == "gone" and sup.state is BootState.CRASHED


@pytest.mark.parametrize("log", sorted(LOGS.glob("*.log")), ids=lambda p: p.name)
def test_live_engine_failure_signature(tmp_path, log):
    sup, rec = boot(tmp_path, "signature", "--log-file", str(log), "--exit-code", "1")
    res = sup.wait_ready(timeout_s=600, probe_interval_s=0.2)
    # A dead child fails the wait at once, never by the timeout: the exit code and the log's own
    # signature say so (a timeout would be boot.timeout with no exit code).
    assert not res.ok and res.state == "failed" and res.exit_code == 1
    assert res.signature.id == log.stem.split("--")[0]
    assert res.tail and len(res.tail) <= 50 and res.tail[-1] == log.read_text().splitlines()[-1]
    assert rec.states() == [("starting", "failed")]


def test_spawn_failure_is_failed_with_event(tmp_path):
    rec = Recorder()
    sup = Supervisor("sglang", on_event=rec)
    spec = LaunchSpec([str(tmp_path / "no-such-python"), "-c", "pass"], {}, 1, "127.0.0.1")
    with pytest.raises(EngineError, match="cannot start"):
        sup.start(spec, tmp_path / "b.log")
    assert sup.state is BootState.FAILED and rec.states() == [("starting", "failed")]
    assert "cannot execute" in (tmp_path / "b.log").read_text()


def test_transitions_are_guarded():
    check_transition("starting", "ready")
    check_transition("ready", "crashed")
    check_transition("ready", "lost")
    for old, new in [("starting", "stopped"), ("ready", "failed"), ("stopped", "ready"), ("failed", "ready"),
                     ("crashed", "stopping"), ("stopping", "ready")]:
        with pytest.raises(IllegalTransition):
            check_transition(old, new)


def test_stop_from_another_process_by_pid_and_pgid(tmp_path):
    """A stopper that is not the parent (e.g. `dynocell stop` of a detached boot) has only pid/pgid."""
    spec = fake_spec("graceful")
    proc = subprocess.Popen(spec.argv, env=spec.env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        ct = process_create_time(proc.pid)
        deadline = time.monotonic() + 20
        with EngineClient(spec.base_url, 1.0) as c:
            while time.monotonic() < deadline:
                try:
                    if c.health().status == 200:
                        break
                except EngineError:
                    pass
                time.sleep(0.05)
        assert process_alive(proc.pid, ct) and not process_alive(proc.pid, ct + 100)  # pid reuse guard
        res = stop_process_group(proc.pid, proc.pid, grace_s=5)
        assert res.how == "graceful" and res.exit_code is None and res.clean
        # Our test process is the parent, so the engine is a zombie until reaped: dead, and reported.
        assert not process_alive(proc.pid)
        assert [z.pid for z in res.zombies] in ([proc.pid], [])
    finally:
        proc.kill()
        proc.wait()
    assert not process_alive(proc.pid)
    assert stop_process_group(proc.pid, proc.pid, grace_s=1).how == "gone"


def test_reference_engine_boot_ready_healthy_stop(tmp_path, model_pair, python_exe):
    """The embedded reference engine through the real adapter: boot → ready → healthy → graceful stop."""
    from dynocell.engine.adapters import render
    from dynocell.engine.config import EngineConfig
    from dynocell.engine.health import ExpectedServer

    target, draft = model_pair.target, model_pair.draft
    cfg = EngineConfig.model_validate({
        "engine": "reference", "model_path": str(target),
        "speculative": {"algorithm": "STANDALONE", "draft_model_path": str(draft), "num_steps": 3,
                        "eagle_topk": 1, "num_draft_tokens": 4},
    })
    spec = render(cfg, python=python_exe, base_env={**ENV, "HOME": str(tmp_path)})
    rec = Recorder()
    sup = Supervisor("reference", on_event=rec)
    sup.start(spec, tmp_path / "ref.log")
    try:
        res = sup.wait_ready(timeout_s=120, probe_interval_s=0.2)
        assert res.ok, (res.reason, res.tail)
        for phase in ("weights_begin", "weights_end", "kv_cache_allocated", "http_listening"):
            assert phase in rec.phases()
        with EngineClient(spec.base_url, 30.0) as client:
            v = check_health(client, process_alive=process_alive(sup.pid),
                             expected=ExpectedServer.from_config(cfg))
        assert v.verdict == "healthy", v.reason
    finally:
        stop = sup.stop(grace_s=15)
    assert stop.how == "graceful" and stop.clean and sup.state is BootState.STOPPED
    assert rec.states() == [("starting", "ready"), ("ready", "stopping"), ("stopping", "stopped")]
