"""Tests of the terminal dashboard (``dynocell tui``, dynocell/cli/tui/).

- Pure formatting: glyph+word states, bars, the rate meter (baseline, resets).
- Snapshots (pytest-textual-snapshot) of the main, boot, run and runbooks screens at 80×24 and
  160×48, rendered from a store filled by REAL runs on the reference engine
  (tests/data/stores/real-run: ``dynocell run``, ``dynocell run examples/tiny-ngram.toml`` and a
  boot that failed with ``port_in_use``, recorded by tests/data/stores/record.py), with a fixed
  clock (the recording's end + 10 min), timezone UTC and ids shown as fixed aliases. A live run
  differs from one run to the next (latencies, acceptance draws, pids), so the run is recorded
  once and replayed; re-record it when the schema or the model recipe changes.
- Pilot interaction tests that wait on conditions (never bare sleeps): start a run from the
  picker, see the boot ``ready`` and the acceptance bars, stop it, check no engine process
  survives; and an engine killed with SIGKILL while watched shows ``crashed``/``lost`` with its
  signature within two polling intervals. The key test (compare, log search, runbook search)
  runs on stand-in rows (tests/web_fill.py) with timestamps pinned by :func:`pin_measurements`.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import signal
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

import psutil
import pytest
from sqlalchemy import select

from dynocell.cli.tui import format as fmt
from dynocell.db import tables as m

NOW = datetime(2026, 11, 30, 4, 12, 0, tzinfo=timezone.utc)
SIZES = [(80, 24), (160, 48)]

#: How long a wait on a real boot or run may take on a loaded 2-core CI machine (a boot takes 20-60 s quiet;
#: under a parallel suite and a compile beside it, 300 s was once not enough). Waits end as soon as their
#: predicate holds, so a long bound costs nothing when all is well.
LOADED_WAIT_S = 420


# ------------------------------------------------------------------ store filling

def pin_measurements(cell, ids: dict[str, Any]) -> None:
    """Pin every clock- or speed-dependent value in the store to fixed values (see module doc)."""
    boots_order = ids["boot_order"]
    with cell.store.session() as s:
        for i, bid in enumerate(boots_order):
            b = s.get(m.Boot, bid)
            start = NOW - timedelta(hours=3) + timedelta(minutes=20 * i)
            live = b.state in ("starting", "ready", "stopping")
            b.started_at = start
            b.ready_at = start + timedelta(seconds=6.5) if b.ready_at else None
            b.ready_s = 6.5 if b.ready_s is not None else None
            b.ended_at = None if live else start + timedelta(minutes=5)
            b.stop_s = 1.0 if b.stop_s is not None else None
            b.port = 41000 + i
            b.pid = 4000 + i
            b.supervisor_pid = os.getpid() if live else None
            for j, ev in enumerate(sorted(b.events, key=lambda e: e.id)):
                ev.offset_s = float(j)
                ev.ts = start + timedelta(seconds=j)
            for j, h in enumerate(s.scalars(select(m.HealthCheck).where(m.HealthCheck.boot_id == bid)
                                            .order_by(m.HealthCheck.id))):
                h.ts = start + timedelta(seconds=10 + 30 * j)
                h.checks = [{**c, "latency_ms": 1.0 if c.get("latency_ms") is not None else None,
                             "sample": None} for c in (h.checks or [])]
        for k, rid in enumerate(ids["run_order"]):
            r = s.get(m.Run, rid)
            r.started_at = NOW - timedelta(hours=2) + timedelta(minutes=20 * k)
            r.ended_at = r.started_at + timedelta(seconds=48)
            if r.breakeven:
                r.breakeven = {**r.breakeven, "spec_step_ms": 20.0, "plain_step_ms": 10.0, "budget_ms": 25.0,
                               "margin": 0.2, "pays": True}
            if r.summary:
                r.summary = {**r.summary, "decode_tok_s": 100.0 * (k + 1)}
            for st in s.scalars(select(m.RunStep).where(m.RunStep.run_id == rid)):
                st.started_at = st.ended_at = r.started_at
                st.detail = {}
            for b in s.scalars(select(m.BenchRun).where(m.BenchRun.run_id == rid)):
                c = b.concurrency
                b.duration_s, b.request_throughput = 4.0, 2.0 * c
                b.output_tok_s, b.total_tok_s, b.prefill_tok_s, b.decode_tok_s = 100.0 * c, 250.0 * c, 3000.0, 110.0 * c
                b.ttft_ms = {"p50": 12.0 * c, "p90": 15.0 * c, "p99": 19.0 * c}
                b.tpot_ms = {"p50": 8.0, "p90": 9.5, "p99": 12.0}
                b.itl_ms = {"p50": 8.0, "p90": 9.5, "p99": 12.0}
                b.e2e_ms = {"p50": 400.0, "p90": 480.0, "p99": 560.0}
            for pr in s.scalars(select(m.ProfileRun).where(m.ProfileRun.run_id == rid)):
                pr.device_ms, pr.window_ms, pr.busy_pct, pr.ms_per_token, pr.launches_per_token = \
                    800.0, 1000.0, 80.0, 3.0, 20.0
                for sp in s.scalars(select(m.ProfileSplit).where(m.ProfileSplit.profile_id == pr.id)):
                    sp.ms = round(sp.pct * 8.0, 2)
                for kn in s.scalars(select(m.ProfileKernel).where(m.ProfileKernel.profile_id == pr.id)):
                    kn.ms = 1.0
            for c in s.scalars(select(m.AcceptanceCurve).where(m.AcceptanceCurve.run_id == rid)):
                if c.engine_tau is not None:
                    c.engine_tau = round(c.tau, 3)


def fill_fixed(cell, ids: dict[str, Any] | None = None) -> dict[str, Any]:
    """Fill stand-in rows (unless ``ids`` of rows already there are given: ``runs``, ``boots``),
    pin their measurements, and return ids + fixed display aliases."""
    from tests.web_fill import fill_stand_in

    if ids is None:
        ids = fill_stand_in(cell)
        boot_order = ids["boots"] + [ids["failed_boot"], ids["live_boot"]]
    else:
        boot_order = ids["boots"]
    ids["boot_order"] = boot_order
    ids["run_order"] = ids["runs"]
    pin_measurements(cell, ids)
    aliases = {bid: f"boot-{chr(97 + i)}" for i, bid in enumerate(boot_order)}
    aliases.update({rid: f"run-{k + 1}" for k, rid in enumerate(ids["runs"])})
    ids["aliases"] = aliases
    return ids


REAL_RUN = Path(__file__).parent / "data" / "stores" / "real-run"


def _recorder():
    spec = importlib.util.spec_from_file_location("store_record", REAL_RUN.parent / "record.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def filled(tmp_path_factory):
    """A cell over a session-wide temp home holding the recorded real-run store (see the module doc).

    ids: ``boots``/``runs`` in start order, ``failed_boot``, ``aliases`` (boot-a…, run-1…) and
    ``now`` (the fixed clock)."""
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    home = tmp_path_factory.mktemp("tui-home")
    _recorder().install(REAL_RUN, home)
    mp = pytest.MonkeyPatch()
    mp.setenv("TZ", "UTC")
    try:
        mp.setenv("DYNOCELL_HOME", str(home))
        cell = open_cell(load_settings())
    finally:
        mp.undo()
    with cell.store.session() as s:
        boots = s.scalars(select(m.Boot).order_by(m.Boot.started_at)).all()
        runs = s.scalars(select(m.Run).order_by(m.Run.started_at)).all()
        ids: dict[str, Any] = {"boots": [b.id for b in boots], "runs": [r.id for r in runs],
                               "failed_boot": next(b.id for b in boots if b.failure_signature)}
        ends = [t for b in boots for t in (b.ended_at, b.started_at) if t] + [r.ended_at for r in runs if r.ended_at]
        ids["now"] = max(ends).replace(tzinfo=timezone.utc) + timedelta(minutes=10)
    aliases = {bid: f"boot-{chr(97 + i)}" for i, bid in enumerate(ids["boots"])}
    aliases.update({rid: f"run-{k + 1}" for k, rid in enumerate(ids["runs"])})
    ids["aliases"] = aliases
    return cell, ids


def make_app(cell, ids, start: Callable[[], Any] | None = None, poll: float = 0):
    from dynocell.cli.tui.app import DynocellApp

    aliases = ids["aliases"]
    now = ids.get("now", NOW)
    return DynocellApp(cell, poll_interval_s=poll, now=lambda: now, alias=lambda i: aliases.get(i, "id?"),
                       start=start)


async def wait_for(pred: Callable[[], bool], timeout: float = 10.0, pilot=None, what: str = "",
                   job: Any = None) -> None:
    """Poll ``pred`` (on the event loop, letting the app work) until true or fail after ``timeout`` s;
    the failure names ``job``'s last progress message, so a slow step reads apart from a stuck one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pilot is not None:
            await pilot.wait_for_scheduled_animations()
        if pred():
            return
        await asyncio.sleep(0.05)
    at = f" (job {job.kind} {job.state}: {job.message})" if job is not None else ""
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what or pred}{at}")


def budget_left(t0: float, total_s: float, reserve_s: float = 150.0) -> float:
    """Seconds left of a test's ``total_s`` budget begun at ``t0`` (monotonic), keeping ``reserve_s``
    for the stop and the checks after it; at least :data:`LOADED_WAIT_S`. A full run's steps share
    one budget, so a slow boot on a loaded host leaves less for acceptance, not a fixed 420 s each."""
    return max(LOADED_WAIT_S, total_s - reserve_s - (time.monotonic() - t0))


def _loaded(pilot) -> Callable[[], Any]:
    async def run_before(p) -> None:
        app = p.app
        await wait_for(lambda: getattr(app.screen, "loaded", False) and app.polls >= 1
                       and not [w for w in app.workers if w.is_running], pilot=p, what="screen loaded")
        await p.pause()
    return run_before


# ------------------------------------------------------------------ pure formatting

def test_state_glyphs_carry_words_not_only_colour():
    for state in ("ready", "starting", "stopping", "stopped", "failed", "crashed", "lost"):
        t = fmt.state_text(state)
        assert state in t.plain and t.plain[0] in "●◐○✖?"
    assert fmt.health_text("degraded").plain == "◐ degraded"
    assert fmt.health_text(None).plain == "· -"


def test_rate_meter_needs_a_baseline_and_treats_decrease_as_reset():
    r = fmt.RateMeter()
    assert r.add(0.0, 100.0) is None  # baseline only
    assert r.add(2.0, 300.0) == pytest.approx(100.0)
    assert r.add(2.0, 900.0) == pytest.approx(100.0)  # same instant: ignored
    assert r.add(3.0, 50.0) is None  # counter went down: reset, new baseline
    assert r.add(4.0, 150.0) == pytest.approx(100.0)


def test_generation_rate_from_health_samples():
    rows = [{"ts": NOW, "checks": [{"name": "progress", "sample": {"generated": 1000.0}}]},
            {"ts": NOW + timedelta(seconds=10), "checks": [{"name": "progress", "sample": {"generated": 1500.0}}]}]
    assert fmt.generation_rate(rows) == pytest.approx(50.0)
    assert fmt.generation_rate(rows[:1]) is None


def test_bars_and_durations():
    assert fmt.hbar(0.5, 10) == "█████·····"
    assert len(fmt.hbar(0.333, 12)) == 12
    assert fmt.duration(7 * 60 + 5) == "7m05s"
    assert fmt.duration(None) == "-"
    lines = fmt.acceptance_lines([{"text_class": "code", "tau": 3.36, "accept_rate": 0.79, "steps": 10,
                                   "num_drafts": 3, "points": [{"position": 1, "p": 0.9, "a": 0.9},
                                                               {"position": 2, "p": 0.79, "a": 0.878}]}], 10)
    assert "τ 3.360" in lines[0].plain and lines[1].plain.startswith("   1 p █████████")


# ------------------------------------------------------------------ snapshots

@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_main(filled, snap_compare, size):
    cell, ids = filled
    assert snap_compare(make_app(cell, ids), terminal_size=size, run_before=_loaded(None))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_boot_detail(filled, snap_compare, size):
    from dynocell.cli.tui.screens import BootScreen

    cell, ids = filled
    boot = ids.get("failed_boot") or ids["boots"][0]
    assert snap_compare(make_app(cell, ids, start=lambda: BootScreen(boot)), terminal_size=size,
                        run_before=_loaded(None))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_run_detail(filled, snap_compare, size):
    from dynocell.cli.tui.screens import RunScreen

    cell, ids = filled
    assert snap_compare(make_app(cell, ids, start=lambda: RunScreen(ids["runs"][0])), terminal_size=size,
                        run_before=_loaded(None))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_snapshot_runbooks(filled, snap_compare, size):
    from dynocell.cli.tui.screens import RunbooksScreen

    cell, ids = filled
    app = make_app(cell, ids, start=lambda: RunbooksScreen(slug="acceptance-definitions"))
    assert snap_compare(app, terminal_size=size, run_before=_loaded(None))


# ------------------------------------------------------------------ pilot: real engines

PAIR_TOML = """
engine = "reference"
model_path = "{target}"
host = "127.0.0.1"
port = 0

[speculative]
algorithm = "STANDALONE"
draft_model_path = "{draft}"
num_steps = 3
eagle_topk = 1
num_draft_tokens = 4

[memory]
context_length = 1024

[meta]
name = "{name}"
"""


def _pair_config(cell, tmp_path, model_pair, name: str) -> str:
    from dynocell.runbooks.configs import add_config

    p = tmp_path / f"{name}.toml"
    p.write_text(PAIR_TOML.format(target=model_pair.target, draft=model_pair.draft, name=name))
    return add_config(cell, p, name).hash


def _row(app, boot_id: str | None) -> dict[str, Any] | None:
    return next((b for b in app.snapshot.get("boots", []) if b["id"] == boot_id), None)


def _table_text(app, boot_id: str) -> str:
    from textual.widgets import DataTable

    from dynocell.cli.tui.screens import MainScreen

    main = next(s for s in app.screen_stack if isinstance(s, MainScreen))
    t = main.query_one("#boots", DataTable)
    try:
        return " ".join(str(getattr(c, "plain", c)) for c in t.get_row(boot_id))
    except Exception:  # noqa: BLE001 - row not there (yet)
        return ""


async def _pick(pilot, option_id: str) -> None:
    from textual.widgets import OptionList

    from dynocell.cli.tui.widgets import ConfigPicker

    app = pilot.app
    await wait_for(lambda: isinstance(app.screen, ConfigPicker), 10, pilot, "the config picker")
    ol = app.screen.query_one(OptionList)
    ol.highlighted = next(i for i in range(ol.option_count) if ol.get_option_at_index(i).id == option_id)
    await pilot.press("enter")


def _group_alive(pgid: int | None) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if pgid and os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.NoSuchProcess, PermissionError):
            pass
    return out


RUN_BUDGET_S = 1500


@pytest.mark.timeout(RUN_BUDGET_S + 100)
def test_run_from_picker_reaches_ready_shows_acceptance_and_stops(model_pair, tmp_path):
    """r → pick a config → boot ready → acceptance bars on the main screen → s, y → nothing survives.

    The acceptance step follows the bench's concurrency levels; beside a llama.cpp build and a second
    pytest worker on 2 cores that took more than 420 s after ready (CI of 37f4c08), so the steps share
    one budget (:func:`budget_left`)."""
    t0 = time.monotonic()
    from dynocell.cli.tui.app import DynocellApp
    from dynocell.cli.tui.screens import MainScreen, boot_summary_lines
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    cell = open_cell(load_settings())
    h = _pair_config(cell, tmp_path, model_pair, "tui-run")
    seen: dict[str, Any] = {}

    async def main() -> None:
        app = DynocellApp(cell, poll_interval_s=1.0)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("r")
            await _pick(pilot, h)
            await wait_for(lambda: app.running_jobs("run") or [j for j in app.jobs if j.kind == "run"], 10, pilot,
                           "the run job")
            job = next(j for j in app.jobs if j.kind == "run")

            def ready_or_failed() -> bool:
                row = _row(app, job.boot_id)
                return job.state != "running" or bool(row and row["state"] == "ready")

            await wait_for(ready_or_failed, budget_left(t0, RUN_BUDGET_S), pilot, "the boot to be ready", job)
            row = _row(app, job.boot_id)
            if not (row and row["state"] == "ready"):
                from dynocell.runbooks import views

                last = (views.list_runs(cell, limit=1) or [{}])[0]
                pytest.fail(f"run_job did not reach a ready boot (boot {row and row['state']}): "
                            f"{job.error or last.get('error')}")
            seen["boot"] = row
            assert "● ready" in _table_text(app, job.boot_id)
            main_screen = next(s for s in app.screen_stack if isinstance(s, MainScreen))
            from textual.widgets import DataTable

            table = main_screen.query_one("#boots", DataTable)
            table.move_cursor(row=table.get_row_index(job.boot_id))

            def bars() -> bool:
                panel = main_screen.last_panel
                if not panel or not panel.get("run") or not panel["run"].get("curves"):
                    return False
                text = "\n".join(t.plain for t in boot_summary_lines(app, panel["detail"], panel["run"], 120)
                                 if hasattr(t, "plain"))
                return " p █" in text or " p ▏" in text or " p ·" in text

            await wait_for(bars, budget_left(t0, RUN_BUDGET_S), pilot, "acceptance bars", job)
            await pilot.press("s")
            await pilot.press("y")
            await wait_for(lambda: job.state != "running" and not app.running_jobs("stop"), 120, pilot,
                           "the run and the stop to end")
            app.request_poll()
            await wait_for(lambda: (_row(app, job.boot_id) or {}).get("state") in ("stopped", "crashed", "failed"),
                           20, pilot, "the boot to show stopped")
            await pilot.press("q")

    asyncio.run(main())
    b = seen["boot"]
    assert not psutil.pid_exists(b["pid"]) or psutil.Process(b["pid"]).status() == psutil.STATUS_ZOMBIE
    assert _group_alive(b.get("pgid")) == []


@pytest.mark.timeout(1200)
def test_engine_killed_while_watched_shows_crashed_with_signature(model_pair, tmp_path):
    """b → detached boot ready → SIGKILL the engine → the table says crashed/lost + signature
    within two polling intervals (plus a little scheduling slack)."""
    from dynocell.cli.tui.app import DynocellApp
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    cell = open_cell(load_settings())
    h = _pair_config(cell, tmp_path, model_pair, "tui-crash")
    interval = 2.0
    seen: dict[str, Any] = {}

    async def main() -> None:
        app = DynocellApp(cell, poll_interval_s=interval)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("b")
            await _pick(pilot, h)
            await wait_for(lambda: [j for j in app.jobs if j.kind == "boot"], 10, pilot, "the boot job")
            job = next(j for j in app.jobs if j.kind == "boot")
            await wait_for(lambda: job.state != "running" or (_row(app, job.boot_id) or {}).get("state") == "ready",
                           LOADED_WAIT_S, pilot, "the boot to be ready")
            row = _row(app, job.boot_id)
            if not (row and row["state"] == "ready"):
                pytest.fail(f"detached boot did not become ready (boot {row and row['state']}): {job.error}")
            seen["boot"] = row
            os.kill(row["pid"], signal.SIGKILL)
            t0 = time.monotonic()

            def shown() -> bool:
                text = _table_text(app, job.boot_id)
                r = _row(app, job.boot_id) or {}
                return ("crashed" in text or "lost" in text) and bool(r.get("failure_signature")) \
                    and r["failure_signature"] in text

            await wait_for(shown, 30, pilot, "crashed with its signature in the table")
            seen["elapsed"] = time.monotonic() - t0
            await pilot.press("q")

    asyncio.run(main())
    assert seen["elapsed"] <= 2 * interval + 1.5, seen["elapsed"]
    b = seen["boot"]
    assert _group_alive(b.get("pgid")) == []


# ------------------------------------------------------------------ pilot: keys on the filled store

async def open_runs_picker(app, pilot) -> Any:
    """After the first poll, ``c`` on the main screen: the runs picker's SelectionList."""
    from textual.widgets import SelectionList

    from dynocell.cli.tui.screens import MainScreen
    from dynocell.cli.tui.widgets import RunsPicker

    await wait_for(lambda: app.polls >= 1 and isinstance(app.screen, MainScreen), 10, pilot, "first poll")
    await pilot.press("c")
    await wait_for(lambda: isinstance(app.screen, RunsPicker), 10, pilot, "the runs picker")
    return app.screen.query_one(SelectionList)


def test_keys_compare_log_search_and_runbook_search(isolated_home):
    """On stand-in rows (two runs to compare, a known log): c compares, / searches the log and
    the runbooks."""
    from textual.widgets import Input

    from dynocell.cli.tui.screens import BootScreen, CompareScreen, MainScreen, RunbooksScreen
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    cell = open_cell(load_settings())
    ids = fill_fixed(cell)
    boot = ids.get("failed_boot") or ids["boots"][0]

    async def main() -> None:
        app = make_app(cell, ids)
        async with app.run_test(size=(80, 24)) as pilot:
            # c: tick two runs, Enter compares
            sl = await open_runs_picker(app, pilot)
            for rid in ids["runs"][:2]:
                sl.select(rid)
            await pilot.press("enter")
            await wait_for(lambda: isinstance(app.screen, CompareScreen) and app.screen.loaded, 10, pilot, "compare")
            await pilot.press("escape")
            # l on a boot: its log; / searches it
            app.push_screen(BootScreen(boot, focus_log=True))
            await wait_for(lambda: isinstance(app.screen, BootScreen) and app.screen._log_key is not None, 10, pilot,
                           "the log tail")
            await pilot.press("slash")
            await pilot.press(*"draft", "enter")
            await wait_for(lambda: app.screen._log_key and app.screen._log_key[1] == 1, 10, pilot, "1 matching line")
            assert app.screen.search == "draft"
            await pilot.press("escape")
            # / on the main screen: runbooks search
            await wait_for(lambda: isinstance(app.screen, MainScreen), 5, pilot, "back on main")
            await pilot.press("slash")
            await wait_for(lambda: isinstance(app.screen, RunbooksScreen) and app.screen.loaded, 10, pilot, "runbooks")
            assert isinstance(app.focused, Input)
            await pilot.press(*"acceptance")
            await wait_for(lambda: app.screen.slug == "acceptance-definitions", 10, pilot, "an acceptance entry")
            await pilot.press("escape")
            await pilot.press("q")

    asyncio.run(main())


def test_tui_command_registers():
    import typer
    from typer.testing import CliRunner

    from dynocell.cli.commands import tui

    app = typer.Typer()
    tui.register(app)

    @app.command("noop")
    def _noop() -> None:  # a second command keeps Typer in multi-command mode
        pass

    res = CliRunner().invoke(app, ["tui", "--help"])
    assert res.exit_code == 0 and "dashboard" in res.output


def test_a_fetch_slower_than_its_requests_still_lands(isolated_home):
    """A panel fetch that takes longer than the polls that re-request it is not starved.

    The main screen re-fetches the selected boot's panel after every poll. When a fetch took longer
    than the gap between polls (a loaded host: CI of 37f4c08), each new fetch superseded the one in
    flight, so no result was ever shown and the acceptance bars never appeared. Requests made while a
    fetch of the same group runs now coalesce into one more fetch after it, and a result whose
    arguments are still the newest asked for is shown."""
    from dynocell.cli.tui.app import DynocellApp
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    cell = open_cell(load_settings())
    shown: list[int] = []
    started: list[int] = []

    def slow(_cell, n: int) -> int:
        started.append(n)
        time.sleep(0.3)
        return n

    async def main() -> None:
        app = DynocellApp(cell, poll_interval_s=0)
        async with app.run_test(size=(80, 24)) as pilot:
            for _ in range(30):  # a request every 0.05 s for 1.5 s, each fetch 0.3 s
                app.fetch(slow, 7, then=shown.append, group="starve")
                await asyncio.sleep(0.05)
            assert shown, "no fetch result was shown while requests kept coming faster than fetches"
            app.fetch(slow, 8, then=shown.append, group="starve")  # new arguments: the last word
            await wait_for(lambda: shown and shown[-1] == 8, 10, pilot, "the newest request's result")
            await pilot.press("q")

    asyncio.run(main())
    assert len(started) < 12, f"requests were not coalesced: {len(started)} fetches ran for 31 requests"
    assert 7 not in shown[shown.index(8):]
