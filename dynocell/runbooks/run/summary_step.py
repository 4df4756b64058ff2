"""The ``diagnose`` step and the run's summary row (headline numbers for lists and reports).
"""

from __future__ import annotations

from typing import Any

from dynocell.db import runs as db_runs
from dynocell.errors import DynocellError
from dynocell.runbooks import boots
from dynocell.runbooks.run.job import RunJob


def warn_concurrent(job: RunJob, boot_id: str) -> None:
    """Warn (progress, and the run summary's ``concurrent_boots`` shown in its report) about each
    other live boot of this store on this host (issue 16, item 15)."""
    try:
        others = boots.other_live_boots(job.cell, boot_id)
    except DynocellError:  # a warning must not fail the run
        return
    for row in others:
        if row["id"] in job.concurrent:
            continue
        msg = job.concurrent[row["id"]] = boots.concurrent_boot_warning(row)
        job.progress(f"⚠ {msg}", {"warning": msg})


def run_diagnose(job: RunJob, d: dict[str, Any]) -> None:
    """The ``diagnose`` step: the acceptance doctor on the run; the rules that fired go in ``d["findings"]``."""
    from dynocell.runbooks import doctor

    findings = doctor.diagnose(job.cell, job.run_id)
    d["findings"] = [f.rule for f in findings]


def summarize(job: RunJob) -> dict[str, Any]:
    """The run's summary row: warnings, τ (steps-weighted over the text classes) and the headline throughput.

    ``best_output_tok_s``: the highest aggregate output tok/s over the whole-workload levels (bench rows
    without a text class), ``best_output_concurrency`` the concurrency of that level (on a GPU usually the
    widest, e.g. c=8). ``decode_tok_s`` is the same number under its old name, kept because stored runs and
    the doctor read it: **deprecated** — it was never a decode rate (the per-request decode rate is the
    bench rows' ``decode_tok_s``); read ``best_output_tok_s``.
    """
    cell = job.cell
    curves = db_runs.curves(cell.store, job.run_id)
    steps = sum(c.steps for c in curves)
    levels = [b for b in db_runs.bench_rows(cell.store, job.run_id) if not b.text_class]
    best = max(levels, key=lambda b: b.output_tok_s, default=None)
    return {
        "failed_steps": job.failed,
        "warnings": job.warnings,
        "concurrent_boots": list(job.concurrent.values()),
        "env_warning": job.env_warning,
        "tau": round(sum(c.tau * c.steps for c in curves) / steps, 4) if steps else None,
        "best_output_tok_s": best.output_tok_s if best else None,
        "best_output_concurrency": best.concurrency if best else None,
        "decode_tok_s": best.output_tok_s if best else None,  # deprecated alias of best_output_tok_s
    }
