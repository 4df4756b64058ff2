"""The web panel's app factory: ``create_app(settings)`` → FastAPI (no global state).

Everything the app needs lives on ``app.state``: ``settings``, ``cell`` (store + settings),
``jobs`` (:class:`dynocell.runbooks.jobs.JobRunner`), ``sessions``, ``limiter``,
``procedures`` (the runbooks procedures actions call), ``bind_host``.

One error path: :class:`dynocell.errors.DynocellError` (status from ``http_status``),
HTTP errors and validation errors render as a full HTML page, an htmx fragment
(``HX-Request``) or JSON (``/api/…``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from jinja2_fragments.fastapi import Jinja2Blocks
from starlette.exceptions import HTTPException as StarletteHTTPException

from dynocell.errors import DynocellError
from dynocell.runbooks.jobs import JobRunner
from dynocell.settings import Settings
from dynocell.web import filters
from dynocell.web.auth import COOKIE, LoginLimiter, Sessions, is_loopback

HERE = Path(__file__).parent
HTMX_FILE = "htmx-2.0.4.min.js"
PUBLIC_PREFIXES = ("/static/", "/login", "/healthz")


def default_procedures() -> dict[str, Callable[..., Any]]:
    """The real runbooks procedures behind the panel's actions (imported lazily when called)."""

    def run(cell, config_ref, progress=None):
        from dynocell.runbooks.run import run_job

        return run_job(cell, config_ref, progress=progress)

    def boot(cell, config_ref, progress=None):
        from dynocell.runbooks.boots import boot as _boot

        return _boot(cell, config_ref, detach=True, progress=progress)

    def attach(cell, url, progress=None):
        from dynocell.runbooks.attach import attach as _attach

        return _attach(cell, url)

    def import_evidence(cell, ref, progress=None):
        from dynocell.runbooks.imports import import_file

        kind, path, config = ref  # (kind, stored upload path, config ref or None), made by the route
        return import_file(cell, kind, path, config_ref=config)

    def stop(cell, boot_ref, progress=None):
        from dynocell.runbooks.boots import stop as _stop

        return _stop(cell, boot_ref)

    def health(cell, boot_ref, progress=None):
        from dynocell.runbooks.boots import health as _health

        return _health(cell, boot_ref)

    def bench(cell, boot_ref, progress=None):
        from dynocell.runbooks.run import bench as _bench

        return _call_with_progress(_bench, cell, boot_ref, progress=progress)

    def profile(cell, boot_ref, progress=None):
        from dynocell.runbooks.run import profile as _profile

        return _call_with_progress(_profile, cell, boot_ref, progress=progress)

    return {"run": run, "boot": boot, "stop": stop, "health": health, "bench": bench, "profile": profile,
            "attach": attach, "import": import_evidence}


def _call_with_progress(fn: Callable[..., Any], *args: Any, progress=None) -> Any:
    import inspect

    try:
        if "progress" in inspect.signature(fn).parameters:
            return fn(*args, progress=progress)
    except (TypeError, ValueError):
        pass
    return fn(*args)


def _result_id(value: Any) -> Any:
    """Procedures may return an id or an object with ``.id`` / ``.run_id``; jobs keep the id."""
    if isinstance(value, (str, int, float)) or value is None:
        return value
    for attr in ("run_id", "id", "boot_id"):
        if hasattr(value, attr):
            return getattr(value, attr)
    if isinstance(value, dict):
        for k in ("run_id", "id", "boot_id"):
            if k in value:
                return value[k]
    return str(value)


def create_app(settings: Settings, *, bind_host: str | None = None, cell: Any = None,
               procedures: dict[str, Callable[..., Any]] | None = None,
               require_login: bool | None = None, login_max_failures: int = 5,
               login_window_s: float = 60.0) -> FastAPI:
    """Build the panel for ``settings``.

    ``bind_host``: the address it will listen on (default ``settings.web_host``); a
    non-loopback bind always requires login. ``require_login``: force login on/off (None =
    required when bound off loopback or any web token exists). ``procedures``: overrides of
    :func:`default_procedures` (tests only). ``cell``: an already-open cell (default:
    ``runbooks.views.open_view_cell(settings)``).
    """
    from dynocell.runbooks import views

    app = FastAPI(title="dynocell panel", version="1", description="Engine test cell: boots, runs, acceptance, "
                  "profiles. JSON mirror of every page under /api; actions need a session + CSRF header or "
                  "`Authorization: Bearer <token>`.")
    app.state.settings = settings
    app.state.cell = cell if cell is not None else views.open_view_cell(settings)
    app.state.bind_host = bind_host or settings.web_host
    app.state.jobs = JobRunner()
    app.state.sessions = Sessions()
    app.state.limiter = LoginLimiter(login_max_failures, login_window_s)
    procs = default_procedures()
    procs.update(procedures or {})
    app.state.procedures = procs
    app.state.require_login_override = require_login

    templates = Jinja2Blocks(directory=str(HERE / "templates"))
    filters.install(templates.env)
    templates.env.globals["htmx_file"] = HTMX_FILE
    templates.env.globals["poll_s"] = settings.poll_interval_s
    app.state.templates = templates
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    def login_required() -> bool:
        if app.state.require_login_override is not None:
            return bool(app.state.require_login_override)
        if not is_loopback(app.state.bind_host):
            return True
        return views.web_token_count(app.state.cell) > 0

    app.state.login_required = login_required

    @app.middleware("http")
    async def access(request: Request, call_next):  # noqa: ANN202
        path = request.url.path
        sessions: Sessions = app.state.sessions
        request.state.session = sessions.verify(request.cookies.get(COOKIE))
        request.state.bearer = False
        request.state.new_cookie = None
        if path.startswith(PUBLIC_PREFIXES) or path in ("/openapi.json",):
            return await call_next(request)
        needs_login = login_required()
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            client = request.client.host if request.client else "?"
            if app.state.limiter.blocked(client):
                return error_response(request, 429, "too many failed logins", "wait a minute")
            if views.web_token_verify(app.state.cell, auth[7:].strip()) is None:
                app.state.limiter.failed(client)
                return error_response(request, 401, "invalid token", "create one with `dynocell web token create`")
            request.state.bearer = True
            return await call_next(request)
        sess = request.state.session
        if needs_login:
            if sess is None or not sess.authenticated:
                return unauthenticated(request)
        else:
            host = (request.headers.get("host") or "").rsplit(":", 1)[0] if "]" not in (
                request.headers.get("host") or "") else (request.headers.get("host") or "").split("]")[0] + "]"
            if not is_loopback(host) and host != "testserver":
                return error_response(request, 400, "this panel answers only to localhost",
                                      "open it as http://127.0.0.1:<port>/ or create a token and log in")
            if sess is None and request.method in ("GET", "HEAD"):
                value, sess = sessions.issue(authenticated=False)
                request.state.session = sess
                request.state.new_cookie = value
        response = await call_next(request)
        if request.state.new_cookie:
            set_session_cookie(response, request.state.new_cookie)
        return response

    def unauthenticated(request: Request) -> Response:
        path = request.url.path
        if path.startswith("/api"):
            return JSONResponse({"error": "login required", "hint": "log in at /login or send a Bearer token",
                                 "status": 401}, status_code=401)
        if request.headers.get("hx-request"):
            return Response(status_code=401, headers={"HX-Redirect": "/login"})
        if request.method in ("GET", "HEAD"):
            target = request.url.path + (("?" + request.url.query) if request.url.query else "")
            return RedirectResponse("/login?next=" + quote(target, safe=""), status_code=303)
        return error_response(request, 401, "login required", "log in at /login")

    def error_response(request: Request, status: int, message: str, hint: str | None = None) -> Response:
        if request.url.path.startswith("/api") or "application/json" in request.headers.get("accept", "") and \
                "text/html" not in request.headers.get("accept", ""):
            return JSONResponse({"error": message, "hint": hint, "status": status}, status_code=status)
        ctx = {"status": status, "message": message, "hint": hint, "title": f"Error {status}"}
        ctx.update(base_context(request))
        block = "error" if request.headers.get("hx-request") else None
        return templates.TemplateResponse(request, "error.html", ctx, status_code=status, block_name=block)

    app.state.error_response = error_response

    def base_context(request: Request) -> dict[str, Any]:
        sess = getattr(request.state, "session", None)
        return {"request": request, "csrf": sess.csrf if sess else "", "logged_in": bool(sess and sess.authenticated),
                "login_required": login_required(), "settings": settings}

    app.state.base_context = base_context

    @app.exception_handler(DynocellError)
    async def dynocell_error(request: Request, exc: DynocellError):  # noqa: ANN202
        return error_response(request, exc.http_status, exc.message, exc.hint)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException):  # noqa: ANN202
        detail = exc.detail if isinstance(exc.detail, str) else "error"
        resp = error_response(request, exc.status_code, detail, None)
        for k, v in (exc.headers or {}).items():
            resp.headers[k] = v
        return resp

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError):  # noqa: ANN202
        parts = [f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()[:5]]
        return error_response(request, 400, "bad request: " + "; ".join(parts), "check the form fields")

    from dynocell.web import routes

    routes.install(app)
    return app


def set_session_cookie(response: Response, value: str) -> None:
    """Set the session cookie: HttpOnly, SameSite=Strict, path /."""
    response.set_cookie(COOKIE, value, httponly=True, samesite="strict", path="/", max_age=12 * 3600)
