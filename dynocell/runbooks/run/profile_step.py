"""The ``profile`` step: a short profiler window on the boot and its trace split (runbooks.profiles).
"""

from __future__ import annotations

from typing import Any

from dynocell.engine import kinds
from dynocell.runbooks import boots
from dynocell.runbooks.run.job import RunJob, SkipStep


def run_profile(job: RunJob, live: boots.LiveBoot | boots.AttachedBoot, workload: Any, context_length: int,
                d: dict[str, Any]) -> int:
    """The ``profile`` step: a profiler window on ``live`` (:func:`dynocell.runbooks.profiles.profile_window`,
    stored with the run); returns the profile's id. SkipStep when the engine kind has no profiler
    (llama-server: "not available for this engine")."""
    from dynocell.runbooks.profiles import profile_window

    kind = kinds.get(getattr(live.cfg, "engine", None))
    if kind is not None and kind.profile_unavailable:
        raise SkipStep(f"profile {kind.profile_unavailable}")
    prof = profile_window(job.cell, live, workload, context_length, run_id=job.run_id,
                          progress=job.progress)
    d.update(profile_id=prof.id, busy_pct=prof.busy_pct, source=prof.source)
    return prof.id
