"""Background jobs of this panel process: one job's page (polled by htmx) and the JSON list."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse

from dynocell.errors import NotFound
from dynocell.web.views.models import JobOut
from dynocell.web.views.shared import Family, render

routes = Family()


def _job(request: Request, job_id: str) -> dict:
    job = request.app.state.jobs.status(job_id)
    if job is None:
        raise NotFound(f"no job {job_id!r}", "jobs live only as long as the panel process")
    return job


@routes.pages.get("/jobs/{job_id}", response_class=HTMLResponse)
def job_page(request: Request, job_id: str):
    job = _job(request, job_id)
    return render(request, "job.html", {"job": job, "title": f"Job {job['label']}"})


@routes.api.get("/jobs", response_model=list[JobOut], summary="Background jobs of this panel process")
def api_jobs(request: Request):
    return request.app.state.jobs.list()


@routes.api.get("/jobs/{job_id}", response_model=JobOut, summary="One background job's status and progress")
def api_job(request: Request, job_id: str):
    return _job(request, job_id)
