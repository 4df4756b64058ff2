"""``dynocell import log|metrics|requests|bench|trace`` and ``dynocell trace split`` — the
evidence operators already hold, from engines dynocell did not start."""

from __future__ import annotations

from pathlib import Path
from typing import Any, List, Optional

import typer

from dynocell.cli.common import add_row, get_cell, out, print_json, say, table
from dynocell.cli.render import KERNEL_NAME_MAX
from dynocell.text import shorten

import_app = typer.Typer(help="Import evidence from engines dynocell did not start: server logs, /metrics "
                         "scrapes, per-request results, benchmark JSON, profiler traces. The same file "
                         "imported twice is one record.\n\nExample: dynocell import log server.log",
                         no_args_is_help=True)
trace_app = typer.Typer(help="Chrome-trace tools.\n\nExample: dynocell trace split rank0.pt.trace.json.gz",
                        no_args_is_help=True)

CONFIG_HELP = ("Config name, hash (prefix) or TOML file the engine ran (default: reconstructed from the evidence, "
               "stored as observed).")


def register(app: typer.Typer) -> None:
    """Add the ``import`` and ``trace`` groups to the root app."""
    app.add_typer(import_app, name="import")
    app.add_typer(trace_app, name="trace")


def _fmt(v: Any, nd: int = 3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{nd}f}"
    return str(v)


def _header(res: dict[str, Any], what: str) -> None:
    again = "" if res.get("created", True) else " (already imported: the stored record)"
    out(f"imported {what} → import #{res['import_id']}{again}")


@import_app.command("log")
def import_log_cmd(
    files: List[Path] = typer.Argument(...,
                                       help="Server log file(s); several files = the nodes of one multi-node boot."),
    node_rank: Optional[List[int]] = typer.Option(
        None, "--node-rank", min=0,
        help="Node rank of the log before it, once per file (a.log --node-rank 0 b.log --node-rank 1); "
             "default: what each log says, else file order."),
    config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
    engine: Optional[str] = typer.Option(None, "--engine",
                                         help="sglang | vllm | llamacpp (default: detected from the log)."),
    allow_mismatch: bool = typer.Option(
        False, "--allow-mismatch",
        help="Import several logs as one boot even when they disagree (server args, start time, node ranks)."),
    json_out: bool = typer.Option(False, "--json", help="Print the import summary as JSON."),
) -> None:
    """Import an engine's server log(s) as a boot of kind `imported`.

    Phases, failure signature, acceptance lines, runtime events, and the config from the log's own config line.

    Several logs are one boot's nodes only when they agree (server args, nnodes, distinct ranks, within 10 min).

    --allow-mismatch imports them as one boot anyway.

    Example: dynocell import log node0.log --node-rank 0 node1.log --node-rank 1
    """
    from dynocell.runbooks.imports import import_log

    res = import_log(get_cell(), files, config_ref=config, node_rank=node_rank or None, engine=engine,
                     allow_mismatch=allow_mismatch)
    if json_out:
        print_json(res)
        return
    _header(res, f"{res['engine']} log")
    if not res.get("created", True):
        out("the same file(s) are one record, kept with the options of their first import")
    out(f"boot {res['boot_id']} (imported, {res['state']})  run {res['run_id']}")
    out(f"config {res['config_hash'][:19]}" + (" (observed)" if res.get("observed") else ""))
    if res.get("config_fields"):
        # every field seen, model paths included (say() makes the log's text safe for the terminal)
        say("config seen in the log: " + ", ".join(f"{k}={v}" for k, v in sorted(res["config_fields"].items())))
    nodes = res.get("nodes") or {}
    names = list(dict.fromkeys(n for per in nodes.values() for n in per))
    if names:
        out("boot timeline (seconds from the first line)")  # a title over the narrow table would wrap
        t = table("phase", *[f"node {r} (s)" for r in nodes], *(["skew (s)"] if len(nodes) > 1 else []))
        for n in names:
            add_row(t, n, *[_fmt(nodes[r].get(n), 0) for r in nodes],
                    *([_fmt(res["phase_skew_s"].get(n), 0)] if len(nodes) > 1 else []))
        out(t)
    if res.get("ready_s") is not None:
        out(f"ready after {_fmt(res['ready_s'], 0)} s")
    else:
        out("never ready" if res.get("state") == "failed" or not res.get("warnings") else "ready time unknown")
    for w in res.get("warnings") or []:
        say(f"warning: {w}")
    for why in res.get("not_one_boot") or []:
        out(f"warning (--allow-mismatch): not one boot: {why}")
    if res.get("config_mismatch"):
        out("warning: the nodes' config lines differ in " + ", ".join(res["config_mismatch"])
            + " (the first node's config is stored)")
    sig = res.get("signature")
    if sig:
        out(f"failure signature: {sig.get('id')} — {sig.get('title')}")
    acc = res.get("acceptance")
    if acc:
        out(f"acceptance ({acc['format']}, {acc['samples']} lines): τ = {acc['tau']:.3f}, D = {acc['num_drafts']}"
            + (f", p = {' / '.join(f'{x:.3f}' for x in acc['p'])}" if acc.get("p") else ""))
    for ev in res.get("events") or []:
        out(f"runtime event: {ev['kind']} at line {ev['line']} (node {ev['node_rank']}): {ev['text'][:120]}")
    for t in res.get("truncated") or []:
        out(f"note: {t} ends mid-line (truncated)")


@import_app.command("trace")
def import_trace_cmd(
    file: Path = typer.Argument(
        ..., help="Chrome trace (.json or .json.gz), e.g. a torch.profiler trace of vLLM or SGLang."),
    config: Optional[str] = typer.Option(None, "--config",
                                         help="Config the engine ran (links the profile to a run of it)."),
    output_tokens: Optional[int] = typer.Option(
        None, "--output-tokens", min=1, help="Tokens generated in the window (gives ms and launches per token)."),
    json_out: bool = typer.Option(False, "--json", help="Print the import summary as JSON."),
) -> None:
    """Store the profile split of a Chrome trace.

    Example: dynocell import trace rank0.pt.trace.json.gz --output-tokens 512
    """
    from dynocell.runbooks.imports import import_trace

    res = import_trace(get_cell(), file, config_ref=config, output_tokens=output_tokens)
    if json_out:
        print_json(res)
        return
    _header(res, "trace")
    out(f"profile #{res['profile_id']}: {res['source']} time {res['device_ms']:.3f} ms, busy {res['busy_pct']:.1f} %, "
        f"{res['launches']} launches")
    _categories(res["categories"])
    if res.get("phase_split"):
        from dynocell.cli.render import phases_text

        out(phases_text(res["phase_split"]))


def _categories(cats: list[dict[str, Any]]) -> None:
    t = table("category", "ms", "%")
    for c in cats:
        if c["ms"]:
            add_row(t, c["category"], f"{c['ms']:.3f}", f"{c['pct']:.1f}")
    out(t)


@trace_app.command("split")
def trace_split_cmd(
    file: Path = typer.Argument(..., help="Chrome trace (.json or .json.gz)."),
    top: int = typer.Option(10, "--top", min=1, max=200, help="How many of the heaviest kernels to list."),
    json_out: bool = typer.Option(False, "--json", help="Print the split as JSON."),
) -> None:
    """Split any Chrome trace's time by kernel category (stores nothing).

    Example: dynocell trace split rank0.pt.trace.json.gz --json
    """
    from dynocell.runbooks.imports import trace_split

    res = trace_split(file, top=top)
    if json_out:
        print_json(res)
        return
    say(f"{res['path']}: {res['source']} time {res['device_ms']:.3f} ms over a {res['window_ms']:.3f} ms window, "
        f"busy {res['busy_pct']:.1f} %, {res['launches']} launches, {res['graph_launches']} CUDA-graph launches")
    _categories(res["categories"])
    t = table("kernel", "category", "ms", "launches", title=f"top {top}")
    for k in res["top"][:top]:
        add_row(t, shorten(k["name"], KERNEL_NAME_MAX), k["category"], f"{k['ms']:.3f}", k["launches"])
    out(t)
    for w in res.get("warnings") or []:
        out(f"warning: {w}")


@import_app.command("metrics")
def import_metrics_cmd(
    files: List[Path] = typer.Argument(...,
                                       help="Prometheus text scrapes of GET /metrics of one engine, oldest first."),
    config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the import summary as JSON."),
) -> None:
    """Import /metrics scrapes: counter deltas, and an acceptance curve from per-position counters.

    Two or more scrapes give counter deltas over the window; per-position counters (vLLM, SGLang) give a curve.

    Example: dynocell import metrics before.txt after.txt
    """
    from dynocell.runbooks.evidence import import_metrics

    res = import_metrics(get_cell(), files, config_ref=config)
    if json_out:
        print_json(res)
        return
    _header(res, f"{res['scrapes']} scrape(s)")
    say(f"run {res['run_id']}  window: {res['window']}  config {res['config_hash'][:19]}"
        + (" (observed)" if res.get("observed") else ""))
    acc = res.get("acceptance")
    if acc:
        say(f"per-position acceptance ({acc['source']})")  # a title over the narrow table would wrap
        t = table("position i", "p_i")
        for i, p in enumerate(acc["p"], start=1):
            add_row(t, i, f"{p:.4f}")
        out(t)
        out(f"τ = {acc['tau']:.4f}" + (f" (engine: {acc['engine_tau']:.4f})" if acc.get("engine_tau") else "")
            + f" over {acc['drafts']:g} drafts")
    else:
        out("no per-position acceptance counters in the scrape(s)")


@import_app.command("requests")
def import_requests_cmd(
    file: Path = typer.Argument(..., help="Per-request responses, JSON lines (SGLang meta_info or OpenAI completions "
                                "with usage)."),
    config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the import summary as JSON."),
) -> None:
    """Import per-request responses as a bench run, with acceptance where the responses carry it.

    Example: dynocell import requests responses.jsonl --config prod
    """
    from dynocell.runbooks.evidence import import_requests

    res = import_requests(get_cell(), file, config_ref=config)
    if json_out:
        print_json(res)
        return
    _header(res, f"{res['requests']} requests ({res['format']})")
    out(f"run {res['run_id']}: {res['requests'] - res['failed']} ok, {res['failed']} failed, "
        f"{res['completion_tokens']} completion tokens, e2e p50 {_fmt(res['e2e_ms_p50'], 1)} ms")
    acc = res.get("acceptance")
    if acc:
        out(f"acceptance: τ = {acc['tau']:.3f}, p = {' / '.join(f'{x:.3f}' for x in acc['p'])}")


@import_app.command("bench")
def import_bench_cmd(
    file: Path = typer.Argument(..., help="Result file of SGLang bench_serving, vLLM bench serve, AIPerf or GuideLLM."),
    config: Optional[str] = typer.Option(None, "--config", help=CONFIG_HELP),
    json_out: bool = typer.Option(False, "--json", help="Print the import summary as JSON."),
) -> None:
    """Import a benchmark tool's results as bench rows (one per level); fields with no column are listed as lost.

    Example: dynocell import bench profile_export_aiperf.json --config prod
    """
    from dynocell.runbooks.evidence import import_bench

    res = import_bench(get_cell(), file, config_ref=config)
    if json_out:
        print_json(res)
        return
    _header(res, f"{res['tool']} results")
    t = table("concurrency", "requests", "failed", "out tok/s", "TTFT p50 (ms)", "accept len", "not kept")
    for lv in res["levels"]:
        add_row(t, lv["concurrency"], lv["requests"], lv["failed"], _fmt(lv["output_tok_s"], 1),
                _fmt(lv["ttft_ms_p50"], 1), _fmt(lv["accept_length"], 2), ", ".join(lv["lost"])[:60])
    out(t)
