"""``dynocell tui``: the terminal dashboard (Textual) for watching and driving engines over SSH.

A thin face over :mod:`dynocell.runbooks`: it reads the store through
``runbooks.views``, acts through ``runbooks.boots`` / ``runbooks.run``, and listens to
``runbooks.events``. Threading rules:

- every runbooks call runs in a Textual *thread* worker (:meth:`DynocellApp.fetch`,
  :meth:`DynocellApp.start_job`), so a slow engine or a long run never blocks a keypress;
- widgets change only on the UI thread: workers hand results back with
  ``call_from_thread``; event subscribers (called on procedure threads) only
  ``post_message`` (thread-safe, non-blocking);
- polling: every ``poll_interval_s`` (``settings.poll_interval_s``) one worker calls
  ``boots.reconcile_and_list`` (which reconciles boots whose supervisor vanished → ``lost``) and the list
  views; a store event triggers the same poll at once. A crashed engine therefore shows
  ``crashed``/``lost`` with its signature within one to two polling intervals.

Options for tests and demos: ``now`` (the clock used for uptimes and "ago"), ``alias``
(id → displayed id, e.g. fixed names for snapshots), ``poll_interval_s=0`` (load once, no
timer), ``start`` (a screen to open on top of the main one).
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from datetime import datetime
from typing import Any, Callable

from textual.app import App
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen

from dynocell.boot_states import LIVE_STATES as LIVE
from dynocell.cli.tui import format as fmt
from dynocell.cli.tui.screens import CompareScreen, DashScreen, MainScreen, RunbooksScreen
from dynocell.cli.tui.widgets import DEFAULT_CHOICE, ConfigPicker, ConfirmScreen, RunsPicker
from dynocell.errors import DynocellError, Interrupted
from dynocell.runbooks import events, views
from dynocell.runbooks.jobs import Job, cancelling_progress
from dynocell.text import printable, printable_tree


class StoreEvent(Message):
    """A ``runbooks.events`` notification, re-posted on the UI thread."""

    def __init__(self, event: dict[str, Any]) -> None:
        super().__init__()
        self.event = event


class JobChanged(Message):
    """A job's progress or state changed (posted from its worker thread)."""

    def __init__(self, job: Job) -> None:
        super().__init__()
        self.job = job


def poll_snapshot(cell: Any, limit: int = 30) -> dict[str, Any]:
    """One poll: reconcile live boots (``boots.reconcile_and_list``), then boots (live first, then newest) and
    runs by id. Returns ``{boots: [...], runs: {id: run}, error: str | None}``; each boot carries
    ``state_note`` (``unknown (host B last seen …)`` for a quiet host's live boot, else None)."""
    from dynocell.runbooks import boots as rb_boots

    error = None
    notes: dict[str, str] = {}
    try:
        notes = {r["id"]: r["state_note"] for r in rb_boots.reconcile_and_list(cell, all=False) if r.get("state_note")}
    except DynocellError as exc:
        error = f"reconcile: {exc.message}"
    except Exception as exc:  # noqa: BLE001 - show it, keep the table alive
        error = f"reconcile: {type(exc).__name__}: {exc}"
    rows = views.list_boots(cell, all=True, limit=limit)
    rows.sort(key=lambda b: (b["state"] not in LIVE,))  # stable: newest first within each group
    for r in rows:  # another host's quiet boot: "unknown (host B last seen … ago)", as `ps` says
        r["state_note"] = notes.get(r["id"])
    runs = {r["id"]: r for r in views.list_runs(cell, limit=200)}
    return printable_tree({"boots": rows, "runs": runs, "error": error})


class DynocellApp(App[None]):
    """The dashboard. ``cell``: a :class:`dynocell.runbooks.cell.Cell`; see the module doc
    for ``poll_interval_s``, ``now``, ``alias`` and ``start``."""

    CSS_PATH = "dynocell.tcss"
    TITLE = "dynocell"
    ENABLE_COMMAND_PALETTE = False  # the footer needs the room at 80 columns
    BINDINGS = [Binding("ctrl+c", "quit_dash", "quit", show=False, priority=True)]

    def __init__(
        self,
        cell: Any,
        *,
        poll_interval_s: float | None = None,
        now: Callable[[], datetime] = fmt.utc_now,
        alias: Callable[[str], str] | None = None,
        start: Callable[[], Screen] | None = None,
    ) -> None:
        super().__init__()
        self.cell = cell
        interval = cell.settings.poll_interval_s if poll_interval_s is None else poll_interval_s
        self.poll_interval_s = float(interval)
        self.now = now
        self.alias: Callable[[str], str] = alias or (lambda i: i[:8])
        self.start = start
        self.snapshot: dict[str, Any] = {"boots": [], "runs": {}, "error": None}
        self.jobs: list[Job] = []
        self.polls = 0
        self._unsubscribe: Callable[[], None] | None = None
        self._poll_running = threading.Lock()
        self._poll_again = False
        self._fetching: set[str] = set()  # fetch groups with a fetch running (UI thread only)
        self._fetch_next: dict[str, tuple[Any, ...]] = {}  # group → the newest request made meanwhile

    # ------------------------------------------------------------ lifecycle
    def on_mount(self) -> None:
        self.push_screen(MainScreen())
        if self.start is not None:
            self.push_screen(self.start())
        self._unsubscribe = events.subscribe(self._subscriber)
        if self.poll_interval_s > 0:
            self.set_interval(self.poll_interval_s, self._tick)

    def on_unmount(self) -> None:
        if self._unsubscribe:
            self._unsubscribe()
        self.stop_owned_runs()

    def stop_owned_runs(self, wait_s: float = 60.0) -> None:
        """Safety net when the dashboard ends with a run still going (engines supervised in this
        process would be orphaned): cancel each run, stop its boot through ``runbooks.boots.stop``,
        and wait (at most ``wait_s``) for the run to record its end. Blocks the caller."""
        runs = self.running_jobs("run")
        if not runs:
            return
        from dynocell.runbooks import boots as rb_boots

        for j in runs:
            j.cancel.set()
            if j.boot_id:
                with contextlib.suppress(Exception):  # best effort on the way out
                    rb_boots.stop(self.cell, j.boot_id)
        for j in runs:
            j.ended.wait(timeout=wait_s)

    def _subscriber(self, event: dict[str, Any]) -> None:
        # Called on a procedure's thread: post only (thread-safe, never blocks the procedure).
        with contextlib.suppress(Exception):  # the app is shutting down
            self.post_message(StoreEvent(event))

    def on_store_event(self, message: StoreEvent) -> None:
        self._tick()

    def _tick(self) -> None:
        screen = self.screen
        if isinstance(screen, MainScreen):
            self.request_poll()
        elif isinstance(screen, DashScreen):
            screen.refresh_data()
            self.request_poll()

    # ------------------------------------------------------------ fetching
    def _ui(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """Run ``fn(*args, **kwargs)`` on the UI thread from a worker (ignored once the app has stopped)."""
        with contextlib.suppress(RuntimeError):
            self.call_from_thread(fn, *args, **kwargs)

    def fetch(self, fn: Callable[..., Any], *args: Any, then: Callable[[Any], object], group: str = "fetch") -> None:
        """Call ``fn(self.cell, *args)`` in a thread worker, then ``then(result)`` on the UI thread.

        One fetch per ``group`` runs at a time. A request made while one runs is kept (the newest
        only) and runs after it; the running fetch's result is still shown when its ``fn`` and
        ``args`` are those of the newest request, so a fetch slower than the polls that re-ask for
        it is never starved (each superseding the last showed nothing on a loaded host). A result
        for older arguments (the cursor moved on) is dropped. Errors become toasts. Call on the UI
        thread."""
        req = (fn, args, then)
        if group in self._fetching:
            self._fetch_next[group] = req
            return
        self._start_fetch(group, req)

    def _start_fetch(self, group: str,
                     req: tuple[Callable[..., Any], tuple[Any, ...], Callable[[Any], object]]) -> None:
        fn, args, _then = req
        self._fetching.add(group)

        def work() -> None:
            try:
                res = printable_tree(fn(self.cell, *args))  # rows carry untrusted text (issue 16, item 5)
            except Exception as exc:  # noqa: BLE001 - DynocellError or a bug: say so, keep the dashboard up
                self._ui(self._fetch_done, group, req, None, exc)
                return
            self._ui(self._fetch_done, group, req, res, None)

        self.run_worker(work, thread=True, group=group, exit_on_error=False)

    async def _fetch_done(self, group: str, req: tuple[Any, ...], res: Any, exc: BaseException | None) -> None:
        """UI thread: a fetch of ``group`` ended; show its result unless newer arguments were asked for
        meanwhile, then start the waiting request, if any."""
        self._fetching.discard(group)
        nxt = self._fetch_next.pop(group, None)
        fresh = nxt is None or (nxt[0] is req[0] and nxt[1] == req[1])
        if exc is not None:
            self.show_error(exc)
        elif fresh:
            shown = (nxt or req)[2](res)
            if inspect.isawaitable(shown):  # a screen's async ``show_*`` (Markdown.update is awaited)
                await shown
        if nxt is not None:  # asked for after this fetch began: its data may be newer
            self._start_fetch(group, nxt)

    def show_error(self, exc: BaseException) -> None:
        """A toast for an error: ``message`` + ``hint`` of a DynocellError, else type and text."""
        if isinstance(exc, DynocellError):
            text = exc.message + (f"\nhint: {exc.hint}" if exc.hint else "")
        else:
            text = f"internal error: {type(exc).__name__}: {exc}"
        self.notify(printable(text, keep_newlines=True), severity="error", timeout=10, markup=False)

    def request_poll(self) -> None:
        """Poll now (one poll at a time; a request during a poll runs one more after it)."""
        if not self._poll_running.acquire(blocking=False):
            self._poll_again = True
            return
        self.run_worker(self._poll_work, thread=True, group="poll", exit_on_error=False)

    def _poll_work(self) -> None:
        try:
            while True:
                self._poll_again = False
                try:
                    snap = poll_snapshot(self.cell)
                except Exception as exc:  # noqa: BLE001
                    self._ui(self.show_error, exc)
                    return
                self._ui(self._apply_snapshot, snap)
                if not self._poll_again:
                    return
        finally:
            self._poll_running.release()

    def _apply_snapshot(self, snap: dict[str, Any]) -> None:
        self.snapshot = snap
        self.polls += 1
        for screen in self.screen_stack:
            if isinstance(screen, MainScreen):
                screen.show_snapshot(snap)

    # ------------------------------------------------------------ jobs
    def start_job(self, job: Job, fn: Callable[[Callable[[str, dict[str, Any]], None]], Any],
                  done: Callable[[Any], None] | None = None) -> Job:
        """Run ``fn(progress)`` in a thread worker as ``job``; ``done(result)`` on the UI thread."""
        job.begin()
        self.jobs.append(job)
        self.jobs = [j for j in self.jobs if j.state == "running" or j is job][-20:]
        notify = lambda j: self.post_message(JobChanged(j))  # noqa: E731 - thread-safe post
        progress = cancelling_progress(job, notify)

        def work() -> None:
            try:
                res = fn(progress)
                job.finish("done", result=res)
                if done is not None:
                    self._ui(done, res)
            except Interrupted as exc:
                job.finish("interrupted", error=exc.message)
                self._ui(self.notify, f"{job.kind} {job.label}: {exc.message}", severity="warning")
            except DynocellError as exc:
                job.finish("failed", error=exc.message)
                self._ui(self.show_error, exc)
            except Exception as exc:  # noqa: BLE001
                job.finish("failed", error=f"{type(exc).__name__}: {exc}")
                self._ui(self.show_error, exc)
            finally:
                notify(job)

        self.post_message(JobChanged(job))
        self.run_worker(work, thread=True, group=f"job-{job.id}", exit_on_error=False)
        return job

    def on_job_changed(self, message: JobChanged) -> None:
        for screen in self.screen_stack:
            if isinstance(screen, DashScreen):
                screen.show_jobs(self.jobs)
        if message.job.state != "running":
            self.request_poll()

    def running_jobs(self, kind: str | None = None) -> list[Job]:
        """Jobs still running (optionally of one ``kind``)."""
        return [j for j in self.jobs if j.state == "running" and (kind is None or j.kind == kind)]

    # ------------------------------------------------------------ actions
    def action_run_config(self) -> None:
        """``r``: pick a config, run the main job on it in this process (engine supervised here)."""
        self.fetch(_configs, then=lambda cs: self.push_screen(ConfigPicker("run which config?", cs), self._run_picked),
                   group="configs")

    def _run_picked(self, choice: str | None) -> None:
        if choice is None:
            return
        from dynocell.runbooks.run import RunOptions, run_job

        ref = None if choice == DEFAULT_CHOICE else choice
        label = "embedded" if ref is None else self._config_label(ref)
        job = Job("run", label)
        self.start_job(job, lambda progress: run_job(self.cell, ref, options=RunOptions(), progress=progress),
                       done=lambda rid: self.notify(f"run {self.alias(rid)} ended (o opens it)", markup=False))

    def action_boot_config(self) -> None:
        """``b``: pick a config, boot it detached (its supervisor outlives the dashboard)."""
        self.fetch(_configs, then=lambda cs: self.push_screen(ConfigPicker("boot which config?", cs),
                                                              self._boot_picked), group="configs")

    def _boot_picked(self, choice: str | None) -> None:
        if choice is None:
            return
        from dynocell.runbooks import boots as rb_boots
        from dynocell.runbooks.run import DEFAULT_CONFIG

        ref = str(DEFAULT_CONFIG) if choice == DEFAULT_CHOICE else choice
        job = Job("boot", "embedded" if choice == DEFAULT_CHOICE else self._config_label(choice))
        self.start_job(job, lambda progress: rb_boots.boot(self.cell, ref, detach=True, progress=progress),
                       done=lambda bid: self.notify(f"boot {self.alias(bid)} ready", markup=False))

    def _config_label(self, config_hash: str) -> str:
        return config_hash.removeprefix("sha256:")[:12]

    def ask_stop(self, boot_id: str) -> None:
        """``s``: confirm, then stop the boot (a run this dashboard drives is interrupted first)."""
        row = next((b for b in self.snapshot.get("boots", []) if b["id"] == boot_id), None)
        if row is not None and row["state"] not in LIVE:
            self.notify(f"boot {self.alias(boot_id)} is already {row['state']}", severity="warning", markup=False)
            return
        self.push_screen(ConfirmScreen(f"Stop boot {self.alias(boot_id)}? (SIGTERM, grace, then SIGKILL of its "
                                       "whole process group)"),
                         lambda yes: self._stop_if(yes, boot_id))

    def _stop_if(self, yes: bool | None, boot_id: str) -> None:
        if yes:
            self.stop_boot(boot_id)

    def stop_boot(self, boot_id: str) -> Job:
        """Stop ``boot_id`` in a worker: cancel our run on it (stops at its next step), wait for
        it, then ``runbooks.boots.stop`` whatever is still live."""
        from dynocell.runbooks import boots as rb_boots

        owners = [j for j in self.running_jobs("run") if j.boot_id == boot_id]
        for j in owners:
            j.cancel.set()
        grace = self.cell.settings.stop_grace_s

        def work(progress: Callable[[str, dict[str, Any]], None]) -> Any:
            for j in owners:
                progress(f"waiting for run {j.label} to stop its engine", {})
                j.ended.wait(timeout=grace + 30)
            return rb_boots.stop(self.cell, boot_id)

        return self.start_job(Job("stop", self.alias(boot_id)), work,
                              done=lambda row: self.notify(f"boot {self.alias(boot_id)} {row.get('state')}",
                                                           markup=False))

    def start_profile(self, boot_id: str) -> Job:
        """``p``: a profiler window on a ready boot (``runbooks.run.profile``)."""
        from dynocell.runbooks import run as rb_run

        return self.start_job(Job("profile", self.alias(boot_id)),
                              lambda progress: rb_run.profile(self.cell, boot_id, progress=progress),
                              done=lambda rid: self.notify(f"profile run {self.alias(rid)} recorded", markup=False))

    def start_health(self, boot_id: str) -> Job:
        """``h``: run the health oracle now (``runbooks.boots.health``) and record the verdict."""
        from dynocell.runbooks import boots as rb_boots

        return self.start_job(Job("health", self.alias(boot_id)),
                              lambda progress: rb_boots.health(self.cell, boot_id),
                              done=lambda row: self.notify(f"health {self.alias(boot_id)}: {row.verdict}",
                                                           markup=False))

    def action_runbooks(self) -> None:
        """``/``: the runbooks screen with the search box focused."""
        if not isinstance(self.screen, RunbooksScreen):
            self.push_screen(RunbooksScreen())

    def _compare_picked(self, ids: list[str] | None) -> None:
        if ids:
            self.push_screen(CompareScreen(ids))

    def action_compare(self) -> None:
        """``c``: tick two runs, then compare them side by side."""
        self.fetch(lambda cell: views.list_runs(cell, limit=50),
                   then=lambda runs: self.push_screen(
                       RunsPicker(runs, self.alias), self._compare_picked),
                   group="runs")

    def action_quit_dash(self) -> None:
        """``q``: quit; a run driven from here is interrupted first (its engine stopped).
        Detached boots keep running under their own supervisors."""
        runs = self.running_jobs("run")
        if not runs:
            self.exit()
            return

        def answer(yes: bool | None) -> None:
            if not yes:
                return
            for j in runs:
                j.cancel.set()
            self.notify("stopping the run(s) before quitting…", markup=False)

            def wait(progress: Callable[[str, dict[str, Any]], None]) -> None:
                for j in runs:
                    progress(f"waiting for run {j.label}", {})
                    j.ended.wait(timeout=self.cell.settings.stop_grace_s + 60)

            self.start_job(Job("quit", "dashboard"), wait, done=lambda _r: self.exit())

        self.push_screen(ConfirmScreen(f"{len(runs)} run(s) in progress: stop them and quit?"), answer)


def _configs(cell: Any) -> list[dict[str, Any]]:
    from dynocell.runbooks.configs import list_configs

    return list_configs(cell)


def run_dashboard(cell: Any, poll_interval_s: float | None = None) -> None:
    """Run the dashboard in the terminal until the operator quits."""
    DynocellApp(cell, poll_interval_s=poll_interval_s).run()
