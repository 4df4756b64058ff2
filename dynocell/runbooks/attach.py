"""Attach to a running engine dynocell did not start: a boot of kind ``attached``.

dynocell owns no process of an attached boot: it records no pid, never signals
anything on its own, and judges liveness over HTTP (``GET /health``). What the
server says about itself becomes an ``observed`` config
(:mod:`dynocell.engine.observed`): SGLang's ``/get_server_info`` (its
ServerArgs) and ``/get_model_info``; vLLM and other OpenAI servers' ``/v1/models``
and ``/version``; ``/metrics`` tells the engine family (``sglang:`` / ``vllm:``).
Then ``health``, ``bench``, ``profile``, ``run --boot`` and ``diagnose`` work on it
like on any boot.

An engine attached at an ``https://`` URL is reached over TLS from then on (liveness, health,
bench, profile): the scheme is kept in the boot's ``argv``, ``(attached: https://host:port)``
(:func:`attached_scheme`).

``detach`` ends dynocell's record of it (``stopped``, ``stop_how`` ``detached``) and touches no
process. Shown (``ps``, ``show``, the polls), an attached boot's health is probed again
(``GET /health``, :data:`ALIVE_TIMEOUT_S`), never the stale last verdict alone.

``stop`` refuses an attached boot unless the operator names the pid
(``--pid``) and that pid is the process listening on the boot's port; then
that process (and its children) get SIGTERM, the grace, SIGKILL.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import re
import shutil
from typing import Any

from dynocell.clock import now_utc
from dynocell.db.boots import BootRow
from dynocell.engine import kinds
from dynocell.engine.client import EngineUnreachable
from dynocell.errors import UserError
from dynocell.runbooks.cell import Cell
import contextlib

__all__ = ["attach", "attached_alive", "attached_scheme", "detach", "health_now", "parse_engine_url", "probe",
           "stop_attached"]

PROBE_TIMEOUT_S = 10.0
ALIVE_TIMEOUT_S = 3.0
_ATTACHED_ARGV = re.compile(r"\(attached: (https?)://")


def parse_engine_url(url: str) -> tuple[str, str, int]:
    """``(scheme, host, port)`` of an engine URL like ``http://10.0.0.5:30000``.

    Only ``http``/``https`` with a host, a port from 1 to 65535 when given, and no user info,
    path, query or fragment (the engine's API root). Raises UserError naming what is wrong.
    """
    import httpx

    text = (url or "").strip()
    try:
        u = httpx.URL(text)
    except Exception:  # noqa: BLE001 - httpx raises several types for a bad URL
        raise UserError(f"URL: {text!r} is not a URL",
                        "give the engine's API root, e.g. http://127.0.0.1:30000") from None
    if u.scheme not in ("http", "https"):
        raise UserError(f"URL: scheme {u.scheme or '(none)'!r} is not http or https",
                        "give the engine's API root, e.g. http://127.0.0.1:30000")
    if not u.host:
        raise UserError(f"URL: {text!r} has no host", "e.g. http://127.0.0.1:30000")
    if u.userinfo:
        raise UserError("URL: user info (user:password@) is not accepted", "give the engine's API root only")
    if u.path not in ("", "/") or u.query or u.fragment:
        raise UserError(f"URL: {text!r} has a path or query", "give the engine's API root, without /v1 or /generate")
    if u.port is not None and not 1 <= u.port <= 65535:  # httpx parses any number as a port
        raise UserError(f"URL: port {u.port} is not a TCP port (1–65535)", "e.g. http://127.0.0.1:30000")
    port = u.port or (443 if u.scheme == "https" else 80)
    return u.scheme, u.host, port


def _get(client: Any, path: str) -> Any:
    try:
        r = client.request("GET", path)
    except EngineUnreachable:
        raise
    return r.body if r.status == 200 and r.body is not None else None


def probe(url: str, timeout_s: float = PROBE_TIMEOUT_S) -> dict[str, Any]:
    """Ask a running engine what it is: ``{engine, observed, answers}``.

    SGLang (and dynocell's reference engine) answer ``/get_server_info`` with their
    server args; otherwise ``/v1/models`` (+ ``/version``) must answer. Raises
    UserError when nothing answers at ``url`` or it is no LLM server.
    """
    from dynocell.engine.client import EngineClient
    from dynocell.engine.observed import from_sglang_server_info, from_vllm_server

    answers: dict[str, Any] = {}
    with EngineClient(url, timeout_s) as client:
        try:
            info = _get(client, "/get_server_info")
        except EngineUnreachable as exc:
            raise UserError(f"nothing answers at {url}: {exc.message}",
                            "is the engine running and the host:port right? (curl URL/health)") from None
        if isinstance(info, dict) and info.get("model_path"):
            answers["get_server_info"] = info
            answers["get_model_info"] = _get(client, "/get_model_info")
            observed = from_sglang_server_info(info)
        else:
            models = _get(client, "/v1/models")
            if models is None:
                raise UserError(f"{url} answers, but neither /get_server_info (SGLang) nor /v1/models (OpenAI) "
                                "describes a model", "is this the engine's API root?")
            version = _get(client, "/version")
            answers["v1_models"], answers["version"] = models, version
            observed = from_vllm_server(models, version)
        metrics = client.request("GET", "/metrics")
        families = set()
        if metrics.status == 200:
            for line in metrics.text.splitlines()[:20000]:
                if line and not line.startswith("#") and ":" in line.split("{", 1)[0]:
                    families.add(line.split(":", 1)[0])
        answers["metrics_families"] = sorted(families)
        engine = observed.engine
        for kind in (kinds.get(n) for n in kinds.names()):  # a registered kind that knows this surface
            if engine == "openai" and kind is not None and kind.recognise(answers.get("v1_models"), families):
                engine = kind.name
                seen = kind.observe(client)
                answers[f"{kind.name}_observed"] = seen
                observed = dataclasses.replace(observed, fields={**observed.fields, **seen})
    if "vllm" in families and engine in ("openai", "vllm"):
        engine = "vllm"
    if engine != observed.engine:
        observed = dataclasses.replace(observed, engine=engine)
    return {"engine": engine, "observed": observed, "answers": answers}


def _started_here(cell: Cell, live: list[BootRow], host: str, port: int) -> BootRow | None:
    """The live boot dynocell started on this machine that ``host:port`` reaches, if any: its bind address
    itself, or a loopback name when it listens on loopback or on every address."""
    from dynocell.runbooks import hosts

    def loopback(h: str) -> bool:
        with contextlib.suppress(ValueError):
            return ipaddress.ip_address(h.strip("[]")).is_loopback
        return h == "localhost"

    mine = hosts.this_host_id(cell)
    for row in live:
        if row.kind != "started" or row.port != port or row.host_id != mine:
            continue
        if host == row.host or (loopback(host) and (loopback(row.host or "") or row.host in ("0.0.0.0", "::"))):
            return row
    return None


def attach(cell: Cell, url: str, *, config_ref: str | None = None) -> dict[str, Any]:
    """Register the engine at ``url`` as a boot of kind ``attached`` (state ``ready``; ``ready_s`` unknown —
    the engine was up before dynocell saw it, so the faces say ``attached``, never ``ready 0.0 s``); returns
    ``{boot_id, created, config_hash, observed, engine, config_fields, warnings}`` (``warnings``: what the
    engine revealed that was dropped as nonsense, e.g. a port outside 1–65535).

    An engine already attached at the same host:port (boot still ready) gives that boot back
    (``created`` False). Raises UserError for a bad URL, nothing answering there, or a live boot dynocell
    started on this machine at that address (the one engine would be recorded twice).
    """
    from dynocell.db import boots as db_boots, imports as db_imports
    from dynocell.runbooks.boots import new_id
    from dynocell.engine.config import redact_tree
    from dynocell.fsmodes import open_private, private_dir
    from dynocell.runbooks.imports import resolve_or_observe

    from dynocell.engine.adapters import engine_base_url

    scheme, host, port = parse_engine_url(url)
    base = engine_base_url(host, port, scheme)
    live = db_boots.list_boots(cell.store, db_boots.LIVE_STATES)
    for row in live:
        if row.kind == "attached" and row.host == host and row.port == port:
            return {"boot_id": row.id, "created": False, "config_hash": row.config_hash, "engine": row.engine,
                    "url": base, "observed": None, "config_fields": None}
    own = _started_here(cell, live, host, port)
    if own is not None:
        raise UserError(f"{base} is boot {own.id}, which dynocell started: attaching would record the one "
                        "engine twice", f"drive it as it is: dynocell run --boot {own.id} (or bench, profile, "
                        f"health {own.id})")
    found = probe(base)
    observed = found["observed"]
    config_hash, cfg_row = resolve_or_observe(cell, config_ref, observed, base)
    boot_id = new_id()
    boot_dir = cell.settings.boots_dir / boot_id
    private_dir(boot_dir)
    answers_path = boot_dir / "attach.json"
    with open_private(answers_path, "wb") as f:  # the engine's answers, its secrets as *** (issue 32)
        f.write(json.dumps(redact_tree({"url": base, **found["answers"]}), indent=2, default=str).encode())
    now = now_utc()
    boot = {"id": boot_id, "config_hash": config_hash, "engine": found["engine"], "hostname": host, "host": host,
            "port": port, "argv": f"(attached: {base})", "env": {}, "state": "ready", "last_phase": "ready",
            "log_path": str(answers_path), "started_at": now, "ready_at": now, "ready_s": None,  # up before we saw it
            "kind": "attached"}
    event = {"boot_id": boot_id, "ts": now, "offset_s": 0.0, "kind": "state", "name": "attached",
             "detail": {"url": base, "engine": found["engine"], "families": found["answers"]["metrics_families"]}}
    try:
        db_imports.record_attached(cell.store, config=cfg_row, boot=boot, event=event)
    except BaseException:
        shutil.rmtree(boot_dir, ignore_errors=True)
        raise
    return {"boot_id": boot_id, "created": True, "config_hash": config_hash, "engine": found["engine"], "url": base,
            "observed": cfg_row is not None, "config_fields": observed.fields if cfg_row is not None else None,
            "warnings": list(observed.warnings)}


def attached_scheme(argv: str | None) -> str:
    """``https`` or ``http``: the scheme of the URL an attached boot was attached at, read from its
    stored ``argv`` (``(attached: https://host:port)``, written by :func:`attach`); ``http`` for any
    other boot or argv."""
    m = _ATTACHED_ARGV.match(argv or "")
    return m.group(1) if m else "http"


def attached_alive(row: BootRow) -> bool:
    """Whether an attached boot's engine (``row``: its stored row) answers ``GET /health`` with 200
    (within :data:`ALIVE_TIMEOUT_S`), asked over the scheme it was attached at (https stays https)."""
    from dynocell.engine.adapters import engine_base_url
    from dynocell.engine.client import EngineClient

    if not row.port:
        return False
    try:
        with EngineClient(engine_base_url(row.host, row.port, attached_scheme(row.argv)), ALIVE_TIMEOUT_S) as c:
            return c.health().status == 200
    except EngineUnreachable:
        return False


def health_now(cell: Cell, boot: BootRow) -> dict[str, Any] | None:
    """For a live attached boot: ``{alive, health, note, timeout_s}`` from a ``GET /health`` made now (at most
    :data:`ALIVE_TIMEOUT_S`); ``health`` is ``down`` when it does not answer 200, else None (the stored
    verdicts stand). None for any other boot (dynocell's own boots are judged by their processes)."""
    from dynocell.runbooks.boots import reconcile

    if boot.kind != "attached":
        return None
    row = reconcile(cell, boot)
    if row["state"] not in ("starting", "ready", "stopping") or row.get("engine_alive") is None:
        return None
    return {"alive": row["engine_alive"], "health": None if row["engine_alive"] else "down",
            "note": row.get("state_note"), "timeout_s": ALIVE_TIMEOUT_S}


def detach(cell: Cell, boot_ref: str) -> BootRow:
    """``dynocell detach BOOT``: end dynocell's record of an attached boot, leaving its engine alone.

    The boot is recorded ``stopped`` with ``stop_how`` ``detached`` and a ``detached`` event (whether
    the engine still answered ``/health``); no signal is sent to any process — dynocell did not start
    it. Attaching the same URL again makes a new boot. Returns the boot row; an attached boot already
    ended (detached, or stopped with ``stop --pid``) is returned unchanged, as ``stop`` returns a stopped
    boot. Raises UserError for a boot dynocell started (use ``stop``); NotFound for an unknown reference.
    """
    from dynocell.db import boots as db_boots
    from dynocell.runbooks.boots import resolve_boot
    from dynocell.clock import aware_utc

    boot = resolve_boot(cell, boot_ref)
    if boot.kind == "imported":
        raise UserError(f"boot {boot.id} was imported from a log (no engine is behind it): there is nothing to detach",
                        f"see it with `dynocell show {boot.id}`")
    if boot.kind != "attached":
        raise UserError(f"boot {boot.id} is not attached (dynocell started it): there is nothing to detach",
                        f"stop it with `dynocell stop {boot.id}`")
    if boot.state not in db_boots.LIVE_STATES:
        return boot
    alive = attached_alive(boot)
    now = now_utc()
    started = aware_utc(boot.started_at)
    offset = max(0.0, (now - started).total_seconds()) if started else 0.0
    db_boots.add_event(cell.store, boot.id, "state", "detached", offset,
                       {"engine_answered_health": alive, "url": f"{boot.host}:{boot.port}"})
    db_boots.transition(cell.store, boot.id, ("ready", "starting"), "stopping")
    db_boots.transition(cell.store, boot.id, db_boots.LIVE_STATES, "stopped", ended_at=now, stop_how="detached",
                        exit_code=None, zombies=0)
    return db_boots.get_boot(cell.store, boot.id) or boot


def _listener_pids(host: str, port: int) -> set[int]:
    import psutil

    pids = set()
    for conn in psutil.net_connections(kind="inet"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port and conn.pid:
            pids.add(conn.pid)
    return pids


def stop_attached(cell: Cell, boot: dict[str, Any], pid: int | None, grace_s: float) -> dict[str, Any]:
    """Stop an attached boot's engine — only when ``pid`` is the process listening on its port.

    Refuses (UserError) without ``pid``, for a remote host, or when ``pid`` does not listen
    on the port. Otherwise SIGTERM → ``grace_s`` → SIGKILL to that process and its
    children (not its process group: a hand-started engine may share its shell's group),
    and records ``stopped``. Returns the final boot row.
    """
    import psutil

    from dynocell.db import boots as db_boots

    if pid is None:
        raise UserError(f"boot {boot['id']} is attached: dynocell did not start it and will not stop it on its own",
                        f"stop it where it was started, or name its process: dynocell stop {boot['id']} --pid PID "
                        f"(the pid listening on port {boot['port']})")
    try:
        local = ipaddress.ip_address(boot["host"]).is_loopback
    except ValueError:
        local = boot["host"] in ("localhost",)
    if not local:
        raise UserError(f"boot {boot['id']} is attached on {boot['host']}, not this host: dynocell cannot stop it",
                        "stop it on its host")
    listeners = _listener_pids(boot["host"], boot["port"])
    if pid not in listeners:
        raise UserError(f"--pid {pid} is not the process listening on port {boot['port']}"
                        + (f" (that is pid {', '.join(map(str, sorted(listeners)))})" if listeners else
                           " (nothing listens there)"),
                        "give the pid of the engine's server process")
    proc = psutil.Process(pid)
    procs = [proc, *proc.children(recursive=True)]
    db_boots.transition(cell.store, boot["id"], ("ready", "starting"), "stopping")
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    gone, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    psutil.wait_procs(alive, timeout=5)
    how = "killed" if alive else "graceful"
    db_boots.transition(cell.store, boot["id"], db_boots.LIVE_STATES, "stopped", ended_at=now_utc(), stop_how=how,
                        exit_code=None, zombies=0)
    from dynocell.runbooks.boots.stop import final_row

    return final_row(cell, boot)
