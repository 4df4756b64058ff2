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
