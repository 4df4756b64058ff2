"""Issue 32 item 13: every Rich cell the TUI builds from stored text is ``Text``, never markup. A fleet host
named ``[/]`` crashed the CompareScreen (Rich's MarkupError) and ``[link=…]`` rendered a link. Here every
string field a screen shows (host names, config labels, run errors, failure signatures, kernel names, split
categories, text classes, entry titles) holds markup, and every screen is opened with Textual's pilot on a
real SQLite store: none crashes, and the markup is shown as the text it is.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from sqlalchemy import select

from dynocell.db import tables as m
from tests.test_tui import make_app, wait_for

#: Rich markup, then terminal escapes (OSC 52 clipboard write, window title, clear screen, 8-bit CSI) and
#: control bytes (BEL, BS, NUL): shown as text, never sent to the terminal (issue 32 second pass, item 3).
HOSTILE = "[/][link=https://evil.example]x[/link][bold]\x1b]52;c;aGVsbG8=\x07\x1b]0;pwned\x07\x1b[2J\x9b2J\x08\x00"
RAW = ("\x1b", "\x07", "\x9b", "\x08", "\x00", "]52;c;", "]0;pwned")


def _poison(cell) -> dict:
    from tests.web_fill import fill_stand_in

    ids = fill_stand_in(cell)
    with cell.store.session() as s:
        s.add(m.Host(id="f" * 32, hostname=HOSTILE + "gpu-node", os=HOSTILE, cpu=HOSTILE, cpu_count=1,
                     memory_bytes=1, gpus=[], cuda=HOSTILE, engine_versions={"sglang": HOSTILE},
                     first_seen_at=datetime.now(timezone.utc), last_seen_at=datetime.now(timezone.utc)))
        s.flush()
        for b in s.scalars(select(m.Boot)):
            b.host_id, b.hostname = "f" * 32, HOSTILE + (b.hostname or "")
            if b.failure_signature:
                b.failure_signature = HOSTILE + b.failure_signature
        for r in s.scalars(select(m.Run)):
            r.host_id = "f" * 32
            r.error = HOSTILE + (r.error or "")
        for lab in s.scalars(select(m.ConfigLabel)):
            lab.name = HOSTILE + lab.name
        for k in s.scalars(select(m.ProfileKernel)):
            k.name = HOSTILE + k.name
        for sp in s.scalars(select(m.ProfileSplit)):
            sp.category = HOSTILE + sp.category
        for b in s.scalars(select(m.BenchRun)):
            b.text_class = HOSTILE + (b.text_class or "")
        for c in s.scalars(select(m.AcceptanceCurve)):
            c.text_class = HOSTILE + c.text_class
        for e in s.scalars(select(m.RunbookEntry)):
            e.title = HOSTILE + e.title
    ids["aliases"] = {}
    return ids


def test_every_screen_shows_stored_markup_as_text(settings):
    from dynocell.cli.tui.screens import BootScreen, CompareScreen, RunbooksScreen, RunScreen
    from dynocell.runbooks.cell import open_cell

    cell = open_cell(settings)
    ids = _poison(cell)
    screens = [None, lambda: BootScreen(ids["failed_boot"]), lambda: BootScreen(ids["boots"][0]),
               lambda: RunScreen(ids["runs"][0]), lambda: CompareScreen(ids["runs"][:2]),
               lambda: RunbooksScreen(query="test-xss-entry", slug="test-xss-entry")]

    async def visit(start) -> str:
        app = make_app(cell, ids, start=start)
        async with app.run_test(size=(160, 48)) as pilot:
            await wait_for(lambda: getattr(app.screen, "loaded", False)
                           and not [w for w in app.workers if w.is_running], 30, pilot, "the screen loaded")
            await pilot.pause()
            svg = app.export_screenshot()
        assert app.return_code in (None, 0), f"the app ended with {app.return_code}"
        return svg

    for start in screens:
        svg = asyncio.run(visit(start))
        name = "main" if start is None else type(start()).__name__
        assert "[/][link=" in svg, f"{name}: the stored markup is not shown as the text it is"
        assert not [r for r in RAW if r in svg], f"{name}: a stored escape or control byte reached the screen"
