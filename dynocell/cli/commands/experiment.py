"""``dynocell experiment create|run|show|list``, ``dynocell pin`` and ``dynocell rollback``.

Experiments compare arms with the incumbent config on one workload, in
interleaved repeated runs, and judge each arm per metric and concurrency
level against the incumbent's own noise (see ``dynocell.engine.verdicts``).
"""

from __future__ import annotations

from typing import Any, List, Optional

import typer

from dynocell.cli.common import (StepProgress, add_row, err_console, get_cell, interrupt_on_term_and_hangup, out,
                                 print_json, say, seconds, table)
from dynocell.text import printable

experiment_app = typer.Typer(
    name="experiment",
    help="Experiments against the incumbent: arms, repeated interleaved runs, noise-aware verdicts.\n\n"
    "Example: dynocell experiment create spec --incumbent tiny-plain --arm tiny --arm tiny-ngram --repeats 3",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    """Add ``experiment …``, ``pin`` and ``rollback`` to the root app."""
    app.add_typer(experiment_app, name="experiment")
    app.command("pin")(pin_cmd)
    app.command("rollback")(rollback_cmd)


class _ExperimentProgress(StepProgress):
    """The experiment's own lines (which run of how many, each run's end) and, within each run, the step progress
    ``dynocell run`` prints: a run takes a minute or more, and was silent all that time (issue 39)."""

    last = ""

    def __call__(self, msg: str, data: dict[str, Any]) -> None:
        if "experiment" in data:
            self.status.update(msg)
            if msg.strip() != self.last:  # a run's own last line, "run X completed", said once
                err_console.print(printable(msg, keep_newlines=True), markup=False, highlight=False)
        else:
            super().__call__(msg, data)
        self.last = msg.strip()


@experiment_app.command("create")
def create_cmd(
    name: str = typer.Argument(..., help="Experiment name (letters, digits, . _ + -)."),
    incumbent: str = typer.Option(..., "--incumbent", "-i",
                                  help="The config serving production (name, hash or TOML), or boot:BOOT_ID "
                                  "(a boot already up, e.g. attached)."),
    arm: List[str] = typer.Option(..., "--arm", "-a",
                                  help="A config to compare (repeat for several arms), or boot:BOOT_ID (a boot already "
                                  "up, e.g. an engine registered with `dynocell attach`; not booted or stopped)."),
    workload: Optional[str] = typer.Option(None, "--workload", "-w", help="Workload TOML (default: bundled)."),
    repeats: int = typer.Option(3, "--repeats", "-n", min=1, max=1000,
                                help="Runs per config (2 or more to get verdicts)."),
    lossless: bool = typer.Option(True, "--lossless-check/--no-lossless-check",
                                  help="Gate arms on greedy output equal to a plain boot."),
    profile: bool = typer.Option(False, "--profile/--no-profile", help="Open a profiler window in every run."),
    timeout: Optional[float] = typer.Option(None, "--timeout", callback=seconds(), help="Boot limit in seconds."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Create an experiment: the incumbent, arms, a workload and repeats; the run order is fixed now.

    Example: dynocell experiment create spec --incumbent examples/tiny-plain.toml
    --arm examples/tiny.toml --arm examples/tiny-ngram.toml --repeats 3
    """
    from dynocell.runbooks import experiments

    res = experiments.create_experiment(get_cell(), name, incumbent, list(arm), workload=workload, repeats=repeats,
                                        lossless=lossless, profile=profile, boot_timeout_s=timeout)
    if json_out:
        print_json(res)
        return
    out(f"experiment {name} created: {len(res['slots'])} runs in this order:")
    out("  " + " ".join(s["label"] for s in res["slots"]))
    out(f"run it with: dynocell experiment run {name}")


@experiment_app.command("run")
def run_cmd(
    name: str = typer.Argument(..., help="Experiment name."),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
) -> None:
    """Run (or resume) an experiment: every run not yet ended, in the interleaved order; then judge.

    Ctrl-C stops the engine of the current run; run the same command again to resume.

    Example: dynocell experiment run spec
    """
    from dynocell.runbooks import experiments

    interrupt_on_term_and_hangup()
    live = _ExperimentProgress()
    with live.status:
        res = experiments.run_experiment(get_cell(), name, progress=live)
    _render(res, json_out)


@experiment_app.command("show")
def show_cmd(
    name: str = typer.Argument(..., help="Experiment name."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
    rejudge: bool = typer.Option(False, "--rejudge", help="Judge again from the stored runs (and store it)."),
) -> None:
    """The verdict table: arms × metrics × concurrency levels against the incumbent.

    Example: dynocell experiment show spec --json
    """
    from dynocell.runbooks import experiments

    cell = get_cell()
    if rejudge:
        experiments.judge(cell, name, store=True)
    _render(experiments.show_experiment(cell, name), json_out)


@experiment_app.command("list")
def list_cmd(json_out: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Experiments, newest first, with progress and each arm's verdict.

    Example: dynocell experiment list
    """
    from dynocell.runbooks import experiments

    rows = experiments.list_experiments(get_cell())
    if json_out:
        print_json(rows)
        return
    t = table("experiment", "state", "runs", "incumbent", "arms", "verdicts")
    for r in rows:
        add_row(t, r["name"], r["state"], f"{r['done']}/{r['total']}", r["incumbent"], ", ".join(r["arms"]),
                "; ".join(f"{k}: {v}" for k, v in r["verdicts"].items()) or "-")
    out(t)


# ---------------------------------------------------------------- rendering

def _fmt(v: float | None, unit: str) -> str:
    if v is None:
        return "-"
    if unit == "ms":
        return f"{v:.1f} ms"
    if unit == "tok/s":
        return f"{v:.1f}"
    return f"{v:.3f}"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1%}"


def verdict_tables(res: dict[str, Any]) -> list[Any]:
    """Rich renderables for an experiment dict (``show_experiment``): overall verdicts, then the
    per-metric table (arm, metric, level, direction, incumbent mean, arm mean, Δ, 95 % CI, floor, verdict)."""
    from dynocell.runbooks.experiments import METRIC_BY_KEY

    v = res.get("verdicts")
    exp = res["experiment"]
    items: list[Any] = []
    done = sum(1 for s in res["slots"] if s["state"] in ("completed", "failed"))
    items.append(f"experiment {exp['name']} [{exp['state']}]  {done}/{len(res['slots'])} runs ended, "
                 f"repeats {exp['repeats']}, workload {exp.get('workload') or 'default'}")
    if not v:
        items.append("no runs yet: dynocell experiment run " + exp["name"])
        return items
    inc = v["incumbent"]
    items.append(f"incumbent {inc['label']} ({len(inc['runs'])} runs); method: {v['method']}; "
                 f"noise floor = max({v['min_floor']:.0%}, incumbent CV)")
    if inc.get("gates"):
        items.append("warning: the incumbent itself failed gates: " + "; ".join(inc["gates"]))
    t = table("arm", "verdict", "why", title="overall")
    for a in v["arms"]:
        add_row(t, a["label"], a["verdict_label"], a["summary"])
    items.append(t)
    mt = table("arm", "metric", "level", "better", "incumbent", "arm", "Δ", "95% CI", "floor", "n", "verdict",
               title="arms × metrics × levels")
    for a in v["arms"]:
        for c in a["comparisons"]:
            m = METRIC_BY_KEY.get(c["metric"])
            unit = m.unit if m else ""
            ci = "-" if c["ci_low"] is None else f"[{c['ci_low']:+.1%}, {c['ci_high']:+.1%}]"
            verdict = c["verdict"]
            if c["verdict"] == "inconclusive" and c["ci_low"] is not None:
                verdict += f" (+{c['more_repeats']} runs)" if c.get("more_repeats") else " (>50 runs)"
            elif c.get("more_repeats"):
                verdict += f" (+{c['more_repeats']} runs)"
            add_row(mt, a["label"], m.label if m else c["metric"], c["level"],
                    "higher" if c["direction"] == "higher-better" else "lower",
                    _fmt(c["incumbent_mean"], unit), _fmt(c["arm_mean"], unit), _pct(c["rel_diff"]), ci,
                    f"±{c['noise_floor']:.1%}", f"{c['n_incumbent']}/{c['n_arm']}", verdict)
    items.append(mt)
    return items


def _render(res: dict[str, Any], json_out: bool) -> None:
    if json_out:
        print_json(res)
        return
    for item in verdict_tables(res):
        if isinstance(item, str):
            say(item)  # prose lines wrap at the width; tables lay themselves out
        else:
            out(item)


# ---------------------------------------------------------------- pin / rollback

def pin_cmd(
    config: Optional[str] = typer.Argument(None, help="Config to pin (name, hash or TOML); omit with --list."),
    build: Optional[str] = typer.Option(None, "--build", help="Engine build hash (or prefix) it runs on."),
    note: Optional[str] = typer.Option(None, "--note", help="Why this is what serves production."),
    list_: bool = typer.Option(False, "--list", help="Show every pin, current first."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Mark what serves production (history keeps every previous pin with its evidence).

    Example: dynocell pin tiny --note "qualified by experiment spec (decode +35 % @c=1)"
    Example: dynocell pin --list
    """
    from dynocell.errors import UserError
    from dynocell.runbooks import experiments

    cell = get_cell()
    if list_:
        rows = experiments.list_pins(cell)
        if json_out:
            print_json(rows)
            return
        t = table("pin", "", "config", "hash", "build", "note", "evidence", "pinned at")
        for p in rows:
            ev = p.get("evidence") or {}
            evs = ", ".join([f"exp {e['name']}: {e.get('verdict') or e['role']}" for e in ev.get("experiments", [])]
                            + ([f"{len(ev['runs'])} runs"] if ev.get("runs") else []))
            add_row(t, f"#{p['id']}", "current" if p["current"] else "", p["label"], p["config_hash"][:19],
                    (p.get("build_hash") or "-")[:19], p["note"], evs or "-", str(p["created_at"])[:19])
        out(t)
        return
    if not config:
        raise UserError("give the CONFIG to pin, or --list", 'e.g. dynocell pin tiny --note "why"')
    if note is None:
        raise UserError("a pin needs --note", 'say why, e.g. --note "qualified by experiment spec"')
    row = experiments.pin(cell, config, note=note, build=build)
    if json_out:
        print_json(row)
        return
    out(f"pinned #{row['id']}: {row['label']} ({row['config_hash'][:19]})"
        + (f" on build {row['build_hash'][:19]}" if row.get("build_hash") else "")
        + (f"; replaces pin #{row['evidence']['replaces_pin']}" if row["evidence"].get("replaces_pin") else ""))


def rollback_cmd(
    apply: bool = typer.Option(False, "--apply", help="Also re-pin the previous config (a new pin row)."),
    json_out: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Show the previous pin with its exact config TOML, build and argv, ready to boot.

    Example: dynocell rollback
    Example: dynocell rollback --apply
    """
    from dynocell.runbooks import experiments

    res = experiments.rollback(get_cell(), apply=apply)
    if json_out:
        print_json(res)
        return
    cur, prev, r = res["current"], res["previous"], res["recipe"]
    out(f"current pin #{cur['id']}: {cur['label']} ({cur['config_hash'][:19]}) — {cur['note']}")
    out(f"previous pin #{prev['id']}: {prev['label']} ({prev['config_hash'][:19]}) — {prev['note']}")
    if r.get("build"):
        b = r["build"]
        out(f"build {b['build_hash']} ({b['base_dist']} {b['base_version']}, {len(b['patches'] or [])} patches) "
            f"at {b['path']} (PYTHONPATH first)")
    out("")
    out("# config (TOML as stored)")
    out(r["source_toml"].rstrip())
    out("")
    out("# argv")
    out(r["argv"])
    if r.get("env"):
        out("# env: " + " ".join(f"{k}={v}" for k, v in r["env"].items()))
    out("")
    out("# boot it with")
    out(r["boot_command"])
    if res.get("applied"):
        out(f"re-pinned as #{res['applied']['id']}")
