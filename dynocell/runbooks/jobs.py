"""An in-process background job runner for the faces (web panel, TUI).

A job is a procedure (``run_job``, ``boot``, ``stop``, ``bench``, ``profile`` …) run on a daemon
thread. It reports progress through the ``progress(step: str, detail: dict)`` callback the
procedures accept; the runner keeps the messages (newest last, at most 500) so a page can poll
them. Ids seen in progress details (``run_id``, ``boot_id``) are kept as ``links``.

De-duplication: ``start(..., key=...)`` with a ``(kind, key)`` pair that already has a queued or
running job returns that job's id instead of starting another — two identical "start a run of
config X" clicks never start two engines. Use the config hash (or boot id) as ``key``.
"""

from __future__ import annotations

import inspect
import threading
import traceback
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Callable

MAX_MESSAGES = 500
ACTIVE = ("queued", "running")


def _now() -> datetime:
    return datetime.now(timezone.utc)


@dataclass
class Job:
    """One background job. ``state``: queued, running, done, failed. ``result``: the function's return."""

    id: str
    kind: str
    key: str | None
    label: str
    state: str = "queued"
    messages: list[dict[str, Any]] = field(default_factory=list)
    links: dict[str, str] = field(default_factory=dict)
    result: Any = None
    error: str | None = None
    error_status: int | None = None
    created_at: datetime = field(default_factory=_now)
    started_at: datetime | None = None
    ended_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        """Plain, JSON-able view (``result`` stringified unless a str/int/float/None)."""
        res = self.result if isinstance(self.result, (str, int, float, type(None))) else str(self.result)
        return {"id": self.id, "kind": self.kind, "key": self.key, "label": self.label, "state": self.state,
                "messages": list(self.messages[-50:]), "links": dict(self.links), "result": res,
                "error": self.error, "created_at": self.created_at, "started_at": self.started_at,
                "ended_at": self.ended_at}


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
            job = Job(id=uuid.uuid4().hex[:12], kind=kind, key=key, label=label or kind)
            self._jobs[job.id] = job
            if key is not None:
                self._active[(kind, key)] = job.id
        t = threading.Thread(target=self._run, args=(job, fn, args, kwargs), name=f"dynocell-job-{job.id}",
                             daemon=True)
        t.start()
        return job.id

    def _progress(self, job: Job) -> Callable[[str, dict | None], None]:
        def cb(step: str, detail: dict | None = None) -> None:
            detail = dict(detail or {})
            with self._lock:
                for k in ("run_id", "boot_id"):
                    if isinstance(detail.get(k), str):
                        job.links[k] = detail[k]
                job.messages.append({"ts": _now(), "step": str(step), "detail": detail})
                del job.messages[:-MAX_MESSAGES]
        return cb

    def _run(self, job: Job, fn: Callable[..., Any], args: tuple, kwargs: dict) -> None:
        cb = self._progress(job)
        with self._lock:
            job.state, job.started_at = "running", _now()
        try:
            try:
                accepts = "progress" in inspect.signature(fn).parameters or any(
                    p.kind is p.VAR_KEYWORD for p in inspect.signature(fn).parameters.values())
            except (TypeError, ValueError):
                accepts = False
            result = fn(*args, **kwargs, progress=cb) if accepts else fn(*args, **kwargs)
            with self._lock:
                job.result, job.state = result, "done"
                if isinstance(result, str) and job.kind in ("run", "bench", "profile"):
                    job.links.setdefault("run_id", result)
                elif isinstance(result, str) and job.kind == "boot":
                    job.links.setdefault("boot_id", result)
        except BaseException as e:  # noqa: BLE001 - the job records every failure
            with self._lock:
                job.state = "failed"
                job.error = str(e) or type(e).__name__
                job.error_status = getattr(e, "http_status", None)
                job.messages.append({"ts": _now(), "step": "error",
                                     "detail": {"error": job.error,
                                                "trace": traceback.format_exception_only(type(e), e)[-1].strip()}})
        finally:
            with self._lock:
                job.ended_at = _now()

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
        import time

        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            st = self.status(job_id)
            if st is None or st["state"] not in ACTIVE:
                return st
            time.sleep(0.05)
        return self.status(job_id)
