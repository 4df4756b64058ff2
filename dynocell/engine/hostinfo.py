"""What this machine is: hostname, machine id, OS, CPU, memory, GPUs, engine package versions.

A fleet shares one store, so every boot, run and profile names the machine
that produced it (the ``hosts`` table). This module only looks; it persists
nothing (the runbooks layer stores it).

- Machine id: systemd's ``/etc/machine-id`` (32 hex digits, stable across
  reboots, see machine-id(5)), else D-Bus's ``/var/lib/dbus/machine-id``; None
  when neither exists (containers often lack both; the caller then generates
  one and keeps it in the data directory).
- GPUs: ``nvidia-smi --query-gpu=index,name,memory.total,driver_version,uuid
  --format=csv,noheader,nounits`` (memory in MiB) and the ``CUDA Version`` of
  its banner; an empty list when ``nvidia-smi`` is absent or fails.
- Engine versions: installed distributions of :data:`ENGINE_PACKAGES` in the
  interpreter that runs engines (``engine_python``), read through
  ``importlib.metadata`` there.
"""

from __future__ import annotations

import contextlib
import json
import os
from importlib import metadata
import platform
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil

MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
#: Distributions whose versions identify an engine stack (absent ones are left out).
ENGINE_PACKAGES = ("sglang", "sgl-kernel", "torch", "transformers", "flashinfer-python", "triton", "vllm")
PROBE_TIMEOUT_S = 20.0

_VERSIONS_SCRIPT = """
import json, importlib.metadata as m
out = {}
for name in %r:
    try:
        out[name] = m.version(name)
    except m.PackageNotFoundError:
        pass
print(json.dumps(out))
"""


def read_machine_id(files: tuple[Path, ...] = MACHINE_ID_FILES) -> str | None:
    """The OS machine id (lower-case hex) from the first readable, non-empty file of ``files``, or None."""
    for f in files:
        try:
            value = f.read_text().strip().lower()
        except OSError:
            continue
        if re.fullmatch(r"[0-9a-f]{16,64}", value):
            return value
    return None


def cpu_model() -> str:
    """The CPU model name (``/proc/cpuinfo`` "model name", else ``platform.processor()``), or ``unknown``."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware")):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def gpu_inventory(nvidia_smi: str | None = None) -> dict[str, Any]:
    """``{"gpus": [{index, name, memory_mib, driver, uuid}], "cuda": str | None}`` from ``nvidia-smi``.

    Empty (``{"gpus": [], "cuda": None}``) when the tool is absent, times out or fails.
    """
    exe = nvidia_smi or shutil.which("nvidia-smi")
    empty: dict[str, Any] = {"gpus": [], "cuda": None}
    if not exe:
        return empty
    try:
        q = subprocess.run([exe, "--query-gpu=index,name,memory.total,driver_version,uuid",
                            "--format=csv,noheader,nounits"], capture_output=True, text=True,
                           timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL)
        banner = subprocess.run([exe], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S,
                                stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return empty
    if q.returncode != 0:
        return empty
    gpus = []
    for line in q.stdout.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 5:
            continue
        try:
            memory = int(float(parts[2]))
        except ValueError:
            memory = None
        gpus.append({"index": int(parts[0]) if parts[0].isdigit() else parts[0], "name": parts[1],
                     "memory_mib": memory, "driver": parts[3], "uuid": parts[4]})
    m = re.search(r"CUDA Version:\s*([0-9.]+)", banner.stdout or "")
    return {"gpus": gpus, "cuda": m.group(1) if m else None}


def engine_versions(python: str | None = None, env: dict[str, str] | None = None) -> dict[str, str]:
    """Versions of the installed :data:`ENGINE_PACKAGES` as seen by ``python`` (default: this interpreter).

    Another interpreter is asked in a subprocess (``env``: its whole environment, default inherited; run
    in :data:`~dynocell.engine.builds.PROBE_CWD` with ``PYTHONSAFEPATH=1``, so nothing in the caller's
    working directory is imported); one that cannot answer gives ``{}``.
    """
    from dynocell.engine.builds import PROBE_CWD, safe_path_env

    if python is None or os.path.realpath(python) == os.path.realpath(sys.executable):
        out = {}
        for name in ENGINE_PACKAGES:
            with contextlib.suppress(metadata.PackageNotFoundError):
                out[name] = metadata.version(name)
        return out
    try:
        proc = subprocess.run([python, "-c", _VERSIONS_SCRIPT % (ENGINE_PACKAGES,)], capture_output=True, text=True,
                              timeout=PROBE_TIMEOUT_S, stdin=subprocess.DEVNULL, cwd=PROBE_CWD,
                              env=None if env is None else safe_path_env(env))
        return json.loads(proc.stdout) if proc.returncode == 0 else {}
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return {}


def probe(engine_python: str | None = None, env: dict[str, str] | None = None) -> dict[str, Any]:
    """This machine's inventory: ``{hostname, os, cpu, cpu_count, memory_bytes, gpus, cuda, engine_versions}``.

    ``memory_bytes`` is total physical memory; ``gpus`` as :func:`gpu_inventory`; ``env``: the engine
    interpreter's environment for :func:`engine_versions`.
    """
    inv = gpu_inventory()
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": psutil.cpu_count(logical=True) or 0,
        "memory_bytes": int(psutil.virtual_memory().total),
        "gpus": inv["gpus"],
        "cuda": inv["cuda"],
        "engine_versions": engine_versions(engine_python, env),
    }


def hardware_key(host: dict[str, Any]) -> tuple[Any, ...]:
    """What makes two hosts' numbers comparable: CPU model, GPU names and memory, driver, CUDA."""
    gpus = tuple(sorted((g.get("name"), g.get("memory_mib"), g.get("driver")) for g in host.get("gpus") or []))
    return (host.get("cpu"), gpus, host.get("cuda"))
