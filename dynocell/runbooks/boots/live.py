"""What every boot procedure shares: boot ids, the engine's base environment and boot marker, the
live boots this process supervises (:class:`LiveBoot`, the registry read by :func:`live_boot`), the log
finish, the current time, and a boot by reference (the one resolver, :mod:`dynocell.db.refs`).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from dynocell.db import boots as db_boots
from dynocell.db import refs
from dynocell.engine import kinds
from dynocell.engine.adapters import LaunchSpec, engine_base_url
from dynocell.engine.client import EngineClient
from dynocell.engine.config import EngineConfig
from dynocell.engine.supervisor import (
    Supervisor, file_digest,
)
from dynocell.runbooks.cell import Cell
from dynocell.settings import child_base_env
from dynocell.text import printable

Progress = Callable[[str, dict[str, Any]], None]


def noop_progress(_msg: str, _data: dict[str, Any]) -> None:
    """A progress callback that reports nothing (the default of every procedure that takes one)."""


def new_id() -> str:
    """A short random id (12 hex chars) for boots and runs."""
    return uuid.uuid4().hex[:12]


#: The marker every engine process (and every process it spawns) carries in its environment:
#: ``DYNOCELL_BOOT_ID=<boot id>``. It is set before the spawn, so an engine whose pid never reached
#: the store (its supervisor killed between fork and the pid write) is still found and stopped by
#: :func:`reconcile` (psutil ``Process.environ()``).
BOOT_MARKER = "DYNOCELL_BOOT_ID"
#: SGLang's variable for where torch-profiler traces go; the reference engine confines
#: ``/start_profile`` output to it.
PROFILER_DIR_ENV = "SGLANG_TORCH_PROFILER_DIR"


#: How long reconciliation waits before its second look for a marked engine of a boot with no pid.
SPAWN_SETTLE_S = 0.5


def default_boot_timeout(settings: Any, engine: str) -> float:
    """The overall boot limit of ``engine`` when none is given, seconds: a registered engine kind's own
    (:mod:`dynocell.engine.kinds`), else the settings' per-engine limit."""
    kind = kinds.get(engine)
    return kind.boot_timeout_s if kind is not None else settings.boot_timeout_s(engine)


def engine_base_env(boot_id: str, boot_dir: Path) -> dict[str, str]:
    """The base environment of a boot's engine: :func:`~dynocell.settings.child_base_env` plus the
    boot marker (:data:`BOOT_MARKER`) and the profile directory ``boot_dir/profiles``
    (:data:`PROFILER_DIR_ENV`)."""
    return {**child_base_env(), BOOT_MARKER: boot_id, PROFILER_DIR_ENV: str(boot_dir / "profiles")}


# ---------------------------------------------------------------- live boots

@dataclass
class LiveBoot:
    """A boot this process supervises: the row id, the supervisor, the launch spec."""

    boot_id: str
    config_hash: str
    cfg: EngineConfig
    spec: LaunchSpec
    supervisor: Supervisor
    log_path: Path
    boot_dir: Path
    ready_s: float | None = None
    progress_sample: Any = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the engine (:func:`~dynocell.engine.adapters.engine_base_url`)."""
        return self.spec.base_url

    def client(self, timeout_s: float) -> EngineClient:
        """An HTTP client of this engine."""
        return EngineClient(self.base_url, timeout_s)


def engine_profile_dir(cfg: Any, boot_dir: Path | str) -> Path | None:
    """Where an engine that fixes its trace directory at boot writes torch traces, else None.

    vLLM 0.26 (and the reference engine's vLLM surface): ``--profiler-config {"torch_profiler_dir": …}``
    is given at launch and
    ``/start_profile`` takes no directory, so every window of one boot writes into
    ``<boot_dir>/profiles/vllm`` (files ``rank<N>.<id>.pt.trace.json.gz``). SGLang and the
    reference engine take ``output_dir`` per ``/start_profile``: None.
    """
    return Path(boot_dir) / "profiles" / "vllm" if getattr(cfg, "api", None) == "vllm" else None


def str_or_none(path: Path | None) -> str | None:
    """``str(path)``, None for None."""
    return None if path is None else str(path)


def printable_log_line(line: str, limit: int = 200) -> str:
    """A log line fit for an error message: escape sequences removed, other control bytes as ``?``, cut."""
    from dynocell.engine.rules import match_text

    return printable(match_text(line), limit=limit)


def finish_log(cell: Cell, boot_id: str, log_path: Path) -> None:
    """Record the log file's size (bytes) and sha256 on the boot row."""
    if log_path.exists():
        digest = file_digest(log_path)
        db_boots.update_boot(cell.store, boot_id, log_size=digest.size_bytes, log_sha256=digest.sha256)


# ---------------------------------------------------------------- boots by reference

def resolve_boot(cell: Cell, ref: str) -> db_boots.BootRow:
    """A boot row by id or unique id prefix (the one resolver, :mod:`dynocell.db.refs`).
    Raises NotFound naming the ambiguity or absence."""
    row = db_boots.get_boot(cell.store, refs.resolve_key(cell.store, ref, "boot"))
    assert row is not None  # resolved just now; boots are never deleted
    return row


supervised_here: dict[str, LiveBoot] = {}


@dataclass
class AttachedBoot:
    """A ready boot supervised elsewhere, driven over HTTP only (bench, profile)."""

    boot_id: str
    config_hash: str
    cfg: EngineConfig
    host: str
    port: int
    boot_dir: Path
    #: the engine's log as its boot row names it (the vLLM and llama.cpp acceptance steps read and keep beside it)
    log_path: Path
    scheme: str = "http"

    @classmethod
    def from_row(cls, row: dict[str, Any], cfg: EngineConfig) -> "AttachedBoot":
        """Build from a boot's columns (a :func:`~dynocell.runbooks.boots.reconcile` row) and its
        (model-resolved) config; an engine attached at ``https://`` keeps its scheme."""
        from dynocell.runbooks.attach import attached_scheme

        return cls(row["id"], row["config_hash"], cfg, row["host"], row["port"], Path(row["log_path"]).parent,
                   Path(row["log_path"]), attached_scheme(row.get("argv")))

    @property
    def base_url(self) -> str:
        """``scheme://host:port`` of the engine (:func:`~dynocell.engine.adapters.engine_base_url`)."""
        return engine_base_url(self.host, self.port, self.scheme)

    def client(self, timeout_s: float) -> EngineClient:
        """An HTTP client of this engine."""
        return EngineClient(self.base_url, timeout_s)


def live_boot(boot_id: str) -> LiveBoot | None:
    """The LiveBoot this process supervises with that id, if any."""
    return supervised_here.get(boot_id)
