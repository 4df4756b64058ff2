"""The terminal dashboard's run detail shows the speculative step's phase split, as ``dynocell show`` and the web
run page do: per phase (verify, draft, draft extend, glue, sampling) its %, ms, launches and launches per output
token; or why the split is unavailable; or, when none is stored, how to compute it.

Rendered from the real H200 store of issue 24 (tests/data/sglang-0.5.17-eagle/dynocell-h200, see its README:
SGLang 0.5.17, EAGLE with CUDA graphs, a torch-profiler window with its phase split stored) copied as the test's
DYNOCELL_HOME, through the app's own data path (``views.run_detail`` on a worker) driven by Textual's pilot.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
from rich.console import Console

DATA = Path(__file__).parent / "data" / "sglang-0.5.17-eagle" / "dynocell-h200"
BOOTS = json.loads((DATA / "boots.json").read_text())
#: The EAGLE main job with CUDA graphs (profiled, phase split stored) and a greedy twin (no profile window).
EAGLE_GRAPH = next(b["run_id"] for b in BOOTS if b["config"] == "h200-eagle-graph" and b["workload"] == "default")
UNPROFILED = next(b["run_id"] for b in BOOTS if b["config"] == "h200-eagle-graph" and b["workload"] != "default")
WIDTH = 120


@pytest.fixture()
def cell(tmp_path, monkeypatch):
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    shutil.copy(DATA / "dynocell.db", tmp_path / "dynocell.db")
    monkeypatch.setenv("DYNOCELL_HOME", str(tmp_path))
    monkeypatch.delenv("DYNOCELL_DATABASE_URL", raising=False)
    return open_cell(load_settings())


def _set_phases(db: Path, run_id: str, sql: str, *args: object) -> None:
    """Edit the stored phase split of ``run_id``'s profile (``sql`` on ``profile_phases``, ``?`` last = its
    profile id) in the copied store."""
    con = sqlite3.connect(db)
    try:
        pid = con.execute("select id from profile_runs where run_id = ?", (run_id,)).fetchone()[0]
        con.execute(sql, (*args, pid))
        con.commit()
    finally:
        con.close()


def _run_detail_text(cell, run_id: str) -> str:
    """The run screen's content as the TUI renders it (pilot at WIDTH columns), as plain text."""
    from textual.widgets import Static

    from dynocell.cli.tui.screens import RunScreen
    from tests.test_tui import make_app, wait_for

    ids = {"aliases": {run_id: "run-1"}}
    out: list[str] = []

    async def main() -> None:
        app = make_app(cell, ids, start=lambda: RunScreen(run_id))
        async with app.run_test(size=(WIDTH, 40)) as pilot:
            await wait_for(lambda: isinstance(app.screen, RunScreen) and app.screen.loaded, 30, pilot, "run detail")
            content = app.screen.query_one("#run-content", Static)
            con = Console(width=content.size.width, record=True, color_system=None)
            con.print(content.content)
            out.append(con.export_text())
            await pilot.press("q")

    asyncio.run(main())
    return out[0]


def test_run_detail_shows_the_phase_split(cell):
    from dynocell.runbooks import views

    phases = views.run_detail(cell, EAGLE_GRAPH)["profile"]["phases"]
    rows = [p for p in phases["phases"] if p["pct"] is not None and p["ms"]]
    assert {p["label"] for p in rows} == {"verify", "draft", "draft extend", "glue", "sampling"}

    text = _run_detail_text(cell, EAGLE_GRAPH)
    # the headline: every phase with its share, in the stored order
    assert "phases: " + ", ".join(f"{p['label']} {p['pct']:.0f} %" for p in rows) in text
    assert f"gpu time in steps {phases['total_ms']:.1f} ms" in text
    # one line per phase: %, ms and launches per output token; after the category split, before top kernels
    lines = text.splitlines()
    for p in rows:
        line = next(ln for ln in lines if ln.strip().startswith(p["label"] + " ") and "/tok" in ln)
        assert f"{p['pct']:5.1f} %" in line and f"{p['ms']:9.2f} ms" in line, line
        assert f"{p['launches_per_token']:6.1f}/tok" in line, line
    assert text.index("profile split") < text.index("phases: ") < text.index("top kernels")


def test_run_detail_says_why_the_split_is_unavailable(cell):
    from dynocell.engine.spec_phases import load_phase_table

    reason = load_phase_table().reason_for("vllm")
    assert reason
    _set_phases(cell.settings.home / "dynocell.db", EAGLE_GRAPH,
                "update profile_phases set state = 'unavailable', phases = '[]', reason = ? where profile_id = ?",
                reason)
    text = _run_detail_text(cell, EAGLE_GRAPH)
    assert "phases: unavailable: " + " ".join(reason.split()[:4]) in " ".join(text.split())


def test_run_detail_without_a_stored_split_says_how_to_compute_it(cell):
    _set_phases(cell.settings.home / "dynocell.db", EAGLE_GRAPH, "delete from profile_phases where profile_id = ?")
    text = _run_detail_text(cell, EAGLE_GRAPH)
    assert "phases: not computed for this profile: dynocell reanalyze run-1" in text
    # a run without a profile window has no phase line at all
    text = _run_detail_text(cell, UNPROFILED)
    assert "profile: none" in text and "phases:" not in text
