"""Engine kinds behind one registry: what a procedure asks an engine kind, and where it finds one.

An :class:`EngineKind` owns everything dynocell knows about one engine: its name (the config's
``engine = "…"``), its HTTP surface, the command line rendered from a config with the engine's own
flag names (and the flags a config therefore owns), its phase-rule and failure-signature file
(``engine/rules/<rules>.toml``), its health checks, metric names, how acceptance is measured, the
completion request shape, the boot timeout and whether a profiler window exists.

Layering: kinds sit on top of the rest of ``engine/`` (they import ``config``, ``adapters``,
``health``, ``metrics``, ``acceptance``); ``config.py`` and ``health.py`` call no kind, procedures
(``runbooks/``) ask :func:`get`. A new engine is one module here, one line in :data:`KIND_MODULES`,
its data files and its tests. SGLang, vLLM and the reference engine still live in ``adapters.py``
and the procedures' two-valued checks; they move here next (the protocol names what they need).

API: :func:`get` ``(name) -> EngineKind | None``, :func:`names`, :func:`require`.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dynocell.errors import UserError

if TYPE_CHECKING:  # annotations only: the kinds import these modules, never the other way round
    from dynocell.engine.adapters import LaunchSpec
    from dynocell.engine.client import EngineClient
    from dynocell.engine.config import EngineConfig
    from dynocell.engine.health import Canary, Check, ExpectedServer
    from dynocell.engine.metrics import MetricsSnapshot, PositionFigures

__all__ = ["KIND_MODULES", "ClassAcceptance", "EngineKind", "RequestAcceptance", "get", "names", "require"]

#: The modules that define a kind, each exposing ``KIND`` (an :class:`EngineKind`), imported on first use.
KIND_MODULES = ("dynocell.engine.kinds.llamacpp",)


@dataclass(frozen=True)
class RequestAcceptance:
    """One request's acceptance as the engine reports it in the response: ``drafted`` draft tokens
    proposed, ``accepted`` of them accepted, ``generated`` tokens generated. ``accept_rate`` =
    accepted / drafted (per drafted token); ``tokens_per_step`` = generated / (generated − accepted)
    (tokens per target forward pass over all decode steps, drafted or not)."""

    drafted: int
    accepted: int
    generated: int

    @property
    def accept_rate(self) -> float | None:
        """accepted / drafted, None when nothing was drafted."""
        return self.accepted / self.drafted if self.drafted else None

    @property
    def tokens_per_step(self) -> float | None:
        """generated / (generated − accepted), None when undefined."""
        steps = self.generated - self.accepted
        return self.generated / steps if self.generated and steps > 0 else None


@dataclass(frozen=True)
class ClassAcceptance:
    """A class window's acceptance from ``/metrics`` counter deltas: ``curve`` (an
    :class:`~dynocell.engine.acceptance.Curve`, steps = verify steps), ``figures`` (the engine's own
    counts: drafts, draft_tokens, accepted_tokens, engine_tau) and ``definition`` (one sentence: what
    the curve's p_i mean, said in reports)."""

    curve: Any
    figures: Mapping[str, float | None] | PositionFigures
    definition: str


@runtime_checkable
class EngineKind(Protocol):
    """One engine kind. Attributes: ``name`` (config ``engine``), ``api`` (HTTP surface the health
    oracle and bench client speak: ``"openai"`` = ``/v1/models`` + ``/v1/completions``), ``rules``
    (phase/signature rules file stem), ``boot_timeout_s`` (default overall boot limit, seconds),
    ``profile_unavailable`` (why ``dynocell profile`` cannot run on it, or None), ``class_definition`` /
    ``request_definition`` (what its two acceptance measurements mean, one sentence each)."""

    name: str
    api: str
    rules: str
    boot_timeout_s: float
    profile_unavailable: str | None
    class_definition: str
    request_definition: str

    def check_config(self, cfg: "EngineConfig", source: str = "<config>") -> None:
        """Refuse (ConfigError naming the field and the fix) what this engine cannot run."""
        ...

    def launch(self, cfg: "EngineConfig", *, program: str, port: int, base_env: dict[str, str]) -> "LaunchSpec":
        """The exact argv and explicit environment that start ``cfg`` on ``port`` (``program``: the
        engine executable). Raises ConfigError for a config it cannot run."""
        ...

    def owned_flags(self) -> dict[str, str]:
        """Every engine flag (all spellings) a config field owns → that field (dotted)."""
        ...

    def surface_checks(self, client: "EngineClient", expected: "ExpectedServer | None", canary: "Canary | None",
                       timeout_s: float) -> list["Check"]:
        """The health oracle's surface checks after ``/health`` 200 (a real generation among them)."""
        ...

    def recognise(self, models: Any, metric_families: set[str] | frozenset[str]) -> bool:
        """Whether an attached OpenAI server (``/v1/models`` body, ``/metrics`` family prefixes) is this kind."""
        ...

    def observe(self, client: "EngineClient") -> dict[str, Any]:
        """Config fields (dotted) a running engine of this kind reveals beyond ``/v1/models``."""
        ...

    def progress_names(self) -> dict[str, tuple[str, ...]]:
        """Metric names the progress check sums: keys ``generated``, ``prompt``, ``running``, ``queued``."""
        ...

    def request_acceptance(self, meta_info: Mapping[str, Any]) -> RequestAcceptance | None:
        """One request's acceptance from its response fields (bench ``meta_info``), or None."""
        ...

    def class_acceptance(self, before: "MetricsSnapshot", after: "MetricsSnapshot") -> ClassAcceptance | None:
        """A class window's acceptance from two ``/metrics`` scrapes; None when no verify step happened."""
        ...

    def context_length(self, client: "EngineClient") -> int | None:
        """The context length in tokens one request may use, from the engine's surface; None = unknown."""
        ...

    def expected(self, cfg: "EngineConfig") -> "ExpectedServer":
        """What the health oracle's surface checks compare against for ``cfg``."""
        ...

    def completion_kw(self, cfg: "EngineConfig") -> dict[str, Any]:
        """``bench.run_level`` keywords of its completion request shape (``api``, ``model``)."""
        ...


_loaded: dict[str, EngineKind] | None = None


def _kinds() -> dict[str, EngineKind]:
    global _loaded
    if _loaded is None:
        found: dict[str, EngineKind] = {}
        for mod in KIND_MODULES:
            kind = importlib.import_module(mod).KIND
            found[kind.name] = kind
        _loaded = found
    return _loaded


def names() -> tuple[str, ...]:
    """Names of the registered kinds, in :data:`KIND_MODULES` order."""
    return tuple(_kinds())


def get(name: str | None) -> EngineKind | None:
    """The registered kind called ``name``, or None (an engine still served by ``adapters.py``)."""
    return _kinds().get(name or "")


def require(name: str) -> EngineKind:
    """The registered kind called ``name``; UserError naming the registered ones otherwise."""
    kind = get(name)
    if kind is None:
        raise UserError(f"no registered engine kind {name!r}", f"registered kinds: {', '.join(names())}")
    return kind
