"""``dynocell export``: runs, acceptance curves and profile splits as Parquet or CSV for notebooks."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from dynocell.cli.common import JSON_OPTION_HELP, get_cell, out, print_json


def export_cmd(
    since: str = typer.Option(..., "--since", help="Runs started since: a date/time (2026-12-01, 2026-12-01T08:00Z) or a span (24h, 7d)."),
    fmt: str = typer.Option("parquet", "--format", "-f", help="parquet (needs pyarrow: pip install 'dynocell[export]') or csv."),
    out_dir: Path = typer.Option(Path("dynocell-export"), "--out", "-o", help="Directory for runs.*, curves.*, splits.*."),
    host: Optional[str] = typer.Option(None, "--host", help="Only runs of this host (hostname or machine id prefix)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Write runs, acceptance curves and profile splits since a time, from every host of the store.

    Example: dynocell export --since 7d --format csv --out /tmp/fleet
    """
    from dynocell.runbooks.export import export, parse_since

    report = export(get_cell(), parse_since(since), fmt.strip().lower(), out_dir.expanduser(), host=host)
    if json_out:
        print_json(report)
        return
    for name, path in report["files"].items():
        out(f"{name:7} {report['rows'][name]:6} rows  {path}")


def register(app: typer.Typer) -> None:
    """Add ``export`` to the root app."""
    app.command("export")(export_cmd)
