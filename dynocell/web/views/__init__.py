"""The panel's routes, one module per family of pages (as datasette's ``views/``): each module's
``routes`` (:class:`~dynocell.web.views.shared.Family`) holds its HTML pages, form actions (POST,
CSRF), JSON reads under /api and JSON actions; :mod:`.shared` holds what they share.

=============  ==============================================================
``auth``       /login, /logout, /healthz
``dashboard``  /, /api/dashboard
``configs``    /configs…, /configs-add, /configs-diff (+ /api)
``boots``      /boots…, artifacts, /actions/boot, stop/health/bench/profile (+ /api)
``runs``       /runs…, /compare, /actions/run (+ /api)
``runbooks``   /runbooks… (+ /api)
``jobs``       /jobs/{id} (+ /api)
``imports``    /actions/attach, /actions/import
``notes``      /notes, /api/notes
=============  ==============================================================
"""

from __future__ import annotations

from fastapi import FastAPI

from dynocell.web.views import auth, boots, configs, dashboard, imports, jobs, notes, runbooks, runs

#: The families in the order their routes are added (within each of pages, actions, api, api actions).
FAMILIES = (auth, dashboard, configs, boots, runs, runbooks, jobs, imports, notes)


def install(app: FastAPI) -> None:
    """Add every family's pages, then actions, then API reads, then API actions to ``app``, and
    record ``app.state.post_paths`` (every POST route's path, sorted)."""
    kinds = ("pages", "actions", "api", "api_actions")
    routers = [getattr(family.routes, kind) for kind in kinds for family in FAMILIES
               if getattr(family.routes, kind).routes]
    for router in routers:
        app.include_router(router)
    app.state.post_paths = sorted({r.path for router in routers for r in router.routes
                                   if "POST" in (getattr(r, "methods", None) or ())})
