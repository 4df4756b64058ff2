"""The one Job class (runbooks/jobs.py) serves both faces: the web panel's JobRunner threads and the
TUI's cancellable workers (issue 23: there used to be two Job classes, one per face)."""

from __future__ import annotations

import pytest

from dynocell.errors import Interrupted
from dynocell.runbooks.jobs import Job, JobRunner, cancelling_progress


def _procedure(progress):
    progress("boot", {"state": "running", "step": "boot", "boot_id": "b0123456789a"})
    progress("bench c=4", {"done": 3, "total": 8})
    return "r0123456789a"


def test_runner_job_records_progress_links_and_result():
    runner = JobRunner()
    job_id = runner.start("run", _procedure, key="cfg", label="tiny")
    st = runner.wait(job_id, 30)
    assert st["state"] == "done" and st["result"] == "r0123456789a"
    assert st["links"] == {"boot_id": "b0123456789a", "run_id": "r0123456789a"}
    assert [m["step"] for m in st["messages"]] == ["boot", "bench c=4"]
    job = runner.get(job_id)
    assert (job.done, job.total, job.boot_id, job.run_id) == (3, 8, "b0123456789a", "r0123456789a")
    assert job.ended.is_set()


def test_runner_job_records_a_failure_with_its_http_status():
    class Refused(Exception):
        http_status = 409

    def fails():
        raise Refused("config abc is already running")

    runner = JobRunner()
    st = runner.wait(runner.start("run", fails), 30)
    assert st["state"] == "failed" and st["error"] == "config abc is already running"
    assert runner.get(st["id"]).error_status == 409
    assert st["messages"][-1]["step"] == "error" and "Refused" in st["messages"][-1]["detail"]["trace"]


def test_cancelled_job_is_interrupted_at_the_next_step_start_only():
    seen: list[str] = []
    job = Job("run", "tiny")
    progress = cancelling_progress(job, lambda j: seen.append(j.message))
    progress("bench", {"state": "running", "step": "bench"})
    job.cancel.set()
    progress("bench c=4", {"done": 1, "total": 8})  # an inner tick: never interrupted
    progress("stop", {"state": "running", "step": "stop"})  # stop is never interrupted
    with pytest.raises(Interrupted):
        progress("profile", {"state": "running", "step": "profile"})
    progress("diagnose", {"state": "running", "step": "diagnose"})  # only once
    assert seen == ["bench", "bench c=4", "stop", "profile", "diagnose"]


def test_tui_job_line_shows_progress_and_a_stop_request():
    from dynocell.cli.tui.format import job_line

    job = Job("run", "tiny")
    job.begin()
    job.update("bench c=4", {"done": 4, "total": 8})
    line = job_line(job, width=8)
    assert line.startswith("⏵ run tiny · bench c=4 [") and "(stopping…)" not in line
    job.cancel.set()
    assert job_line(job, width=8).endswith("(stopping…)")
