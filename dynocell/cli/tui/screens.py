"""The dashboard's screens: main (boots table + selected boot), boot detail, run detail,
runbooks, compare.

Screens never read the store or an engine on the UI thread: they ask the app
(:meth:`DynocellApp.fetch`) to call a ``dynocell.runbooks`` function in a thread worker and
apply the result back on the UI thread. Each screen has ``loaded`` (first data applied) and
``refresh_data()`` (called on every poll tick and store event while it is on top).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.console import Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text
from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Input, Log, Markdown, OptionList, Static
from textual.widgets.option_list import Option

from dynocell.boot_states import LIVE_STATES as LIVE
from dynocell.cli.render import phases_hint, phases_text
from dynocell.cli.tui import format as fmt
from dynocell.cli.tui.widgets import JobBar
from dynocell.runbooks import views

if TYPE_CHECKING:  # pragma: no cover
    from dynocell.cli.tui.app import DynocellApp



class _LiteralTable(Table):
    """A rich Table whose ``str`` cells and headers are shown literally (:func:`fmt.plain`): a stored string
    such as a fleet host name ``[/]`` crashed the app as Rich markup, ``[link=…]`` rendered a link (issue 32,
    item 13)."""

    def add_row(self, *renderables: Any, **kwargs: Any) -> None:
        super().add_row(*(fmt.plain(c) if isinstance(c, str) else c for c in renderables), **kwargs)


def _tbl(title: str | None, *cols: str) -> Table:
    t = _LiteralTable(title=escape(title) if title else None, title_justify="left", title_style="bold",
                      show_edge=False, header_style="bold", pad_edge=False, box=None, padding=(0, 1))
    for c in cols:
        t.add_column(fmt.plain(c), overflow="ellipsis", no_wrap=True)
    return t


def _boot_panel(cell: Any, boot_id: str) -> dict[str, Any]:
    """boot_detail of a boot plus run_detail of its newest run (None when it has none)."""
    detail = views.boot_detail(cell, boot_id)
    run = None
    if detail["runs"]:
        run = views.run_detail(cell, detail["runs"][0]["id"])
    return {"detail": detail, "run": run}


class DashScreen(Screen):
    """Common parts: the app handle, ``loaded``, the job bar."""

    loaded: bool = False

    @property
    def dash(self) -> "DynocellApp":
        return self.app  # type: ignore[return-value]

    def refresh_data(self) -> None:  # pragma: no cover - overridden
        """Fetch this screen's data again (poll tick, store event)."""

    def show_jobs(self, jobs: list[Any]) -> None:
        for bar in self.query(JobBar):
            bar.show_jobs(jobs)


# ------------------------------------------------------------------ main

#: The boots table's columns: (key, header, width at 80 columns, widest it grows to). A width counts the blank
#: cell that ends every cell (the table has no padding), so at 80 columns the row is 78 cells and two values
#: never run together (a 12-digit config hash fused with its port: ``294ed3536f452751``).
BOOT_COLUMNS: tuple[tuple[str, str, int, int], ...] = (
    ("id", "boot", 9, 13), ("state", "state", 11, 30), ("health", "health", 11, 12), ("config", "config", 11, 32),
    ("port", "port", 6, 7), ("uptime", "uptime", 7, 9), ("tau", "τ", 5, 6), ("toks", "tok/s", 6, 8),
    ("sig", "signature", 12, 60))
#: Which columns take the width a wider terminal gives, in turn: the names first, then prose.
GROW_ORDER = ("id", "config", "toks", "uptime", "tau", "port", "health", "state", "sig")


def boot_columns(width: int) -> list[tuple[str, str, int]]:
    """(key, header, width) of the boots table at a terminal ``width`` columns wide: the 80-column widths,
    and what a wider terminal gives shared in :data:`GROW_ORDER` up to each column's widest."""
    widths = {k: w for k, _, w, _ in BOOT_COLUMNS}
    spare = max(0, width - 2 - sum(widths.values()))  # 2: the scrollbar's and the edge's cells
    widest = {k: m for k, _, _, m in BOOT_COLUMNS}
    for k in GROW_ORDER:
        give = min(spare, widest[k] - widths[k])
        widths[k] += give
        spare -= give
    return [(k, label, widths[k]) for k, label, _, _ in BOOT_COLUMNS]


class MainScreen(DashScreen):
    """Boots table (live first) updated by polling and events; the highlighted boot's detail below.

    ``last_panel``: the data of the selected-boot panel as last shown (``{detail, run}``)."""

    last_panel: dict[str, Any] | None = None

    BINDINGS = [
        Binding("r", "app.run_config", "run"),
        Binding("b", "app.boot_config", "boot"),
        Binding("s", "stop", "stop"),
        Binding("p", "profile", "profile"),
        Binding("h", "health", "health"),
        Binding("l", "logs", "logs"),
        Binding("slash", "app.runbooks", "search"),
        Binding("c", "app.compare", "compare"),
        Binding("enter", "open_boot", "open", show=False),
        Binding("o", "open_run", "last run", show=False),
        Binding("q", "app.quit_dash", "quit"),
    ]

    def compose(self) -> ComposeResult:
        yield Static(id="title")
        yield DataTable(id="boots", cursor_type="row", zebra_stripes=False, cell_padding=0)
        with VerticalScroll(id="boot-pane"):
            yield Static(id="boot-summary")
        yield JobBar()
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self._layout_columns(self.app.size.width)
        self.query_one("#title", Static).update(Text("dynocell · loading…", style="bold"))
        self.refresh_data()

    def on_resize(self, event: Any) -> None:
        if self._layout_columns(event.size.width) and self.dash.snapshot:
            self.show_snapshot(self.dash.snapshot)

    def _layout_columns(self, width: int) -> bool:
        """Lay the boots table's columns out for ``width`` terminal columns (:func:`boot_columns`); True when
        they changed (the rows are then shown again)."""
        widths = boot_columns(width)
        if widths == getattr(self, "_widths", None):
            return False
        self._widths = widths
        t = self.query_one("#boots", DataTable)
        t.clear(columns=True)
        for key, label, w in widths:
            t.add_column(label, key=key, width=w)
        return True

    def _cell(self, key: str, value: Text) -> Text:
        """``value`` cut with ``…`` to leave one blank cell after it: two columns never run together."""
        room = {k: w for k, _, w in self._widths}[key] - 1
        value = value.copy()
        value.truncate(room, overflow="ellipsis")
        return value

    # data
    def refresh_data(self) -> None:
        self.dash.request_poll()

    def show_snapshot(self, snap: dict[str, Any]) -> None:
        """Rebuild the table from the app's poll snapshot (keeps the cursor on the same boot)."""
        t = self.query_one("#boots", DataTable)
        now = self.dash.now
        keep = self.selected_boot()
        t.clear()
        runs = snap["runs"]
        c = self._cell
        for b in snap["boots"]:
            run = runs.get(b.get("last_run_id") or "")
            toks = None
            if run:
                summ = run.get("summary") or {}  # decode_tok_s: the deprecated name of best_output_tok_s
                toks = summ.get("best_output_tok_s") or summ.get("decode_tok_s") or run.get("best_output_tok_s")
            sig = b.get("failure_signature") or ""
            t.add_row(c("id", Text(self.dash.alias(b["id"]))),
                      c("state", fmt.state_text(b["state"], b.get("state_note"))),
                      c("health", fmt.health_text((b.get("health") or {}).get("verdict"))),
                      c("config", Text(fmt.config_name(b))), c("port", Text(fmt.port_or_kind(b))),
                      c("uptime", Text(fmt.duration(fmt.uptime_s(b, now))
                                       if b["state"] in LIVE or b.get("ready_at") else "-")),
                      c("tau", Text(fmt.num(b.get("last_tau"), ".2f"))), c("toks", Text(fmt.num(toks, ".0f"))),
                      c("sig", Text(sig, style="red" if sig else "")), key=b["id"])
        ids = [b["id"] for b in snap["boots"]]
        if keep in ids:
            t.move_cursor(row=ids.index(keep))
        live = sum(1 for b in snap["boots"] if b["state"] in LIVE)
        title = Text("dynocell", style="bold")
        title.append(f" · {live} live · {len(ids)} shown · poll {self.dash.poll_interval_s:g}s")
        fleet = sorted({b["host_label"] for b in snap["boots"] if b.get("host_id")})
        if len(fleet) > 1:
            title.append(f" · {len(fleet)} hosts")
        if snap.get("error"):
            title.append(f" · {snap['error']}", style="red")
        self.query_one("#title", Static).update(title)
        if not ids:
            self.query_one("#boot-summary", Static).update(
                Text("no boots yet — press r to run a config, b to boot one", style="dim"))
            self.loaded = True
            return
        bid = self.selected_boot()
        if bid:
            self.dash.fetch(_boot_panel, bid, then=self.show_boot, group="main-boot")

    def selected_boot(self) -> str | None:
        t = self.query_one("#boots", DataTable)
        if t.row_count == 0:
            return None
        try:
            return t.coordinate_to_cell_key(t.cursor_coordinate).row_key.value
        except Exception:  # noqa: BLE001 - an empty or shrinking table
            return None

    @on(DataTable.RowHighlighted, "#boots")
    def _highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.row_key.value:
            self.dash.fetch(_boot_panel, event.row_key.value, then=self.show_boot, group="main-boot")

    @on(DataTable.RowSelected, "#boots")
    def _selected(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.dash.push_screen(BootScreen(event.row_key.value))

    def show_boot(self, data: dict[str, Any]) -> None:
        """Render the selected boot: identity, signature + entries, health checks, newest run + acceptance."""
        d, run = data["detail"], data["run"]
        if d["boot"]["id"] != self.selected_boot():
            return
        self.last_panel = data
        self.query_one("#boot-summary", Static).update(Group(*boot_summary_lines(self.dash, d, run,
                                                                               self.size.width)))
        self.loaded = True

    # actions on the highlighted boot
    def _need_boot(self) -> str | None:
        bid = self.selected_boot()
        if bid is None:
            self.notify("no boot selected", severity="warning")
        return bid

    def action_stop(self) -> None:
        if bid := self._need_boot():
            self.dash.ask_stop(bid)

    def action_profile(self) -> None:
        if bid := self._need_boot():
            self.dash.start_profile(bid)

    def action_health(self) -> None:
        if bid := self._need_boot():
            self.dash.start_health(bid)

    def action_logs(self) -> None:
        if bid := self._need_boot():
            self.dash.push_screen(BootScreen(bid, focus_log=True))

    def action_open_boot(self) -> None:
        if bid := self._need_boot():
            self.dash.push_screen(BootScreen(bid))

    def action_open_run(self) -> None:
        bid = self._need_boot()
        if bid is None:
            return
        boot = next((b for b in self.dash.snapshot.get("boots", []) if b["id"] == bid), None)
        if boot and boot.get("last_run_id"):
            self.dash.push_screen(RunScreen(boot["last_run_id"]))
        else:
            self.notify("this boot has no run", severity="warning")


def boot_summary_lines(dash: "DynocellApp", d: dict[str, Any], run: dict[str, Any] | None,
                       width: int) -> list[Any]:
    """Lines of the selected-boot panel (also used by tests through the widget)."""
    b = d["boot"]
    now = dash.now
    head = Text(f"boot {dash.alias(b['id'])} ", style="bold")
    head.append_text(fmt.state_text(b["state"]))
    head.append(fmt.kind_word(b))
    head.append(f"  {b.get('engine')} :{b.get('port')}  pid {b.get('pid') or '-'}  "
                + ("attached" if b.get("kind") == "attached" else f"ready {fmt.num(b.get('ready_s'), '.1f')} s")
                + f"  up {fmt.duration(fmt.uptime_s(b, now))}")
    lines: list[Any] = [head]
    if b.get("host_id"):  # rows from before host records carry none
        lines.append(Text(f"host {b.get('host_label')}"
                          + (f" · files there under {d['elsewhere']['dir']}" if d.get("elsewhere") else "")))
    if b.get("failure_signature"):
        sig = Text("signature: ", style="bold")
        sig.append(str(b["failure_signature"]), style="red")
        title = (b.get("failure_detail") or {}).get("title")
        if title:
            sig.append(f" — {title}")
        lines.append(sig)
        for e in d.get("entries") or []:
            lines.append(Text(f"  runbook: {e['slug']} — {e['title']}"))
    hist = d.get("health") or []
    lines.extend(fmt.health_lines(hist[-1] if hist else None, now))
    rate = fmt.generation_rate(hist)
    if rate is not None:
        lines.append(Text(f"  generation {rate:.1f} tok/s between the last probes"))
    if run:
        r = run["run"]
        line = Text(f"run {dash.alias(r['id'])} ", style="bold")
        line.append(r["state"], style=fmt.RUN_STYLES.get(r["state"], ""))
        line.append(f"  step {r.get('step') or '-'}  τ {fmt.num(r.get('tau'), '.3f')}  (o: open)")
        lines.append(line)
        bw = max(6, min(20, (width - 34) // 2))
        lines.extend(fmt.acceptance_lines(run.get("curves") or [], bw))
    return lines


# ------------------------------------------------------------------ boot detail

class BootScreen(DashScreen):
    """One boot: phase timeline, last health verdict with checks, failure signature + runbook
    entries, its runs (Enter opens one), and the live log tail (follow ``f``, search ``/``)."""

    BINDINGS = [
        Binding("escape", "back", "back"),
        Binding("slash", "search_log", "search"),
        Binding("f", "follow", "follow"),
        Binding("h", "health", "health"),
        Binding("p", "profile", "profile"),
        Binding("s", "stop", "stop"),
        Binding("e", "entry", "runbook"),
        Binding("q", "app.quit_dash", "quit"),
    ]

    def __init__(self, boot_id: str, focus_log: bool = False) -> None:
        super().__init__()
        self.boot_id = boot_id
        self.focus_log = focus_log
        self.follow = True
        self.search = ""
        self._log_key: tuple[Any, ...] | None = None
        self.detail: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="boot-head")
        with VerticalScroll(id="boot-body"):
            # The boot's runs first, focused: at 80x24 the phases filled the pane and the runs table sat below it,
            # out of sight, with Enter opening nothing (issue 39).
            yield Static(Text("runs (Enter opens)", style="bold"), id="boot-runs-head")
            yield DataTable(id="boot-runs", cursor_type="row")
            yield Static(id="boot-info")
        yield Input(placeholder="search the log (Enter applies, empty = all lines)", id="log-search")
        yield Static(id="log-status")
        yield Log(id="log", max_lines=2000, auto_scroll=True)
        yield JobBar()
        yield Footer(compact=True)

    def on_mount(self) -> None:
        t = self.query_one("#boot-runs", DataTable)
        for label, w in (("run", 10), ("kind", 7), ("state", 11), ("step", 10), ("τ", 6), ("tok/s", 7)):
            t.add_column(label, width=w)
        self.query_one("#log-search", Input).display = False
        if self.focus_log:
            self.query_one("#log", Log).focus()
        self.refresh_data()

    def refresh_data(self) -> None:
        self.dash.fetch(views.boot_detail, self.boot_id, then=self.show_detail, group="boot-detail")
        if self.follow or self._log_key is None:
            self.dash.fetch(views.log_tail, self.boot_id, 200, self.search or None, then=self.show_log,
                            group="boot-log")

    def show_detail(self, d: dict[str, Any]) -> None:
        self.detail = d
        b = d["boot"]
        now = self.dash.now
        head = Text(f"boot {self.dash.alias(b['id'])} ", style="bold")
        head.append_text(fmt.state_text(b["state"]))
        head.append(fmt.kind_word(b))
        head.append(f"  {fmt.config_name(b)}  {b.get('engine')} :{b.get('port')}  "
                    f"up {fmt.duration(fmt.uptime_s(b, now))}")
        if b.get("host_id"):  # rows from before host records carry none
            head.append(f"  host {b.get('host_label')}")
        self.query_one("#boot-head", Static).update(head)
        width = max(10, min(40, self.size.width - 40))
        parts: list[Any] = [Text("phases", style="bold")]
        parts.extend(fmt.phase_lines(d.get("phases") or [], width) or [Text("  (none recorded)", style="dim")])
        hist = d.get("health") or []
        parts.extend(fmt.health_lines(hist[-1] if hist else None, now))
        if b.get("failure_signature"):
            sig = Text("failure signature: ", style="bold")
            sig.append(str(b["failure_signature"]), style="red")
            det = b.get("failure_detail") or {}
            if det.get("title"):
                sig.append(f" — {det['title']}")
            if det.get("hint"):
                sig.append(f"\n  hint: {det['hint']}")
            parts.append(sig)
            entries = d.get("entries") or []
            for e in entries:
                parts.append(Text(f"  runbook: {e['slug']} — {e['title']}  (e opens)"))
            if not entries:
                parts.append(Text("  no runbook entry linked to this signature", style="dim"))
        runs = d.get("runs") or []
        if not runs:
            parts.append(Text("runs: none", style="dim"))
        self.query_one("#boot-info", Static).update(Group(*parts))
        t = self.query_one("#boot-runs", DataTable)
        self.query_one("#boot-runs-head", Static).display = t.display = bool(runs)
        if runs and not self.loaded and not self.focus_log:
            t.focus()
        t.clear()
        for r in runs:
            t.add_row(*map(fmt.plain, (self.dash.alias(r["id"]), r.get("kind") or "", r["state"], r.get("step") or "",
                                       fmt.num(r.get("tau"), ".3f"), fmt.num(r.get("best_output_tok_s"), ".0f"))),
                      key=r["id"])
        self.loaded = True

    def show_log(self, tail: dict[str, Any]) -> None:
        key = (tail["total_lines"], tail["matched"], self.search, tail["size"])
        status = Text(f"log: {tail['matched']}/{tail['total_lines']} lines", style="bold")
        status.append(f"  follow {'on' if self.follow else 'off'} (f)")
        if self.search:
            status.append(f"  search {self.search!r} (/)")
        self.query_one("#log-status", Static).update(status)
        if key == self._log_key:
            return
        self._log_key = key
        log = self.query_one("#log", Log)
        log.clear()
        log.write_lines(tail["lines"])

    @on(DataTable.RowSelected, "#boot-runs")
    def _open_run(self, event: DataTable.RowSelected) -> None:
        if event.row_key.value:
            self.dash.push_screen(RunScreen(event.row_key.value))

    def action_back(self) -> None:
        box = self.query_one("#log-search", Input)
        if box.display and box.has_focus:
            box.display = False
            self.query_one("#log", Log).focus()
            return
        self.dash.pop_screen()

    def action_search_log(self) -> None:
        box = self.query_one("#log-search", Input)
        box.display = True
        box.value = self.search
        box.focus()

    @on(Input.Submitted, "#log-search")
    def _apply_search(self, event: Input.Submitted) -> None:
        self.search = event.value.strip()
        self._log_key = None
        event.input.display = bool(self.search)
        self.query_one("#log", Log).focus()
        self.dash.fetch(views.log_tail, self.boot_id, 200, self.search or None, then=self.show_log, group="boot-log")

    def action_follow(self) -> None:
        self.follow = not self.follow
        self.query_one("#log", Log).auto_scroll = self.follow
        self.refresh_data()

    def action_health(self) -> None:
        self.dash.start_health(self.boot_id)

    def action_profile(self) -> None:
        self.dash.start_profile(self.boot_id)

    def action_stop(self) -> None:
        self.dash.ask_stop(self.boot_id)

    def action_entry(self) -> None:
        entries = (self.detail or {}).get("entries") or []
        if not entries:
            self.notify("no runbook entry linked to this boot", severity="warning")
            return
        self.dash.push_screen(RunbooksScreen(slug=entries[0]["slug"]))


# ------------------------------------------------------------------ run detail

class RunScreen(DashScreen):
    """One run: throughput/latency, acceptance curves (bars of p_i and a_i per position),
    lossless, break-even, profile split bars with %, the speculative step's phase split, top kernels, doctor
    findings, steps."""

    BINDINGS = [Binding("escape", "back", "back"), Binding("c", "app.compare", "compare"),
                Binding("slash", "app.runbooks", "search"), Binding("q", "app.quit_dash", "quit")]

    def __init__(self, run_id: str) -> None:
        super().__init__()
        self.run_id = run_id
        self.detail: dict[str, Any] | None = None

    def compose(self) -> ComposeResult:
        yield Static(id="run-head")
        with VerticalScroll(id="run-body"):
            yield Static(id="run-content")
        yield JobBar()
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.refresh_data()

    def refresh_data(self) -> None:
        if self.detail is None or self.detail["run"]["state"] == "running":
            self.dash.fetch(views.run_detail, self.run_id, then=self.show_detail, group="run-detail")

    def on_resize(self) -> None:
        if self.detail is not None:
            self.show_detail(self.detail)

    def show_detail(self, d: dict[str, Any]) -> None:
        self.detail = d
        self.query_one("#run-head", Static).update(run_head(self.dash, d))
        self.query_one("#run-content", Static).update(Group(*run_sections(self.dash, d, self.size.width)))
        self.loaded = True

    def action_back(self) -> None:
        self.dash.pop_screen()


def run_head(dash: "DynocellApp", d: dict[str, Any]) -> Text:
    r = d["run"]
    head = Text(f"run {dash.alias(r['id'])} ", style="bold")
    head.append(r["state"], style=fmt.RUN_STYLES.get(r["state"], ""))
    head.append(f"  {r.get('kind')}  config {fmt.config_name(r)}  step {r.get('step') or '-'}  "
                f"took {fmt.duration(r.get('duration_s'))}")
    if r.get("boot_id"):
        head.append(f"  boot {dash.alias(r['boot_id'])}")
    if r.get("error"):
        head.append(f"\nerror: {r['error']}", style="red")
    return head


def _bench_table(bench: list[dict[str, Any]]) -> Any:
    """The run's bench levels: throughput, TTFT and TPOT (ms p50/p99) per concurrency level."""
    t = _tbl("throughput and latency (ms p50/p99)", "level", "out tok/s", "req/s", "TTFT", "TPOT",
             "decode tok/s")

    def pp(x: dict[str, Any] | None) -> str:
        x = x or {}
        return f"{fmt.num(x.get('p50'))}/{fmt.num(x.get('p99'))}"

    for b in bench:
        lvl = f"c={b['concurrency']}" + (f" {b['text_class']}" if b.get("text_class") else "")
        t.add_row(lvl, fmt.num(b.get("output_tok_s")), fmt.num(b.get("request_throughput"), ".2f"),
                  pp(b.get("ttft_ms")), pp(b.get("tpot_ms")), fmt.num(b.get("decode_tok_s")))
    return t


def _profile_parts(prof: dict[str, Any], width: int, hint: str | None = None) -> list[Any]:
    """The run's profile: why it failed, or its split by category, the speculative step's phase split
    (``prof["phases"]`` as ``dynocell show`` prints it, :func:`dynocell.cli.render.phases_text`: % and launches
    per output token per phase, or why it is unavailable; ``hint`` when none is stored) and its top kernels."""
    if prof.get("state") == "failed":
        return [Text(f"profile failed: {prof.get('error')}", style="red")]
    parts: list[Any] = [Text(f"profile split ({prof.get('source')}; busy {fmt.num(prof.get('busy_pct'))} %, "
                             f"{fmt.num(prof.get('ms_per_token'), '.2f')} ms/token, "
                             f"{fmt.num(prof.get('launches_per_token'), '.1f')} launches/token)", style="bold")]
    parts.extend(fmt.split_lines(prof.get("splits") or [], max(8, min(30, width - 50))))
    phases = phases_text(prof.get("phases"), hint=hint)
    if phases is not None:
        parts.append(phases)
    kernels = prof.get("kernels") or []
    if kernels:
        t = _tbl("top kernels", "kernel", "category", "ms", "launches")
        for k in kernels[:8]:
            t.add_row(Text(k["name"][:max(20, width - 40)]), k["category"], f"{k['ms']:.2f}",
                      str(k["launches"]))
        parts.append(t)
    return parts


def run_sections(dash: "DynocellApp", d: dict[str, Any], width: int) -> list[Any]:
    """Renderables of the run screen in reading order, sized for ``width`` columns."""
    r = d["run"]
    parts: list[Any] = []
    bench = d.get("bench") or []
    if bench:
        parts.append(_bench_table(bench))
    curves = d.get("curves") or []
    parts.append(Text("acceptance per text class (p unconditional, a conditional)", style="bold"))
    if curves:
        bw = max(6, min(24, (width - 34) // 2))
        parts.extend(fmt.acceptance_lines(curves, bw))
    else:
        parts.append(Text("  (no acceptance recorded)", style="dim"))
    lossless = r.get("lossless")
    ll = Text("lossless: ", style="bold")
    ll.append(str(lossless or "not checked"), style="green" if lossless in ("yes", "pass") else
              ("red" if lossless else "dim"))
    for mm in ((r.get("lossless_detail") or {}).get("mismatches") or [])[:2]:
        ll.append(f"\n  diverges at {mm.get('unit')} {mm.get('first_diverging_index')}")
    parts.append(ll)
    be = r.get("breakeven")
    if be:
        t = Text("break-even: ", style="bold")
        margin = be.get("margin")
        if margin is None and be.get("margin_pct") is not None:
            margin = be["margin_pct"] / 100.0
        t.append(f"τ {fmt.num(be.get('tau'), '.2f')}  spec step {fmt.num(be.get('spec_step_ms'), '.2f')} ms  "
                 f"plain step {fmt.num(be.get('plain_step_ms'), '.2f')} ms  margin "
                 f"{'-' if margin is None else f'{margin * 100:+.1f} %'}")
        if be.get("pays") is not None:
            t.append("  pays" if be["pays"] else "  does NOT pay", style="green" if be["pays"] else "red")
        parts.append(t)
    prof = d.get("profile")
    if prof:
        parts.extend(_profile_parts(prof, width, phases_hint(d, dash.alias(r["id"]))))
    else:
        parts.append(Text("profile: none", style="dim"))
    findings = d.get("findings") or []
    parts.append(Text(f"doctor findings ({len(findings)})", style="bold"))
    for f in findings:
        line = Text(f"  [{f['severity']}] ", style="yellow" if f["severity"] in ("warn", "warning") else "")
        line.append(f"{f['rule']}: {f['message']}")
        if f.get("entries"):
            line.append(f"  → {', '.join(f['entries'])}", style="dim")
        parts.append(line)
    steps = d.get("steps") or []
    if steps:
        st = Text("steps: ", style="bold")
        for i, s in enumerate(steps):
            mark = {"completed": "✔", "failed": "✖", "skipped": "–", "running": "…", "interrupted": "!"}.get(
                s["state"], "?")
            st.append(("  " if i else "") + f"{mark}{s['name']}")
        parts.append(st)
    return parts


# ------------------------------------------------------------------ runbooks

class RunbooksScreen(DashScreen):
    """Search the runbook entries (FTS) and read one as markdown."""

    BINDINGS = [Binding("escape", "back", "back"), Binding("slash", "focus_search", "search"),
                Binding("q", "app.quit_dash", "quit", show=False)]

    def __init__(self, query: str = "", slug: str | None = None, focus_search: bool = True) -> None:
        super().__init__()
        self.query_text = query
        self.slug = slug
        self.focus_search = focus_search and slug is None

    def compose(self) -> ComposeResult:
        yield Input(value=self.query_text, placeholder="search runbooks (words; Enter / Tab to the list)",
                    id="rb-query")
        with Vertical(id="rb-body"):
            yield OptionList(id="rb-hits")
            yield Markdown(id="rb-entry")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        if self.focus_search:
            self.query_one("#rb-query", Input).focus()
        else:
            self.query_one("#rb-hits", OptionList).focus()
        self._search(self.query_text)
        if self.slug:
            self.dash.fetch(views.get_entry, self.slug, then=self.show_entry, group="rb-entry")

    def _search(self, q: str) -> None:
        self.dash.fetch(views.search_entries, q, then=self.show_hits, group="rb-search")

    @on(Input.Changed, "#rb-query")
    def _changed(self, event: Input.Changed) -> None:
        if event.value != self.query_text:  # the operator typed: the entry shown follows the new top hit
            self.query_text = event.value
            self.slug = None
        self._search(event.value)

    @on(Input.Submitted, "#rb-query")
    def _submitted(self, event: Input.Submitted) -> None:
        self.query_one("#rb-hits", OptionList).focus()

    def show_hits(self, hits: list[dict[str, Any]]) -> None:
        ol = self.query_one("#rb-hits", OptionList)
        ol.clear_options()
        ol.add_options([Option(Text(f"{h['slug']}  [{h.get('kind') or '-'}]  {h['title']}"), id=h["slug"])
                        for h in hits])
        if not hits:
            ol.add_option(Option(Text("no entry matches", style="dim"), disabled=True))
        if self.slug is None and hits:
            self.slug = hits[0]["slug"]
            self.dash.fetch(views.get_entry, self.slug, then=self.show_entry, group="rb-entry")
        elif not self.slug:
            self.loaded = True

    @on(OptionList.OptionHighlighted, "#rb-hits")
    @on(OptionList.OptionSelected, "#rb-hits")
    def _pick(self, event: OptionList.OptionHighlighted | OptionList.OptionSelected) -> None:
        slug = event.option.id
        if slug and slug != self.slug:
            self.slug = slug
            self.dash.fetch(views.get_entry, slug, then=self.show_entry, group="rb-entry")

    async def show_entry(self, e: dict[str, Any]) -> None:
        head = f"# {e['title']}\n\n*{e.get('kind') or 'entry'}* · `{e['slug']}`"
        if e.get("tags"):
            head += " · " + ", ".join(e["tags"])
        body = e.get("body") or ""
        md = self.query_one("#rb-entry", Markdown)
        await md.update(head + "\n\n" + body)
        self.loaded = True

    def action_focus_search(self) -> None:
        self.query_one("#rb-query", Input).focus()

    def action_back(self) -> None:
        self.dash.pop_screen()


# ------------------------------------------------------------------ compare

class CompareScreen(DashScreen):
    """Two or more runs side by side: τ, throughput per level (Δ % vs the first), split (Δ pp)."""

    BINDINGS = [Binding("escape", "back", "back"), Binding("q", "app.quit_dash", "quit")]

    def __init__(self, run_ids: list[str]) -> None:
        super().__init__()
        self.run_ids = run_ids

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(id="cmp")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        self.dash.fetch(views.compare_runs, self.run_ids, then=self.show, group="compare")

    def show(self, c: dict[str, Any]) -> None:
        names = [self.dash.alias(r["run"]["id"]) for r in c["runs"]]
        t = _tbl("runs (first is the base)", "", *names)
        t.add_row("config", *[fmt.config_name(r["run"]) for r in c["runs"]])
        t.add_row("host", *[r["run"].get("host_label") or "?" for r in c["runs"]])
        t.add_row("τ", *[fmt.num(r["run"].get("tau"), ".3f") for r in c["runs"]])
        t.add_row("state", *[r["run"]["state"] for r in c["runs"]])
        tp = _tbl("output tok/s (Δ % vs base)", "level", *names)
        for row in c["throughput"]:
            cells = []
            for v, dlt in zip(row["values"], row["deltas_pct"]):
                cells.append(fmt.num(v) + ("" if dlt is None or v is row["values"][0] else f" ({dlt:+.1f}%)"))
            tp.add_row(f"c={row['concurrency']}" + (f" {row['text_class']}" if row["text_class"] else ""), *cells)
        sp = _tbl("profile split % (Δ pp vs base)", "category", *names)
        for row in c["splits"]:
            cells = []
            for i, (p, dlt) in enumerate(zip(row["pct"], row["delta_pp"])):
                cells.append(fmt.num(p) + ("" if dlt is None or i == 0 else f" ({dlt:+.1f})"))
            sp.add_row(row["category"], *cells)
        warn = [Text("⚠ " + c["hardware_warning"], style="bold yellow"), Text("")] if c.get("hardware_warning") else []
        self.query_one("#cmp", Static).update(Group(*warn, t, Text(""), tp, Text(""), sp))
        self.loaded = True

    def action_back(self) -> None:
        self.dash.pop_screen()
