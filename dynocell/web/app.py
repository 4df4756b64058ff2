"""The web panel's app factory: ``create_app(settings)`` → FastAPI (no global state).

Everything the app needs lives on ``app.state``: ``settings``, ``cell`` (store + settings),
``jobs`` (:class:`dynocell.runbooks.jobs.JobRunner`), ``sessions``, ``limiter`` (login
back-off), ``check_token``, ``launch_token``, ``procedures`` (the runbooks procedures actions
call), ``bind_host``. Every response carries :data:`SECURITY_HEADERS`.

One error path: :class:`dynocell.errors.DynocellError` (status from ``http_status``),
HTTP errors and validation errors render as a full HTML page, an htmx fragment
(``HX-Request``) or JSON (``/api/…``).
"""

from __future__ import annotations

import hashlib
import threading
from math import ceil
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote, urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.concurrency import run_in_threadpool
from jinja2_fragments.fastapi import Jinja2Blocks
from starlette.exceptions import HTTPException as StarletteHTTPException

from dynocell.errors import DynocellError
from dynocell.runbooks.jobs import JobRunner
from dynocell.settings import Settings
from dynocell.web import filters
from dynocell.web.auth import (
    COOKIE, LAUNCH_TOKEN_ID, LoginBackoff, Sessions, host_name, is_loopback, same_origin,
)

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


def _digest(token: str) -> str:
    return hashlib.sha256(token.strip().encode()).hexdigest()


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


SECURITY_HEADERS = {
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    # Only the panel's own scripts (htmx from /static); no inline or eval'd script. Inline styles
    # stay allowed (htmx adds its indicator style; charts carry style attributes).
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
                               "img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "form-action 'self'; frame-ancestors 'none'",
}
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")


def uvicorn_options(settings: Settings) -> dict[str, Any]:
    """Keyword arguments for ``uvicorn.run`` / ``uvicorn.Config`` about forwarding headers.

    uvicorn trusts ``X-Forwarded-For``/``-Proto`` from 127.0.0.1 by default, so any local user
    could pick the client address the login back-off counts. Off unless
    ``settings.web_trusted_proxy`` names the proxy's address(es).
    """
    proxy = (settings.web_trusted_proxy or "").strip()
    if not proxy:
        return {"proxy_headers": False, "forwarded_allow_ips": ""}
    return {"proxy_headers": True, "forwarded_allow_ips": proxy}


def create_app(settings: Settings, *, bind_host: str | None = None, cell: Any = None,
               procedures: dict[str, Callable[..., Any]] | None = None,
               launch_token: str | None = None, login_max_failures: int = 5,
               login_backoff_s: float = 1.0) -> FastAPI:
    """Build the panel for ``settings``. Every page but /login, /healthz and /static needs a login.

    ``bind_host``: the address it will listen on (default ``settings.web_host``); on a loopback
    bind the ``Host`` header must be a loopback name (stops DNS-rebinding pages).
    ``launch_token``: a token valid for this panel process only (``dynocell web`` makes one
    when no stored token exists and prints ``http://HOST:PORT/?token=…``).
    ``login_max_failures`` wrong logins per client are free, then the wait doubles from
    ``login_backoff_s`` (:class:`dynocell.web.auth.LoginBackoff`). ``procedures``: overrides of
    :func:`default_procedures` (tests only). ``cell``: an already-open cell (default:
    ``runbooks.views.open_view_cell(settings)``).
    """
    from dynocell.runbooks import views

    app = FastAPI(title="dynocell panel", version="1", description="Engine test cell: boots, runs, acceptance, "
                  "profiles. JSON mirror of every page under /api; every route needs a login: a session + "
                  "CSRF header or `Authorization: Bearer <token>`.")
    app.state.settings = settings
    app.state.cell = cell if cell is not None else views.open_view_cell(settings)
    app.state.bind_host = bind_host or settings.web_host
    app.state.jobs = JobRunner()
    app.state.sessions = Sessions()
    app.state.limiter = LoginBackoff(login_max_failures, login_backoff_s)
    app.state.launch_token = launch_token
    # sha256(token) → token id of tokens this process has verified (and the launch token): a
    # known token is checked without scrypt, so a script keeps working while its address backs off.
    known: dict[str, str] = {}
    known_lock = threading.Lock()
    if launch_token:
        known[_digest(launch_token)] = LAUNCH_TOKEN_ID
    procs = default_procedures()
    procs.update(procedures or {})
    app.state.procedures = procs

    templates = Jinja2Blocks(directory=str(HERE / "templates"))
    filters.install(templates.env)
    templates.env.globals["htmx_file"] = HTMX_FILE
    templates.env.globals["poll_s"] = settings.poll_interval_s
    app.state.templates = templates
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    def token_live(token_id: str) -> bool:
        if token_id == LAUNCH_TOKEN_ID:
            return app.state.launch_token is not None
        return token_id.isdigit() and views.web_token_live(app.state.cell, int(token_id))

    def known_token(token: str) -> str | None:
        with known_lock:
            tid = known.get(_digest(token))
        return tid if tid is not None and token_live(tid) else None

    def check_token(token: str, client: str) -> tuple[str | None, float]:
        """``(token id, 0)`` for a right token, ``(None, 0)`` for a wrong one, ``(None, wait)``
        while ``client`` backs off. Blocking (scrypt): call from a worker thread."""
        token = (token or "").strip()
        tid = known_token(token) if token else None
        if tid is not None:  # no scrypt, nothing to limit; it does not clear the address's back-off either
            return tid, 0.0
        wait = app.state.limiter.reserve(client)
        if wait:
            return None, wait
        found = views.web_token_verify(app.state.cell, token) if token else None
        if found is None:
            return None, 0.0
        app.state.limiter.succeeded(client)
        with known_lock:
            known[_digest(token)] = str(found)
        return str(found), 0.0

    app.state.check_token = check_token

    def host_ok(request: Request) -> bool:
        if not is_loopback(app.state.bind_host):
            return True
        name = host_name(request.headers.get("host") or "")
        return is_loopback(name) or name == "testserver"

    def origin_ok(request: Request) -> bool:
        # Browsers send Origin on every cross-origin POST (Referer as a fallback); scripts may send neither.
        origin = request.headers.get("origin") or request.headers.get("referer")
        return not origin or same_origin(origin, request.headers.get("host") or "")

    @app.middleware("http")
    async def headers(request: Request, call_next):  # noqa: ANN202
        response = await access(request, call_next)
        for k, v in SECURITY_HEADERS.items():
            response.headers.setdefault(k, v)
        return response

    async def access(request: Request, call_next):  # noqa: ANN202
        path = request.url.path
        sessions: Sessions = app.state.sessions
        client = request.client.host if request.client else "?"
        request.state.bearer = False
        request.state.session = None
        if not host_ok(request):
            return error_response(request, 400, "this panel answers only to localhost",
                                  "open it as http://127.0.0.1:<port>/ (the address `dynocell web` printed)")
        if request.method in UNSAFE_METHODS and not origin_ok(request):
            return error_response(request, 403, "cross-origin request refused",
                                  "submit the form from the panel's own pages")
        sess = sessions.verify(request.cookies.get(COOKIE))
        if sess is not None and not await run_in_threadpool(token_live, sess.token_id):
            sess = None  # its token was revoked: the session ends
        request.state.session = sess
        if path.startswith(PUBLIC_PREFIXES) or path in ("/openapi.json",):
            return await call_next(request)
        url_token = request.query_params.get("token")
        if url_token is not None and request.method in ("GET", "HEAD"):
            return await token_url_login(request, url_token, client)
        auth = request.headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            tid, wait = await run_in_threadpool(check_token, auth[7:], client)
            if wait:
                return error_response(request, 429, "too many failed logins from this address",
                                      f"try again in {wait:.0f} s", headers={"Retry-After": str(ceil(wait))})
            if tid is None:
                return error_response(request, 401, "invalid token", "create one with `dynocell web token create`")
            request.state.bearer = True
            return await call_next(request)
        if sess is None:
            return unauthenticated(request)
        return await call_next(request)

    async def token_url_login(request: Request, token: str, client: str) -> Response:
        """``GET …?token=T`` (the URL ``dynocell web`` prints): trade T for a session cookie and
        redirect to the same address without the token."""
        tid, wait = await run_in_threadpool(check_token, token, client)
        if wait:
            return error_response(request, 429, "too many failed logins from this address",
                                  f"try again in {wait:.0f} s", headers={"Retry-After": str(ceil(wait))})
        if tid is None:
            return error_response(request, 401, "that login link's token is not valid",
                                  "use the URL `dynocell web` printed, or log in at /login")
        rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
        target = request.url.path + ("?" + urlencode(rest) if rest else "")
        value, _ = app.state.sessions.issue(tid)
        resp = RedirectResponse(target, status_code=303)
        set_session_cookie(resp, value)
        return resp

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

    def error_response(request: Request, status: int, message: str, hint: str | None = None,
                       headers: dict[str, str] | None = None) -> Response:
        if request.url.path.startswith("/api") or "application/json" in request.headers.get("accept", "") and \
                "text/html" not in request.headers.get("accept", ""):
            return JSONResponse({"error": message, "hint": hint, "status": status}, status_code=status,
                                headers=headers)
        ctx = {"status": status, "message": message, "hint": hint, "title": f"Error {status}"}
        ctx.update(base_context(request))
        block = "error" if request.headers.get("hx-request") else None
        return templates.TemplateResponse(request, "error.html", ctx, status_code=status, block_name=block,
                                          headers=headers)

    app.state.error_response = error_response

    def base_context(request: Request) -> dict[str, Any]:
        sess = getattr(request.state, "session", None)
        return {"request": request, "csrf": sess.csrf if sess else "", "logged_in": sess is not None,
                "settings": settings}

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
