"""``dynocell attach URL`` — register a running engine dynocell did not start."""

from __future__ import annotations

from typing import Optional

import typer

from dynocell.cli.common import ended_before, get_cell, out, print_json, say


def register(app: typer.Typer) -> None:
    """Add the attach command to the root app."""
    app.command("attach")(attach_cmd)
    app.command("detach")(detach_cmd)


def attach_cmd(
    url: str = typer.Argument(..., help="The engine's API root, e.g. http://127.0.0.1:30000."),
    config: Optional[str] = typer.Option(None, "--config", help="Config the engine runs (default: reconstructed from "
                                         "what it says about itself, stored as observed)."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Attach to a running engine (SGLang, vLLM, any OpenAI server) as a boot of kind `attached`.

    dynocell owns no process of it: health, bench, profile, run --boot and diagnose work on it.

    stop refuses unless --pid names the process listening on its port.

    Example: dynocell attach http://10.0.0.5:30000 && dynocell run --boot BOOT
    """
    from dynocell.runbooks.attach import attach

    res = attach(get_cell(), url, config_ref=config)
    if json_out:
        print_json(res)
        return
    if not res["created"]:
        out(f"{res['url']} is already attached as boot {res['boot_id']}")
        return
    say(f"attached {res['engine']} at {res['url']} as boot {res['boot_id']} (config {res['config_hash'][:19]}"
        + (", observed)" if res.get("observed") else ")"))
    for warning in res.get("warnings") or []:
        say(f"warning: {warning}")
    if res.get("config_fields"):
        say("seen: " + ", ".join(f"{k}={v}" for k, v in sorted(res["config_fields"].items())))
    out(f"next: dynocell health {res['boot_id']} / dynocell run --boot {res['boot_id']}")


def detach_cmd(
    boot: str = typer.Argument(..., help="The attached boot's id (or a unique prefix)."),
    json_out: bool = typer.Option(False, "--json", help="Print the boot row as JSON."),
) -> None:
    """End dynocell's record of an attached boot; the engine process is not touched.

    The boot is recorded stopped (detached): dynocell did not start the engine, so it leaves it running.

    A boot already ended is left as it is (exit 0).

    Example: dynocell detach 3f2a
    """
    from datetime import datetime, timezone

    from dynocell.runbooks.attach import detach

    asked = datetime.now(timezone.utc).replace(tzinfo=None)  # the store keeps naive UTC
    row = detach(get_cell(), boot)
    if json_out:
        print_json(row.to_dict())
        return
    ago = ended_before(row.ended_at, asked)
    if ago is not None:
        how = " (detached)" if row.stop_how == "detached" else ""
        out(f"boot {row.id} was already {row.state}{how} ({ago} ago): nothing to detach")
        return
    say(f"boot {row.id} detached (recorded {row.state}); the engine at {row.host}:{row.port} was not "
        "touched — stop it where it was started, or attach again to drive it")
