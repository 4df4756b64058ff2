"""Boot, watch, probe and stop engines — and record every step of it.

Procedures here compose the engine layer (adapters, supervisor, health oracle)
with the store. Ownership rule: one process supervises a boot (its
``supervisor_pid``): the ``dynocell run`` process for the main job, a
``dynocell boot`` in the foreground, or a detached supervisor process
(``python -m dynocell.runbooks.supervise``) for ``dynocell boot --detach``.
Stopping a boot asks its supervisor (SIGTERM) and waits for the store to
show the end; when the supervisor is gone the stopper applies the stop
discipline itself. A boot whose supervisor vanished is ``lost`` if its engine
is gone too; an engine that outlived its supervisor is stopped by the next
process that reconciles (:func:`reconcile`, :func:`reconcile_and_list`) — never
orphaned, never ``ready`` by assumption.

One module per procedure: :mod:`.start`, :mod:`.stop`, :mod:`.reconcile`, :mod:`.health`,
:mod:`.wait`, :mod:`.logs`; shared state in :mod:`.live`.
"""

from __future__ import annotations

from dynocell.runbooks.boots.health import (
    config_of_boot, expected_server, health, oracle_kw, rank_status_of, record_verdict,
)
from dynocell.runbooks.boots.live import (
    BOOT_MARKER, PROFILER_DIR_ENV, AttachedBoot, LiveBoot, Progress, default_boot_timeout, engine_base_env,
    engine_profile_dir,
    finish_log, live_boot, new_id, resolve_boot,
)
from dynocell.runbooks.boots.logs import follow, logs
from dynocell.runbooks.boots.reconcile import (
    concurrent_boot_warning, other_live_boots, reconcile, reconcile_and_list, supervisor_alive,
)
from dynocell.runbooks.boots.start import describe_exit, record_crash, resolve_models, start_boot
from dynocell.runbooks.boots.stop import (
    STOP_REQUEST, requested_grace, stop, stop_live, watch,
)
from dynocell.runbooks.boots.wait import boot, wait_for_boot

__all__ = [
    "AttachedBoot",
    "BOOT_MARKER",
    "LiveBoot",
    "PROFILER_DIR_ENV",
    "Progress",
    "STOP_REQUEST",
    "boot",
    "concurrent_boot_warning",
    "config_of_boot",
    "describe_exit",
    "engine_base_env",
    "engine_profile_dir",
    "default_boot_timeout",
    "oracle_kw",
    "expected_server",
    "finish_log",
    "follow",
    "health",
    "live_boot",
    "logs",
    "new_id",
    "other_live_boots",
    "rank_status_of",
    "reconcile",
    "reconcile_and_list",
    "record_crash",
    "record_verdict",
    "requested_grace",
    "resolve_boot",
    "resolve_models",
    "start_boot",
    "stop",
    "stop_live",
    "supervisor_alive",
    "wait_for_boot",
    "watch",
]
