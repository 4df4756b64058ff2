"""Who may use the panel, checked on every request before any route: the ``Host`` header on a
loopback bind (stops DNS rebinding), ``Origin``/``Referer`` on state-changing methods, then a
session cookie, a Bearer token or a ``?token=`` login URL; every response gets
:data:`SECURITY_HEADERS`. Token checks go through :class:`TokenChecker` (scrypt, back-off)."""

from __future__ import annotations

import hashlib
import threading
from math import ceil
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import Request
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.concurrency import run_in_threadpool

from dynocell.web.auth import COOKIE, LAUNCH_TOKEN_ID, Sessions, host_name, is_loopback, safe_next, same_origin
from dynocell.web.errors import error_response

PUBLIC_PREFIXES = ("/static/",)
PUBLIC_PATHS = ("/login", "/healthz")
"""What a logged-out client may reach: the login page, the liveness probe and the static assets.
Everything else needs a login, ``/openapi.json`` included (it maps the whole API surface)."""
UNSAFE_METHODS = ("POST", "PUT", "PATCH", "DELETE")
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


def _digest(token: str) -> str:
    return hashlib.sha256(token.strip().encode()).hexdigest()


class TokenChecker:
    """Checks login tokens of one panel (``app.state``: ``cell``, ``limiter``, ``launch_token``).

    Remembers sha256(token) → token id of tokens this process has verified (and the launch
    token): a known token is checked without scrypt, so a script keeps working while its address
    backs off. A stored token counts only while it is live (not revoked). Back-off applies to a client's
    failures, never to a right token: while an address backs off its tokens are still checked, one at a time.
    """

    def __init__(self, state: Any) -> None:
        self.state = state
        self._known: dict[str, str] = {}
        self._lock = threading.Lock()
        self._lane = threading.Lock()  # the one scrypt check of a backing-off client at a time
        if state.launch_token:
            self._known[_digest(state.launch_token)] = LAUNCH_TOKEN_ID

    def live(self, token_id: str) -> bool:
        """True while token ``token_id`` may log in (the launch token: while the panel has one)."""
        from dynocell.runbooks import web_tokens

        if token_id == LAUNCH_TOKEN_ID:
            return self.state.launch_token is not None
        return token_id.isdigit() and web_tokens.is_live(self.state.cell, int(token_id))

    def _known_id(self, token: str) -> str | None:
        with self._lock:
            tid = self._known.get(_digest(token))
        return tid if tid is not None and self.live(tid) else None

    def __call__(self, token: str, client: str) -> tuple[str | None, float]:
        """``(token id, 0)`` for a right token (also while ``client`` backs off), ``(None, 0)`` for a wrong one,
        ``(None, wait)`` for a wrong one while ``client`` backs off (or when another backing-off check is under
        way). Blocking (scrypt): call from a worker thread."""
        from dynocell.runbooks import web_tokens

        token = (token or "").strip()
        tid = self._known_id(token) if token else None
        if tid is not None:  # no scrypt, nothing to limit; it does not clear the address's back-off either
            return tid, 0.0
        wait = self.state.limiter.reserve(client)
        if wait:
            # backing off: another user of the same address may hold a right token (issue 32, item 11), so it is
            # still checked, one at a time in the whole panel (scrypt work stays bounded; a check already under way
            # answers 429); a right one gets in, a wrong one waits; neither clears the address's failures
            if not token or not self._lane.acquire(blocking=False):
                return None, wait
            try:
                found = web_tokens.verify(self.state.cell, token)
            finally:
                self._lane.release()
            if found is None:
                return None, wait
        else:
            found = web_tokens.verify(self.state.cell, token) if token else None
            if found is None:
                return None, 0.0
            self.state.limiter.succeeded(client)
        with self._lock:
            self._known[_digest(token)] = str(found)
        return str(found), 0.0


def set_session_cookie(response: Response, value: str) -> None:
    """Set the session cookie: HttpOnly, SameSite=Strict, path /."""
    response.set_cookie(COOKIE, value, httponly=True, samesite="strict", path="/", max_age=12 * 3600)


def _host_ok(request: Request) -> bool:
    if not is_loopback(request.app.state.bind_host):
        return True
    name = host_name(request.headers.get("host") or "")
    return is_loopback(name) or name == "testserver"


def _origin_ok(request: Request) -> bool:
    # Browsers send Origin on every cross-origin POST (Referer as a fallback); scripts may send neither.
    origin = request.headers.get("origin") or request.headers.get("referer")
    return not origin or same_origin(origin, request.headers.get("host") or "")


def _backing_off(request: Request, wait: float) -> Response:
    return error_response(request, 429, "too many failed logins from this address",
                          f"try again in {wait:.0f} s", headers={"Retry-After": str(ceil(wait))})


async def security_headers(request: Request, call_next):  # noqa: ANN201
    """HTTP middleware: :func:`access`, then :data:`SECURITY_HEADERS` on whatever it answered."""
    response = await access(request, call_next)
    for k, v in SECURITY_HEADERS.items():
        response.headers.setdefault(k, v)
    return response


async def access(request: Request, call_next):  # noqa: ANN201
    """Refuse a foreign ``Host`` (400) or a cross-origin unsafe method (403); attach the session
    (``request.state.session``, None when absent or its token was revoked); public paths pass;
    a ``?token=`` GET logs in; a Bearer token must be valid (401, 429 while backing off); else a
    session is required (:func:`_unauthenticated`)."""
    sessions: Sessions = request.app.state.sessions
    request.state.bearer = False
    request.state.session = None
    if not _host_ok(request):
        return error_response(request, 400, "this panel answers only to localhost",
                              "open it as http://127.0.0.1:<port>/ (the address `dynocell web` printed)")
    if request.method in UNSAFE_METHODS and not _origin_ok(request):
        return error_response(request, 403, "cross-origin request refused",
                              "submit the form from the panel's own pages")
    sess = sessions.verify(request.cookies.get(COOKIE))
    if sess is not None and not await run_in_threadpool(request.app.state.check_token.live, sess.token_id):
        sess = None  # its token was revoked: the session ends
    request.state.session = sess
    path = request.url.path
    if is_public(path):
        return await call_next(request)
    url_token = request.query_params.get("token")
    if url_token is not None and request.method in ("GET", "HEAD"):
        return await _token_url_login(request, url_token)
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return await _bearer(request, auth[7:], call_next)
    if sess is None:
        return _unauthenticated(request)
    return await call_next(request)


def is_public(path: str) -> bool:
    """True for the paths a logged-out client may reach (:data:`PUBLIC_PATHS`, :data:`PUBLIC_PREFIXES`)."""
    return path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)


def _client(request: Request) -> str:
    return request.client.host if request.client else "?"


async def _bearer(request: Request, token: str, call_next):  # noqa: ANN202
    tid, wait = await run_in_threadpool(request.app.state.check_token, token, _client(request))
    if wait:
        return _backing_off(request, wait)
    if tid is None:
        return error_response(request, 401, "invalid token", "create one with `dynocell web token create`")
    request.state.bearer = True
    return await call_next(request)


async def _token_url_login(request: Request, token: str) -> Response:
    """``GET …?token=T`` (the URL ``dynocell web`` prints): trade T for a session cookie and
    redirect to the same address without the token — on this panel only: a path such as ``//evil.example/``
    (another site to a browser) redirects to ``/`` (:func:`~dynocell.web.auth.safe_next`)."""
    tid, wait = await run_in_threadpool(request.app.state.check_token, token, _client(request))
    if wait:
        return _backing_off(request, wait)
    if tid is None:
        return error_response(request, 401, "that login link's token is not valid",
                              "use the URL `dynocell web` printed, or log in at /login")
    rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
    target = safe_next(request.url.path + ("?" + urlencode(rest) if rest else ""))
    value, _ = request.app.state.sessions.issue(tid)
    resp = RedirectResponse(target, status_code=303)
    set_session_cookie(resp, value)
    return resp


def _unauthenticated(request: Request) -> Response:
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
