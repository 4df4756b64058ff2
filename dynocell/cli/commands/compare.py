"""``dynocell compare RUN RUN…``: runs side by side, one column per run (configs, engines, hosts)."""

from __future__ import annotations

from typing import Any, List

import typer

from dynocell.cli.common import JSON_OPTION_HELP, get_cell, out, print_json, say


def _f(v: Any, fmt: str = "{:.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _p(p: float) -> str:
    """A probability in 3 characters: .57 (1.0 stays 1.0)."""
    return f"{p:.2f}"[1:] if 0 <= p < 1 else f"{p:.1f}"


#: The legend's title (the table of runs above the side-by-side one).
LEGEND_TITLE = "runs compared (columns of the table below)"

#: The speculative step's phases in the order a step runs them, as labelled in the stored split.
PHASE_ROWS = ("draft", "draft extend", "verify", "sampling", "glue")


def _phase_rows(table: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """The speculative step's phase split, one row per phase (% of the step's GPU time): ``split``,
    ``n/a`` (the trace has no phase ranges, e.g. vLLM) or ``-`` (none stored) on the header row."""
    splits = [((t["profile"] or {}).get("phases") or None) for t in table]
    if not any(splits):
        return []
    rows = [("spec step phases", ["-" if not ph else ("split" if ph["state"] == "split" else "n/a") for ph in splits])]
    for label in PHASE_ROWS:
        cells = []
        for ph in splits:
            pct = {p["label"]: p["pct"] for p in (ph or {}).get("phases") or [] if p.get("pct") is not None}
            cells.append(f"{pct[label]:.0f}" if label in pct else "-")
        rows.append((f"  {label} %", cells))
    return rows


def short_ids(ids: list[str], least: int = 6) -> list[str]:
    """The shortest prefixes (at least ``least`` characters) that still tell the given run ids apart."""
    n = least
    while n < max(map(len, ids), default=0) and len({i[:n] for i in ids}) < len(set(ids)):
        n += 1
    return [i[:n] for i in ids]


def _rows(table: list[dict[str, Any]]) -> list[tuple[str, list[str]]]:
    """(label, one cell per run) in reading order: identity, boot, throughput, acceptance, profile.

    Every cell is one number or one short word, so no cell wraps; a label names its unit and, for
    throughput, the concurrency (``c=8 out tok/s``: the level's aggregate output rate; ``c=8 decode/req
    tok/s``: the mean per-request decode rate at that level). ``boot ready s`` is the boot's ``ready_s``
    (when dynocell found the engine ready); the indented rows under it are the engine's phase lines, s after
    spawn, the ``ready`` phase as ``ready line s`` so no second row reads "ready s"."""
    from dynocell.runbooks.compare import KEY_PHASES

    rows: list[tuple[str, list[str]]] = [
        ("engine", [t["engine"] or "-" for t in table]),
        ("state", [t["state"] for t in table]),
        ("temperature", [_f(t["temperature"], "{:g}") for t in table]),
        ("boot ready s", [_f(t["ready_s"]) for t in table]),
    ]
    for ph in KEY_PHASES:
        if any(ph in t["phases"] for t in table):
            label = "ready line" if ph == "ready" else ph
            rows.append((f"  {label} s", [_f(t["phases"].get(ph)) for t in table]))
    concs = sorted({lv["concurrency"] for t in table for lv in t["levels"]})
    for c in concs:
        lvs = [next((x for x in t["levels"] if x["concurrency"] == c), None) for t in table]
        rows.append((f"c={c} out tok/s", ["-" if lv is None else _f(lv["output_tok_s"], "{:.0f}") for lv in lvs]))
        rows.append((f"c={c} decode/req tok/s",
                     ["-" if lv is None else _f(lv["decode_tok_s"], "{:.0f}") for lv in lvs]))
    classes = sorted({c["text_class"] for t in table for c in t["curves"]})
    for cls in classes:
        curs = [next((c for c in t["curves"] if c["text_class"] == cls), None) for t in table]
        rows.append((f"τ {cls}", ["-" if c is None else f"{c['tau']:.3f}" for c in curs]))
        rows.append(("  p1/p2/p3", ["-" if c is None else "/".join(_p(p) for p in c["p"][:3]) for c in curs]))
    rows.append(("lossless", [t["lossless"] or "-" for t in table]))
    rows.append(("break-even", [
        "-" if not t["breakeven"] or t["breakeven"].get("margin") is None
        else f"{t['breakeven']['margin'] * 100:+.1f}%" for t in table]))
    prof = [t["profile"] or {} for t in table]
    rows.append(("profile device ms", [_f(p.get("device_ms"), "{:.2f}") for p in prof]))
    rows.append(("  busy %", [_f(p.get("busy_pct")) for p in prof]))
    rows.append(("  launches/tok", [_f(p.get("launches_per_token")) for p in prof]))
    rows.append(("  graph launches", ["-" if not p else str(p.get("graph_launches") or 0) for p in prof]))
    rows += _phase_rows(table)
    return rows


def _legend(table: list[dict[str, Any]], ids: list[str]) -> Any:
    """The runs named above the side-by-side table: short id, config name and the profile's top categories
    (prose that would widen every column there; here it wraps at spaces)."""
    from dynocell.cli.fit import FitTable

    t = FitTable("run", "config", "top categories", title=LEGEND_TITLE, keys=1)
    for n, (row, short) in enumerate(zip(table, ids)):
        top = ", ".join(f"{s['category']} {s['pct']:.0f}%" for s in (row["profile"] or {}).get("top") or [])
        t.add_row(short, row["config"] + (" (base)" if n == 0 else ""), top or "-")
    return t


def compare_cmd(
    runs: List[str] = typer.Argument(..., help="Two or more run ids (or unique prefixes); the first is the base."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Runs side by side: boot phases, throughput, τ, acceptance, break-even and profile.

    Throughput at each concurrency, τ and per-position acceptance per text class, lossless, break-even, profile.

    Works across engines (an SGLang run beside a vLLM run of one pair) and hosts (warned if the hardware differs).

    `--json` adds the per-category profile deltas and the per-class throughput deltas against the first run.

    Columns are headed by short run ids, named with their config in the table above them.

    A table too wide for the terminal is split into several, each repeating the row names; no number wraps.

    Example: dynocell compare 6dc3 85fb
    """
    from dynocell.cli.fit import FitTable
    from dynocell.runbooks.compare import compare

    data = compare(get_cell(), runs)
    if json_out:
        print_json(data)
        return
    table = data["table"]
    ids = short_ids([row["run_id"] for row in table])
    out(_legend(table, ids))
    t = FitTable("", *ids, title="runs side by side (first = base)", keys=1)
    for label, cells in _rows(table):
        t.add_row(label, *cells)
    out(t)
    if data.get("hardware_warning"):
        say(f"warning: {data['hardware_warning']}")


def register(app: typer.Typer) -> None:
    """Add the ``compare`` command to the root app."""
    app.command("compare")(compare_cmd)
