"""Boot procedures end to end: the real `dynocell` CLI, detached supervisor processes, test engines.

The SGLang adapter renders ``<engine_python> -m sglang.launch_server …``; here
``engine_python`` is a small shim that runs ``tests/engines/fake_engine.py``
in the mode named by the config's ``[env] FAKE_MODE`` instead — so the whole
path (config → adapter → supervisor process → store → ps/health/stop) is real.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from engines.shim import write_shim

HERE = Path(__file__).parent
FAKE = HERE / "engines" / "fake_engine.py"


def dynocell(env: dict[str, str], *args: str, timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=timeout)
    if check and proc.returncode != 0:
        raise AssertionError(f"dynocell {' '.join(args)} → {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture
def fake_env(cli_env, tmp_path):
    shim = write_shim(tmp_path / "fake-python")
    env = dict(cli_env)
    env["DYNOCELL_ENGINE_PYTHON"] = str(shim)
    env["DYNOCELL_STOP_GRACE_S"] = "2"
    env["DYNOCELL_BOOT_TIMEOUT_SGLANG_S"] = "30"
    return env


def write_config(tmp_path: Path, name: str, mode: str, fake_args: str = "") -> Path:
    model = tmp_path / "model"
    model.mkdir(exist_ok=True)
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(f"""engine = "sglang"
model_path = "{model}"

[env]
FAKE_MODE = "{mode}"
FAKE_ARGS = "{fake_args}"

[meta]
name = "{name}"
""")
    return cfg


def boot_row(env: dict[str, str], boot_id: str) -> dict:
    rows = json.loads(dynocell(env, "ps", "--all", "--json").stdout)
    return next(r for r in rows if r["id"] == boot_id)


def wait_for(pred, timeout: float = 30.0, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError("condition not met in time")


def test_detached_boot_health_stop(fake_env, tmp_path):
    cfg = write_config(tmp_path, "graceful", "graceful")
    out = dynocell(fake_env, "boot", str(cfg), "--detach", "--json")
    boot = json.loads(out.stdout)
    assert boot["state"] == "ready" and boot["ready_s"] > 0
    ps = json.loads(dynocell(fake_env, "ps", "--json").stdout)
    assert [r["id"] for r in ps] == [boot["id"]] and ps[0]["supervised"] and ps[0]["engine_alive"]
    health = json.loads(dynocell(fake_env, "health", boot["id"][:6], "--json").stdout)
    assert health["verdict"] == "healthy", health
    names = {c["name"] for c in health["checks"]}
    assert {"process", "health", "health_generate", "server_info"} <= names
    stopped = json.loads(dynocell(fake_env, "stop", boot["id"], "--json").stdout)
    assert stopped["state"] == "stopped" and stopped["stop_how"] == "graceful"
    assert stopped["log_size"] > 0 and len(stopped["log_sha256"]) == 64
    assert not psutil.pid_exists(boot["pid"]) or psutil.Process(boot["pid"]).status() == psutil.STATUS_ZOMBIE
    logs = dynocell(fake_env, "logs", boot["id"], "--tail", "200").stdout
    assert "ready to roll" in logs


def test_sigterm_ignoring_engine_is_killed_and_never_healthy_while_stopping(fake_env, tmp_path):
    cfg = write_config(tmp_path, "stubborn", "ignore_term")
    boot = json.loads(dynocell(fake_env, "boot", str(cfg), "--detach", "--json").stdout)
    stopper = subprocess.Popen([sys.executable, "-m", "dynocell", "stop", boot["id"], "--json", "--grace", "15"],
                               env=fake_env,
                               stdout=subprocess.PIPE, text=True)
    # While stopping (grace 2 s) the engine still answers /health 200: the oracle must not say healthy.
    wait_for(lambda: boot_row(fake_env, boot["id"])["state"] == "stopping", timeout=15)
    health = json.loads(dynocell(fake_env, "health", boot["id"], "--json", check=False).stdout)
    assert health["verdict"] != "healthy"
    out, _ = stopper.communicate(timeout=60)
    row = json.loads(out)
    assert row["state"] == "stopped" and row["stop_how"] == "killed"
    assert not any(p.info["cmdline"] and str(FAKE) in " ".join(p.info["cmdline"])
                   and p.status() != psutil.STATUS_ZOMBIE
                   for p in psutil.process_iter(["cmdline"]) if p.pid == boot["pid"])


def test_failed_boot_records_signature(fake_env, tmp_path):
    log = tmp_path / "sig.log"
    log.write_text("OSError: [Errno 98] Address already in use\n")
    cfg = write_config(tmp_path, "portbusy", "signature", f"--log-file {log}")
    proc = dynocell(fake_env, "boot", str(cfg), "--detach", check=False)
    assert proc.returncode == 3, proc.stderr
    assert "port" in proc.stderr.lower()
    rows = json.loads(dynocell(fake_env, "ps", "--all", "--json").stdout)
    assert rows[0]["state"] == "failed" and rows[0]["failure_signature"] == "port_in_use"


def test_crash_after_ready_is_crashed_with_signature(fake_env, tmp_path):
    log = tmp_path / "crash.log"
    log.write_text("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n")
    cfg = write_config(tmp_path, "crashy", "die_after_ready", f"--die-after 1.0 --log-file {log}")
    boot = json.loads(dynocell(fake_env, "boot", str(cfg), "--detach", "--json").stdout)
    row = wait_for(lambda: (r := boot_row(fake_env, boot["id"]))["state"] == "crashed" and r, timeout=30)
    assert row["failure_signature"] and row["failure_signature"] != "unknown"
    assert row["exit_code"] not in (None, 0)


def test_killed_supervisor_engine_is_stopped_never_orphaned(fake_env, tmp_path):
    cfg = write_config(tmp_path, "hang", "hang")
    booter = subprocess.Popen([sys.executable, "-m", "dynocell", "boot", str(cfg), "--detach"], env=fake_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    row = wait_for(lambda: (rows := json.loads(dynocell(fake_env, "ps", "--json").stdout))
                   and rows[0].get("pid") and rows[0], timeout=30)
    os.kill(row["supervisor_pid"], signal.SIGKILL)
    booter.kill()
    booter.wait()
    # The next look at the boots finds the engine without its supervisor and stops it (never `ready`).
    again = boot_row(fake_env, row["id"])
    assert again["state"] == "stopped" and not again["engine_alive"], again
    assert "supervisor" in again["failure_detail"]["reason"]
    assert not psutil.pid_exists(row["pid"]) or psutil.Process(row["pid"]).status() == psutil.STATUS_ZOMBIE


def test_killed_supervisor_and_engine_is_lost(fake_env, tmp_path):
    cfg = write_config(tmp_path, "hang", "hang")
    booter = subprocess.Popen([sys.executable, "-m", "dynocell", "boot", str(cfg), "--detach"], env=fake_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    row = wait_for(lambda: (rows := json.loads(dynocell(fake_env, "ps", "--json").stdout))
                   and rows[0].get("pid") and rows[0], timeout=30)
    os.kill(row["supervisor_pid"], signal.SIGKILL)
    os.killpg(row["pgid"], signal.SIGKILL)
    booter.kill()
    booter.wait()
    wait_for(lambda: not psutil.pid_exists(row["pid"]) or psutil.Process(row["pid"]).status() == psutil.STATUS_ZOMBIE,
             timeout=10)
    lost = boot_row(fake_env, row["id"])
    assert lost["state"] == "lost"


def test_detached_boot_from_a_long_lived_caller_leaves_no_zombie_supervisor(fake_env, tmp_path, monkeypatch):
    """The web panel and the TUI call ``boots.boot(detach=True)`` in their own process, which is then
    the supervisor's parent: once the boot is stopped the supervisor must be reaped, not left
    ``<defunct>`` (found by benchmarks/soak.py)."""
    for key in ("DYNOCELL_ENGINE_PYTHON", "DYNOCELL_STOP_GRACE_S", "DYNOCELL_BOOT_TIMEOUT_SGLANG_S"):
        monkeypatch.setenv(key, fake_env[key])
    from dynocell.runbooks import boots
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    cell = open_cell(load_settings())
    boot_id = boots.boot(cell, str(write_config(tmp_path, "graceful", "graceful")), detach=True)
    sup = boots.resolve_boot(cell, boot_id).supervisor_pid
    assert sup and sup != os.getpid() and psutil.Process(sup).ppid() == os.getpid()
    assert boots.stop(cell, boot_id)["state"] == "stopped"
    wait_for(lambda: not psutil.pid_exists(sup), timeout=15)


def test_boot_timeout_says_timed_out_once(fake_env, tmp_path):
    """Issue 20, item 9: one clear sentence, not "failed: … — boot.timeout: Boot timed out …"."""
    cfg = write_config(tmp_path, "hangs", "hang")
    proc = dynocell(fake_env, "boot", str(cfg), "--timeout", "3", check=False)
    assert proc.returncode != 0
    err = proc.stderr.lower()
    assert err.count("timed out") == 1, proc.stderr
    assert "timed out: no /health 200 within 3 s (last phase:" in proc.stderr
    assert proc.stderr.splitlines()[-2].count("last phase") == 1, proc.stderr  # said once, not again in a title
