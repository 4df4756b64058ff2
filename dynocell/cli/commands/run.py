"""``dynocell run | show | runs | bench | profile | reanalyze`` — the main job and its records."""

from __future__ import annotations

from typing import Callable, Optional

import typer

from dynocell.cli.common import (StepProgress, add_row, console, get_cell, host_cells, human_duration,
                                 interrupt_on_term_and_hangup, out, print_json, seconds, table)


def register(app: typer.Typer) -> None:
    """Add the main-job commands to the root app."""
    app.command("run")(run_cmd)
    app.command("show")(show_cmd)
    app.command("runs")(runs_cmd)
    app.command("bench")(bench_cmd)
    app.command("profile")(profile_cmd)
    app.command("reanalyze")(reanalyze_cmd)


def run_cmd(
    config: Optional[str] = typer.Argument(
        None, help="Config name, hash (prefix) or TOML file; default: the embedded reference config."),
    workload: Optional[str] = typer.Option(None, "--workload", "-w",
                                           help="Workload TOML, or a bundled one by name: default, long, ladder "
                                                "(acceptance by context length)."),
    lossless: bool = typer.Option(True, "--lossless-check/--no-lossless-check",
                                  help="Compare greedy output with a plain boot of the same target."),
    profile: bool = typer.Option(True, "--profile/--no-profile",
                                 help="Open a profiler window and split where the time goes."),
    timeout: Optional[float] = typer.Option(None, "--timeout", callback=seconds(), help="Boot limit in seconds."),
    boot: Optional[str] = typer.Option(None, "--boot", help="Run on this boot, already up (e.g. attached): health, "
                                       "bench, acceptance, profile, diagnose; no boot, lossless check or stop."),
    requests: Optional[int] = typer.Option(None, "--requests", min=1,
                                           help="Requests per text class of the acceptance levels (default: the "
                                                "workload's); more narrow every interval."),
    allow_contended: bool = typer.Option(False, "--allow-contended",
                                         help="Judge the run even when the host was contended while it measured "
                                              "(load above the core count, another live boot)."),
    json_out: bool = typer.Option(False, "--json", help="Print the run record as JSON instead of the report."),
) -> None:
    """Put one config on the stand and leave a complete record.

    config → build → model → boot → health → bench → acceptance → lossless → profile → break-even → stop → diagnose.

    Every step is stored as soon as it ends; Ctrl-C stops the engine and marks the run interrupted.

    Example: dynocell run                      (embedded reference engine)
    Example: dynocell run --boot 3f2a          (a boot already up, e.g. attached)
    Example: dynocell run examples/tiny-ngram.toml --no-profile
    """
    from dynocell.runbooks.run import RunOptions, run_job, run_on_boot

    cell = get_cell()
    interrupt_on_term_and_hangup()
    live = StepProgress()
    if boot:
        if config:
            from dynocell.errors import UserError

            raise UserError("give a CONFIG or --boot, not both", "the boot's own config is used with --boot")
        with live.status:
            run_id = run_on_boot(cell, boot, workload=workload, profile=profile, progress=live)
        _show(run_id, json_out)
        _exit_for(run_id)
        return
    opts = RunOptions(workload=workload, lossless=lossless, profile=profile, boot_timeout_s=timeout,
                      requests=requests, allow_contended=allow_contended)
    with live.status:
        run_id = run_job(cell, config, options=opts, progress=live)
    _show(run_id, json_out)
    _exit_for(run_id)


def _exit_for(run_id: str) -> None:
    """Exit 1 when the run did not complete (the report above says which step failed)."""
    from dynocell.runbooks.run import resolve_run

    if resolve_run(get_cell(), run_id).state != "completed":
        raise typer.Exit(1)


def _show(ref: str, json_out: bool) -> None:
    from dynocell.runbooks import views
    from dynocell.runbooks.run import resolve_run

    cell = get_cell()
    run = resolve_run(cell, ref)
    detail = views.run_detail(cell, run.id)
    boot = views.boot_detail(cell, run.boot_id) if run.boot_id else None
    if json_out:
        print_json({**detail, "boot": boot})
        return
    from dynocell.cli.render import run_report

    for item in run_report(detail, boot):
        out(item)
        out()


def show_cmd(
    ref: Optional[str] = typer.Argument(None, help="Run id or boot id (or a unique prefix); default: the newest run."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Reprint the report of a run, or the timeline and health of a boot (with no argument: the newest run).

    Example: dynocell show 7c1e
    """
    from dynocell.runbooks import refs, views
    from dynocell.runbooks.run import reconcile_runs

    cell = get_cell(read_only=True)
    reconcile_runs(cell)  # a run whose process died shows as interrupted, its engine stopped
    if ref is None:
        ref = views.latest_run_id(cell)
    found = refs.resolve(cell, ref, ("run", "boot"))  # ambiguous across the two kinds → Error listing both
    if found.kind == "boot":
        from dynocell.runbooks import boots, views

        from dynocell.runbooks.attach import health_now

        boot = boots.resolve_boot(cell, found.key)
        bd = views.boot_detail(cell, boot.id)
        bd["health_now"] = now = health_now(cell, boot)  # an attached engine: probed again, never a stale light
        if json_out:
            print_json(bd)
            return
        from dynocell.cli.render import command_lines, health_table, phases_table

        out(f"boot {boot.id} [{boot.state}] on {bd['boot'].get('host_label')} {boot.engine} port {boot.port}")
        out(f"argv: {command_lines(boot.argv, console.size.width - 6)}")
        if bd.get("elsewhere"):
            out(f"files: on host {bd['elsewhere']['host']} under {bd['elsewhere']['dir']}")
        if boot.failure_signature:
            title = (boot.failure_detail or {}).get("title") or ""
            out(f"failure signature: {boot.failure_signature} {title}")
        if now and now["health"] == "down":
            out(f"health now: down — GET /health does not answer (probed just now, {now['timeout_s']:g} s timeout); "
                "the verdict below is the last stored one")
        if boot.state in ("crashed", "failed") and boot.exit_code is not None:
            out(f"ended: the engine {boots.describe_exit(boot.exit_code)}")  # "was killed by SIGKILL"
        for x in (phases_table(bd), health_table(bd)):
            if x is not None:
                out(x)
        return
    _show(found.key, json_out)


def runs_cmd(
    limit: int = typer.Option(20, "--limit", "-n", min=1, max=1_000_000, help="How many runs."),
    host: Optional[str] = typer.Option(None, "--host", help="Only runs of this host (hostname or machine id prefix)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """List recent runs with host, state, τ and best output tok/s.

    Example: dynocell runs -n 5 --host gpu-node-2
    """
    from dynocell.runbooks import hosts, views
    from dynocell.runbooks.run import reconcile_runs

    cell = get_cell(read_only=True)
    reconcile_runs(cell)
    rows = views.list_runs(cell, limit=limit, host_ids=hosts.resolve(cell, host) if host else None)
    if json_out:
        print_json(rows)
        return
    # At 120 columns a row stays on one line: the host by its name (its id only where two machines share it),
    # no kind column when every run is a plain run, no error column when none failed.
    t = table("run", "host", "kind", "state", "config", "boot", "τ", "out tok/s", "lossless", "took", "error",
              optional=("kind", "error"))
    plain = all(r["kind"] == "run" for r in rows)
    for r, host_cell in zip(rows, host_cells(rows)):
        add_row(t, r["id"], host_cell, "" if plain else r["kind"], r["state"],
                ", ".join(r.get("labels") or []) or r["config_hash"][:19],
                r.get("boot_id"), f"{r['tau']:.3f}" if r.get("tau") else "-",
                f"{r['best_output_tok_s']:.1f}" if r.get("best_output_tok_s") else "-", r.get("lossless") or "-",
                human_duration(r.get("duration_s")), (r.get("error") or "")[:60])
    out(t)


def _int_list(value: Optional[str]) -> Optional[list[int]]:
    """``1,4,8`` → [1, 4, 8]; a bad item is a clear Error: naming --concurrency."""
    from dynocell.errors import UserError

    if value is None:
        return None
    try:
        out = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"--concurrency {value!r} is not a comma-separated list of whole numbers",
                        "e.g. --concurrency 1,4,8") from None
    if not out:
        raise UserError("--concurrency is empty", "e.g. --concurrency 1,4,8")
    return out


def bench_cmd(
    boot: str = typer.Argument(..., help="A ready boot (id or prefix)."),
    workload: Optional[str] = typer.Option(None, "--workload", "-w", help="Workload TOML (default: bundled)."),
    num_prompts: Optional[int] = typer.Option(None, "--num-prompts", min=0,
                                              help="Requests per throughput level (0 = 5 × concurrency)."),
    concurrency: Optional[str] = typer.Option(None, "--concurrency", help="Throughput levels, e.g. 1,4,8."),
    warmup: Optional[int] = typer.Option(None, "--warmup", min=0, help="Unmeasured requests before each level."),
    requests: Optional[int] = typer.Option(None, "--requests", min=1,
                                           help="Requests per text class of the acceptance levels."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Benchmark a running boot (throughput levels, and acceptance when speculative).

    The knobs resize the workload (its identity hash changes with them); more requests narrow every interval.

    Example: dynocell bench 3f2a
    Example: dynocell bench 3f2a --concurrency 1,4,8 --num-prompts 64 --warmup 4
    """
    from dynocell.runbooks.run import bench

    sizes = {k: v for k, v in {"requests": requests, "num_prompts": num_prompts,
                               "concurrency": _int_list(concurrency), "warmup": warmup}.items() if v is not None}
    live = StepProgress()
    with live.status:
        run_id = bench(get_cell(), boot, workload=workload, progress=live, sizes=sizes)
    _show(run_id, json_out)
    _exit_for(run_id)


def profile_cmd(
    boot: str = typer.Argument(..., help="A ready boot (id or prefix)."),
    workload: Optional[str] = typer.Option(None, "--workload", "-w", help="Workload TOML (default: bundled)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Open a profiler window on a running boot and split where the time goes.

    Example: dynocell profile 3f2a
    """
    from dynocell.runbooks.run import profile

    _on_boot(profile, boot, workload, json_out)


def _on_boot(procedure: Callable[..., str], boot: str, workload: str | None, json_out: bool) -> None:
    """Run ``procedure`` (``runbooks.run.bench`` or ``profile``) on a ready boot with live progress, show the
    run it recorded and exit with its outcome."""
    live = StepProgress()
    with live.status:
        run_id = procedure(get_cell(), boot, workload=workload, progress=live)
    _show(run_id, json_out)
    _exit_for(run_id)


def reanalyze_cmd(
    run: str = typer.Argument(..., help="A run with a profile window (id or unique prefix)."),
    trace_dir: Optional[str] = typer.Option(None, "--trace-dir",
                                            help="Folder holding the run's trace files when they moved."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Compute a stored run's speculative phase split from its trace files and store it.

    Phases: draft, draft extend, target verify, sampling / accept, glue (GPU time, launches per token).

    For runs recorded before the split existed, or brought back from another host.

    Traces are found where they were written, under --trace-dir, or under boots/<boot id>/.

    A trace is used only when its sha256 is the one stored with the run.

    Example: dynocell reanalyze 7c1e
    """
    from dynocell.runbooks.phase_split import reanalyze

    res = reanalyze(get_cell(), run, trace_dir)
    if json_out:
        print_json(res)
        return
    from dynocell.cli.render import phases_text

    out(f"run {res['run_id']}, profile #{res['profile_id']}: {len(res['files'])} trace file(s)")
    line = phases_text(res["phases"], hint=res["note"])
    if line is not None:
        out(line)
