"""The panel's one error path: a full HTML page, an htmx fragment (``HX-Request``) or JSON
(``/api/…`` or a JSON-only ``Accept``), for :class:`dynocell.errors.DynocellError` (status from
``http_status``), HTTP errors and request validation errors alike."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from dynocell.errors import DynocellError


def base_context(request: Request) -> dict[str, Any]:
    """What every template gets: ``request``, ``csrf`` (the session's token or ``""``),
    ``logged_in``, ``settings``."""
    sess = getattr(request.state, "session", None)
    return {"request": request, "csrf": sess.csrf if sess else "", "logged_in": sess is not None,
            "settings": request.app.state.settings}


def _wants_json(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return request.url.path.startswith("/api") or "application/json" in accept and "text/html" not in accept


def error_response(request: Request, status: int, message: str, hint: str | None = None,
                   headers: dict[str, str] | None = None) -> Response:
    """``{"error", "hint", "status"}`` JSON for the API, else ``error.html`` (its ``error`` block
    alone for htmx), with HTTP ``status`` and ``headers``."""
    if _wants_json(request):
        return JSONResponse({"error": message, "hint": hint, "status": status}, status_code=status,
                            headers=headers)
    ctx = {"status": status, "message": message, "hint": hint, "title": f"Error {status}"}
    ctx.update(base_context(request))
    block = "error" if request.headers.get("hx-request") else None
    return request.app.state.templates.TemplateResponse(request, "error.html", ctx, status_code=status,
                                                        block_name=block, headers=headers)


async def _dynocell_error(request: Request, exc: DynocellError) -> Response:
    return error_response(request, exc.http_status, exc.message, exc.hint)


async def _http_error(request: Request, exc: StarletteHTTPException) -> Response:
    detail = exc.detail if isinstance(exc.detail, str) else "error"
    resp = error_response(request, exc.status_code, detail, None)
    for k, v in (exc.headers or {}).items():
        resp.headers[k] = v
    return resp


async def _validation_error(request: Request, exc: RequestValidationError) -> Response:
    parts = [f"{'.'.join(str(x) for x in e.get('loc', ()))}: {e.get('msg')}" for e in exc.errors()[:5]]
    return error_response(request, 400, "bad request: " + "; ".join(parts), "check the form fields")


def install(app: FastAPI) -> None:
    """Route every DynocellError, HTTP error and validation error of ``app`` through
    :func:`error_response`."""
    # Starlette types a handler as taking any Exception; it calls each only with the class it is registered for
    app.add_exception_handler(DynocellError, _dynocell_error)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation_error)  # type: ignore[arg-type]
