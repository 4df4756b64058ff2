"""``dynocell init`` and ``dynocell settings``."""

from __future__ import annotations

import typer

from dynocell.cli.common import JSON_OPTION_HELP, add_row, get_cell, get_settings, out, print_json, table


def init(json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP)) -> None:
    """Create the data directory and the store, migrated to the newest schema; report where they are.

    Safe to run again: an existing store is only migrated forward.

    Example: dynocell init   (DYNOCELL_HOME=/tmp/cell dynocell init for a scratch cell)
    """
    from dynocell.runbooks.cell import init as do_init

    report = do_init(get_cell())
    if json_out:
        print_json(report)
        return
    before = report["revision_before"]
    if before is None:
        what = f"created the store at schema {report['revision']}"
    elif report["migrated"]:
        what = f"migrated the store {before} → {report['revision']}"
    else:
        what = f"store already at schema {report['revision']}"
    out(f"dynocell: {what}")
    mode = report.get("home_mode")
    private = (" (only you can read it)" if mode and mode.endswith("00") else
               f" (mode {mode}: other users can read it; chmod 700 it)") if mode else ""
    out(f"  data directory  {report['home']}  {mode or ''}{private}"
        + ("  ← group and other access removed" if report.get("home_tightened") else ""))
    out(f"  database        {report['db_url']} ({report['store']})")
    out(f"  boot logs       {report['boots_dir']}")
    out(f"  made models     {report['models_dir']}")
    out(f"  engine builds   {report['builds_dir']}")


def settings(json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP)) -> None:
    """Print every setting, its value, and where it came from (environment variable or default).

    Settings are read from DYNOCELL_* environment variables only.

    Example: dynocell settings --json
    """
    rows = get_settings().describe()
    if json_out:
        print_json(rows)
        return
    t = table("setting", "value", "source", "variable")
    for r in rows:
        add_row(t, r["name"], r["value"], r["source"], r["env"])
    out(t)


def register(app: typer.Typer) -> None:
    """Add ``init`` and ``settings`` to the root app."""
    app.command("init")(init)
    app.command("settings")(settings)
