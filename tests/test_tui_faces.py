"""What a new user hit in the terminal dashboard (issue 39): the boots table's columns running together
(a config hash fused with the port, ``294ed3536f452751``) and widths fixed whatever the terminal; the compare
picker showing its ticks by colour only.

Textual pilot tests over the recorded real-run store (tests/test_tui.py's ``filled`` fixture).
"""

from __future__ import annotations

import asyncio

from rich.cells import cell_len

from tests.test_tui import filled, make_app, wait_for  # noqa: F401 - filled is a fixture

__all__ = ["filled"]


def _table_cells(app) -> tuple[dict[str, int], list[dict[str, str]]]:
    from textual.widgets import DataTable

    t = app.screen.query_one("#boots", DataTable)
    widths = {str(k.value): c.width for k, c in t.columns.items()}
    rows = []
    for rk in t.rows:
        cells = t.get_row(rk)
        rows.append({key: (c.plain if hasattr(c, "plain") else str(c)) for key, c in zip(widths, cells)})
    return widths, rows


def test_boots_columns_never_run_together_and_follow_the_terminal_width(filled):  # noqa: F811
    from dynocell.cli.tui.screens import MainScreen

    cell, ids = filled

    async def main() -> None:
        app = make_app(cell, ids)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(lambda: isinstance(app.screen, MainScreen) and app.polls >= 1
                           and app.screen.query_one("#boots").row_count > 0, 30, pilot, "the boots table")
            narrow, rows = _table_cells(app)
            assert sum(narrow.values()) <= 78
            for row in rows:  # each value leaves a blank cell before the next column
                for key, text in row.items():
                    assert cell_len(text) <= narrow[key] - 1, (key, text, narrow[key])
            assert any(r["config"].endswith("…") or len(r["config"]) < 11 for r in rows)
            await pilot.resize_terminal(160, 48)
            await wait_for(lambda: _table_cells(app)[0] != narrow, 10, pilot, "widths for 160 columns")
            wide, rows = _table_cells(app)
            assert sum(wide.values()) > 150 and wide["config"] > narrow["config"] and wide["id"] >= 13
            assert all(cell_len(t) <= wide[k] - 1 for r in rows for k, t in r.items())
            full = {fmtname for fmtname in (r["config"] for r in rows)}
            assert not any(n.endswith("…") for n in full), full  # at 160 a 12-digit hash or a label shows whole
            await pilot.press("q")

    asyncio.run(main())


def test_compare_picker_shows_ticks_and_the_base_in_words(isolated_home):
    """The runs picker's toggle button only changed colour when a run was ticked: each line now reads
    ``[x] base`` / ``[x] #2`` / ``[ ]`` and a line under the list names the ticked runs in order."""
    from textual.widgets import Label

    from dynocell.cli.tui.screens import CompareScreen
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings
    from tests.test_tui import fill_fixed, open_runs_picker

    cell = open_cell(load_settings())
    ids = fill_fixed(cell)

    def prompts(sl) -> list[str]:
        return [sl.get_option_at_index(i).prompt.plain for i in range(sl.option_count)]

    async def main() -> None:
        app = make_app(cell, ids)
        async with app.run_test(size=(80, 24)) as pilot:
            sl = await open_runs_picker(app, pilot)
            assert all(p.startswith("[ ]") for p in prompts(sl))
            sl.focus()
            await pilot.press("down", "space")  # the second run first: it is the base
            await pilot.press("up", "space")
            await wait_for(lambda: len(sl.selected) == 2 and prompts(sl)[0].startswith("[x]"), 10, pilot, "two ticks")
            lines = prompts(sl)
            assert lines[1].startswith("[x] base") and lines[0].startswith("[x] #2"), lines
            assert all(p.startswith("[ ]") for p in lines[2:])
            said = str(app.screen.query_one("#runs-picked", Label).render())
            first, second = sl.selected
            alias = ids["aliases"]
            assert f"ticked 2: {alias[first]} (base), {alias[second]}" in said, said
            await pilot.press("space")  # untick the second-ticked (cursor on it)
            await wait_for(lambda: len(sl.selected) == 1, 10, pilot, "one tick")
            assert prompts(sl)[0].startswith("[ ]") and prompts(sl)[1].startswith("[x] base")
            await pilot.press("space", "enter")
            await wait_for(lambda: isinstance(app.screen, CompareScreen), 10, pilot, "compare")
            assert app.screen.run_ids == [first, second]
            await pilot.press("escape", "q")

    asyncio.run(main())


def test_boot_screen_at_80x24_shows_its_runs_and_enter_opens_one(filled):  # noqa: F811
    """At 80x24 the boot screen opened on its phases with the runs table below the pane, out of sight, and the
    focus on the scroll pane: Enter opened nothing. The runs now come first, focused."""
    from sqlalchemy import select

    from dynocell.cli.tui.screens import BootScreen, RunScreen
    from dynocell.db import tables as m

    cell, ids = filled
    with cell.store.session() as s:
        boot, run = next((b, r) for b in ids["boots"] for r in s.scalars(
            select(m.Run.id).where(m.Run.boot_id == b).order_by(m.Run.started_at.desc())).all()[:1])

    async def main() -> None:
        app = make_app(cell, ids, start=lambda: BootScreen(boot))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(lambda: getattr(app.screen, "loaded", False), 20, pilot, "the boot screen")
            await pilot.pause()
            table, body = app.screen.query_one("#boot-runs"), app.screen.query_one("#boot-body")
            assert app.focused is table and table.row_count >= 1
            assert body.region.contains_region(table.region), (table.region, body.region)  # in sight
            await pilot.press("enter")
            await wait_for(lambda: isinstance(app.screen, RunScreen), 10, pilot, "the run screen")
            assert app.screen.run_id == run
            await pilot.press("escape", "q")

    asyncio.run(main())
