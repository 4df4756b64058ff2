"""``dynocell compare RUN RUN…``: runs side by side, one column per run (configs, engines, hosts)."""

from __future__ import annotations

from typing import Any, List

import typer

from dynocell.cli.common import JSON_OPTION_HELP, get_cell, out, print_json


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _p(p: float) -> str:
    """A probability in 3 characters: .57 (1.0 stays 1.0)."""
    return f"{p:.2f}"[1:] if 0 <= p < 1 else f"{p:.1f}"


def _phase_cell(profile: dict[str, Any] | None) -> str:
    """``verify 37 %, draft 26 %, …`` (the step's phases, largest first), ``unavailable`` or ``-``."""
    ph = (profile or {}).get("phases")
    if not ph:
        return "-"
    if ph["state"] != "split":
        return "unavailable"
    return ", ".join(f"{p['label']} {p['pct']:.0f}%" for p in sorted(ph["phases"], key=lambda p: -p["pct"]))


def _rows(table: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(label, one cell per run) in reading order: identity, boot, throughput, acceptance, profile."""
    from dynocell.runbooks.compare import KEY_PHASES

    rows: list[tuple[str, list[str]]] = [
        ("config", [t["config"] for t in table]),
        ("engine", [t["engine"] or "-" for t in table]),
        ("state", [t["state"] for t in table]),
        ("temperature", [_f(t["temperature"], "{:g}") for t in table]),
        ("boot ready s", [_f(t["ready_s"]) for t in table]),
    ]
    for ph in KEY_PHASES:
        if any(ph in t["phases"] for t in table):
            rows.append((f"  {ph} s", [_f(t["phases"].get(ph)) for t in table]))
    concs = sorted({lv["concurrency"] for t in table for lv in t["levels"]})
    for c in concs:
        cells = []
        for t in table:
            lv = next((x for x in t["levels"] if x["concurrency"] == c), None)
            cells.append("-" if lv is None else
                         f"{_f(lv['output_tok_s'], '{:.0f}')} ({_f(lv['decode_tok_s'], '{:.0f}')})")
        rows.append((f"tok/s c={c} (per req)", cells))
    classes = sorted({c["text_class"] for t in table for c in t["curves"]})
    for cls in classes:
        curs = [next((c for c in t["curves"] if c["text_class"] == cls), None) for t in table]
        rows.append((f"τ {cls}", ["-" if c is None else f"{c['tau']:.3f}" for c in curs]))
        rows.append(("  p1/p2/p3", ["-" if c is None else "/".join(_p(p) for p in c["p"][:3]) for c in curs]))
    rows.append(("lossless", [t["lossless"] or "-" for t in table]))
    rows.append(("break-even", [
        "-" if not t["breakeven"] or t["breakeven"].get("margin") is None
        else f"{t['breakeven']['margin'] * 100:+.1f} %" for t in table]))
    rows.append(("profile ms · busy", [
        "-" if not t["profile"] else f"{_f(t['profile']['device_ms'], '{:.2f}')} · {_f(t['profile']['busy_pct'])} %"
        for t in table]))
    rows.append(("launches/tok (graphs)", [
        "-" if not t["profile"] else
        f"{_f(t['profile']['launches_per_token'])} ({t['profile']['graph_launches'] or 0})" for t in table]))
    if any(t["profile"] and t["profile"].get("phases") for t in table):
        rows.append(("spec step phases", [_phase_cell(t["profile"]) for t in table]))
    rows.append(("top categories", [
        "-" if not t["profile"] else ", ".join(f"{s['category']} {s['pct']:.0f}%" for s in t["profile"]["top"])
        for t in table]))
    return rows


def compare_cmd(
    runs: List[str] = typer.Argument(..., help="Two or more run ids (or unique prefixes); the first is the base."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Runs side by side: boot phases, throughput at each concurrency, τ and per-position
    acceptance per text class, lossless, break-even and the profile headline.

    Works across engines (an SGLang run beside a vLLM run of the same model pair) and hosts
    (a warning says when the hardware differs). `--json` adds the per-category profile deltas
    and the per-class throughput deltas against the first run.

    Example: dynocell compare 6dc3 85fb
    """
    from rich.table import Table

    from dynocell.runbooks.compare import compare

    data = compare(get_cell(), runs)
    if json_out:
        print_json(data)
        return
    table = data["table"]
    t = Table(show_header=True, header_style="bold", title="runs side by side (first = base)", title_justify="left")
    t.add_column("", no_wrap=True)
    for row in table:
        t.add_column(row["run_id"], overflow="fold")
    for label, cells in _rows(table):
        t.add_row(label, *cells)
    out(t)
    if data.get("hardware_warning"):
        out(f"warning: {data['hardware_warning']}")


def register(app: typer.Typer) -> None:
    """Add the ``compare`` command to the root app."""
    app.command("compare")(compare_cmd)
