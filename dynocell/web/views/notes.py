"""Notes on a config, boot, run or runbook entry: the form on each page and ``POST /api/notes``."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Form, Request
from fastapi.responses import RedirectResponse

from dynocell.runbooks.knowledge import add_note_by_ref
from dynocell.web.views.models import NoteRequest
from dynocell.web.views.shared import Family, cell

routes = Family()


@routes.actions.post("/notes")
def add_note(request: Request, kind: str = Form(...), target: str = Form(...), text: str = Form(...)):
    add_note_by_ref(cell(request), kind, target, text)
    back = {"config": f"/configs/{quote(target, safe=':')}", "boot": f"/boots/{quote(target)}",
            "run": f"/runs/{quote(target)}", "entry": f"/runbooks/{quote(target)}"}.get(kind, "/")
    return RedirectResponse(back + "#notes", status_code=303)


@routes.api_actions.post("/notes", summary="Add a note to a config, boot, run or entry")
def api_note(request: Request, body: NoteRequest):
    return {"id": int(add_note_by_ref(cell(request), body.kind, body.target, body.text).id)}
