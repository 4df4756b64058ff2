"""The main job's step machinery: options, the step recorder (one ``run_steps`` row per step, written as it
starts and ends), the skip/failure signals, and helpers every step shares (workload, context length).
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from dynocell.db import runs as db_runs
from dynocell.engine import kinds
from dynocell.engine.client import EngineClient
from dynocell.engine.config import EngineConfig
from dynocell.errors import DynocellError, Interrupted
from dynocell.runbooks import events
from dynocell.runbooks.boots.live import noop_progress  # noqa: F401 - the one no-op progress, for the steps
from dynocell.runbooks.cell import Cell

Progress = Callable[[str, dict[str, Any]], None]
DEFAULT_CONFIG = Path(__file__).parents[1] / "data" / "embedded.toml"
ESSENTIAL = ("config", "build", "model", "boot", "health", "bench")
LOSSLESS_TOKENS = 48
PROFILE_REQUESTS = 2
PROFILE_TOKENS = 32


@dataclass
class RunOptions:
    """Knobs of one main-job run.

    ``workload``: path of a workload TOML (None = bundled default);
    ``lossless``: compare greedy outputs with a plain boot of the same target;
    ``profile``: open a profiler window; ``boot_timeout_s``: overrides the
    engine's default; ``stop_grace_s``: overrides the settings' grace;
    ``requests``: requests per text class of the acceptance levels (None = the
    workload's; more requests narrow every interval, issue 33);
    ``allow_contended``: let the doctor judge a window measured under contention.
    """

    workload: str | None = None
    lossless: bool = True
    profile: bool = True
    diagnose: bool = True
    boot_timeout_s: float | None = None
    stop_grace_s: float | None = None
    requests: int | None = None
    allow_contended: bool = False

    def as_dict(self) -> dict[str, Any]:
        """Plain values, as stored on the run row."""
        return dict(self.__dict__)


class StepFailed(Exception):
    """An essential step (:data:`ESSENTIAL`) failed: ``name`` the step, ``error`` what it raised; ends the run."""

    def __init__(self, name: str, error: BaseException) -> None:
        super().__init__(f"{name}: {error}")
        self.name, self.error = name, error


class SkipStep(Exception):
    """Raised inside a step to record it as ``skipped`` with a reason."""


@dataclass
class RunJob:
    """One main-job run in progress: its cell and run id, the progress callback, and what the steps found so far
    (failed steps, warnings, concurrent boots, the env warning). :meth:`step` records each step."""

    cell: Cell
    run_id: str
    progress: Progress
    failed: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    concurrent: dict[str, str] = field(default_factory=dict)  # other live boot id → its warning
    env_warning: str | None = None  # "⚠ env sets LD_PRELOAD" for a config whose [env] injects code

    @contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        """Record a step: running → completed | skipped | failed | interrupted."""
        sid = db_runs.start_step(self.cell.store, self.run_id, name)
        events.publish("run.step_started", run_id=self.run_id, step=name)
        self.progress(f"{name} …", {"step": name, "state": "running"})
        detail: dict[str, Any] = {}
        t0 = time.monotonic()
        try:
            yield detail
        except SkipStep as skip:
            detail["seconds"] = round(time.monotonic() - t0, 3)
            db_runs.end_step(self.cell.store, sid, "skipped", detail, str(skip))
            self._ended(name, "skipped", str(skip))
        except (KeyboardInterrupt, Interrupted):
            db_runs.end_step(self.cell.store, sid, "interrupted", detail, "interrupted by the operator")
            self._ended(name, "interrupted", "")
            raise
        except Exception as exc:  # noqa: BLE001 - every failure is recorded, then re-raised or absorbed
            detail["seconds"] = round(time.monotonic() - t0, 3)
            db_runs.end_step(self.cell.store, sid, "failed", detail, error_text(exc))
            self._ended(name, "failed", error_text(exc))
            self.failed.append(name)
            if name in ESSENTIAL:
                raise StepFailed(name, exc) from exc
        else:
            detail["seconds"] = round(time.monotonic() - t0, 3)
            db_runs.end_step(self.cell.store, sid, "completed", detail)
            self._ended(name, "completed", "")

    def _ended(self, name: str, state: str, error: str) -> None:
        events.publish("run.step_ended", run_id=self.run_id, step=name, state=state, error=error)
        self.progress(f"{name} {state}" + (f": {error}" if error else ""), {"step": name, "state": state})


def error_text(exc: BaseException) -> str:
    """A step's error as stored: a DynocellError's own message, any other exception with its type name."""
    return str(exc) if isinstance(exc, DynocellError) else f"{type(exc).__name__}: {exc}"


def this_pid() -> int:
    """This process's pid (stored on the run: :mod:`dynocell.runbooks.run.reconcile` judges runs of dead ones)."""
    import os

    return os.getpid()


def load_run_workload(path: str | None):  # noqa: ANN202 - engine type
    """The workload at ``path`` (None: the bundled default), imported when a run needs it."""
    from dynocell.engine.workloads import load_workload

    return load_workload(path)


def sized_workload(workload: Any, requests: int | None = None, *, num_prompts: int | None = None,
                   concurrency: list[int] | None = None, warmup: int | None = None) -> Any:
    """``workload`` resized by the operator's knobs (None = unchanged): ``requests`` per text class of the
    acceptance levels (``run --requests N``), ``num_prompts`` per throughput level (``bench --num-prompts``),
    the throughput ``concurrency`` list (``bench --concurrency 1,4,8``) and ``warmup`` requests per level.
    The workload's sha256 changes with them: another request count is another experiment. Raises UserError
    naming the flag when a value is out of the workload schema's bounds."""
    from pydantic import ValidationError

    from dynocell.errors import UserError

    data = workload.model_dump()
    if requests is not None and data.get("acceptance") is not None:
        data["acceptance"]["requests_per_class"] = requests
    if data.get("throughput") is not None:
        if num_prompts is not None:
            data["throughput"]["requests_per_level"] = num_prompts
        if concurrency is not None:
            data["throughput"]["concurrency"] = list(concurrency)
    if warmup is not None:
        data["warmup"] = warmup
    if data == workload.model_dump():
        return workload
    try:
        return type(workload).model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err.get("loc", ()))
        flag = {"acceptance.requests_per_class": "--requests", "throughput.requests_per_level": "--num-prompts",
                "warmup": "--warmup"}.get(loc, "--concurrency" if loc.startswith("throughput.concurrency") else loc)
        raise UserError(f"{flag}: {err.get('msg')}", "e.g. --requests 20, --num-prompts 40, --concurrency 1,4,8, "
                        "--warmup 2") from None


def engine_context_length(client: EngineClient, cfg: EngineConfig) -> int:
    """The engine's context length in tokens: a registered kind's own probe, vLLM's ``max_model_len``
    (``/v1/models``), SGLang's ``context_length`` / ``max_total_num_tokens`` (``/get_server_info``), else the
    config's, else 2048."""
    try:
        kind = kinds.get(cfg.engine)
        if kind is not None:
            n = kind.context_length(client)
            if n:
                return n
        elif cfg.api == "vllm":  # vLLM: /v1/models carries max_model_len
            models = (client.models().body or {}).get("data") or [{}]
            if models[0].get("max_model_len"):
                return int(models[0]["max_model_len"])
        info = client.server_info().body or {}
        value = info.get("context_length") or info.get("max_total_num_tokens")
        if value:
            return int(value)
    except Exception:  # noqa: BLE001 - fall back to the config
        pass
    return cfg.memory.context_length or 2048
