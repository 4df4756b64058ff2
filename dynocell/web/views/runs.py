"""Runs: the list, one run's page (bench levels, acceptance curves by draft position, profile
split, findings), the comparison of two or more runs; starting the main job; their JSON mirror."""

from __future__ import annotations

from typing import Any

from fastapi import Form, Query, Request
from fastapi.responses import HTMLResponse

from dynocell.runbooks import views
from dynocell.web import charts
from dynocell.web.views.models import StartedOut, StartRequest
from dynocell.web.views.shared import Family, cell, json_response, render, start_on_config

routes = Family()


@routes.pages.get("/runs", response_class=HTMLResponse)
def runs_page(request: Request, host: str = ""):
    c = cell(request)
    return render(request, "runs.html", {"runs": views.list_runs(c, host_ids=views.host_ids_for(c, host)),
                                         "hosts": views.host_choices(c), "host": host, "title": "Runs"})


@routes.pages.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(request: Request, run_id: str):
    d = views.run_detail(cell(request), run_id)
    ctx = {"r": d, "title": "Run " + d["run"]["id"]}
    ctx.update(_run_charts(d))
    return render(request, "run.html", ctx)


@routes.pages.get("/compare", response_class=HTMLResponse)
def compare_page(request: Request, runs: list[str] = Query(default=[])):
    ids = _compare_ids(runs)
    if len(ids) < 2:
        return render(request, "compare_pick.html", {"runs": views.list_runs(cell(request)),
                                                     "title": "Compare runs"})
    cmp = views.compare_runs(cell(request), ids)
    ctx = {"cmp": cmp, "title": "Compare " + " · ".join(r["run"]["id"][:8] for r in cmp["runs"])}
    ctx.update(_compare_charts(cmp))
    return render(request, "compare.html", ctx)


@routes.actions.post("/actions/run")
def start_run(request: Request, config: str = Form(...)):
    return start_on_config(request, "run", config)


@routes.api.get("/runs", summary="Runs, newest first")
def api_runs(request: Request, limit: int = Query(100, ge=1, le=10_000, description="at most this many runs"),
             host: str = Query("", description="only runs of this host (hostname or machine id prefix)")):
    return json_response(views.list_runs(cell(request), limit=limit,
                                         host_ids=views.host_ids_for(cell(request), host)))


@routes.api.get("/runs/{run_id}", summary="One run: bench levels, acceptance curves, profile split, findings")
def api_run(request: Request, run_id: str):
    return json_response(views.run_detail(cell(request), run_id))


@routes.api.get("/compare", summary="Two or more runs side by side (runs=a&runs=b or runs=a,b)")
def api_compare(request: Request, runs: list[str] = Query(default=[])):
    return json_response(views.compare_runs(cell(request), _compare_ids(runs)))


@routes.api_actions.post("/runs", response_model=StartedOut, status_code=202,
                         summary="Start the main job for a stored config (deduplicated per config)")
def api_start_run(request: Request, body: StartRequest):
    return start_on_config(request, "run", body.config)


def _run_charts(detail: dict[str, Any]) -> dict[str, Any]:
    acc = []
    for c in detail["curves"]:
        series: list[dict[str, Any]] = [
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
    bl = detail.get("by_length")
    length = charts.length_chart(bl["buckets"], crossover=bl.get("crossover_tokens")) if bl else None
    return {"acceptance_charts": acc, "profile_chart": prof, "length_chart": length}


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
