"""Start a reference engine as a real subprocess on a free port (for tests and the benchmark).

This is a small convenience, not the supervisor (``engine/supervisor.py`` is the
real boot path with phases and stop discipline).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from dynocell.errors import EngineError


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class RunningEngine:
    """A started engine: ``proc``, ``url`` (``http://127.0.0.1:PORT``), ``log_path``."""

    proc: subprocess.Popen
    url: str
    log_path: Path
    port: int

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout_s: float = 10.0) -> int:
        """SIGTERM, wait ``timeout_s`` (s), SIGKILL if needed; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


def start_engine(model_path: Path, extra_args: list[str], log_path: Path, python: str | None = None,
                 ready_timeout_s: float = 120.0, env: dict | None = None) -> RunningEngine:
    """Spawn ``python -m dynocell.engine.reference --model-path … --port <free> …extra_args``, logging
    stdout+stderr to ``log_path``, and wait until ``/health`` answers 200. The engine runs in ``log_path``'s
    folder with ``PYTHONSAFEPATH=1`` (the caller's working directory is not on its import path).

    Raises :class:`EngineError` (with the log tail) if it exits or is not ready within ``ready_timeout_s`` s.
    """
    port = free_port()
    argv = [python or sys.executable, "-m", "dynocell.engine.reference", "--model-path", str(model_path),
            "--host", "127.0.0.1", "--port", str(port), *extra_args]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    fh = open(log_path, "wb")
    e = dict(env if env is not None else os.environ)
    e["PYTHONUNBUFFERED"] = "1"
    e["PYTHONSAFEPATH"] = "1"  # with cwd below: nothing beside the caller is imported (adapters.SAFE_PATH_ENV)
    proc = subprocess.Popen(argv, stdout=fh, stderr=subprocess.STDOUT, env=e, start_new_session=True,
                            cwd=log_path.parent)
    fh.close()
    eng = RunningEngine(proc, f"http://127.0.0.1:{port}", log_path, port)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise EngineError(f"reference engine exited with {proc.returncode} before ready:\n"
                              f"{eng.log_text()[-3000:]}", "read the log above")
        try:
            if httpx.get(eng.url + "/health", timeout=2).status_code == 200:
                return eng
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    eng.stop()
    raise EngineError(f"reference engine not ready in {ready_timeout_s:.0f} s:\n{eng.log_text()[-3000:]}",
                      "raise ready_timeout_s or read the log")
