"""Configs: the list, adding one (paste or upload TOML; a label that moves needs confirming), the
diff of two, one config's page; their JSON mirror under /api."""

from __future__ import annotations

from urllib.parse import quote

from fastapi import Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.datastructures import UploadFile

from dynocell.errors import UserError
from dynocell.runbooks import configs, views
from dynocell.web.views.models import ConfigAddedOut, ConfigAddRequest
from dynocell.web.views.shared import MAX_UPLOAD, Family, cell, json_response, render

routes = Family()


@routes.pages.get("/configs", response_class=HTMLResponse)
def configs_page(request: Request):
    return render(request, "configs.html", {"configs": views.list_configs(cell(request)), "title": "Configs"})


@routes.pages.get("/configs-add", response_class=HTMLResponse)
def config_add_page(request: Request):
    return render(request, "config_add.html", {"title": "Add config", "toml": "", "name": "", "move": None})


@routes.pages.get("/configs-diff", response_class=HTMLResponse)
def config_diff_page(request: Request, a: str = Query(...), b: str = Query(...)):
    return render(request, "config_diff.html", {"diff": views.config_diff(cell(request), a, b),
                                                "title": "Config diff"})


@routes.pages.get("/configs/{ref:path}", response_class=HTMLResponse)
def config_page(request: Request, ref: str):
    d = views.config_detail(cell(request), ref)
    others = [c for c in views.list_configs(cell(request)) if c["config_hash"] != d["config"]["config_hash"]]
    return render(request, "config.html", {"c": d, "others": others,
                                           "title": "Config " + (d["config"]["labels"] or
                                                                 [d["config"]["config_hash"][7:19]])[0]})


@routes.actions.post("/configs-add")
async def add_config(request: Request):
    form = await request.form()
    text = form.get("toml")
    upload = form.get("upload")
    if isinstance(upload, UploadFile) and upload.filename:
        raw = await upload.read(MAX_UPLOAD + 1)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            if len(raw) <= MAX_UPLOAD:  # a larger one is refused for its size below
                raise UserError("upload: the file is not UTF-8 text (it would be stored altered)",
                                "save the config as UTF-8 TOML and upload it again") from None
            text = raw.decode("utf-8", errors="replace")
    name = str(form.get("name") or "").strip() or None
    return _add_config(request, text if isinstance(text, str) else "", name, str(form.get("confirm") or ""))


@routes.api.get("/configs", summary="Configs with labels and hashes")
def api_configs(request: Request):
    return json_response(views.list_configs(cell(request)))


@routes.api.get("/configs-diff", summary="Field-by-field diff of two configs")
def api_config_diff(request: Request, a: str, b: str):
    return json_response(views.config_diff(cell(request), a, b))


@routes.api.get("/configs/{ref:path}", summary="One config by label, hash or hash prefix")
def api_config(request: Request, ref: str):
    return json_response(views.config_detail(cell(request), ref))


@routes.api_actions.post("/configs", response_model=ConfigAddedOut,
                         summary="Store a config from its TOML text (moving a label needs confirm = the new hash)")
def api_add_config(request: Request, body: ConfigAddRequest):
    return _add_config(request, body.toml, body.name, body.confirm or "")


def _add_config(request: Request, text: str, name: str | None, confirm: str) -> Response:
    """Store pasted/uploaded TOML; a label that would move to another config needs ``confirm``
    equal to the new hash — otherwise 409 and the move spelled out (``label tiny: sha256:aaa… →
    sha256:bbb…``), nothing stored."""
    c = cell(request)
    if len(text.encode()) > MAX_UPLOAD:
        raise UserError("config text is larger than 1 MiB", "paste the engine config only")
    cfg_hash, label = configs.preview_config_text(text, name)
    old = configs.label_target(c, label)
    is_api = request.url.path.startswith("/api")
    if old is not None and old != cfg_hash and confirm.strip() != cfg_hash:
        move = {"label": label, "from": old, "to": cfg_hash,
                "text": f"label {label}: {old[:19]}… → {cfg_hash[:19]}…"}
        if is_api:
            return JSONResponse({"error": f"{move['text']} needs confirmation",
                                 "hint": "send again with confirm = the new hash", "status": 409,
                                 "move": move}, status_code=409)
        return render(request, "config_add.html", {"title": "Confirm label move", "toml": text, "name": label,
                                                   "move": move}, status=409)
    rec = configs.add_config_text(c, text, label)
    moved = old if old is not None and old != cfg_hash else None
    if is_api:
        return JSONResponse({"hash": rec.hash, "name": rec.name, "moved_from": moved})
    return RedirectResponse(f"/configs/{quote(rec.hash, safe=':')}", status_code=303)
