"""Long actions the dashboard starts (run, boot, stop, profile, health), run off the UI thread.

A :class:`Job` is the UI's record of one action: a name, the latest progress message,
``done``/``total`` when the procedure reports counts, the boot it concerns (learnt from
progress data), and a cancel flag. Procedures are the ``dynocell.runbooks`` ones; the
dashboard never talks to an engine itself.

Cancelling a main-job run: :func:`cancelling_progress` raises
:class:`~dynocell.errors.Interrupted` at the next step START after the flag is set (never
inside a step's inner progress ticks, never in the ``stop``/``diagnose`` steps), which is
where ``run_job`` records the run ``interrupted`` and stops its engine.
"""

from __future__ import annotations

import itertools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from dynocell.errors import Interrupted

_ids = itertools.count(1)
NEVER_INTERRUPT = ("stop", "diagnose")


@dataclass
class Job:
    """One long action: ``kind`` (run, boot, stop, profile, health), ``label`` (what it acts on)."""

    kind: str
    label: str
    id: int = field(default_factory=lambda: next(_ids))
    message: str = "starting…"
    done: int | None = None
    total: int | None = None
    boot_id: str | None = None
    run_id: str | None = None
    state: str = "running"  # running | done | failed | interrupted
    error: str | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.monotonic)
    ended: threading.Event = field(default_factory=threading.Event)
    _raised: bool = False

    def update(self, msg: str, data: dict[str, Any]) -> None:
        """Take one ``progress(msg, data)`` call of a procedure."""
        self.message = msg
        if data.get("boot_id"):
            self.boot_id = str(data["boot_id"])
        if data.get("run_id"):
            self.run_id = str(data["run_id"])
        if "done" in data and "total" in data:
            self.done, self.total = int(data["done"]), int(data["total"])
        elif data.get("state") == "running":
            self.done = self.total = None

    def should_interrupt(self, data: dict[str, Any]) -> bool:
        """True once, at the first step start after :attr:`cancel` was set (see module doc)."""
        if self._raised or not self.cancel.is_set():
            return False
        if data.get("state") == "running" and data.get("step") and data["step"] not in NEVER_INTERRUPT:
            self._raised = True
            return True
        return False

    def progress_text(self, width: int = 20) -> str:
        """``"run tiny · bench c=4: 3/8 [██████······] "`` — one line for the job bar."""
        from dynocell.cli.tui.format import hbar

        head = f"⏵ {self.kind} {self.label} · {self.message}"
        if self.done is not None and self.total:
            head += f" [{hbar(self.done / self.total, width)}]"
        if self.cancel.is_set() and self.state == "running":
            head += " (stopping…)"
        return head


def cancelling_progress(job: Job, notify: Callable[[Job], None]) -> Callable[[str, dict[str, Any]], None]:
    """A procedure ``progress`` callback that records into ``job``, calls ``notify(job)``
    (which must be thread-safe), and raises Interrupted when the job was cancelled."""

    def progress(msg: str, data: dict[str, Any]) -> None:
        job.update(msg, data)
        notify(job)
        if job.should_interrupt(data):
            raise Interrupted(f"{job.kind} {job.label} stopped from the dashboard", "see the run's steps")

    return progress
