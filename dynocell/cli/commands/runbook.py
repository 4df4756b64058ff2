"""``dynocell runbook lint|search|show|add``, ``note``, ``diagnose`` and ``bisect plan|run``.

Runbook entries are markdown with front matter (see ``dynocell/runbooks/knowledge/``);
the doctor is ``dynocell/runbooks/doctor.py``; bisect plans ``dynocell/runbooks/bisect.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer

from dynocell.cli.common import (JSON_OPTION_HELP, err_console, get_cell, get_settings, interrupt_on_term_and_hangup,
                                 out, print_json, say)
from dynocell.text import printable

runbook_app = typer.Typer(help="Runbook knowledge: lint, search, show and add entries.\n\n"
                          "Example: dynocell runbook search \"acceptance collapse\"", no_args_is_help=True)
bisect_app = typer.Typer(help="Bisect two configs to the knob that flips the verdict.\n\n"
                         "Example: dynocell bisect plan examples/tiny.toml examples/tiny-ngram.toml",
                         no_args_is_help=True)


def register(app: typer.Typer) -> None:
    """Add ``runbook``, ``note``, ``diagnose`` and ``bisect`` to the root app."""
    app.add_typer(runbook_app, name="runbook")
    app.add_typer(bisect_app, name="bisect")
    app.command("note")(note_cmd)
    app.command("diagnose")(diagnose_cmd)


# ------------------------------------------------------------------ runbook

@runbook_app.command("lint")
def lint_cmd(
    paths: Optional[list[Path]] = typer.Argument(None, help="Entry files or directories (default: bundled + "
                                                 "operator directory)."),
    logs: Optional[Path] = typer.Option(None, "--logs", help="Also sweep the entries' log regexes over the real "
                                        "engine logs a corpus manifest names (e.g. tests/data/engine_logs.toml): no "
                                        "match on a healthy boot's log, a match on some log of the versions named."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Validate runbook entries: front matter fields, selectors, version ranges, log regexes (timed).

    Prints one line per problem as FILE: FIELD: MESSAGE; exit code 1 when any.

    Example: dynocell runbook lint ~/my-runbooks/ --logs tests/data/engine_logs.toml
    """
    from dynocell.runbooks.knowledge import BUNDLED_DIR, LintError, lint_paths, operator_dir
    from dynocell.runbooks.knowledge.sweep import load_corpus, sweep, unlisted_logs

    if not paths:
        paths = [BUNDLED_DIR]
        op = operator_dir(get_settings())
        if op.is_dir():
            paths.append(op)
    entries, errors = lint_paths(paths)
    if logs is not None:
        corpus = load_corpus(logs)
        errors += sweep(entries, corpus)
        errors += [LintError(str(p), None, f"a log file {logs} neither lists nor skips") for p in unlisted_logs(corpus)]
    if json_out:
        print_json({"entries": len(entries), "errors": [{"path": e.path, "field": e.field, "message": e.message}
                                                      for e in errors]})
    else:
        for e in errors:
            out(str(e))
        err_console.print(f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'} valid, {len(errors)} problem(s)",
                          markup=False, highlight=False)
    if errors:
        raise typer.Exit(1)


@runbook_app.command("search")
def search_cmd(
    query: list[str] = typer.Argument(..., help="Words to search for (title, tags, body, evidence, fix)."),
    limit: int = typer.Option(10, "--limit", "-n", min=1, help="At most this many results."),
    any_word: bool = typer.Option(False, "--any", help="Entries with any of the words (default: all of them)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Full-text search over runbook entries holding all the words, best match first.

    Each hit shows its relevance (1.00 = the best hit of this search) and the words around the match.

    Example: dynocell runbook search cuda graph capture
    """
    from dynocell.runbooks.knowledge import knowledge_for, search

    cell = get_cell()
    words = " ".join(query)
    hits = search(cell.store, knowledge_for(cell.settings), words, limit=limit, any_word=any_word)
    if json_out:
        print_json([h.to_dict() for h in hits])
        return
    if not hits:
        out("no entry has any of these words" if any_word
            else f"no entry has all of these words; `dynocell runbook search --any {printable(words)}` finds "
                 "entries with any of them")
        return
    for h in hits:
        say(f"{h.slug}  [{h.kind}]  {h.title}  (relevance {h.relevance:.2f})")
        say(h.snippet, indent=4)


@runbook_app.command("show")
def show_cmd(
    slug: str = typer.Argument(..., help="Entry slug (or a unique prefix)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Show one entry: front matter, evidence, what to try, body, and notes attached to it.

    Example: dynocell runbook show draft-parallel-config-copies-every-size
    """
    from dynocell.runbooks.knowledge import knowledge_for, list_notes

    cell = get_cell()
    e = knowledge_for(cell.settings).get(slug)
    notes = list_notes(cell, "entry", e.slug)
    if json_out:
        d = e.to_dict()
        d["notes"] = [n.to_dict() for n in notes]
        print_json(d)
        return
    from rich.markdown import Markdown

    say(f"{e.title}")
    say(f"slug: {e.slug}   kind: {e.kind}   origin: {e.origin}   tags: {', '.join(e.tags)}")
    if e.engines:
        say("engines: " + ", ".join(f"{k} {v}" for k, v in e.engines.items()))
    sig = {k: v for k, v in e.signatures.items() if v}
    if sig:
        say("signatures: " + "; ".join(f"{k}: {', '.join(map(str, v))}" for k, v in sig.items()))
    if e.applies_to:
        from dynocell.runbooks.knowledge import selector_text

        say(f"applies to: {selector_text(e.applies_to)}")
    out("\nevidence:")
    for x in e.evidence:
        say(f"- {x}", indent=2)
    out("what to try:")
    for x in e.fix:
        say(f"- {x}", indent=2)
    if e.sources:
        out("sources:")
        for i, x in enumerate(e.sources, 1):
            say(f"[{i}] {x}", indent=2)
    if e.examples:
        out("example lines:")
        for x in e.examples:
            out(f"  {x}")
    out("")
    out(Markdown(e.body))
    for n in notes:
        out(f"note {_ts(n.created_at)}: {n.text}")


@runbook_app.command("add")
def add_cmd(
    file: Path = typer.Argument(..., help="A markdown entry file to lint and copy into the operator directory."),
) -> None:
    """Lint an entry and copy it into the operator directory (same slug as a bundled entry = override).

    Example: dynocell runbook add my-trap.md
    """
    from dynocell.runbooks.knowledge import add_entry_file, knowledge_for, sync_index

    cell = get_cell()
    entry, dest, overrides = add_entry_file(cell.settings, file)
    sync_index(cell.store, knowledge_for(cell.settings))
    out(f"added {entry.slug} → {dest}" + (" (overrides the bundled entry)" if overrides else ""))


# ------------------------------------------------------------------ note

def note_cmd(
    target: str = typer.Argument(..., help="KIND:ID (config, boot, run, entry, experiment) or a bare id/name/slug."),
    text: Optional[str] = typer.Argument(None, help="The note; omit to list the target's notes."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Attach a timestamped note to a config, boot, run, runbook entry or experiment (or list its notes).

    Example: dynocell note run:3f2a "τ collapse reproduced with dcp 4"
    """
    from dynocell.runbooks.knowledge import knowledge_for, list_notes, resolve_note_target

    cell = get_cell()
    kind, ident = resolve_note_target(cell.store, knowledge_for(cell.settings), target)
    if text is None:
        notes = list_notes(cell, kind, ident)
        if json_out:
            print_json([n.to_dict() for n in notes])
            return
        for n in notes:
            out(f"{_ts(n.created_at)}  {n.text}")
        if not notes:
            out(f"no notes on {kind}:{ident}")
        return
    if not text.strip():
        from dynocell.errors import UserError

        raise UserError("empty note", "write the note text in quotes after the target")
    from dynocell.runbooks.knowledge import add_note

    n = add_note(cell, kind, ident, text.strip())
    if json_out:
        print_json(n.to_dict())
    else:
        out(f"noted on {kind}:{ident} at {_ts(n.created_at)}")


# ------------------------------------------------------------------ diagnose

def diagnose_cmd(
    ref: Optional[str] = typer.Argument(None, help="Run id or boot id (or a unique prefix); default: the newest run."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Run the acceptance doctor on a run (or each run of a boot; default: the newest) and store findings.

    Each finding has its evidence numbers and the runbook entries that explain it.

    On a store opened read-only (--store) the findings are printed and not stored.

    Example: dynocell diagnose 3f2a
    """
    from dynocell.runbooks import views
    from dynocell.runbooks.doctor import diagnose, render_findings

    cell = get_cell()
    if ref is None:
        ref = views.latest_run_id(cell)
    # A store opened read-only (--store, or a file this user cannot write) is diagnosed all the same;
    # the findings are printed, not stored, and the closing note says so.
    writable = not (cell.snapshot or cell.store.read_only)
    findings = diagnose(cell, ref, store_findings=writable)
    if not writable:
        cell.notes.append("findings not stored: the store is open read-only (they are printed only)")
    if json_out:
        print_json([f.to_dict() for f in findings])
        return
    from rich.text import Text

    out(Text(render_findings(findings, ref)))  # wrapped at spaces to the terminal, slugs kept whole


# ------------------------------------------------------------------ bisect

def _load(ref: str) -> Any:
    from dynocell.runbooks.configs import read_config_file

    if Path(ref).is_file():
        return read_config_file(ref)
    from dynocell.runbooks.configs import resolve_config

    return resolve_config(get_cell(), ref)[0]


@bisect_app.command("plan")
def bisect_plan_cmd(
    good: str = typer.Argument(..., help="The good config: TOML file, name or hash."),
    bad: str = typer.Argument(..., help="The bad config: TOML file, name or hash."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """List the knobs that differ and the intermediate configs that isolate the responsible one.

    Example: dynocell bisect plan examples/tiny.toml examples/tiny-ngram.toml
    """
    from dynocell.runbooks.bisect import plan

    p = plan(_load(good), _load(bad))
    if json_out:
        print_json(p.to_dict())
    else:
        say(p.render())


@bisect_app.command("run")
def bisect_run_cmd(
    good: str = typer.Argument(..., help="The good config: TOML file, name or hash."),
    bad: str = typer.Argument(..., help="The bad config: TOML file, name or hash."),
    tau_drop: float = typer.Option(0.1, "--tau-drop",
                                   help="A step is bad when its τ is this fraction below GOOD's (or lossless fails)."),
    workload: Optional[str] = typer.Option(None, "--workload", "-w",
                                           help="Workload TOML of every run (default: the bundled one)."),
    lossless: bool = typer.Option(True, "--lossless-check/--no-lossless-check",
                                  help="Compare greedy outputs with the plain twin in every run (slower: one more boot "
                                       "per run); without it only τ decides."),
    profile: bool = typer.Option(False, "--profile/--no-profile",
                                 help="Open a profiler window in every run (off: bisect needs τ, not traces)."),
    json_out: bool = typer.Option(False, "--json", help=JSON_OPTION_HELP),
) -> None:
    """Run the main job on GOOD, BAD and each bisect step; report which knob flips τ or lossless.

    Example: dynocell bisect run eager.toml graph.toml

    Per component of a speculative step (SGLang, patch spec-graph-switches):

    Example: dynocell bisect run gpu/configs/h200-eagle-bisect-good.toml gpu/configs/h200-eagle-bisect-bad.toml
    """
    from dynocell.runbooks.bisect import run_bisect
    from dynocell.runbooks.run import RunOptions

    def show(msg: str, _d: dict[str, Any]) -> None:
        err_console.print(printable(msg, keep_newlines=True), markup=False, highlight=False)

    opts = RunOptions(workload=workload, lossless=lossless, profile=profile)
    interrupt_on_term_and_hangup()
    res = run_bisect(get_cell(), good, bad, tau_drop=tau_drop, progress=show, options=opts)
    if json_out:
        print_json(res)
        return
    r = res["result"]
    for run in res["runs"]:
        out(f"{run['label']:<10} run {run['run_id']}  τ {run['tau']}  lossless {run['lossless']}")
    out("responsible: "
        + (", ".join(r["responsible"]) if r.get("responsible") else "not isolated (the knobs interact)"))


def _ts(dt: Any) -> str:
    """ISO-8601 text of a stored time ('' for None)."""
    return dt.isoformat(timespec="seconds") if dt else ""
