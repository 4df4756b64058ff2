"""``dynocell boot | ps | logs | health | stop`` — start, watch, probe and stop engines."""

from __future__ import annotations

import signal
import threading
import time
from typing import Any, Optional

import typer

from dynocell.cli.common import (
    add_row, ended_before, err_console, get_cell, host_cells, human_duration, out, print_json, seconds, table,
)
from dynocell.errors import EngineError
from dynocell.text import printable

STATE_STYLE = {"ready": "green", "starting": "yellow", "stopping": "yellow", "stopped": "dim",
               "failed": "red", "crashed": "red", "lost": "magenta"}
HEALTH_LIGHT = {"healthy": "● healthy", "degraded": "◐ degraded", "down": "○ down", None: "-"}


def register(app: typer.Typer) -> None:
    """Add the boot commands to the root app."""
    app.command("boot")(boot_cmd)
    app.command("ps")(ps_cmd)
    app.command("logs")(logs_cmd)
    app.command("health")(health_cmd)
    app.command("stop")(stop_cmd)


def _progress_printer(prefix: str = "") -> Any:
    def show(msg: str, _data: dict[str, Any]) -> None:
        err_console.print(printable(f"{prefix}{msg}", keep_newlines=True), markup=False, highlight=False)

    return show


def boot_cmd(
    config: str = typer.Argument(..., help="Config name, hash (prefix) or TOML file."),
    detach: bool = typer.Option(False, "--detach", "-d",
                                help="Return the boot id once ready; a supervisor process keeps watching."),
    timeout: Optional[float] = typer.Option(
        None, "--timeout", callback=seconds(),
        help="Boot limit in seconds (default: per engine, see `dynocell settings`)."),
    json_out: bool = typer.Option(False, "--json", help="Print the boot row as JSON."),
) -> None:
    """Boot an engine with one config and show its phase timeline live.

    In the foreground the engine runs until Ctrl-C (then it is stopped cleanly);
    with --detach the command returns the boot id once the engine is ready.

    Example: dynocell boot examples/tiny.toml --detach
    """
    from dynocell.runbooks import boots

    cell = get_cell()
    with err_console.status("booting …") as status:
        def show(msg: str, data: dict[str, Any]) -> None:
            status.update(msg)
            if "phase" in data or "ready_s" in data or "boot_id" in data or "warning" in data:
                err_console.print(printable(f"  {msg}", keep_newlines=True), markup=False, highlight=False)

        boot_id = boots.boot(cell, config, detach=detach, timeout_s=timeout, progress=show)
    row = boots.resolve_boot(cell, boot_id)
    if json_out:
        print_json(row.to_dict())
    else:
        out(f"boot {boot_id} ready in {row.ready_s:.1f} s on http://{row.host}:{row.port}")
    if detach:
        if not json_out:
            out(f"stop it with: dynocell stop {boot_id}")
        return
    live = boots.live_boot(boot_id)
    if live is None:  # boot() registers every boot this process supervises; never None after it returned
        raise EngineError(f"boot {boot_id} is not supervised by this process",
                          f"see it with: dynocell show {boot_id}; stop it with: dynocell stop {boot_id}")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGHUP):  # kill, timeout, or the terminal closed: stop it too
        signal.signal(sig, lambda *_: stop.set())
    err_console.print("engine running in the foreground; Ctrl-C stops it", markup=False)
    try:
        state = boots.watch(cell, live, should_stop=stop.is_set)
    except KeyboardInterrupt:
        boots.stop_live(cell, live, reason="Ctrl-C")
        state = "stopped"
    final = boots.resolve_boot(cell, boot_id)
    out(f"boot {boot_id} {state}" + (f" ({final.failure_signature})" if state == "crashed" else ""))
    if state == "crashed":
        raise typer.Exit(3)


def ps_cmd(
    all_: bool = typer.Option(False, "--all", "-a", help="Include ended boots."),
    host: Optional[str] = typer.Option(None, "--host", help="Only boots of this host (hostname or machine id prefix)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List boots with host, state, uptime, port and the last health verdict.

    A boot of this host whose supervisor vanished is marked `lost` when its engine
    is gone; an engine still running without its supervisor is stopped (never
    orphaned). Boots of other hosts sharing the store are never judged from here:
    a host not heard from shows `unknown (host B last seen …)`.

    Example: dynocell ps --all --host gpu-node-2
    """
    from dynocell.runbooks import boots

    rows = boots.reconcile_and_list(get_cell(read_only=True), all=all_, host=host)
    if json_out:
        print_json(rows)
        return
    if not rows:
        out("no live boots" + ("" if all_ else " (dynocell ps --all shows ended ones)"))
        return
    t = table("boot", "host", "state", "health", "config", "engine", "port", "uptime", "ready", "signature",
              optional=("signature",))
    for r, host_cell in zip(rows, host_cells(rows)):
        unsupervised = r.get("supervised") is False and r["state"] in ("starting", "ready", "stopping")
        state = r["state"] + (" (unsupervised)" if unsupervised else "") + (
            " (detached)" if r.get("stop_how") == "detached" else "")
        if r.get("state_note"):
            state = f"{r['state']}: {r['state_note']}"
        from rich.text import Text

        add_row(t, r["id"], host_cell, Text(state, style=STATE_STYLE.get(r["state"], "")),
                HEALTH_LIGHT.get(r.get("health"), r.get("health")),
                ", ".join(r.get("labels") or []) or (r.get("config_hash") or "").removeprefix("sha256:")[:12],
                r["engine"], r["port"], human_duration(r.get("uptime_s")),
                "attached" if r.get("kind") == "attached" else f"{r['ready_s']:.1f} s" if r.get("ready_s") else "-",
                r.get("failure_signature") or "")
    out(t)


def logs_cmd(
    boot: str = typer.Argument(..., help="Boot id or unique prefix."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing new lines until the boot ends."),
    tail: int = typer.Option(50, "--tail", "-n", min=0, help="Lines from the end to show first."),
    raw: bool = typer.Option(False, "--raw", help="Print the lines byte for byte, escape sequences included "
                             "(by default they are removed and control bytes shown as ?)."),
) -> None:
    """Print a boot's engine log (written to disk, timestamped, before anything parsed it).

    The engine's text is not trusted: terminal escape sequences are removed and
    other control bytes shown as ``?`` unless ``--raw``.

    Example: dynocell logs 3f2a -f
    """
    from dynocell.runbooks import boots

    cell = get_cell(read_only=True)
    lines = boots.follow(cell, boot, tail) if follow else boots.logs(cell, boot, tail)
    try:
        for line in lines:
            print(line if raw else printable(line), flush=True)
    except KeyboardInterrupt:
        pass


def health_cmd(
    boot: str = typer.Argument(..., help="Boot id or unique prefix."),
    watch: Optional[float] = typer.Option(None, "--watch", callback=seconds(),
                                          help="Probe every S seconds until Ctrl-C."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Run the health oracle now: process alive, /health, /health_generate, server info, progress.

    Healthy only if every check passes; each check's latency is stored.

    Example: dynocell health 3f2a --watch 5
    """
    from dynocell.runbooks import boots

    cell = get_cell()
    worst = 0
    try:
        while True:
            row = boots.health(cell, boot)
            worst = max(worst, {"healthy": 0, "degraded": 1, "down": 2}.get(row.verdict, 2))
            if json_out:
                print_json(row.to_dict())
            else:
                _print_verdict(row)
            if not watch:
                break
            time.sleep(watch)
    except KeyboardInterrupt:
        pass
    if worst:
        raise typer.Exit(worst)


def _print_verdict(row: Any) -> None:
    t = table("check", "ok", "latency", "reason",
              title=f"{row.verdict}" + (f" ({row.failed})" if row.failed else ""))
    for c in (c for c in row.checks if not str(c.get("name", "")).startswith("_")):
        lat = c.get("latency_ms")
        add_row(t, c.get("name"), "yes" if c.get("ok") else "NO", f"{lat:.1f} ms" if lat is not None else "-",
                c.get("reason") or "")
    out(t)


def stop_cmd(
    boot: str = typer.Argument(..., help="Boot id or unique prefix."),
    grace: Optional[float] = typer.Option(None, "--grace", callback=seconds(zero_ok=True),
                                          help="Seconds between SIGTERM and SIGKILL (default from settings)."),
    pid: Optional[int] = typer.Option(None, "--pid", min=1, help="For an attached boot: the pid listening on its "
                                      "port (required to stop it)."),
    json_out: bool = typer.Option(False, "--json", help="Print the final boot row as JSON."),
) -> None:
    """Stop a boot: SIGTERM to its process group, wait the grace, SIGKILL, verify nothing survives.

    An attached boot (dynocell attach) is stopped only with --pid naming the process listening on its port.

    Example: dynocell stop 3f2a --grace 10
    """
    from datetime import datetime, timezone

    from dynocell.runbooks import boots

    asked = datetime.now(timezone.utc).replace(tzinfo=None)  # the store keeps naive UTC
    with err_console.status("stopping …"):
        row = boots.stop(get_cell(), boot, grace_s=grace, pid=pid)
    if json_out:
        print_json(row)
        return
    how = row.get("stop_how") or "-"
    secs = row.get("stop_s")
    ago = ended_before(row.get("ended_at"), asked)
    if ago is not None:
        out(f"boot {row['id']} was already {row['state']} ({ago} ago)")
        return
    out(f"boot {row['id']} {row['state']} ({how}" + (f", {secs:.1f} s" if secs is not None else "") + ")"
        + (f", {row['zombies']} zombie(s) reaped" if row.get("zombies") else ""))
