"""The dashboard: ``/`` (live boots, recent runs, failures, configs, jobs) and ``/api/dashboard``."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse

from dynocell.runbooks import views
from dynocell.web.views.shared import Family, cell, json_response, render

routes = Family()


@routes.pages.get("/", response_class=HTMLResponse)
def dashboard_page(request: Request):
    views.reconcile_live(cell(request))
    data = views.dashboard(cell(request))
    configs = views.list_configs(cell(request))
    jobs = request.app.state.jobs.list()[:10]
    return render(request, "dashboard.html", {"d": data, "configs": configs, "jobs": jobs,
                                              "title": "Dashboard"})


@routes.api.get("/dashboard", summary="Live boots, recent runs, failures")
def api_dashboard(request: Request):
    views.reconcile_live(cell(request))
    return json_response(views.dashboard(cell(request)))
