"""Routes of the panel: HTML pages (full or htmx fragment), actions (POST, CSRF), JSON API mirror.

Pages take ``?fragment=<block>`` (with ``HX-Request``) to render one block of the same template.
Every POST passes :func:`require_csrf` (session + CSRF token, or a Bearer token for scripts);
GET handlers only read. Actions start background jobs through ``app.state.jobs``, keyed by
(kind, config hash | boot id) so duplicate clicks never start two engines.
"""

from __future__ import annotations

from math import ceil
from typing import Any
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, FastAPI, File, Form, HTTPException, Query, Request, UploadFile
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel
from starlette.concurrency import run_in_threadpool

from dynocell.errors import NotFound, UserError
from dynocell.runbooks import configs, views
from dynocell.web import charts
from dynocell.web.app import _result_id, set_session_cookie
from dynocell.web.auth import COOKIE, CSRF_FIELD, CSRF_HEADER

FRAGMENTS = {
    "dashboard.html": {"live", "jobs"},
    "boot.html": {"log", "state"},
    "job.html": {"job"},
    "runbooks.html": {"results"},
}


# ---------------------------------------------------------------- API models (cheap ones)

class JobOut(BaseModel):
    """A background job's status."""

    id: str
    kind: str
    key: str | None
    label: str
    state: str
    messages: list[dict[str, Any]]
    links: dict[str, str]
    result: Any = None
    error: str | None = None


class StartRequest(BaseModel):
    """Start a run or a boot of a stored config (label, hash or hash prefix; never a file path)."""

    config: str


class ConfigAddRequest(BaseModel):
    """Store a config from its TOML text, labelled ``name`` (default: its ``[meta] name``).

    When the label already points at another config, nothing is stored unless ``confirm`` is
    the new config's hash (the answer then is 409 with the move to confirm)."""

    toml: str
    name: str | None = None
    confirm: str | None = None


class ConfigAddedOut(BaseModel):
    """A stored config: ``hash``, ``name`` (its label now), ``moved_from`` (the label's old hash)."""

    hash: str
    name: str
    moved_from: str | None = None


class NoteRequest(BaseModel):
    """A note on a target (``kind``: config, boot, run, entry, experiment)."""

    kind: str
    target: str
    text: str


class StartedOut(BaseModel):
    """A started (or reused, when identical) job."""

    job_id: str
    job_url: str


# ---------------------------------------------------------------- helpers

async def require_csrf(request: Request) -> None:
    """Dependency of every state-changing route: a session and its CSRF token (header or form
    field), or a verified Bearer token. Raises HTTP 403 otherwise."""
    if getattr(request.state, "bearer", False):
        return
    sess = request.state.session
    token = request.headers.get(CSRF_HEADER)
    if not token and "form" in request.headers.get("content-type", ""):
        form = await request.form()
        token = form.get(CSRF_FIELD)
    if sess is None or not request.app.state.sessions.check_csrf(sess, token if isinstance(token, str) else None):
        raise HTTPException(403, "missing or wrong CSRF token (reload the page and try again)")


def cell(request: Request) -> Any:
    return request.app.state.cell


def render(request: Request, name: str, ctx: dict[str, Any], status: int = 200,
           headers: dict[str, str] | None = None) -> Response:
    app = request.app
    full = app.state.base_context(request)
    full.update(ctx)
    frag = request.query_params.get("fragment")
    block = frag if frag and frag in FRAGMENTS.get(name, set()) else None
    return app.state.templates.TemplateResponse(request, name, full, status_code=status, block_name=block,
                                                headers=headers)


def _safe_next(target: str | None) -> str:
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    parts = urlsplit(target)
    return parts.path + (("?" + parts.query) if parts.query else "") if not parts.netloc else "/"


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


def _started(request: Request, job_id: str) -> Response:
    if request.url.path.startswith("/api"):
        return JSONResponse({"job_id": job_id, "job_url": f"/api/jobs/{job_id}"}, status_code=202)
    if request.headers.get("hx-request"):
        return _job_fragment(request, job_id)
    return RedirectResponse(f"/jobs/{job_id}", status_code=303)


def _job_fragment(request: Request, job_id: str) -> Response:
    job = request.app.state.jobs.status(job_id)
    full = request.app.state.base_context(request)
    full.update({"job": job})
    return request.app.state.templates.TemplateResponse(request, "job.html", full, block_name="job")


def _start(request: Request, kind: str, proc: str, ref: str, key: str, label: str) -> str:
    fn = request.app.state.procedures[proc]
    c = cell(request)

    def job(progress=None):
        return _result_id(fn(c, ref, progress=progress))

    return request.app.state.jobs.start(kind, job, key=key, label=label)


MAX_UPLOAD = 1 << 20


def _name(request: Request, ref: str, config_hash: str) -> str:
    """How a job names its config: the label the request used, else the short hash."""
    ref = ref.strip()
    return ref if configs.label_target(cell(request), ref) == config_hash else configs.short_hash(config_hash)


def _bootable_config(request: Request, ref: str) -> str:
    """The hash of the stored config ``ref`` names (never a path), refused when its ``[env]``
    injects code and nobody trusted it from the CLI."""
    c = cell(request)
    h = configs.resolve_stored(c, ref)
    configs.check_web_bootable(c, h)
    return h


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


def _run_charts(detail: dict[str, Any]) -> dict[str, Any]:
    acc = []
    for c in detail["curves"]:
        series = [
            {"name": "p", "label": "p_i unconditional", "points": [(p["position"], p["p"]) for p in c["points"]]},
            {"name": "a", "label": "a_i conditional", "points": [(p["position"], p["a"]) for p in c["points"]],
             "dashed": True},
        ]
        acc.append(charts.acceptance_chart(
            series, title=f"Acceptance by draft position — {c['text_class']}", num_drafts=c["num_drafts"],
            taus=[{"tau": c["tau"], "engine_tau": c["engine_tau"]}]))
    prof = None
    if detail["profile"] and detail["profile"].get("splits"):
        prof = charts.profile_split_chart([{"label": "all ranks", "splits": detail["profile"]["splits"]}],
                                          title=charts.profile_title(detail["profile"].get("source")))
    return {"acceptance_charts": acc, "profile_chart": prof}


def _compare_charts(cmp: dict[str, Any]) -> dict[str, Any]:
    classes = sorted({c["text_class"] for r in cmp["runs"] for c in r["curves"]})
    acc = []
    for tc in classes:
        series, taus, d = [], [], 1
        for r in cmp["runs"]:
            for c in r["curves"]:
                if c["text_class"] == tc:
                    rid = r["run"]["id"]
                    name = (r["run"]["labels"][0] + " " if r["run"]["labels"] else "") + rid[:8]
                    series.append({"name": f"p:{rid}", "label": f"p_i {name}",
                                   "points": [(p["position"], p["p"]) for p in c["points"]]})
                    taus.append({"label": rid[:8], "tau": c["tau"], "engine_tau": c["engine_tau"]})
                    d = max(d, c["num_drafts"])
        acc.append(charts.acceptance_chart(series, title=f"Acceptance overlaid — {tc}", num_drafts=d, taus=taus,
                                           css_class="acceptance-chart compare"))
    rows = [{"label": r["run"]["id"][:8], "splits": r["profile"]["splits"]} for r in cmp["runs"]
            if r["profile"] and r["profile"].get("splits")]
    prof = charts.profile_split_chart(rows, title="GPU time by category, per run") if rows else None
    return {"acceptance_charts": acc, "profile_chart": prof}


def _compare_ids(runs: list[str]) -> list[str]:
    out: list[str] = []
    for r in runs:
        out.extend(x for x in r.replace(" ", ",").split(",") if x)
    return out


# ---------------------------------------------------------------- install

def install(app: FastAPI) -> None:
    """Add every page, action and API route to ``app``."""
    pages = APIRouter(include_in_schema=False)
    actions = APIRouter(include_in_schema=False, dependencies=[Depends(require_csrf)])
    api = APIRouter(prefix="/api", tags=["read"])
    api_actions = APIRouter(prefix="/api", tags=["actions"], dependencies=[Depends(require_csrf)])

    # ------------------------------------------------ public
    @pages.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @pages.get("/login", response_class=HTMLResponse)
    def login_page(request: Request, next: str = "/"):  # noqa: A002
        return render(request, "login.html", {"next": _safe_next(next), "error": None, "title": "Log in"})

    @pages.post("/login")
    def login(request: Request, token: str = Form(""), next: str = Form("/")):  # noqa: A002
        # Origin/Host were checked by the access middleware (a cross-origin form never gets here).
        tid, wait = request.app.state.check_token(token, _client(request))
        if wait:
            return render(request, "login.html", {"next": _safe_next(next), "title": "Log in",
                                                  "error": f"Too many failed logins; try again in {ceil(wait)} s."},
                          status=429, headers={"Retry-After": str(ceil(wait))})
        if tid is None:
            return render(request, "login.html", {"next": _safe_next(next), "title": "Log in",
                                                  "error": "That token is not valid."}, status=401)
        value, _ = request.app.state.sessions.issue(tid)
        resp = RedirectResponse(_safe_next(next), status_code=303)
        set_session_cookie(resp, value)
        return resp

    # ------------------------------------------------ pages
    @pages.get("/", response_class=HTMLResponse)
    def dashboard_page(request: Request):
        views.reconcile_live(cell(request))
        data = views.dashboard(cell(request))
        configs = views.list_configs(cell(request))
        jobs = request.app.state.jobs.list()[:10]
        return render(request, "dashboard.html", {"d": data, "configs": configs, "jobs": jobs,
                                                  "title": "Dashboard"})

    @pages.get("/configs", response_class=HTMLResponse)
    def configs_page(request: Request):
        return render(request, "configs.html", {"configs": views.list_configs(cell(request)), "title": "Configs"})

    @pages.get("/configs-add", response_class=HTMLResponse)
    def config_add_page(request: Request):
        return render(request, "config_add.html", {"title": "Add config", "toml": "", "name": "", "move": None})

    @pages.get("/configs-diff", response_class=HTMLResponse)
    def config_diff_page(request: Request, a: str = Query(...), b: str = Query(...)):
        return render(request, "config_diff.html", {"diff": views.config_diff(cell(request), a, b),
                                                    "title": "Config diff"})

    @pages.get("/configs/{ref:path}", response_class=HTMLResponse)
    def config_page(request: Request, ref: str):
        d = views.config_detail(cell(request), ref)
        others = [c for c in views.list_configs(cell(request)) if c["config_hash"] != d["config"]["config_hash"]]
        return render(request, "config.html", {"c": d, "others": others,
                                               "title": "Config " + (d["config"]["labels"] or
                                                                     [d["config"]["config_hash"][7:19]])[0]})

    @pages.get("/boots", response_class=HTMLResponse)
    def boots_page(request: Request, all: bool = True, host: str = ""):  # noqa: A002
        c = cell(request)
        views.reconcile_live(c)
        return render(request, "boots.html", {"boots": views.list_boots(c, all, host_ids=views.host_ids_for(c, host)),
                                              "hosts": views.host_choices(c), "host": host, "title": "Boots"})

    @pages.get("/boots/{boot_id}", response_class=HTMLResponse)
    def boot_page(request: Request, boot_id: str, n: int = 200, q: str = ""):
        views.reconcile_live(cell(request))
        d = views.boot_detail(cell(request), boot_id)
        log = views.log_tail(cell(request), d["boot"]["id"], n, q or None)
        return render(request, "boot.html", {"b": d, "log": log, "q": q, "n": n,
                                             "phase_chart": charts.phase_timeline(d["phases"]),
                                             "title": "Boot " + d["boot"]["id"]})

    @pages.get("/boots/{boot_id}/artifacts/{name:path}")
    def artifact(request: Request, boot_id: str, name: str):
        p = views.artifact_path(cell(request), boot_id, name)
        media = "text/plain; charset=utf-8" if p.suffix in (".log", ".txt", "") else "application/octet-stream"
        return FileResponse(p, media_type=media, filename=p.name,
                            headers={"X-Content-Type-Options": "nosniff", "Content-Security-Policy": "sandbox"})

    @pages.get("/runs", response_class=HTMLResponse)
    def runs_page(request: Request, host: str = ""):
        c = cell(request)
        return render(request, "runs.html", {"runs": views.list_runs(c, host_ids=views.host_ids_for(c, host)),
                                             "hosts": views.host_choices(c), "host": host, "title": "Runs"})

    @pages.get("/runs/{run_id}", response_class=HTMLResponse)
    def run_page(request: Request, run_id: str):
        d = views.run_detail(cell(request), run_id)
        ctx = {"r": d, "title": "Run " + d["run"]["id"]}
        ctx.update(_run_charts(d))
        return render(request, "run.html", ctx)

    @pages.get("/compare", response_class=HTMLResponse)
    def compare_page(request: Request, runs: list[str] = Query(default=[])):
        ids = _compare_ids(runs)
        if len(ids) < 2:
            return render(request, "compare_pick.html", {"runs": views.list_runs(cell(request)),
                                                         "title": "Compare runs"})
        cmp = views.compare_runs(cell(request), ids)
        ctx = {"cmp": cmp, "title": "Compare " + " · ".join(r["run"]["id"][:8] for r in cmp["runs"])}
        ctx.update(_compare_charts(cmp))
        return render(request, "compare.html", ctx)

    @pages.get("/runbooks", response_class=HTMLResponse)
    def runbooks_page(request: Request, q: str = ""):
        return render(request, "runbooks.html", {"q": q, "entries": views.search_entries(cell(request), q),
                                                 "title": "Runbooks"})

    @pages.get("/runbooks/{slug:path}", response_class=HTMLResponse)
    def entry_page(request: Request, slug: str):
        e = views.get_entry(cell(request), slug)
        return render(request, "entry.html", {"e": e, "title": e["title"]})

    @pages.get("/jobs/{job_id}", response_class=HTMLResponse)
    def job_page(request: Request, job_id: str):
        job = request.app.state.jobs.status(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r}", "jobs live only as long as the panel process")
        return render(request, "job.html", {"job": job, "title": f"Job {job['label']}"})

    # ------------------------------------------------ actions (POST, CSRF)
    @actions.post("/logout")
    def logout(request: Request):
        sess = request.state.session
        if sess:
            request.app.state.sessions.revoke(sess.sid)
        resp = RedirectResponse("/login", status_code=303)
        resp.delete_cookie(COOKIE, path="/")
        return resp

    @actions.post("/actions/run")
    def start_run(request: Request, config: str = Form(...)):
        key = _bootable_config(request, config)
        return _started(request, _start(request, "run", "run", key, key, f"run {_name(request, config, key)}"))

    @actions.post("/actions/boot")
    def start_boot(request: Request, config: str = Form(...)):
        key = _bootable_config(request, config)
        return _started(request, _start(request, "boot", "boot", key, key, f"boot {_name(request, config, key)}"))

    @actions.post("/configs-add")
    async def add_config(request: Request):
        form = await request.form()
        text = form.get("toml")
        upload = form.get("upload")
        if hasattr(upload, "read") and getattr(upload, "filename", ""):
            text = (await upload.read(MAX_UPLOAD + 1)).decode("utf-8", errors="replace")
        name = str(form.get("name") or "").strip() or None
        return _add_config(request, text if isinstance(text, str) else "", name, str(form.get("confirm") or ""))

    for verb in ("stop", "health", "bench", "profile"):
        def make(verb: str):
            def action(request: Request, boot_id: str):
                bid = views.boot_key(cell(request), boot_id)
                return _started(request, _start(request, verb, verb, bid, bid, f"{verb} {bid}"))
            action.__name__ = f"boot_{verb}"
            return action
        actions.post(f"/boots/{{boot_id}}/{verb}")(make(verb))

    @actions.post("/actions/attach")
    def start_attach(request: Request, url: str = Form(...)):
        url = url.strip()
        return _started(request, _start(request, "attach", "attach", url, f"attach {url}", f"attach {url}"))

    @actions.post("/actions/import")
    async def start_import(request: Request, kind: str = Form(...), config: str = Form(""),
                           file: UploadFile = File(...)):
        from dynocell.errors import UserError
        from dynocell.runbooks.imports import MAX_UPLOAD_BYTES, store_upload

        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_UPLOAD_BYTES + (1 << 20):
            raise UserError(f"file: more than {MAX_UPLOAD_BYTES >> 20} MiB",
                            "import a file this large with the CLI (dynocell import …)")
        data, size = [], 0
        while chunk := await file.read(1 << 20):
            size += len(chunk)
            if size > MAX_UPLOAD_BYTES:
                raise UserError(f"file: more than {MAX_UPLOAD_BYTES >> 20} MiB",
                                "import a file this large with the CLI (dynocell import …)")
            data.append(chunk)
        path = await run_in_threadpool(store_upload, cell(request), kind, iter(data))
        ref = (kind, str(path), config.strip() or None)
        return _started(request, _start(request, "import", "import", ref, f"import {path.name}",
                                         f"import {kind} {path.name[:12]}"))

    @actions.post("/notes")
    def add_note(request: Request, kind: str = Form(...), target: str = Form(...), text: str = Form(...)):
        views.add_note(cell(request), kind, target, text)
        back = {"config": f"/configs/{quote(target, safe=':')}", "boot": f"/boots/{quote(target)}",
                "run": f"/runs/{quote(target)}", "entry": f"/runbooks/{quote(target)}"}.get(kind, "/")
        return RedirectResponse(back + "#notes", status_code=303)

    # ------------------------------------------------ JSON API (read)
    def j(data: Any) -> JSONResponse:
        return JSONResponse(jsonable_encoder(data))

    @api.get("/dashboard", summary="Live boots, recent runs, failures")
    def api_dashboard(request: Request):
        views.reconcile_live(cell(request))
        return j(views.dashboard(cell(request)))

    @api.get("/boots", summary="Boots, newest first (live only unless all=true)")
    def api_boots(request: Request, all: bool = False,  # noqa: A002
                  host: str = Query("", description="only boots of this host (hostname or machine id prefix)")):
        views.reconcile_live(cell(request))
        return j(views.list_boots(cell(request), all, host_ids=views.host_ids_for(cell(request), host)))

    @api.get("/boots/{boot_id}", summary="One boot: phases, health history, runs, linked entries")
    def api_boot(request: Request, boot_id: str):
        views.reconcile_live(cell(request))
        return j(views.boot_detail(cell(request), boot_id))

    @api.get("/boots/{boot_id}/log", summary="Log tail (n lines, optional case-insensitive search q)")
    def api_log(request: Request, boot_id: str, n: int = 200, q: str = ""):
        return j(views.log_tail(cell(request), boot_id, n, q or None))

    @api.get("/runs", summary="Runs, newest first")
    def api_runs(request: Request, limit: int = Query(100, ge=1, le=10_000, description="at most this many runs"),
                 host: str = Query("", description="only runs of this host (hostname or machine id prefix)")):
        return j(views.list_runs(cell(request), limit=limit, host_ids=views.host_ids_for(cell(request), host)))

    @api.get("/runs/{run_id}", summary="One run: bench levels, acceptance curves, profile split, findings")
    def api_run(request: Request, run_id: str):
        return j(views.run_detail(cell(request), run_id))

    @api.get("/compare", summary="Two or more runs side by side (runs=a&runs=b or runs=a,b)")
    def api_compare(request: Request, runs: list[str] = Query(default=[])):
        return j(views.compare_runs(cell(request), _compare_ids(runs)))

    @api.get("/configs", summary="Configs with labels and hashes")
    def api_configs(request: Request):
        return j(views.list_configs(cell(request)))

    @api.get("/configs-diff", summary="Field-by-field diff of two configs")
    def api_config_diff(request: Request, a: str, b: str):
        return j(views.config_diff(cell(request), a, b))

    @api.get("/configs/{ref:path}", summary="One config by label, hash or hash prefix")
    def api_config(request: Request, ref: str):
        return j(views.config_detail(cell(request), ref))

    @api.get("/runbooks", summary="Runbook search (full text)")
    def api_runbooks(request: Request, q: str = ""):
        return j(views.search_entries(cell(request), q))

    @api.get("/runbooks/{slug:path}", summary="One runbook entry (markdown body)")
    def api_entry(request: Request, slug: str):
        return j(views.get_entry(cell(request), slug))

    @api.get("/jobs", response_model=list[JobOut], summary="Background jobs of this panel process")
    def api_jobs(request: Request):
        return request.app.state.jobs.list()

    @api.get("/jobs/{job_id}", response_model=JobOut, summary="One background job's status and progress")
    def api_job(request: Request, job_id: str):
        job = request.app.state.jobs.status(job_id)
        if job is None:
            raise NotFound(f"no job {job_id!r}", "jobs live only as long as the panel process")
        return job

    # ------------------------------------------------ JSON API (actions)
    @api_actions.post("/runs", response_model=StartedOut, status_code=202,
                      summary="Start the main job for a stored config (deduplicated per config)")
    def api_start_run(request: Request, body: StartRequest):
        key = _bootable_config(request, body.config)
        return _started(request, _start(request, "run", "run", key, key, f"run {_name(request, body.config, key)}"))

    @api_actions.post("/boots", response_model=StartedOut, status_code=202,
                      summary="Boot a stored config (detached)")
    def api_start_boot(request: Request, body: StartRequest):
        key = _bootable_config(request, body.config)
        return _started(request, _start(request, "boot", "boot", key, key, f"boot {_name(request, body.config, key)}"))

    @api_actions.post("/configs", response_model=ConfigAddedOut,
                      summary="Store a config from its TOML text (moving a label needs confirm = the new hash)")
    def api_add_config(request: Request, body: ConfigAddRequest):
        return _add_config(request, body.toml, body.name, body.confirm or "")

    for verb in ("stop", "health", "bench", "profile"):
        def make_api(verb: str):
            def action(request: Request, boot_id: str):
                bid = views.boot_key(cell(request), boot_id)
                return _started(request, _start(request, verb, verb, bid, bid, f"{verb} {bid}"))
            action.__name__ = f"api_boot_{verb}"
            return action
        api_actions.post(f"/boots/{{boot_id}}/{verb}", response_model=StartedOut, status_code=202,
                         summary=f"{verb.capitalize()} a boot (background job)")(make_api(verb))

    @api_actions.post("/notes", summary="Add a note to a config, boot, run or entry")
    def api_note(request: Request, body: NoteRequest):
        return {"id": views.add_note(cell(request), body.kind, body.target, body.text)}

    app.state.post_paths = sorted({r.path for router in (pages, actions, api, api_actions) for r in router.routes
                                   if "POST" in (getattr(r, "methods", None) or ())})
    app.include_router(pages)
    app.include_router(actions)
    app.include_router(api)
    app.include_router(api_actions)
