"""The Textual terminal dashboard behind ``dynocell tui`` (see :mod:`dynocell.cli.tui.app`)."""

from dynocell.cli.tui.app import DynocellApp, run_dashboard

__all__ = ["DynocellApp", "run_dashboard"]
