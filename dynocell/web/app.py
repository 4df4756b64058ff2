"""The web panel's app factory: ``create_app(settings)`` → FastAPI (no global state).

Everything the app needs lives on ``app.state``: ``settings``, ``cell`` (store + settings),
``jobs`` (:class:`dynocell.runbooks.jobs.JobRunner`), ``sessions``, ``limiter`` (login
back-off), ``check_token``, ``launch_token``, ``procedures`` (the runbooks procedures actions
call), ``bind_host``. Every response carries :data:`dynocell.web.access.SECURITY_HEADERS`;
every request passes :func:`dynocell.web.access.access` first.

One error path (:mod:`dynocell.web.errors`): :class:`dynocell.errors.DynocellError` (status from
``http_status``), HTTP errors and validation errors render as a full HTML page, an htmx fragment
(``HX-Request``) or JSON (``/api/…``). Routes: one module per family of pages, :mod:`dynocell.web.views`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from jinja2_fragments.fastapi import Jinja2Blocks

from dynocell.runbooks.jobs import JobRunner
from dynocell.settings import Settings
from dynocell.web import errors, filters
from dynocell.web.access import TokenChecker, security_headers
from dynocell.web.auth import LoginBackoff, Sessions
from dynocell.web.errors import base_context, error_response

HERE = Path(__file__).parent
HTMX_FILE = "htmx-2.0.4.min.js"


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

        return _health(cell, boot_ref).to_dict()  # the job's result: the verdict's columns

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


def result_id(value: Any) -> Any:
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


#: The most bytes any request's body may have (the web import's route allows its own, larger limit): a config of
#: 1 MiB (``MAX_UPLOAD``) percent-encoded in a form, with room. Counted as the body streams in (FastAPI's
#: ``max_body_size``: 413), so nobody — a neighbour posting to ``/login`` without a token included — makes the
#: panel hold a body of any size in memory before it answers (issue 32, the attack pass).
MAX_BODY = 4 << 20


def create_app(settings: Settings, *, bind_host: str | None = None, cell: Any = None,
               procedures: dict[str, Callable[..., Any]] | None = None,
               launch_token: str | None = None, login_max_failures: int = 5,
               login_backoff_s: float = 1.0) -> FastAPI:
    """Build the panel for ``settings``. Every page but /login, /healthz and /static needs a login
    (``/openapi.json`` too; no ``/docs`` or ``/redoc``).

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

    # /openapi.json needs a login like any page (access.PUBLIC_PATHS); no /docs or /redoc: their
    # pages load scripts from a CDN, which the panel's Content-Security-Policy refuses anyway.
    app = FastAPI(title="dynocell panel", version="1", docs_url=None, redoc_url=None, max_body_size=MAX_BODY,
                  description="Engine test cell: boots, runs, acceptance, "
                  "profiles. JSON mirror of every page under /api; every route needs a login: a session + "
                  "CSRF header or `Authorization: Bearer <token>`.")
    app.state.settings = settings
    app.state.cell = cell if cell is not None else views.open_view_cell(settings)
    app.state.bind_host = bind_host or settings.web_host
    app.state.jobs = JobRunner()
    app.state.sessions = Sessions()
    app.state.limiter = LoginBackoff(login_max_failures, login_backoff_s)
    app.state.launch_token = launch_token
    app.state.check_token = TokenChecker(app.state)
    procs = default_procedures()
    procs.update(procedures or {})
    app.state.procedures = procs

    templates = Jinja2Blocks(directory=str(HERE / "templates"))
    filters.install(templates.env)
    templates.env.globals["htmx_file"] = HTMX_FILE
    templates.env.globals["poll_s"] = settings.poll_interval_s
    app.state.templates = templates
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")
    app.state.error_response = error_response
    app.state.base_context = base_context
    app.middleware("http")(security_headers)
    errors.install(app)

    from dynocell.web import views as web_views

    web_views.install(app)
    return app
