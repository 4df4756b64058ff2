"""Runbooks: full-text search over the knowledge entries and one entry's page; JSON mirror."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import HTMLResponse

from dynocell.runbooks import views
from dynocell.web.views.shared import Family, cell, json_response, render

routes = Family()


@routes.pages.get("/runbooks", response_class=HTMLResponse)
def runbooks_page(request: Request, q: str = ""):
    return render(request, "runbooks.html", {"q": q, "entries": views.search_entries(cell(request), q),
                                             "title": "Runbooks"})


@routes.pages.get("/runbooks/{slug:path}", response_class=HTMLResponse)
def entry_page(request: Request, slug: str):
    e = views.get_entry(cell(request), slug)
    return render(request, "entry.html", {"e": e, "title": e["title"]})


@routes.api.get("/runbooks", summary="Runbook search (full text)")
def api_runbooks(request: Request, q: str = ""):
    return json_response(views.search_entries(cell(request), q))


@routes.api.get("/runbooks/{slug:path}", summary="One runbook entry (markdown body)")
def api_entry(request: Request, slug: str):
    return json_response(views.get_entry(cell(request), slug))
