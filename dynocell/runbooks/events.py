"""In-process notifications of what procedures record (boot transitions, phases, run steps).

Faces living in the same process (the TUI, the web panel's job runner)
subscribe here; other processes see the same facts in the store. Events are
past-tense dicts: ``{"event": "boot.phase_reached" | "boot.state_changed" |
"run.step_started" | "run.step_ended" | "health.recorded", …}``.
Callbacks run in the publishing thread and must be quick; an exception in a
subscriber is swallowed so it can never break a procedure.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any, Callable

Subscriber = Callable[[dict[str, Any]], None]
_subs: list[Subscriber] = []
_lock = threading.Lock()


def subscribe(fn: Subscriber) -> Callable[[], None]:
    """Call ``fn(event)`` for every published event; returns an unsubscribe function."""
    with _lock:
        _subs.append(fn)

    def unsubscribe() -> None:
        with _lock:
            if fn in _subs:
                _subs.remove(fn)

    return unsubscribe


def publish(event: str, **data: Any) -> None:
    """Publish ``{"event": event, **data}`` to every subscriber."""
    payload = {"event": event, **data}
    with _lock:
        subs = list(_subs)
    for fn in subs:
        with contextlib.suppress(Exception):  # a face's bug must not break a procedure
            fn(payload)
