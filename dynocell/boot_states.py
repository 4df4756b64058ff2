"""The states of a boot, defined once for every layer (the supervisor's state machine, the store's
queries, the faces' live/failed filters).

A boot starts ``starting``; ``ready`` when the health oracle passed; ``stopping`` while the stop
discipline runs. It ends ``stopped`` (asked to), ``failed`` (never became ready), ``crashed``
(exited on its own after ready) or ``lost`` (its supervisor died and the engine is gone).
"""

from __future__ import annotations

import enum


class BootState(str, enum.Enum):
    """States of a boot (values are the strings stored in the store)."""

    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"
    CRASHED = "crashed"
    LOST = "lost"


S = BootState
TRANSITIONS: dict[BootState, frozenset[BootState]] = {
    S.STARTING: frozenset({S.READY, S.FAILED, S.STOPPING, S.LOST}),
    S.READY: frozenset({S.STOPPING, S.CRASHED, S.LOST}),
    S.STOPPING: frozenset({S.STOPPED, S.LOST}),
    S.STOPPED: frozenset(),
    S.FAILED: frozenset(),
    S.CRASHED: frozenset(),
    S.LOST: frozenset(),
}
"""Legal state changes (the supervisor refuses any other)."""

TERMINAL = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)

LIVE_STATES: tuple[str, ...] = tuple(s.value for s in BootState if s not in TERMINAL)
"""``("starting", "ready", "stopping")``: a boot whose engine may be running."""

TERMINAL_STATES: tuple[str, ...] = tuple(s.value for s in BootState if s in TERMINAL)
"""``("stopped", "failed", "crashed", "lost")``: a boot that is over."""

FAILED_STATES: tuple[str, ...] = (S.FAILED.value, S.CRASHED.value, S.LOST.value)
"""The terminal states that are a failure (not a requested stop)."""
