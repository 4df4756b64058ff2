"""Boots: the list, one boot's page (phases, health, log tail with search), its artifacts;
starting a boot and the verbs on one (stop, health, bench, profile); their JSON mirror."""

from __future__ import annotations

from fastapi import Form, Query, Request
from fastapi.responses import FileResponse, HTMLResponse

from dynocell.runbooks import views
from dynocell.web import charts
from dynocell.web.views.models import StartedOut, StartRequest
from dynocell.web.views.shared import Family, cell, json_response, render, start_on_boot, start_on_config

routes = Family()
#: What a boot's action buttons (and the API) may do to it, each a background job.
BOOT_VERBS = ("stop", "health", "bench", "profile")


@routes.pages.get("/boots", response_class=HTMLResponse)
def boots_page(request: Request, all: bool = True, host: str = ""):  # noqa: A002
    c = cell(request)
    views.reconcile_live(c)
    return render(request, "boots.html", {"boots": views.list_boots(c, all, host_ids=views.host_ids_for(c, host)),
                                          "hosts": views.host_choices(c), "host": host, "title": "Boots"})


@routes.pages.get("/boots/{boot_id}", response_class=HTMLResponse)
def boot_page(request: Request, boot_id: str, n: int = 200, q: str = ""):
    views.reconcile_live(cell(request))
    d = views.boot_detail(cell(request), boot_id)
    log = views.log_tail(cell(request), d["boot"]["id"], n, q or None)
    return render(request, "boot.html", {"b": d, "log": log, "q": q, "n": n,
                                         "phase_chart": charts.phase_timeline(d["phases"]),
                                         "title": "Boot " + d["boot"]["id"]})


@routes.pages.get("/boots/{boot_id}/artifacts/{name:path}")
def artifact(request: Request, boot_id: str, name: str):
    p = views.artifact_path(cell(request), boot_id, name)
    media = "text/plain; charset=utf-8" if p.suffix in (".log", ".txt", "") else "application/octet-stream"
    return FileResponse(p, media_type=media, filename=p.name,
                        headers={"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"})


@routes.actions.post("/actions/boot")
def start_boot(request: Request, config: str = Form(...)):
    return start_on_config(request, "boot", config)


def _verb_action(verb: str, name: str):
    def action(request: Request, boot_id: str):
        return start_on_boot(request, verb, boot_id)
    action.__name__ = name
    return action


for _verb in BOOT_VERBS:
    routes.actions.post(f"/boots/{{boot_id}}/{_verb}")(_verb_action(_verb, f"boot_{_verb}"))


@routes.api.get("/boots", summary="Boots, newest first (live only unless all=true)")
def api_boots(request: Request, all: bool = False,  # noqa: A002
              host: str = Query("", description="only boots of this host (hostname or machine id prefix)")):
    views.reconcile_live(cell(request))
    return json_response(views.list_boots(cell(request), all, host_ids=views.host_ids_for(cell(request), host)))


@routes.api.get("/boots/{boot_id}", summary="One boot: phases, health history, runs, linked entries")
def api_boot(request: Request, boot_id: str):
    views.reconcile_live(cell(request))
    return json_response(views.boot_detail(cell(request), boot_id))


@routes.api.get("/boots/{boot_id}/log", summary="Log tail (n lines, optional case-insensitive search q)")
def api_log(request: Request, boot_id: str, n: int = 200, q: str = ""):
    return json_response(views.log_tail(cell(request), boot_id, n, q or None))


@routes.api_actions.post("/boots", response_model=StartedOut, status_code=202,
                         summary="Boot a stored config (detached)")
def api_start_boot(request: Request, body: StartRequest):
    return start_on_config(request, "boot", body.config)


for _verb in BOOT_VERBS:
    routes.api_actions.post(f"/boots/{{boot_id}}/{_verb}", response_model=StartedOut, status_code=202,
                            summary=f"{_verb.capitalize()} a boot (background job)")(
        _verb_action(_verb, f"api_boot_{_verb}"))
