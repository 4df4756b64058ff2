"""``dynocell hosts`` (the machines sharing the store) and ``dynocell export`` (runs, acceptance curves
and profile splits as Parquet or CSV for notebooks)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from dynocell.cli.common import JSON_OPTION_HELP, add_row, get_cell, out, print_json, table


def hosts_cmd(json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP)) -> None:
    """List the hosts that write to this store: machine id, OS, CPU, memory, GPUs, engine versions, last seen.

    This machine registers itself on first use of the store.

    Example: dynocell hosts --json
    """
    from dynocell.runbooks import hosts

    cell = get_cell()
    hosts.heartbeat(cell)
    rows = hosts.hosts(cell)
    if json_out:
        print_json(rows)
        return
    t = table("host", "this", "OS", "CPU", "memory", "GPUs", "CUDA", "engine", "last seen")
    for h in rows:
        gpus = ", ".join(f"{g.get('name')} {round((g.get('memory_mib') or 0) / 1024)} GiB" for g in h["gpus"]) or "-"
        engine = " ".join(f"{k} {v}" for k, v in sorted(h["engine_versions"].items())) or "-"
        add_row(t, h["label"], "yes" if h["this"] else "", h["os"], f"{h['cpu']} ×{h['cpu_count']}",
                f"{h['memory_bytes'] / 2**30:.0f} GiB", gpus, h.get("cuda") or "-", engine, hosts.ago(h))
    out(t)


def export_cmd(
    since: str = typer.Option(..., "--since", help="Runs started since: a date/time (2026-12-01, 2026-12-01T08:00Z) "
                              "or a span (24h, 7d)."),
    fmt: str = typer.Option("parquet", "--format", "-f",
                            help="parquet (needs pyarrow: pip install 'dynocell\\[export]') or csv."),
    out_dir: Path = typer.Option(Path("dynocell-export"), "--out", "-o",
                                 help="Directory for runs.*, curves.*, splits.*, phases.*."),
    host: Optional[str] = typer.Option(None, "--host", help="Only runs of this host (hostname or machine id prefix)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Write runs, acceptance curves, profile splits and phase splits since a time, from every host of the store.

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
    """Add ``hosts`` and ``export`` to the root app."""
    app.command("hosts")(hosts_cmd)
    app.command("export")(export_cmd)
