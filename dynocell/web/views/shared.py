"""What every family of pages shares: the four routers of a family, the CSRF dependency,
rendering (full page or one htmx block), starting a background job and answering for it, and the
config references a job is keyed by.

Pages take ``?fragment=<block>`` (with ``HX-Request``) to render one block of the same template.
Every POST passes :func:`require_csrf` (session + CSRF token, or a Bearer token for scripts);
GET handlers only read. Actions start background jobs through ``app.state.jobs``, keyed by
(kind, config hash | boot id) so duplicate clicks never start two engines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Request
from fastapi.encoders import jsonable_encoder
from fastapi.responses import JSONResponse, RedirectResponse, Response

from dynocell.runbooks import configs, views
from dynocell.web.app import result_id
from dynocell.web.auth import CSRF_FIELD, CSRF_HEADER
from dynocell.errors import UserError
from dynocell.text import printable

#: The blocks of a template a page may render alone (``?fragment=<block>``); each is a ``{% block %}`` of its
#: template (a test checks it: a listed block the template lacks was a 500).
FRAGMENTS = {
    "dashboard.html": {"live", "jobs"},
    "boot.html": {"log"},
    "job.html": {"job"},
    "runbooks.html": {"results"},
}
#: The largest config text (pasted or uploaded) the panel stores, in bytes.
MAX_UPLOAD = 1 << 20


async def require_csrf(request: Request) -> None:
    """Dependency of every state-changing route: a session and its CSRF token (header or form
    field), or a verified Bearer token. Raises HTTP 403 otherwise."""
    if getattr(request.state, "bearer", False):
        return
    sess = request.state.session
    token: object = request.headers.get(CSRF_HEADER)  # a str, or what the form holds (a file too)
    if not token and "form" in request.headers.get("content-type", ""):
        form = await request.form()
        token = form.get(CSRF_FIELD)
    if sess is None or not request.app.state.sessions.check_csrf(sess, token if isinstance(token, str) else None):
        raise HTTPException(403, "missing or wrong CSRF token (reload the page and try again)")


def _pages() -> APIRouter:
    return APIRouter(include_in_schema=False)


def _actions() -> APIRouter:
    return APIRouter(include_in_schema=False, dependencies=[Depends(require_csrf)])


def _api() -> APIRouter:
    return APIRouter(prefix="/api", tags=["read"])


def _api_actions() -> APIRouter:
    return APIRouter(prefix="/api", tags=["actions"], dependencies=[Depends(require_csrf)])


@dataclass(frozen=True)
class Family:
    """The routes of one family of pages, in four routers: ``pages`` (HTML, GET, no CSRF),
    ``actions`` (HTML forms, POST, :func:`require_csrf`), ``api`` (JSON under /api, read) and
    ``api_actions`` (JSON under /api, POST, :func:`require_csrf`; in the OpenAPI schema)."""

    pages: APIRouter = field(default_factory=_pages)
    actions: APIRouter = field(default_factory=_actions)
    api: APIRouter = field(default_factory=_api)
    api_actions: APIRouter = field(default_factory=_api_actions)


def cell(request: Request) -> Any:
    """The panel's open cell (store + settings), ``app.state.cell``."""
    return request.app.state.cell


def render(request: Request, name: str, ctx: dict[str, Any], status: int = 200,
           headers: dict[str, str] | None = None) -> Response:
    """Template ``name`` with the base context and ``ctx``: the whole page, or only the block
    ``?fragment=`` names when :data:`FRAGMENTS` lists it for ``name``. Raises UserError (HTTP 400) for a
    ``?fragment=`` the page does not have."""
    app = request.app
    full = app.state.base_context(request)
    full.update(ctx)
    frag = request.query_params.get("fragment")
    if frag is not None and frag not in FRAGMENTS.get(name, set()):
        known = sorted(FRAGMENTS.get(name, set()))
        raise UserError(f"fragment: this page has no fragment {printable(frag, limit=40)!r}",
                        f"use one of {', '.join(known)}" if known else "leave out ?fragment= (this page has none)")
    block = frag
    return app.state.templates.TemplateResponse(request, name, full, status_code=status, block_name=block,
                                                headers=headers)


def json_response(data: Any) -> JSONResponse:
    """``data`` (dicts, lists, dates, dataclasses…) as a JSON response."""
    return JSONResponse(jsonable_encoder(data))


def started(request: Request, job_id: str) -> Response:
    """The answer to an action that started (or reused) job ``job_id``: 202 + JSON under /api,
    the job's block for htmx, else a redirect to the job's page."""
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


def start(request: Request, kind: str, proc: str, ref: Any, key: str, label: str) -> str:
    """Start procedure ``proc`` (``app.state.procedures``) on ``ref`` as a background job of
    ``kind`` keyed by ``key`` (an identical running job is reused); returns the job id."""
    fn = request.app.state.procedures[proc]
    c = cell(request)

    def job(progress=None):
        return result_id(fn(c, ref, progress=progress))

    return request.app.state.jobs.start(kind, job, key=key, label=label)


def start_on_boot(request: Request, verb: str, boot_id: str) -> Response:
    """Start ``verb`` (stop, health, bench, profile) on the boot ``boot_id`` names."""
    bid = views.boot_key(cell(request), boot_id)
    return started(request, start(request, verb, verb, bid, bid, f"{verb} {bid}"))


def config_name(request: Request, ref: str, config_hash: str) -> str:
    """How a job names its config: the label the request used, else the short hash."""
    ref = ref.strip()
    return ref if configs.label_target(cell(request), ref) == config_hash else configs.short_hash(config_hash)


def bootable_config(request: Request, ref: str) -> str:
    """The hash of the stored config ``ref`` names (never a path), refused when its ``[env]``
    injects code and nobody trusted it from the CLI."""
    c = cell(request)
    h = configs.resolve_stored(c, ref)
    configs.check_web_bootable(c, h)
    return h


def start_on_config(request: Request, kind: str, ref: str) -> Response:
    """Start ``kind`` (run, boot) on the stored config ``ref`` names, keyed by its hash."""
    key = bootable_config(request, ref)
    return started(request, start(request, kind, kind, key, key, f"{kind} {config_name(request, ref, key)}"))


def client(request: Request) -> str:
    """The client's address (``?`` when unknown)."""
    return request.client.host if request.client else "?"
