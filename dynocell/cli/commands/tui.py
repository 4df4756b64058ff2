"""``dynocell tui``: the terminal dashboard (boots, health, runs, acceptance, profile, runbooks)."""

from __future__ import annotations

from typing import Optional

import typer

from dynocell.cli.common import get_cell, get_settings


def register(app: typer.Typer) -> None:
    """Add ``tui`` to the root app."""
    app.command("tui")(tui_cmd)


def tui_cmd(
    poll: Optional[float] = typer.Option(None, "--poll", min=0.2,
                                         help="Polling interval in seconds (default: setting poll_interval_s)."),
) -> None:
    """Open the terminal dashboard.

    Keys: r run, b boot, s stop, p profile, h health, l logs, / search, c compare, q quit.

    Example: dynocell tui
    """
    from dynocell.cli.tui import run_dashboard

    settings = get_settings()
    run_dashboard(get_cell(), poll_interval_s=poll if poll is not None else settings.poll_interval_s)
