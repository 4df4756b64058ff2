"""How busy the host was while a measurement ran (issue 33, comparability context), store-free.

A window's contention is read from the operating system at its start and end:

- load average per core: ``os.getloadavg()[0]`` (1-minute, Linux ``/proc/loadavg``) over
  ``psutil.cpu_count()``; the larger of the two readings is the window's;
- CPU steal: the share of CPU time the hypervisor gave to other guests during the window, from
  ``psutil.cpu_times()`` deltas (Linux ``steal`` column of ``/proc/stat``; ``None`` where not exported);
- GPU utilisation: ``nvidia-smi --query-gpu=utilization.gpu`` (percent per GPU) at the end, where the tool is;
- other live boots of this store on this host: counted by the caller (the store is not read here).

:func:`contended` applies the default rule (load above the core count, or another live boot) and
says why in words; the faces show the reason, and verdicts leave such windows out unless the
operator passes ``--allow-contended``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Any

import psutil

#: Load per core above which a window counts as contended (load above the core count).
LOAD_PER_CORE_MAX = 1.0
#: CPU steal share above which a window counts as contended (another guest took the CPU).
STEAL_MAX = 0.10
#: Seconds allowed for one ``nvidia-smi`` query.
NVIDIA_SMI_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class Reading:
    """One reading of the host: ``load_per_core`` (1-min load average / logical cores), ``cores``,
    ``cpu_times`` (psutil's ``cpu_times()`` as a dict, for the steal delta)."""

    load_per_core: float | None
    cores: int
    cpu_times: dict[str, float]


def read() -> Reading:
    """The host now (:class:`Reading`); ``load_per_core`` is ``None`` where the OS has no load average."""
    cores = psutil.cpu_count() or 1
    try:
        load = os.getloadavg()[0] / cores
    except (OSError, AttributeError):
        load = None
    return Reading(None if load is None else round(load, 3), cores, psutil.cpu_times()._asdict())


def gpu_utilisation(nvidia_smi: str | None = None) -> list[int] | None:
    """Percent utilisation per GPU from ``nvidia-smi --query-gpu=utilization.gpu``; ``None`` when the tool
    is absent, fails or times out."""
    exe = nvidia_smi or shutil.which("nvidia-smi")
    if not exe:
        return None
    try:
        q = subprocess.run([exe, "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if q.returncode != 0:
        return None
    out = [int(x.strip()) for x in q.stdout.splitlines() if x.strip().isdigit()]
    return out or None


def steal_share(before: dict[str, float], after: dict[str, float]) -> float | None:
    """Steal time over all CPU time between two ``cpu_times`` dicts (fraction 0–1); ``None`` when the OS
    exports no ``steal`` column or no time passed."""
    if "steal" not in before or "steal" not in after:
        return None
    total = sum(after.values()) - sum(before.values())
    if total <= 0:
        return None
    return round(max(0.0, after["steal"] - before["steal"]) / total, 4)


def window(before: Reading, after: Reading, *, other_boots: int = 0, gpu: list[int] | None = None) -> dict[str, Any]:
    """The contention of the window between two readings, as stored with a measurement:
    ``{load_per_core, cores, steal, gpu_util_pct, other_boots, contended}`` — ``load_per_core`` the larger of
    the two readings, ``steal`` :func:`steal_share`, ``contended`` :func:`contended`'s reason or ``None``."""
    loads = [x for x in (before.load_per_core, after.load_per_core) if x is not None]
    ctx: dict[str, Any] = {"load_per_core": max(loads) if loads else None, "cores": after.cores,
                           "steal": steal_share(before.cpu_times, after.cpu_times), "gpu_util_pct": gpu,
                           "other_boots": other_boots}
    ctx["contended"] = contended(ctx)
    return ctx


def contended(ctx: dict[str, Any] | None) -> str | None:
    """Why a window (a :func:`window` dict) counts as contended, in words, or ``None``: load per core above
    :data:`LOAD_PER_CORE_MAX`, steal above :data:`STEAL_MAX`, or another live boot of this store on the host."""
    if not ctx:
        return None
    why = []
    load = ctx.get("load_per_core")
    if isinstance(load, (int, float)) and load > LOAD_PER_CORE_MAX:
        why.append(f"load {load:.2f} per core (> {LOAD_PER_CORE_MAX:.0f})")
    steal = ctx.get("steal")
    if isinstance(steal, (int, float)) and steal > STEAL_MAX:
        why.append(f"CPU steal {steal * 100:.0f} %")
    others = ctx.get("other_boots")
    if isinstance(others, int) and others > 0:
        why.append(f"{others} other live boot(s) of this store on the host")
    return "; ".join(why) or None


def load_band_ok(a: dict[str, Any] | None, b: dict[str, Any] | None, band: float) -> bool:
    """True when two windows' ``load_per_core`` are both known and within ``band`` of each other (a stored
    measurement is reused only from a host about as busy as now)."""
    la, lb = (a or {}).get("load_per_core"), (b or {}).get("load_per_core")
    if not isinstance(la, (int, float)) or not isinstance(lb, (int, float)):
        return False
    return abs(la - lb) <= band
