"""Small widgets shared by the dashboard's screens: the job bar and modal dialogs."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Label, OptionList, SelectionList, Static
from textual.widgets.option_list import Option

from dynocell.cli.tui.format import job_line
from dynocell.text import printable


class JobBar(Static):
    """One line per running job (progress message + bar), hidden when nothing runs."""

    DEFAULT_CSS = """
    JobBar { height: auto; max-height: 3; display: none; }
    JobBar.-busy { display: block; }
    """

    def show_jobs(self, jobs: list[Any]) -> None:
        """Render the running jobs (:class:`dynocell.runbooks.jobs.Job`, one :func:`format.job_line` each)."""
        running = [j for j in jobs if j.state == "running"]
        self.set_class(bool(running), "-busy")
        self.update(Text("\n".join(printable(job_line(j)) for j in running[-3:]), style="bold"))


class ConfirmScreen(ModalScreen[bool]):
    """A yes/no question; dismisses with True on ``y``/Enter, False on ``n``/Escape."""

    BINDINGS = [Binding("y,enter", "answer(True)", "yes"), Binding("n,escape", "answer(False)", "no")]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(self.question))
            yield Label(Text("y = yes, n / Esc = no", style="dim"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


DEFAULT_CHOICE = "__embedded__"


class ConfigPicker(ModalScreen[str | None]):
    """Pick a stored config (or the embedded default); dismisses with its hash,
    :data:`DEFAULT_CHOICE`, or None on Escape."""

    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, configs: list[dict[str, Any]]) -> None:
        super().__init__()
        self.title_text = title
        self.configs = configs

    def compose(self) -> ComposeResult:
        opts = [Option(Text("embedded default (reference engine, made-locally pair)"), id=DEFAULT_CHOICE)]
        for c in self.configs:
            name = ", ".join(c.get("names") or []) or c.get("short") or c["hash"][:19]
            opts.append(Option(Text(f"{name:<20} {c.get('engine', '')}  {c.get('algorithm') or 'plain'}  "
                                    f"{c.get('short', '')}"), id=c["hash"]))
        with Vertical(classes="dialog"):
            yield Label(Text(self.title_text, style="bold"))
            yield OptionList(*opts, id="picker")
            yield Label(Text("Enter = choose, Esc = cancel", style="dim"))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)


class RunsPicker(ModalScreen[list[str] | None]):
    """Tick two (or more) runs to compare; Enter confirms, Escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "cancel"), Binding("enter", "confirm", "compare", priority=True)]

    def __init__(self, runs: list[dict[str, Any]], alias: Any) -> None:
        super().__init__()
        self.runs = runs
        self.alias = alias

    def _prompt(self, r: dict[str, Any], picked: list[str]) -> Text:
        """One run's line: ``[x]``/``[ ]`` and, once ticked, its place (``base``, ``2``…): a tick reads without
        colour (the toggle button only changes colour)."""
        tau = "-" if r.get("tau") is None else f"{r['tau']:.2f}"
        name = ", ".join(r.get("labels") or []) or "-"
        if r["id"] in picked:
            n = picked.index(r["id"])
            mark = Text("[x] " + ("base" if n == 0 else f"#{n + 1}").ljust(5), style="bold")
        else:
            mark = Text("[ ]      ")
        return mark + Text(f"{self.alias(r['id'])}  {name:<12} {r['state']:<11} τ {tau}")

    def picked_line(self, picked: list[str]) -> Text:
        """The line under the list naming the ticked runs in order (the first is the base)."""
        if not picked:
            return Text("none ticked · Esc = cancel", style="dim")
        names = [self.alias(p) + (" (base)" if i == 0 else "") for i, p in enumerate(picked)]
        return Text(f"ticked {len(picked)}: " + ", ".join(names) + " · Esc = cancel")

    def compose(self) -> ComposeResult:
        items = [(self._prompt(r, []), r["id"]) for r in self.runs]
        with Vertical(classes="dialog"):
            yield Label(Text("compare runs: Space ticks, Enter compares (first ticked = base)", style="bold"))
            yield SelectionList[str](*items, id="runs-pick")
            yield Label(self.picked_line([]), id="runs-picked")

    def on_selection_list_selected_changed(self, event: SelectionList.SelectedChanged) -> None:
        picked = list(event.selection_list.selected)
        for i, r in enumerate(self.runs):
            event.selection_list.replace_option_prompt_at_index(i, self._prompt(r, picked))
        self.query_one("#runs-picked", Label).update(self.picked_line(picked))

    def action_confirm(self) -> None:
        picked = list(self.query_one(SelectionList).selected)
        if len(picked) < 2:
            self.notify("tick at least two runs (Space)", severity="warning")
            return
        self.dismiss(picked)

    def action_cancel(self) -> None:
        self.dismiss(None)
