"""Background jobs for the faces (web panel, TUI): one :class:`Job` record and the web's runner.

A job is a procedure (``run_job``, ``boot``, ``stop``, ``bench``, ``profile`` …) run off the
face's request/UI thread. It reports progress through the ``progress(step: str, detail: dict)``
callback the procedures accept; :meth:`Job.update` takes each call: the latest step is
``message``, the messages are kept (newest last, at most 500) so a page can poll them, ids seen in
progress details (``run_id``, ``boot_id``) are kept as ``links``, and ``done``/``total`` when the
procedure reports counts (the TUI's progress bar).

The web panel runs jobs through :class:`JobRunner` (daemon threads; :meth:`JobRunner.shutdown` cancels
them when the panel exits). The TUI runs them in its own Textual thread workers and uses
:func:`cancelling_progress`.

De-duplication: ``JobRunner.start(..., key=...)`` with a ``(kind, key)`` pair that already has a
queued or running job returns that job's id instead of starting another — two identical "start a
run of config X" clicks never start two engines. Use the config hash (or boot id) as ``key``.

Cancelling (TUI): :func:`cancelling_progress` raises :class:`~dynocell.errors.Interrupted` at the
next step START after :attr:`Job.cancel` is set (never inside a step's inner progress ticks, never
in the ``stop``/``diagnose`` steps), which is where ``run_job`` records the run ``interrupted`` and
stops its engine.
"""

from __future__ import annotations

import inspect
import threading
import time
import traceback
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

from dynocell.errors import Interrupted

MAX_MESSAGES = 500
ACTIVE = ("queued", "running")
NEVER_INTERRUPT = ("stop", "diagnose")


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Job:
    """One background job: ``kind`` (run, boot, stop, bench, profile, health …), ``label`` (what it
    acts on). ``state``: queued, running, done, failed, interrupted. ``result``: the function's
    return. ``cancel`` asks a cancellable job to stop; ``ended`` is set once it has ended."""

    kind: str
    label: str
    key: str | None = None
    id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    state: str = "queued"
    message: str = "starting…"
    done: int | None = None
    total: int | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    error_status: int | None = None
    created_at: datetime = field(default_factory=_now)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    cancel: threading.Event = field(default_factory=threading.Event, repr=False)
    ended: threading.Event = field(default_factory=threading.Event, repr=False)
    _raised: bool = field(default=False, repr=False)

    @property
    def boot_id(self) -> str | None:
        """The boot this job concerns, once a progress detail named it."""
        return self.links.get("boot_id")

    @property
    def run_id(self) -> str | None:
        """The run this job recorded, once a progress detail (or the result) named it."""
        return self.links.get("run_id")

    def begin(self) -> None:
        """Mark the job running (its function is about to be called)."""
        self.state, self.started_at = "running", _now()

    def finish(self, state: str, *, result: Any = None, error: str | None = None,
               error_status: int | None = None) -> None:
        """Record the end: ``state`` done, failed or interrupted; ``ended`` is set afterwards."""
        self.state, self.result, self.error, self.error_status = state, result, error, error_status
        if state == "done" and isinstance(result, str):
            if self.kind in ("run", "bench", "profile"):
                self.links.setdefault("run_id", result)
            elif self.kind == "boot":
                self.links.setdefault("boot_id", result)
        if error is not None:
            self.messages.append({"ts": _now(), "step": "error", "detail": {"error": error}})
        self.ended_at = _now()
        self.ended.set()

    def update(self, step: str, detail: dict[str, Any] | None = None) -> None:
        """Take one ``progress(step, detail)`` call of a procedure."""
        detail = dict(detail or {})
        self.message = str(step)
        for k in ("run_id", "boot_id"):
            if detail.get(k):
                self.links[k] = str(detail[k])
        if "done" in detail and "total" in detail:
            self.done, self.total = int(detail["done"]), int(detail["total"])
        elif detail.get("state") == "running":
            self.done = self.total = None
        self.messages.append({"ts": _now(), "step": str(step), "detail": detail})
        del self.messages[:-MAX_MESSAGES]

    def should_interrupt(self, detail: dict[str, Any]) -> bool:
        """True once, at the first step start after :attr:`cancel` was set (see module doc)."""
        if self._raised or not self.cancel.is_set():
            return False
        if detail.get("state") == "running" and detail.get("step") and detail["step"] not in NEVER_INTERRUPT:
            self._raised = True
            return True
        return False

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-able view (``result`` stringified unless a str/int/float/None)."""
        res = self.result if isinstance(self.result, (str, int, float, type(None))) else str(self.result)
        return {"id": self.id, "kind": self.kind, "key": self.key, "label": self.label, "state": self.state,
                "messages": list(self.messages[-50:]), "links": dict(self.links), "result": res,
                "error": self.error, "created_at": self.created_at, "started_at": self.started_at,
                "ended_at": self.ended_at}


def cancelling_progress(job: Job, notify: Callable[[Job], object]) -> Callable[[str, dict[str, Any]], None]:
    """A procedure ``progress`` callback that records into ``job``, calls ``notify(job)``
    (which must be thread-safe), and raises Interrupted when the job was cancelled."""

    def progress(msg: str, data: dict[str, Any]) -> None:
        job.update(msg, data)
        notify(job)
        if job.should_interrupt(data):
            raise Interrupted(f"{job.kind} {job.label} stopped from the dashboard", "see the run's steps")

    return progress


def _accepts_progress(fn: Callable[..., Any]) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "progress" in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


class JobRunner:
    """Runs jobs on daemon threads; thread-safe. One runner per app (keep it on ``app.state``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, Job] = {}
        self._active: dict[tuple[str, str], str] = {}

    def start(self, kind: str, fn: Callable[..., Any], *args: Any, key: str | None = None, label: str | None = None,
              **kwargs: Any) -> str:
        """Start ``fn(*args, **kwargs, progress=cb)`` in the background; returns the job id.

        ``progress`` is passed only when ``fn`` accepts it. With ``key``, an active job of the same
        ``(kind, key)`` is reused (its id returned) — nothing new starts.
        """
        with self._lock:
            if key is not None:
                existing = self._active.get((kind, key))
                if existing and self._jobs[existing].state in ACTIVE:
                    return existing
            job = Job(kind=kind, label=label or kind, key=key)
            self._jobs[job.id] = job
            if key is not None:
                self._active[(kind, key)] = job.id
        t = threading.Thread(target=self._run, args=(job, fn, args, kwargs), name=f"dynocell-job-{job.id}",
                             daemon=True)
        t.start()
        return job.id

    def _progress(self, job: Job) -> Callable[[str, dict | None], None]:
        def cb(step: str, detail: dict | None = None) -> None:
            with self._lock:
                job.update(step, detail)
                stop = job.should_interrupt(detail or {})
            if stop:
                raise Interrupted(f"{job.kind} {job.label} stopped: the panel shut down", "see the run's steps")
        return cb

    def _run(self, job: Job, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        cb = self._progress(job)
        with self._lock:
            job.begin()
        try:
            result = fn(*args, **kwargs, progress=cb) if _accepts_progress(fn) else fn(*args, **kwargs)
        except BaseException as e:  # noqa: BLE001 - the job records every failure
            with self._lock:
                job.finish("interrupted" if isinstance(e, Interrupted) else "failed", error=str(e) or type(e).__name__,
                           error_status=getattr(e, "http_status", None))
                job.messages[-1]["detail"]["trace"] = traceback.format_exception_only(type(e), e)[-1].strip()
        else:
            with self._lock:
                job.finish("done", result=result)

    def shutdown(self, wait_s: float) -> list[Job]:
        """Stop the active jobs before the process exits (``dynocell web`` after SIGTERM or Ctrl-C): each is
        cancelled at its next step start — a main job then records its run ``interrupted`` and stops its
        engine, as ``dynocell run`` does on Ctrl-C — and waited for up to ``wait_s`` seconds in all. Returns
        the jobs still running then (their threads end with the process; the next command reconciles what
        they leave). Before, the panel's exit left a run ``running`` and its engine up."""
        with self._lock:
            active = [j for j in self._jobs.values() if j.state in ACTIVE]
        for job in active:
            job.cancel.set()
        deadline = time.monotonic() + wait_s
        for job in active:
            job.ended.wait(max(0.0, deadline - time.monotonic()))
        return [j for j in active if not j.ended.is_set()]

    def get(self, job_id: str) -> Job | None:
        """The job with ``job_id`` or None."""
        with self._lock:
            return self._jobs.get(job_id)

    def status(self, job_id: str) -> dict[str, Any] | None:
        """:meth:`Job.as_dict` of ``job_id`` or None."""
        with self._lock:
            job = self._jobs.get(job_id)
            return job.as_dict() if job else None

    def list(self, *, active_only: bool = False) -> list[dict[str, Any]]:
        """Jobs newest first as dicts."""
        with self._lock:
            jobs = sorted(self._jobs.values(), key=lambda j: j.created_at, reverse=True)
            return [j.as_dict() for j in jobs if not active_only or j.state in ACTIVE]

    def wait(self, job_id: str, timeout_s: float = 60.0) -> dict[str, Any] | None:
        """Block until the job ends or ``timeout_s`` passes; returns its status."""
        job = self.get(job_id)
        if job is not None:
            job.ended.wait(timeout_s)
        return self.status(job_id)
