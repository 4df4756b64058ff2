"""The main job and its single-step variants (``dynocell run``, ``bench``, ``profile``), one module per
step (``*_step``), orchestration in :mod:`.main`, the step machinery in :mod:`.job`.
"""

from __future__ import annotations

from dynocell.runbooks.run.job import DEFAULT_CONFIG, Progress, RunOptions
from dynocell.runbooks.run.main import run_job
from dynocell.runbooks.run.on_boot import bench, profile, run_on_boot
from dynocell.runbooks.run.reconcile import latest_run_json, reconcile_runs, resolve_run

__all__ = [
    "DEFAULT_CONFIG",
    "Progress",
    "RunOptions",
    "bench",
    "latest_run_json",
    "profile",
    "reconcile_runs",
    "resolve_run",
    "run_job",
    "run_on_boot",
]
