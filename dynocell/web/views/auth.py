"""Logging in and out: ``/login`` (page and form), ``/logout``, and ``/healthz`` (public)."""

from __future__ import annotations

from math import ceil

from fastapi import Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from dynocell.web.access import set_session_cookie
from dynocell.web.auth import COOKIE, safe_next
from dynocell.web.views.shared import Family, client, render

routes = Family()


@routes.pages.get("/healthz")
async def healthz() -> dict[str, str]:
    """The panel's liveness probe: answered on the event loop, so it answers at once even while every worker
    thread waits on an engine (issue 32, item 10)."""
    return {"status": "ok"}


@routes.pages.get("/login", response_class=HTMLResponse)
def login_page(request: Request, next: str = "/"):  # noqa: A002
    return render(request, "login.html", {"next": safe_next(next), "error": None, "title": "Log in"})


@routes.pages.post("/login")
def login(request: Request, token: str = Form(""), next: str = Form("/")):  # noqa: A002
    # Origin/Host were checked by the access middleware (a cross-origin form never gets here).
    tid, wait = request.app.state.check_token(token, client(request))
    if wait:
        return render(request, "login.html", {"next": safe_next(next), "title": "Log in",
                                              "error": f"Too many failed logins; try again in {ceil(wait)} s."},
                      status=429, headers={"Retry-After": str(ceil(wait))})
    if tid is None:
        return render(request, "login.html", {"next": safe_next(next), "title": "Log in",
                                              "error": "That token is not valid."}, status=401)
    value, _ = request.app.state.sessions.issue(tid)
    resp = RedirectResponse(safe_next(next), status_code=303)
    set_session_cookie(resp, value)
    return resp


@routes.actions.post("/logout")
def logout(request: Request):
    sess = request.state.session
    if sess:
        request.app.state.sessions.revoke(sess.sid)
    resp = RedirectResponse("/login", status_code=303)
    resp.delete_cookie(COOKIE, path="/")
    return resp
