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
process that reconciles (:func:`reconcile`) — never orphaned, never ``ready``
by assumption.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import psutil

from dynocell.db import boots as db_boots
from dynocell.db import refs
from dynocell.engine.adapters import LaunchSpec, pick_free_port, redact_env, render
from dynocell.engine.client import EngineClient
from dynocell.engine.config import BUILTIN_MODEL_PREFIX, EngineConfig, injection_warning
from dynocell.engine import health as engine_health
from dynocell.engine import ranks as engine_ranks
from dynocell.engine.supervisor import (
    Supervisor, file_digest, process_alive, process_create_time, stop_marked, stop_process_group,
)
from dynocell.errors import EngineError, UserError
from dynocell.runbooks import events, hosts
from dynocell.runbooks.cell import Cell
from dynocell.settings import child_base_env
from dynocell.text import printable

Progress = Callable[[str, dict[str, Any]], None]


def _noop(_msg: str, _data: dict[str, Any]) -> None:
    pass


def new_id() -> str:
    """A short random id (12 hex chars) for boots and runs."""
    return uuid.uuid4().hex[:12]


# ---------------------------------------------------------------- model paths

def resolve_models(cell: Cell, cfg: EngineConfig, progress: Progress = _noop) -> EngineConfig:
    """Replace ``dynocell:tiny`` / ``dynocell:tiny-draft`` with the made-locally pair's paths.

    Makes the pair on first use (cached in the data directory). The config's
    hash is NOT recomputed from the result: the stored config keeps the label.
    """
    paths = [cfg.model_path, cfg.speculative.draft_model_path or ""]
    if not any(p.startswith(BUILTIN_MODEL_PREFIX) for p in paths):
        return cfg
    from dynocell.runbooks.models import default_pair

    pair = default_pair(cell.settings, progress=lambda m: progress(m, {"step": "model"}))
    table = {"dynocell:tiny": str(pair.target), "dynocell:tiny-draft": str(pair.draft)}
    changes: dict[str, Any] = {}
    for key, value in (("model_path", cfg.model_path), ("speculative.draft_model_path", cfg.speculative.draft_model_path)):
        if value and value.startswith(BUILTIN_MODEL_PREFIX):
            if value not in table:
                raise UserError(f"{key}: unknown built-in model {value!r}", "use dynocell:tiny or dynocell:tiny-draft")
            changes[key] = table[value]
    return cfg.with_changes(**changes)


# ---------------------------------------------------------------- the engine's environment

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
        """``http://host:port`` of the engine."""
        return f"http://{self.spec.host}:{self.spec.port}"

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


def _str_or_none(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _record_event(cell: Cell, boot_id: str) -> Callable[[Any], None]:
    """The supervisor's event callback: every phase and transition becomes a row and a notification."""

    def on_event(ev: Any) -> None:
        kind = type(ev).__name__
        if kind == "PhaseReached":
            db_boots.add_event(cell.store, boot_id, "phase", ev.name, ev.offset_s, ev.detail or None)
            db_boots.update_boot(cell.store, boot_id, last_phase=ev.name)
            events.publish("boot.phase_reached", boot_id=boot_id, phase=ev.name, offset_s=ev.offset_s,
                           detail=ev.detail)
        elif kind == "StateChanged":
            events.publish("boot.state_changed", boot_id=boot_id, old=ev.old, new=ev.new, reason=ev.reason)

    return on_event


def start_boot(
    cell: Cell,
    cfg: EngineConfig,
    config_hash: str,
    *,
    timeout_s: float | None = None,
    boot_id: str | None = None,
    port: int | None = None,
    build: dict[str, Any] | None = None,
    progress: Progress = _noop,
    on_created: Callable[[], None] | None = None,
) -> LiveBoot:
    """Spawn the engine for ``cfg`` under this process's supervision and wait until ready.

    Writes the boot row first (state ``starting``), each phase as it is
    reached, and the final ``ready``/``failed`` transition. On failure the
    boot row keeps exit code, signature and log tail, and :class:`EngineError`
    is raised (the engine is already gone or stopped). When the port was
    picked here (none given, config port 0) and another process binds it
    before the engine does (``port_in_use``), the engine is launched again on a
    newly picked port (at most :data:`PORT_RETRIES` times, a ``port_retry``
    note event each time) under the same boot row.

    ``timeout_s`` (default: the engine's boot timeout setting) counts from this
    call, making the reference model pair on first use included: a boot that
    runs out of it while the models are made fails before any engine is spawned.
    """
    from dynocell.engine.config import require_model_paths

    settings = cell.settings
    t0 = time.monotonic()
    cfg_run = resolve_models(cell, cfg, progress)
    limit = timeout_s or settings.boot_timeout_s(cfg_run.engine)
    deadline = t0 + limit
    if time.monotonic() >= deadline:
        raise EngineError(f"boot timed out: {limit:.0f} s were spent making the reference model pair; "
                          "no engine was started",
                          "boot again (the pair is kept once made), or give a longer --timeout")
    require_model_paths(cfg_run, cfg_run.name or config_hash)
    boot_id = boot_id or new_id()
    boot_dir = settings.boots_dir / boot_id
    boot_dir.mkdir(parents=True, exist_ok=True)
    log_path = boot_dir / "engine.log"
    picked_port = not (port or cfg_run.port)
    port = port or cfg_run.port or pick_free_port(cfg_run.host)
    spec = render(
        cfg_run, python=settings.engine_python, port=port,
        build_pythonpath=(build or {}).get("pythonpath"), base_env=engine_base_env(boot_id, boot_dir),
        profile_dir=_str_or_none(engine_profile_dir(cfg_run, boot_dir)),
    )
    spec.env[BOOT_MARKER] = boot_id  # after [env]: a config cannot unset or fake the marker
    supervisor_ctime = process_create_time(os.getpid())
    db_boots.create_boot(
        cell.store, id=boot_id, config_hash=config_hash, build_hash=(build or {}).get("build_hash"),
        engine=cfg_run.engine, hostname=socket.gethostname(), host=spec.host, port=spec.port,
        host_id=hosts.this_host_id(cell),
        argv=spec.argv_string, env=redact_env(spec.env), state="starting", log_path=str(log_path),
        supervisor_pid=os.getpid(), supervisor_create_time=supervisor_ctime,
    )
    if on_created is not None:
        on_created()
    events.publish("boot.created", boot_id=boot_id, config_hash=config_hash, port=spec.port)
    progress(f"booting {cfg_run.engine} on port {spec.port} (boot {boot_id})", {"boot_id": boot_id})
    retries_left = PORT_RETRIES if picked_port else 0
    while True:
        # Phase rules follow the log's shapes: the reference engine's vLLM surface prints vLLM's lines.
        rules = "vllm" if cfg_run.api == "vllm" else cfg_run.engine
        sup = Supervisor(rules, on_event=_record_event(cell, boot_id))
        try:
            sup.start(spec, log_path)
        except (OSError, EngineError) as exc:  # Supervisor.start reports a spawn failure as EngineError
            why = exc.message if isinstance(exc, EngineError) else f"could not start the engine: {exc}"
            db_boots.transition(cell.store, boot_id, "starting", "failed", ended_at=_now(),
                                failure_signature="spawn_error", failure_detail={"error": why, "reason": why})
            raise EngineError(why, f"check engine_python ({settings.engine_python})") from exc
        db_boots.update_boot(cell.store, boot_id, pid=sup.pid, pgid=sup.pgid, engine_create_time=sup.create_time)
        live = LiveBoot(boot_id, config_hash, cfg_run, spec, sup, log_path, boot_dir)
        try:
            result = sup.wait_ready(timeout_s=max(deadline - time.monotonic(), 0.1),
                                    http_timeout_s=settings.http_timeout_s)
        except BaseException:
            # Ctrl-C / SIGTERM while booting: the engine must not outlive the procedure that started it.
            res = sup.stop(settings.stop_grace_s)
            finish_log(cell, boot_id, log_path)
            db_boots.transition(cell.store, boot_id, ("starting", "stopping", "ready"), "stopped", ended_at=_now(),
                                exit_code=res.exit_code, stop_how=res.how, stop_s=res.seconds,
                                zombies=len(res.zombies), failure_detail={"reason": "interrupted while booting"})
            raise
        if result.ok:
            live.ready_s = result.ready_s
            db_boots.transition(cell.store, boot_id, "starting", "ready", ready_at=_now(), ready_s=result.ready_s)
            progress(f"ready in {result.ready_s:.1f} s", {"boot_id": boot_id, "ready_s": result.ready_s})
            return live
        if retries_left and _port_taken(result):
            # The port was free when picked, but another process bound it before the engine did:
            # not the operator's doing — pick another one and launch again under the same boot.
            retries_left -= 1
            sup.close()
            taken = spec.port
            spec = render(
                cfg_run, python=settings.engine_python, port=pick_free_port(cfg_run.host),
                build_pythonpath=(build or {}).get("pythonpath"), base_env=engine_base_env(boot_id, boot_dir),
                profile_dir=_str_or_none(engine_profile_dir(cfg_run, boot_dir)),
            )
            spec.env[BOOT_MARKER] = boot_id
            db_boots.add_event(cell.store, boot_id, "note", "port_retry", sup.offset_s(),
                               {"port": taken, "new_port": spec.port,
                                "reason": "the picked port was taken before the engine bound it"})
            db_boots.update_boot(cell.store, boot_id, port=spec.port, argv=spec.argv_string)
            progress(f"port {taken} was taken before the engine bound it; retrying on port {spec.port}",
                     {"boot_id": boot_id, "port": spec.port})
            continue
        break
    # Not ready: wait_ready already stopped what was left of the group; record why.
    stop = result.stop
    sup.close()
    finish_log(cell, boot_id, log_path)
    sig = result.signature
    db_boots.transition(
        cell.store, boot_id, ("starting", "stopping"), "failed", ended_at=_now(),
        exit_code=result.exit_code if result.exit_code is not None else (stop.exit_code if stop else None),
        failure_signature=sig.id if sig else "unknown",
        failure_detail={"reason": result.reason, "title": sig.title if sig else None,
                        "hint": sig.hint if sig else None, "groups": sig.groups if sig else {},
                        "last_phase": result.last_phase, "tail": list(result.tail)[-50:]},
        stop_how=stop.how if stop else None, stop_s=stop.seconds if stop else None,
    )
    known = bool(sig and sig.id != "unknown")
    # No signature matched: the engine's last words are the best clue, so show them (cut, printable).
    last = [_printable(ln) for ln in list(result.tail)[-3:] if ln.strip()] if not known else []
    if known and sig.id == "boot.timeout":
        head = f"boot {boot_id} timed out: {result.reason}"  # the signature's title would say it twice
    else:
        head = f"boot {boot_id} failed: {result.reason}" + (f" — {sig.id}: {sig.title}" if known else "")
    raise EngineError(
        head
        + ("".join(f"\n  | {ln}" for ln in last)),
        (sig.hint if known and sig.hint else
         f"read the log: `dynocell logs {boot_id}`; add a failure signature if it recurs"),
    )


def _printable(line: str, limit: int = 200) -> str:
    """A log line fit for an error message: escape sequences removed, other control bytes as ``?``, cut."""
    from dynocell.engine.rules import match_text

    return printable(match_text(line), limit=limit)


PORT_RETRIES = 2


def _port_taken(result: Any) -> bool:
    """Whether a failed boot failed because its port was already bound (``port_in_use``)."""
    return result.signature is not None and result.signature.id == "port_in_use"


def _now():
    from datetime import datetime, timezone

    return datetime.now(timezone.utc)


def finish_log(cell: Cell, boot_id: str, log_path: Path) -> None:
    """Record the log file's size (bytes) and sha256 on the boot row."""
    if log_path.exists():
        digest = file_digest(log_path)
        db_boots.update_boot(cell.store, boot_id, log_size=digest.size_bytes, log_sha256=digest.sha256)


def stop_live(cell: Cell, live: LiveBoot, grace_s: float | None = None, reason: str = "stop requested") -> dict[str, Any]:
    """Stop a boot this process supervises: ``stopping`` → TERM, grace, KILL, verify → ``stopped``.

    Returns ``{exit_code, how, seconds, survivors, zombies}``; survivors (which
    should be none) are also recorded as a failure detail.
    """
    grace = cell.settings.stop_grace_s if grace_s is None else grace_s
    db_boots.transition(cell.store, live.boot_id, ("starting", "ready"), "stopping")
    events.publish("boot.state_changed", boot_id=live.boot_id, old="ready", new="stopping", reason=reason)
    res = live.supervisor.stop(grace)
    finish_log(cell, live.boot_id, live.log_path)
    detail = {"survivors": [str(x) for x in res.survivors]} if res.survivors else None
    db_boots.transition(
        cell.store, live.boot_id, ("stopping", "ready", "starting"), "stopped", ended_at=_now(),
        exit_code=res.exit_code, stop_how=res.how, stop_s=res.seconds, zombies=len(res.zombies),
        **({"failure_detail": detail} if detail else {}),
    )
    events.publish("boot.state_changed", boot_id=live.boot_id, old="stopping", new="stopped", reason=reason)
    return {"exit_code": res.exit_code, "how": res.how, "seconds": res.seconds,
            "survivors": [str(x) for x in res.survivors], "zombies": [str(x) for x in res.zombies]}


def record_crash(cell: Cell, live: LiveBoot) -> dict[str, Any]:
    """Record that a ready engine died without a stop request (``crashed``, with signature)."""
    sup = live.supervisor
    sup.poll()
    leftovers = sup.stop(0.0)  # a crashed engine may leave children behind: none may survive
    finish_log(cell, live.boot_id, live.log_path)
    sig = sup.failure
    db_boots.transition(
        cell.store, live.boot_id, ("ready", "starting"), "crashed", ended_at=_now(), exit_code=sup.exit_code,
        failure_signature=sig.id if sig else "unknown", stop_how=leftovers.how, zombies=len(leftovers.zombies),
        failure_detail={"title": sig.title if sig else None, "hint": sig.hint if sig else None,
                        "tail": sup.tail(50), "survivors": [str(x) for x in leftovers.survivors]},
    )
    events.publish("boot.state_changed", boot_id=live.boot_id, old="ready", new="crashed",
                   reason=sig.id if sig else "unknown")
    return db_boots.get_boot(cell.store, live.boot_id) or {}


# ---------------------------------------------------------------- health

def expected_server(cfg: EngineConfig) -> "engine_health.ExpectedServer":
    """What /get_server_info must report for ``cfg`` (model path, tp size, speculative widths)."""
    return engine_health.ExpectedServer.from_config(cfg)


def record_verdict(cell: Cell, boot_id: str, verdict: Any) -> dict[str, Any]:
    """Store a health verdict and publish it."""
    checks = verdict.as_dict()["checks"]
    if verdict.progress is not None:
        checks.append({"name": "_progress_sample", "ok": True, "latency_ms": None, "reason": "",
                       "sample": dataclasses.asdict(verdict.progress)})
    row = db_boots.add_health(cell.store, boot_id, verdict.verdict, checks, ",".join(verdict.failed))
    events.publish("health.recorded", boot_id=boot_id, verdict=verdict.verdict, failed=list(verdict.failed))
    return row


# ---------------------------------------------------------------- boots by reference

def resolve_boot(cell: Cell, ref: str) -> dict[str, Any]:
    """A boot row by id or unique id prefix (the one resolver, :mod:`dynocell.db.refs`).
    Raises NotFound naming the ambiguity or absence."""
    row = db_boots.get_boot(cell.store, refs.resolve_key(cell.store, ref, "boot"))
    assert row is not None  # resolved just now; boots are never deleted
    return row


def _is_our_process(pid: int | None, marker: str) -> bool:
    if not pid:
        return False
    try:
        p = psutil.Process(pid)
        if p.status() == psutil.STATUS_ZOMBIE:
            return False
        return marker in " ".join(p.cmdline())
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return False


def supervisor_alive(row: dict[str, Any]) -> bool:
    """Whether the process that supervises a boot (``row``: a boot row) still runs.

    The one liveness check every wait uses (CLI, web jobs, TUI): a wait on a boot
    polls this each time it reads the row and ends when it turns False.

    The supervisor's create time (recorded with the boot) guards against a
    recycled pid; rows written before it was recorded fall back to a
    ``dynocell`` command-line check.
    """
    pid = row.get("supervisor_pid")
    if not pid:
        return False
    if pid == os.getpid():
        return True
    ctime = row.get("supervisor_create_time")
    if ctime is not None:
        return process_alive(pid, ctime)
    return _is_our_process(pid, "dynocell")


def reconcile(cell: Cell, boot: dict[str, Any]) -> dict[str, Any]:
    """Check a live-looking boot against reality: no engine is ever left orphaned.

    A boot whose supervisor process died (``kill -9`` of ``dynocell run``, a
    killed ``--detach`` supervisor) is settled here, by whichever process looks
    next (``ps``, ``runs``, ``show``, the TUI and web polls):

    - engine gone too → ``lost``;
    - engine still running on this host (its pid and recorded create time
      match) → stopped now (SIGTERM, grace, SIGKILL on its process group) and
      recorded ``stopped`` with the reason. Its log pipe died with the
      supervisor, so nothing could capture its output or watch it any more: it
      is not reattached.

    Only boots of this host are judged (a process check means nothing for another
    machine's pids): a live boot of another host keeps its recorded state; when
    that host has not been heard from for ``host_stale_s`` the row's
    ``state_note`` says ``unknown (host B last seen … ago)``.

    Adds ``supervised`` (bool), ``engine_alive`` (bool, None for another host's boot)
    and ``state_note`` (str or None) to the returned row.
    """
    row = dict(boot)
    row["state_note"] = None
    if row["state"] not in db_boots.LIVE_STATES:
        row["supervised"], row["engine_alive"] = False, False
        return row
    if row.get("host_id") and row["host_id"] != hosts.this_host_id(cell):
        return _foreign(cell, row)
    if row.get("kind") == "attached":  # no process of ours: alive = answers /health; never signalled here
        from dynocell.runbooks.attach import attached_alive

        row["supervised"], row["engine_alive"] = False, attached_alive(row)
        return row
    supervised = supervisor_alive(row)
    ctime = row.get("engine_create_time")
    engine_alive = bool(row["pid"]) and process_alive(row["pid"], ctime)
    row["supervised"], row["engine_alive"] = supervised, engine_alive
    if not supervised and engine_alive and ctime is not None and row.get("hostname") == socket.gethostname():
        # Only an engine positively identified (same host, pid with the recorded create time) is
        # signalled: a recycled pid, or a row from before create times were kept, is left alone.
        return _stop_orphan(cell, row)
    if not supervised and not engine_alive and row.get("hostname") == socket.gethostname():
        # No live pid on record (the supervisor died between the spawn and the pid write, or the
        # engine's children outlived it): the processes carrying this boot's marker are its engine.
        res = stop_marked(BOOT_MARKER, row["id"], cell.settings.stop_grace_s)
        if res is None and not row["pid"]:
            # A child forked just before the supervisor died may not have exec'd the engine yet
            # (its environment is the marker's only from exec on): look once more, a moment later.
            time.sleep(SPAWN_SETTLE_S)
            res = stop_marked(BOOT_MARKER, row["id"], cell.settings.stop_grace_s)
        if res is not None:
            return _record_orphan_stop(cell, row, res, "found by its DYNOCELL_BOOT_ID marker "
                                                       f"(pids {', '.join(map(str, res.signalled)) or '-'})")
    if not supervised and not engine_alive:
        if db_boots.transition(cell.store, row["id"], db_boots.LIVE_STATES, "lost", ended_at=_now(),
                               failure_detail={"reason": "supervisor and engine gone", "last_state": row["state"]}):
            row["state"] = "lost"
            events.publish("boot.state_changed", boot_id=row["id"], old=boot["state"], new="lost", reason="supervisor gone")
    return row


def _refuse_foreign(boot: dict[str, Any], what: str) -> None:
    """Raise UserError when ``boot`` (a :func:`reconcile` row) is a live boot of another host."""
    if boot["state"] in db_boots.LIVE_STATES and boot.get("engine_alive") is None:
        raise UserError(f"boot {boot['id']} runs on host {boot.get('hostname') or boot.get('host_id')}: "
                        f"this host cannot {what}",
                        f"run the command on {boot.get('hostname') or 'that host'} (same store)")


def _refuse_foreign_files(cell: Cell, boot: dict[str, Any]) -> None:
    """Raise UserError when ``boot``'s files live on another host."""
    if boot.get("host_id") and boot["host_id"] != hosts.this_host_id(cell):
        raise UserError(f"boot {boot['id']}'s log lives on host {boot.get('hostname') or boot['host_id']} "
                        f"under {Path(boot['log_path']).parent}, not on this host",
                        "run `dynocell logs` on that host (the store is shared)")


def _foreign(cell: Cell, row: dict[str, Any]) -> dict[str, Any]:
    """A live boot of another host: never judged here; noted ``unknown`` when that host went quiet."""
    row["supervised"], row["engine_alive"] = None, None
    other = hosts.get(cell, row["host_id"])
    if other is None or hosts.seen_ago_s(other) > cell.settings.host_stale_s:
        seen = f"last seen {hosts.ago(other)}" if other else "never seen"
        row["state_note"] = f"unknown (host {row.get('hostname') or '?'} {seen})"
    return row


def _stop_orphan(cell: Cell, row: dict[str, Any]) -> dict[str, Any]:
    """Stop the engine of a boot whose supervisor died and record ``stopped`` with the reason."""
    grace = cell.settings.stop_grace_s
    db_boots.transition(cell.store, row["id"], ("starting", "ready"), "stopping")
    res = stop_process_group(row["pid"], row["pgid"] or row["pid"], grace)
    marked = stop_marked(BOOT_MARKER, row["id"], grace)  # children that left the group, if any
    if marked is not None:
        res = dataclasses.replace(res, survivors=res.survivors + marked.survivors)
    return _record_orphan_stop(cell, row, res)


def _record_orphan_stop(cell: Cell, row: dict[str, Any], res: Any, found: str | None = None) -> dict[str, Any]:
    """Record ``stopped`` for a boot whose orphaned engine reconciliation just stopped (``res``)."""
    db_boots.transition(cell.store, row["id"], ("starting", "ready"), "stopping")
    finish_log(cell, row["id"], Path(row["log_path"]))
    detail = {**(row.get("failure_detail") or {}), "last_state": row["state"],
              "reason": f"supervisor (pid {row['supervisor_pid']}) died; the orphaned engine"
                        + (f" ({found})" if found else "") + " was stopped by reconciliation"}
    if res.survivors:
        detail["survivors"] = [str(x) for x in res.survivors]
    if db_boots.transition(cell.store, row["id"], db_boots.LIVE_STATES, "stopped", ended_at=_now(),
                           exit_code=res.exit_code, stop_how=res.how, stop_s=res.seconds,
                           zombies=len(res.zombies), failure_detail=detail):
        events.publish("boot.state_changed", boot_id=row["id"], old=row["state"], new="stopped",
                       reason="supervisor gone: orphaned engine stopped")
    out = dict(db_boots.get_boot(cell.store, row["id"]) or row)
    out["supervised"], out["engine_alive"] = False, bool(res.survivors)
    return out


def ps(cell: Cell, all: bool = False, host: str | None = None) -> list[dict[str, Any]]:
    """Boots (live ones unless ``all``; of the hosts matching ``host`` if given, see
    :func:`hosts.resolve`), reconciled against reality, each with its last health verdict and
    ``host_label``. Marks this host as heard from (when the store takes writes)."""
    hosts.heartbeat_quietly(cell)
    rows = db_boots.list_boots(cell.store, None if all else db_boots.LIVE_STATES,
                               host_ids=hosts.resolve(cell, host) if host else None)
    names = hosts.labels(cell)
    out = []
    for b in rows:
        r = reconcile(cell, b)
        if not all and r["state"] not in db_boots.LIVE_STATES:
            continue
        last = db_boots.health_history(cell.store, r["id"], limit=1)
        # Only a ready boot can be healthy now: a stopped one keeps its last verdict apart.
        r["last_health"] = last[0]["verdict"] if last else None
        r["health"] = r["last_health"] if r["state"] == "ready" else None
        r["uptime_s"] = _uptime(r)
        r["host_label"] = names.get(r.get("host_id") or "", r.get("hostname") or "?")
        out.append(r)
    return out


def other_live_boots(cell: Cell, boot_id: str | None = None) -> list[dict[str, Any]]:
    """Live boots of this store on this host other than ``boot_id`` (each reconciled first, so a
    dead one is not counted): engines that share the machine with it and disturb its measurements."""
    host = socket.gethostname()
    out = []
    for row in db_boots.list_boots(cell.store, db_boots.LIVE_STATES):
        if row["id"] == boot_id or row.get("hostname") != host:
            continue
        row = reconcile(cell, row)
        if row["state"] in db_boots.LIVE_STATES:
            out.append(row)
    return out


def concurrent_boot_warning(row: dict[str, Any]) -> str:
    """The warning for another live boot ``row`` on this host (one line, for output and reports)."""
    return (f"another boot of this store is live on this host: boot {row['id']} ({row['engine']}, "
            f"{row['state']}, port {row['port']}, config {row['config_hash'].removeprefix('sha256:')[:12]}); "
            "engines measured side by side disturb each other's numbers")


def _uptime(row: dict[str, Any]) -> float | None:
    start = row.get("ready_at") or row.get("started_at")
    if start is None:
        return None
    from datetime import timezone

    if start.tzinfo is None:
        start = start.replace(tzinfo=timezone.utc)
    end = row.get("ended_at") or _now()
    if end.tzinfo is None:
        end = end.replace(tzinfo=timezone.utc)
    return max(0.0, (end - start).total_seconds())


def health(cell: Cell, boot_ref: str) -> dict[str, Any]:
    """Run the health oracle on a boot now and store the verdict.

    The progress check compares with the previous stored verdict's sample.
    Returns the stored row (``verdict``, ``checks``, ``failed``).
    """
    boot = reconcile(cell, resolve_boot(cell, boot_ref))
    _refuse_foreign(boot, "probe its health")
    if boot["state"] not in db_boots.LIVE_STATES:
        raise UserError(f"boot {boot['id']} is {boot['state']}: there is no engine to probe",
                        f"see `dynocell show {boot['id']}` for how it ended, or boot it again")
    cfg = config_of_boot(cell, boot)
    client = EngineClient(f"http://{boot['host']}:{boot['port']}", cell.settings.http_timeout_s)
    prev = db_boots.health_history(cell.store, boot["id"], limit=1)
    prev_sample = None
    if prev:
        for c in prev[0]["checks"]:
            if c.get("name") == "_progress_sample" and c.get("sample"):
                prev_sample = engine_health.ProgressSample(**c["sample"])
    verdict = engine_health.check_health(
        client,
        process_alive=boot["engine_alive"],
        stop_requested=boot["state"] in ("stopping", "stopped"),
        expected=expected_server(resolve_models(cell, cfg)),
        canary=None,
        previous_progress=prev_sample,
        generate_timeout_s=cell.settings.health_generate_timeout_s,
        ranks=rank_status_of(cfg, boot["pid"], boot["pgid"] or boot["pid"]),
        api=engine_health.api_of(cfg),
    )
    return record_verdict(cell, boot["id"], verdict)


def rank_status_of(cfg: EngineConfig, pid: int | None, pgid: int | None) -> engine_ranks.RankStatus | None:
    """The rank processes of a boot (issue 11) when ``cfg`` runs more than one rank, else None (not checked).

    vLLM is checked with one rank too: its engine is a child (EngineCore) of the API server.
    """
    expected = engine_ranks.expected_ranks(cfg)
    if not pid or expected == 0 or (expected == 1 and cfg.api != "vllm"):
        return None
    return engine_ranks.rank_status(pid, pgid, expected)


def config_of_boot(cell: Cell, boot: dict[str, Any]) -> EngineConfig:
    """The EngineConfig a boot was started with (from its stored canonical JSON)."""
    from dynocell.runbooks.configs import config_by_hash

    return config_by_hash(cell, boot["config_hash"])


# ---------------------------------------------------------------- stop

def stop(cell: Cell, boot_ref: str, grace_s: float | None = None, wait_s: float = 60.0,
         pid: int | None = None) -> dict[str, Any]:
    """Stop a boot by reference, from any process.

    If its supervisor lives, it is asked (SIGTERM) and this waits for the store
    to show the end (at most grace + ``wait_s`` seconds). Otherwise this process
    applies the stop discipline to the engine's process group and records it.
    Returns the final boot row. A boot already ended is returned unchanged.
    An ``attached`` boot is refused unless ``pid`` is the process listening on its
    port (:func:`dynocell.runbooks.attach.stop_attached`).
    """
    boot = reconcile(cell, resolve_boot(cell, boot_ref))
    if boot["state"] not in db_boots.LIVE_STATES:
        return boot
    _refuse_foreign(boot, "stop it")
    grace = cell.settings.stop_grace_s if grace_s is None else grace_s
    if boot.get("kind") == "attached":
        from dynocell.runbooks.attach import stop_attached

        return stop_attached(cell, boot, pid, grace)
    if boot["supervised"] and boot["supervisor_pid"] != os.getpid():
        if grace_s is not None:
            (Path(boot["log_path"]).parent / STOP_REQUEST).write_text(json.dumps({"grace_s": grace}))
        os.kill(boot["supervisor_pid"], signal.SIGTERM)
        deadline = time.monotonic() + grace + wait_s
        while time.monotonic() < deadline:
            row = db_boots.get_boot(cell.store, boot["id"])
            if row and row["state"] not in db_boots.LIVE_STATES:
                return row
            if row and not supervisor_alive(row):
                break  # it died instead of finishing: reconcile and stop it here, now
            time.sleep(WAIT_POLL_S)
        boot = reconcile(cell, db_boots.get_boot(cell.store, boot["id"]) or boot)
        if boot["state"] not in db_boots.LIVE_STATES:
            return boot
    # Unsupervised (or the supervisor did not finish): do it here.
    db_boots.transition(cell.store, boot["id"], ("starting", "ready"), "stopping")
    res = (stop_process_group(boot["pid"], boot["pgid"] or boot["pid"], grace) if boot["pid"]
           else stop_marked(BOOT_MARKER, boot["id"], grace))  # no pid on record: find it by its marker
    finish_log(cell, boot["id"], Path(boot["log_path"]))
    db_boots.transition(
        cell.store, boot["id"], db_boots.LIVE_STATES, "stopped", ended_at=_now(),
        exit_code=res.exit_code if res else None, stop_how=res.how if res else "gone",
        stop_s=res.seconds if res else 0.0, zombies=len(res.zombies) if res else 0,
    )
    events.publish("boot.state_changed", boot_id=boot["id"], old=boot["state"], new="stopped", reason="stop")
    return db_boots.get_boot(cell.store, boot["id"]) or boot


# ---------------------------------------------------------------- boot from the CLI / web

def boot(
    cell: Cell,
    config_ref: str,
    *,
    detach: bool = True,
    timeout_s: float | None = None,
    progress: Progress = _noop,
) -> str:
    """Boot a config and return the boot id once it is ready (raises EngineError on failure).

    ``detach=True`` hands supervision to a separate supervisor process
    (``python -m dynocell.runbooks.supervise``) that outlives this call;
    ``detach=False`` supervises in this process (the caller then watches and
    stops it, e.g. ``dynocell boot`` in the foreground).
    """
    from dynocell.runbooks.configs import resolve_config

    cfg, config_hash = resolve_config(cell, config_ref)
    warning = injection_warning(cfg.env)
    if warning:
        progress(warning, {"warning": warning})
    if not detach:
        live = start_boot(cell, cfg, config_hash, timeout_s=timeout_s, progress=progress)
        _live_boots[live.boot_id] = live
        return live.boot_id
    boot_id = new_id()
    timeout = timeout_s or cell.settings.boot_timeout_s(cfg.engine)
    argv = [sys.executable, "-m", "dynocell.runbooks.supervise", config_hash, "--boot-id", boot_id,
            "--timeout", str(timeout)]
    log = cell.settings.boots_dir / boot_id
    log.mkdir(parents=True, exist_ok=True)
    with open(log / "supervisor.log", "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    # A long-lived caller (web panel, TUI) is the supervisor's parent: reap it when it exits,
    # or every stopped detached boot leaves a zombie behind until the next Popen.
    threading.Thread(target=proc.wait, name=f"reap-supervisor-{boot_id}", daemon=True).start()
    return wait_for_boot(cell, boot_id, timeout_s=timeout, supervisor=proc, progress=progress)


#: How often a wait on a boot reads its row and checks its supervisor (s).
WAIT_POLL_S = 0.2
#: Beyond the boot timeout, how long a wait gives the supervisor to record the end itself (s):
#: its own start, the stop discipline (grace + SIGKILL wait) and a margin.
WAIT_SLACK_S = 30.0


def wait_for_boot(
    cell: Cell,
    boot_id: str,
    *,
    timeout_s: float,
    supervisor: subprocess.Popen[bytes] | None = None,
    progress: Progress = _noop,
) -> str:
    """Wait until boot ``boot_id`` (supervised by another process) is ``ready``; returns its id.

    Each poll (:data:`WAIT_POLL_S`) reads the row, reports new phases, and
    checks the supervisor with :func:`supervisor_alive` (``supervisor``, the
    Popen when this process started it, is checked before the row exists).
    Raises EngineError when the boot ends (``failed`` …, with its reason); when
    the supervisor dies first (the row is reconciled, the engine stopped — so
    within a poll or two of the death); and when the supervisor's own timeout
    (``timeout_s``, honoured by the supervisor, model making included) plus
    :data:`WAIT_SLACK_S` has passed: the supervisor is then asked to stop
    (SIGTERM) and the error says either that the boot was stopped or, if it
    still has not ended, plainly that it goes on in the background and how to
    stop it — never "failed" while it runs.
    """
    seen_phases: set[str] = set()
    log = cell.settings.boots_dir / boot_id / "supervisor.log"
    grace = cell.settings.stop_grace_s
    deadline = time.monotonic() + timeout_s + grace + WAIT_SLACK_S
    row: dict[str, Any] | None = None
    while time.monotonic() < deadline:
        row = db_boots.get_boot(cell.store, boot_id)
        if row:
            for ev in db_boots.events(cell.store, boot_id):
                if ev["kind"] == "phase" and ev["name"] not in seen_phases:
                    seen_phases.add(ev["name"])
                    progress(f"{ev['offset_s']:7.1f} s  {ev['name']}", {"phase": ev["name"], "boot_id": boot_id})
            _raise_if_ended(row)
            if row["state"] == "ready":
                return boot_id
            if not supervisor_alive(row):
                _supervisor_died(cell, boot_id)
        elif supervisor is not None and supervisor.poll() is not None:
            if db_boots.get_boot(cell.store, boot_id):
                continue  # it recorded the boot just before exiting: read it
            tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
            raise EngineError(f"the supervisor process exited ({supervisor.returncode}) before recording the boot",
                              tail.strip().splitlines()[-1] if tail.strip() else None)
        time.sleep(WAIT_POLL_S)
    return _timed_out(cell, boot_id, timeout_s, supervisor)


def _raise_if_ended(row: dict[str, Any]) -> None:
    if row["state"] in db_boots.TERMINAL_STATES:
        det = row.get("failure_detail") or {}
        raise EngineError(
            f"boot {row['id']} {row['state']}: {det.get('reason') or row.get('failure_signature')}"
            + (f" — {row['failure_signature']}: {det.get('title')}" if det.get("title") else ""),
            det.get("hint") or f"see `dynocell logs {row['id']}`",
        )


def _supervisor_died(cell: Cell, boot_id: str) -> None:
    """The supervisor of a live-looking boot is gone: settle the row (reconcile) and raise."""
    row = db_boots.get_boot(cell.store, boot_id) or {}
    if row.get("state") == "ready":
        return
    _raise_if_ended(row)  # it recorded the end just before exiting
    settled = reconcile(cell, row)
    raise EngineError(
        f"boot {boot_id}: its supervisor (pid {row.get('supervisor_pid')}) died while it was "
        f"{row.get('state')}; the boot is now {settled['state']}"
        + (" (its engine was stopped)" if settled["state"] == "stopped" else ""),
        f"see `dynocell logs {boot_id}` and {cell.settings.boots_dir / boot_id / 'supervisor.log'}",
    )


def _timed_out(cell: Cell, boot_id: str, timeout_s: float, supervisor: subprocess.Popen[bytes] | None) -> str:
    """The wait outlived the supervisor's own timeout: ask it to stop, then say how the boot ended."""
    row = db_boots.get_boot(cell.store, boot_id)
    pid = row["supervisor_pid"] if row else (supervisor.pid if supervisor is not None else None)
    if row is None or supervisor_alive(row) or (supervisor is not None and supervisor.poll() is None):
        if pid:
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        end = time.monotonic() + cell.settings.stop_grace_s + WAIT_SLACK_S
        while time.monotonic() < end:
            row = db_boots.get_boot(cell.store, boot_id)
            gone = (row is not None and not supervisor_alive(row)) or (
                supervisor is not None and supervisor.poll() is not None)
            if (row and row["state"] not in db_boots.LIVE_STATES) or gone:
                break
            time.sleep(WAIT_POLL_S)
    row = db_boots.get_boot(cell.store, boot_id)
    if row and row["state"] in db_boots.LIVE_STATES and not supervisor_alive(row):
        row = reconcile(cell, row)
    if row is None or row["state"] not in db_boots.LIVE_STATES:
        raise EngineError(f"boot {boot_id} timed out after {timeout_s:.0f} s"
                          + (f" and was {row['state']}" if row else "; no engine was started"),
                          f"see `dynocell logs {boot_id}`; give a longer --timeout if the engine is slow")
    if row["state"] == "ready":
        return boot_id
    raise EngineError(
        f"boot {boot_id} is not ready after {timeout_s:.0f} s and still running in the background "
        f"({row['state']}, supervisor pid {row['supervisor_pid']})",
        f"stop it with `dynocell stop {boot_id}`, or follow it with `dynocell ps` / `dynocell logs {boot_id} -f`",
    )


_live_boots: dict[str, LiveBoot] = {}


@dataclass
class AttachedBoot:
    """A ready boot supervised elsewhere, driven over HTTP only (bench, profile)."""

    boot_id: str
    config_hash: str
    cfg: EngineConfig
    host: str
    port: int
    boot_dir: Path

    @classmethod
    def from_row(cls, row: dict[str, Any], cfg: EngineConfig) -> "AttachedBoot":
        """Build from a boot row and its (model-resolved) config."""
        return cls(row["id"], row["config_hash"], cfg, row["host"], row["port"], Path(row["log_path"]).parent)

    @property
    def base_url(self) -> str:
        """``http://host:port`` of the engine."""
        return f"http://{self.host}:{self.port}"

    def client(self, timeout_s: float) -> EngineClient:
        """An HTTP client of this engine."""
        return EngineClient(self.base_url, timeout_s)


def live_boot(boot_id: str) -> LiveBoot | None:
    """The LiveBoot this process supervises with that id, if any."""
    return _live_boots.get(boot_id)


STOP_REQUEST = "stop-request.json"


def requested_grace(live: LiveBoot) -> float | None:
    """The grace (s) a `dynocell stop --grace S` asked for, if any (read from the boot dir)."""
    try:
        return float(json.loads((live.boot_dir / STOP_REQUEST).read_text())["grace_s"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def watch(cell: Cell, live: LiveBoot, *, should_stop: Callable[[], bool], interval_s: float = 0.5) -> str:
    """Watch a ready boot until ``should_stop()`` (→ stop it, ``stopped``) or it dies (``crashed``).

    Returns the final state. Marks this host as heard from every ``host_stale_s / 4`` seconds (a
    shared store shows other hosts a quiet host's boots as unknown).
    """
    beat_s, last_beat = cell.settings.host_stale_s / 4, time.monotonic()
    while True:
        if should_stop():
            stop_live(cell, live, requested_grace(live))
            return "stopped"
        if live.supervisor.poll().value in ("crashed", "failed"):
            record_crash(cell, live)
            return "crashed"
        if time.monotonic() - last_beat >= beat_s:
            hosts.heartbeat_quietly(cell)
            last_beat = time.monotonic()
        time.sleep(interval_s)


# ---------------------------------------------------------------- logs

def logs(cell: Cell, boot_ref: str, tail: int = 50) -> list[str]:
    """The last ``tail`` lines of a boot's log file (timestamped as written).

    Raises UserError for a boot of another host (its log is there, not here).
    """
    boot = resolve_boot(cell, boot_ref)
    _refuse_foreign_files(cell, boot)
    path = Path(boot["log_path"])
    if not path.exists():
        return []
    with open(path, "r", encoding="utf-8", errors="replace") as f:
        return [line.rstrip("\n") for line in deque(f, maxlen=max(tail, 0))]


def follow(cell: Cell, boot_ref: str, tail: int = 50, poll_s: float = 0.3) -> Iterator[str]:
    """Yield the last ``tail`` lines, then new lines as they are written, until the boot ends."""
    boot = resolve_boot(cell, boot_ref)
    path = Path(boot["log_path"])
    yield from logs(cell, boot["id"], tail)
    pos = path.stat().st_size if path.exists() else 0
    while True:
        if path.exists() and path.stat().st_size > pos:
            with open(path, "r", encoding="utf-8", errors="replace") as f:
                f.seek(pos)
                chunk = f.read()
                pos = f.tell()
            yield from chunk.splitlines()
        else:
            row = db_boots.get_boot(cell.store, boot["id"])
            if row and row["state"] not in db_boots.LIVE_STATES:
                return
            time.sleep(poll_s)
