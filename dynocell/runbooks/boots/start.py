"""Start a boot: resolve the model paths, render argv + env, spawn under the supervisor, record every
phase and the verdict as it comes; a crash after ready is recorded here too.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from typing import Any, Callable

from dynocell.clock import now_utc
from dynocell.fsmodes import private_dir
from dynocell.db import boots as db_boots
from dynocell.engine import kinds
from dynocell.engine.adapters import LaunchSpec, pick_free_port, redact_env, render, secret_args_to_file
from dynocell.engine.config import BUILTIN_MODEL_PREFIX, EngineConfig
from dynocell.engine.supervisor import (
    Supervisor, process_create_time,
)
from dynocell.errors import EngineError, UserError
from dynocell.runbooks import events, hosts
from dynocell.runbooks.boots.live import (
    BOOT_MARKER, LiveBoot, Progress, default_boot_timeout, engine_base_env, engine_profile_dir, finish_log, new_id,
    noop_progress,
    printable_log_line, str_or_none,
)
from dynocell.runbooks.cell import Cell


def resolve_models(cell: Cell, cfg: EngineConfig, progress: Progress = noop_progress) -> EngineConfig:
    """Replace ``dynocell:tiny`` / ``dynocell:tiny-draft`` with the made-locally pair's paths, and a
    fetched pretrained model's name (``dynocell:smollm2-135m``) with its GGUF in the model cache.

    Makes the pair on first use (cached in the data directory); a fetched model not in the cache is a
    UserError naming ``dynocell model fetch``. The config's
    hash is NOT recomputed from the result: the stored config keeps the label.
    """
    given = [cfg.model_path, cfg.speculative.draft_model_path or ""]
    if not any(p.startswith(BUILTIN_MODEL_PREFIX) for p in given):
        return cfg
    from dynocell.runbooks.model_pair import default_pair, fetched_model_path

    changes: dict[str, Any] = {}
    paths = (("model_path", cfg.model_path), ("speculative.draft_model_path", cfg.speculative.draft_model_path))
    for key, value in paths:  # pretrained models fetched into the cache (dynocell model fetch NAME)
        fetched = fetched_model_path(cell.settings, value) if value else None
        if fetched is not None:
            changes[key] = fetched
    if all(not v or not v.startswith(BUILTIN_MODEL_PREFIX) or k in changes for k, v in paths):
        return cfg.with_changes(**changes)
    pair = default_pair(cell.settings, progress=lambda m: progress(m, {"step": "model"}))
    table = {"dynocell:tiny": str(pair.target), "dynocell:tiny-draft": str(pair.draft)}
    for key, value in paths:
        if key in changes:
            continue
        if value and value.startswith(BUILTIN_MODEL_PREFIX):
            if value not in table:
                raise UserError(f"{key}: unknown built-in model {value!r}", "use dynocell:tiny or dynocell:tiny-draft")
            changes[key] = table[value]
    return cfg.with_changes(**changes)


def launch_spec(cell: Cell, cfg: EngineConfig, port: int, build: dict[str, Any] | None, boot_id: str,
                boot_dir: Any) -> LaunchSpec:
    """What to spawn for ``cfg`` on ``port``: a registered engine kind's own launch (its executable: a
    llamacpp build's binary, else :func:`~dynocell.runbooks.builds.llama_server_program`), else the
    adapters' ``python -m …`` render with the build's PYTHONPATH, SGLang's secret flags moved to a 0600
    ``--config`` file in ``boot_dir`` (:func:`~dynocell.engine.adapters.secret_args_to_file`). ConfigError /
    UserError from either."""
    kind = kinds.get(cfg.engine)
    base_env = engine_base_env(boot_id, boot_dir)
    if kind is not None:
        from dynocell.runbooks.builds import llama_server_program

        program = (build or {}).get("binary") or llama_server_program(cell)
        return kind.launch(cfg, program=program, port=port, base_env=base_env)
    spec = render(cfg, python=cell.settings.engine_python, port=port, build_pythonpath=(build or {}).get("pythonpath"),
                  base_env=base_env, profile_dir=str_or_none(engine_profile_dir(cfg, boot_dir)))
    return secret_args_to_file(spec, boot_dir)  # SGLang's --api-key off /proc/PID/cmdline (issue 32)


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
    progress: Progress = noop_progress,
    on_created: Callable[[], object] | None = None,
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

    ``build``: the engine build of the config's ``patches`` (``runbooks.builds.ensure_build``); when
    None and the config names patches it is made (or found) here and its import checked, so
    ``dynocell boot`` runs the patched engine exactly as ``dynocell run`` does (UserError/EngineError
    from the build before any row is written).
    """
    from dynocell.engine.config import require_draft_head, require_model_paths
    from dynocell.runbooks.configs import require_secrets

    require_secrets(cfg, config_hash)  # a secret withheld from this host's store is not booted as ***
    settings = cell.settings
    t0 = time.monotonic()
    if build is None and cfg.patches:
        from dynocell.runbooks import builds

        build = builds.ensure_build(cell, cfg)
        builds.check_import(cell, build, cfg)
    cfg_run = resolve_models(cell, cfg, progress)
    kind = kinds.get(cfg_run.engine)
    limit = timeout_s or default_boot_timeout(settings, cfg_run.engine)
    deadline = t0 + limit
    if time.monotonic() >= deadline:
        raise EngineError(f"boot timed out: {limit:.0f} s were spent making the reference model pair; "
                          "no engine was started",
                          "boot again (the pair is kept once made), or give a longer --timeout")
    require_model_paths(cfg_run, cfg_run.name or config_hash)
    require_draft_head(cfg_run, cfg_run.name or config_hash)
    boot_id = boot_id or new_id()
    boot_dir = settings.boots_dir / boot_id
    private_dir(boot_dir)
    log_path = boot_dir / "engine.log"
    picked_port = not (port or cfg_run.port)
    port = port or cfg_run.port or pick_free_port(cfg_run.host)
    spec = launch_spec(cell, cfg_run, port, build, boot_id, boot_dir)
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
        rules = kind.rules if kind is not None else "vllm" if cfg_run.api == "vllm" else cfg_run.engine
        sup = Supervisor(rules, on_event=_record_event(cell, boot_id))
        try:
            sup.start(spec, log_path)
        except (OSError, EngineError) as exc:  # Supervisor.start reports a spawn failure as EngineError
            why = exc.message if isinstance(exc, EngineError) else f"could not start the engine: {exc}"
            db_boots.transition(cell.store, boot_id, "starting", "failed", ended_at=now_utc(),
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
            db_boots.transition(cell.store, boot_id, ("starting", "stopping", "ready"), "stopped", ended_at=now_utc(),
                                exit_code=res.exit_code, stop_how=res.how, stop_s=res.seconds,
                                zombies=len(res.zombies), failure_detail={"reason": "interrupted while booting"})
            raise
        if result.ok:
            live.ready_s = result.ready_s
            db_boots.transition(cell.store, boot_id, "starting", "ready", ready_at=now_utc(), ready_s=result.ready_s)
            progress(f"ready in {result.ready_s:.1f} s", {"boot_id": boot_id, "ready_s": result.ready_s})
            return live
        if retries_left and _port_taken(result):
            # The port was free when picked, but another process bound it before the engine did:
            # not the operator's doing — pick another one and launch again under the same boot.
            retries_left -= 1
            sup.close()
            taken = spec.port
            spec = launch_spec(cell, cfg_run, pick_free_port(cfg_run.host), build, boot_id, boot_dir)
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
        cell.store, boot_id, ("starting", "stopping"), "failed", ended_at=now_utc(),
        exit_code=result.exit_code if result.exit_code is not None else (stop.exit_code if stop else None),
        failure_signature=sig.id if sig else "unknown",
        failure_detail={"reason": result.reason, "title": sig.title if sig else None,
                        "hint": sig.hint if sig else None, "groups": sig.groups if sig else {},
                        "last_phase": result.last_phase, "tail": list(result.tail)[-50:]},
        stop_how=stop.how if stop else None, stop_s=stop.seconds if stop else None,
    )
    matched = sig if sig is not None and sig.id != "unknown" else None
    known = matched is not None
    # No signature matched: the engine's last words are the best clue, so show them (cut, printable).
    last = [printable_log_line(ln) for ln in list(result.tail)[-3:] if ln.strip()] if not known else []
    if matched is not None and matched.id == "boot.timeout":
        head = f"boot {boot_id} timed out: {result.reason}"  # the signature's title would say it twice
    else:
        head = f"boot {boot_id} failed: {result.reason}" + (f" — {matched.id}: {matched.title}" if matched else "")
    raise EngineError(
        head
        + ("".join(f"\n  | {ln}" for ln in last)),
        (matched.hint if matched and matched.hint else
         f"read the log: `dynocell logs {boot_id}`; add a failure signature if it recurs"),
    )


PORT_RETRIES = 2


def _port_taken(result: Any) -> bool:
    """Whether a failed boot failed because its port was already bound (``port_in_use``)."""
    return result.signature is not None and result.signature.id == "port_in_use"


def describe_exit(exit_code: int | None) -> str:
    """How a process ended, from its ``Popen.returncode``: ``"exited with code 1"``, ``"was
    killed by SIGKILL"`` (a negative code is the signal), ``"exited"`` when unknown."""
    if exit_code is None:
        return "exited"
    if exit_code < 0:
        try:
            return f"was killed by {signal.Signals(-exit_code).name}"
        except ValueError:
            return f"was killed by signal {-exit_code}"
    return f"exited with code {exit_code}"


def record_crash(cell: Cell, live: LiveBoot) -> db_boots.BootRow | None:
    """Record that a ready engine died without a stop request (``crashed``, with signature)."""
    sup = live.supervisor
    sup.poll()
    leftovers = sup.stop(0.0)  # a crashed engine may leave children behind: none may survive
    finish_log(cell, live.boot_id, live.log_path)
    sig = sup.failure
    db_boots.transition(
        cell.store, live.boot_id, ("ready", "starting"), "crashed", ended_at=now_utc(), exit_code=sup.exit_code,
        failure_signature=sig.id if sig else "unknown", stop_how=leftovers.how, zombies=len(leftovers.zombies),
        failure_detail={"title": sig.title if sig else None, "hint": sig.hint if sig else None,
                        "tail": sup.tail(50), "survivors": [str(x) for x in leftovers.survivors]},
    )
    events.publish("boot.state_changed", boot_id=live.boot_id, old="ready", new="crashed",
                   reason=sig.id if sig else "unknown")
    return db_boots.get_boot(cell.store, live.boot_id)
