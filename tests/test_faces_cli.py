"""What a new user hit in the CLI's faces (issue 39): help that reads, a newest-run default, config
output without Python literals, a second label saying whose notes are kept, runbook search that means
"all these words", and Error: lines wrapped at the terminal's width, a `command` never split.

Each test runs the real ``dynocell`` console script in a subprocess on a private data directory.
"""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

DATA = Path(__file__).parent / "data"
REAL_RUN = DATA / "stores" / "real-run"
EXAMPLES = Path(__file__).parent.parent / "examples"


def dynocell(env: dict, *args: str, columns: int | None = None) -> subprocess.CompletedProcess:
    e = dict(env)
    if columns is not None:
        e["COLUMNS"] = str(columns)
    exe = Path(sys.executable).with_name("dynocell")
    return subprocess.run([str(exe), *args], env=e, capture_output=True, text=True, timeout=120)


def test_help_shows_no_python_types_on_flags_and_names_arguments(cli_env):
    for args in (("--help",), ("show", "--help"), ("config", "show", "--help"), ("runbook", "search", "--help")):
        r = dynocell(cli_env, *args, columns=100)
        assert r.returncode == 0, r.stderr
        assert "<bool>" not in r.stdout, args
        assert not re.search(r"\{\w+\}", r.stdout.split("\n\n")[0] + r.stdout), args
    usage = dynocell(cli_env, "show", "--help", columns=100).stdout
    assert "[REF]" in usage or "REF" in usage


def test_show_and_diagnose_without_an_argument_take_the_newest_run(cli_env, isolated_home):
    empty = dynocell(cli_env, "show")
    assert empty.returncode == 2 and "no run is recorded" in empty.stderr and "dynocell run" in empty.stderr
    shutil.copytree(REAL_RUN, isolated_home, dirs_exist_ok=True)
    newest = json.loads(dynocell(cli_env, "runs", "--json").stdout)[0]["id"]
    by_default = dynocell(cli_env, "show", "--json")
    assert by_default.returncode == 0, by_default.stderr
    assert json.loads(by_default.stdout)["run"]["id"] == newest
    assert json.loads(by_default.stdout) == json.loads(dynocell(cli_env, "show", newest, "--json").stdout)
    diag = dynocell(cli_env, "diagnose", "--json")
    assert diag.returncode == 0, diag.stderr
    assert json.loads(diag.stdout) == json.loads(dynocell(cli_env, "diagnose", newest, "--json").stdout)


def test_config_show_prints_no_empty_python_literals(cli_env):
    assert dynocell(cli_env, "config", "add", str(EXAMPLES / "tiny.toml")).returncode == 0
    shown = dynocell(cli_env, "config", "show", "tiny", columns=120).stdout
    rows = {line.split()[0]: line.split()[-1] for line in shown.splitlines()
            if line.strip().startswith(("env", "extra_args", "nodes", "patches"))}
    assert rows and all(v == "-" for v in rows.values()), rows


def test_a_second_file_with_the_same_settings_says_whose_notes_are_kept(cli_env, tmp_path):
    src = (EXAMPLES / "tiny.toml").read_text()
    other = tmp_path / "tiny-copy.toml"
    other.write_text("# a colleague's copy\n" + re.sub(r'notes = ".*"', 'notes = "my own notes"', src))
    assert dynocell(cli_env, "config", "add", str(EXAMPLES / "tiny.toml")).returncode == 0
    r = dynocell(cli_env, "config", "add", str(other), "--name", "mine")
    assert r.returncode == 0, r.stderr
    assert "already stored" in r.stdout
    assert "its source and notes are kept" in r.stderr
    same = dynocell(cli_env, "config", "add", str(EXAMPLES / "tiny.toml"), "--name", "again")
    assert "source and notes are kept" not in same.stderr  # the same text: nothing to say


def test_runbook_search_wants_every_word_and_says_how_to_widen(cli_env):
    none = dynocell(cli_env, "runbook", "search", "zzzz", "nothing", "--json")
    assert none.returncode == 0 and json.loads(none.stdout) == []
    said = dynocell(cli_env, "runbook", "search", "zzzz", "nothing", columns=200)
    assert "no entry has all of these words" in said.stdout and "--any" in said.stdout
    wide = json.loads(dynocell(cli_env, "runbook", "search", "zzzz", "acceptance", "--any", "--json").stdout)
    assert wide, "any-word search finds the entries with 'acceptance'"


def test_runbook_search_relevance_reads(cli_env):
    hits = json.loads(dynocell(cli_env, "runbook", "search", "acceptance", "collapse", "--json").stdout)
    assert hits and hits[0]["relevance"] == 1.0
    assert all(0 < h["relevance"] <= 1.0 for h in hits) and "score" not in hits[0]
    assert [h["relevance"] for h in hits] == sorted((h["relevance"] for h in hits), reverse=True)
    assert all("[" in h["snippet"] for h in hits)
    shown = dynocell(cli_env, "runbook", "search", "acceptance", "collapse", columns=200).stdout
    assert "(relevance 1.00)" in shown


def test_snippets_are_cut_at_words_never_inside_a_number():
    from dynocell.db.fulltext import snippet

    body = ("# Acceptance\n\n" + "filler words about nothing " * 12 + "accept rate 0.731 at position 3, then "
            "collapse to 0.012 past 4,096 tokens of context; " + "more words after the match " * 12)
    cut = snippet(body, ["collapse"], width=80)
    inner = cut.strip("…").replace("[", "").replace("]", "")
    flat = " ".join(body.replace("#", " ").split())
    assert cut.startswith("…") and cut.endswith("…") and "[collapse]" in cut
    assert flat.find(inner) >= 0 and flat[flat.find(inner) - 1] == " "  # starts at a word
    end = flat.find(inner) + len(inner)
    assert flat[end] == " "  # and ends at one: 0.731, 0.012 and 4,096 whole
    assert snippet("collapsing acceptance", ["collapse"]) == "[collapsing] acceptance"  # a stemmed form


def test_error_lines_wrap_at_the_terminal_width_never_inside_a_command(cli_env, tmp_path):
    missing = tmp_path / ("a-long-directory-name-" * 3) / "config.toml"
    wide = dynocell(cli_env, "config", "add", str(missing), columns=250)
    assert wide.returncode == 2
    error = [ln for ln in wide.stderr.splitlines() if ln.startswith("Error:")]
    assert error and str(missing) in error[0]  # one line at 250 columns, path whole
    narrow = dynocell(cli_env, "config", "add", str(missing), columns=60)
    lines = [ln for ln in narrow.stderr.splitlines() if ln.strip()]
    # wrapped (continuation lines indented); the long path whole on its line
    assert len(lines) > 1 and any(ln.strip().startswith(str(missing)) for ln in lines)


@pytest.mark.parametrize("width", [30, 60, 100])
def test_wrap_keeping_commands_keeps_backticked_spans_whole(width):
    from dynocell.text import wrap_keeping_commands

    text = ("Error: the store is at an older schema; run `dynocell init --store /a/very/long/path/to/the/store.db` "
            "to upgrade it, then `dynocell runs` again")
    wrapped = wrap_keeping_commands(text, width)
    assert any("`dynocell init --store /a/very/long/path/to/the/store.db`" in ln for ln in wrapped.splitlines())
    assert any("`dynocell runs`" in ln for ln in wrapped.splitlines())
    assert " ".join(wrapped.split()) == " ".join(text.split())
    for ln in wrapped.splitlines():
        assert len(ln) <= max(width, 20) or "`" in ln


def test_the_readmes_query_ranks_a_general_entry_above_a_one_model_fix(cli_env):
    """README's tour searches "acceptance collapse"; a GLM-5-only fix ranked first (issue 39)."""
    from dynocell.runbooks.knowledge import bundled_knowledge
    from dynocell.runbooks.knowledge.search import _model_words

    hits = json.loads(dynocell(cli_env, "runbook", "search", "acceptance", "collapse", "--json").stdout)
    top = bundled_knowledge().entries[hits[0]["slug"]]
    assert not _model_words(top.applies_to), hits[0]["slug"]
    glm = json.loads(dynocell(cli_env, "runbook", "search", "acceptance", "glm", "--json").stdout)
    assert glm[0]["slug"] == "index-share-topk-seed-last-verified"  # named, the model's entry comes first


def test_listings_drop_empty_columns_and_ps_names_the_config(cli_env, isolated_home):
    shutil.copytree(REAL_RUN, isolated_home, dirs_exist_ok=True)
    runs = dynocell(cli_env, "runs", columns=120).stdout
    assert "error" not in runs.splitlines()[0]  # every run completed: no empty error column
    ps = dynocell(cli_env, "ps", "--all", columns=200).stdout
    header = ps.splitlines()[0]
    assert "config" in header
    boots = json.loads(dynocell(cli_env, "ps", "--all", "--json").stdout)
    assert any(b["config_hash"].removeprefix("sha256:")[:12] in ps or any(lab in ps for lab in b["labels"])
               for b in boots)


def test_show_boot_lays_out_its_command_line_to_paste(cli_env, isolated_home):
    shutil.copytree(REAL_RUN, isolated_home, dirs_exist_ok=True)
    boots = json.loads(dynocell(cli_env, "ps", "--all", "--json").stdout)
    boot = next(b for b in boots if b["state"] == "stopped")
    shown = dynocell(cli_env, "show", boot["id"], columns=80).stdout
    lines = shown.splitlines()
    assert all(len(ln) <= 80 for ln in lines[: lines.index(next(ln for ln in lines if ln.startswith("argv:"))) + 12])
    start = next(i for i, ln in enumerate(lines) if ln.startswith("argv:"))
    block = []
    for ln in lines[start:]:
        block.append(ln)
        if not ln.endswith(" \\"):
            break
    import shlex

    pasted = " ".join(ln.removesuffix(" \\").strip() for ln in block).removeprefix("argv: ")
    stored = json.loads(dynocell(cli_env, "show", boot["id"], "--json").stdout)["boot"]["argv"]
    assert shlex.split(pasted) == shlex.split(stored)


def test_profile_split_names_idle_categories_on_one_line(cli_env, isolated_home):
    shutil.copytree(REAL_RUN, isolated_home, dirs_exist_ok=True)
    run = next(r for r in json.loads(dynocell(cli_env, "runs", "--json").stdout) if r["lossless"] == "yes")
    shown = dynocell(cli_env, "show", run["id"], columns=100).stdout
    assert "no time in:" in shown
    assert not [ln for ln in shown.splitlines() if re.match(r"\s+\w+\s+0\.0 %.*\b0 launches", ln)]


_EVERY_HELP = r"""
import contextlib, io, json, sys
import typer
from dynocell.cli.app import build_app, run

def walk(cmd, path=()):
    yield path
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from walk(sub, (*path, name))

out = {}
for path in walk(typer.main.get_command(build_app())):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        run([*path, "--help"])
    out[" ".join(path)] = buf.getvalue()
print(json.dumps(out))
"""


def test_no_help_shows_a_python_type_or_a_braced_usage_placeholder(cli_env):
    """``dynocell compare --help`` read ``Usage: dynocell compare [OPTIONS] {RUNS...}...`` and ``RUNS...
    <list[str]>``; ``run --help`` had ``--timeout <float>``, ``--requests <int range>`` (issue 39)."""
    e = dict(cli_env, COLUMNS="200")
    r = subprocess.run([sys.executable, "-c", _EVERY_HELP], env=e, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    helps = json.loads(r.stdout)
    assert len(helps) > 40
    for path, text in helps.items():
        assert not re.search(r"<(str|int|float|bool|path|file|list\[[^]]*\]|int range|float range)>", text), path
        usage = next(ln for ln in text.splitlines() if "Usage:" in ln)
        assert "{" not in usage and "..." + "..." not in usage.replace("[OPTIONS]", ""), (path, usage)
    compare = dynocell(cli_env, "compare", "--help", columns=100).stdout
    assert "Usage: dynocell compare [OPTIONS] RUNS..." in compare and "RUNS......" not in compare
    assert "Usage: dynocell show [OPTIONS] [REF]" in helps["show"]
    assert "Usage: dynocell config show [OPTIONS] NAME|HASH" in helps["config show"]
    assert "Usage: dynocell runbook lint [OPTIONS] [PATHS...]" in helps["runbook lint"]
    run_help = " ".join(helps["run"].split())
    assert "--timeout FLOAT" in run_help and "--requests INTEGER [x>=1]" in run_help
    missing = dynocell(cli_env, "compare")
    assert missing.returncode == 2 and "'RUNS...'" in missing.stderr


def _data_rows(table_text: str) -> list[str]:
    return [ln for ln in table_text.splitlines() if "│" in ln]


def test_runs_at_120_columns_keep_each_run_on_one_line(cli_env, tmp_path):
    """``runs`` at 120 columns wrapped the host ``vm (4afff20f)`` onto two lines on the shipped vLLM store,
    and split the listing in two on the EAGLE one (issue 39): a host by its name, the id only where two
    machines share the name; no kind column when every run is a plain run."""
    vllm = DATA / "vllm-0.26.0" / "dynocell-h200" / "dynocell.db"
    shown = dynocell(cli_env, "--store", str(vllm), "runs", columns=120)
    assert shown.returncode == 0, shown.stderr
    rows = json.loads(dynocell(cli_env, "--store", str(vllm), "runs", "--json").stdout)
    header = shown.stdout.splitlines()[0]
    assert all(h in header for h in ("run", "host", "state", "config", "τ", "lossless", "took"))
    assert "kind" not in header and {r["kind"] for r in rows} == {"run"}
    lines = [ln for ln in _data_rows(shown.stdout) if not ln.lstrip().startswith("┃")]
    firsts = [ln.split("│")[0].strip() for ln in lines]
    assert firsts[: len(rows)] == [r["id"] for r in rows]  # one line per run, no continuation line
    assert all(ln.split("│")[1].strip() == "vm" for ln in lines[: len(rows)])
    assert {r["host_label"] for r in rows} == {"vm (4afff20f)"}  # --json keeps the stored label
    eagle = DATA / "sglang-0.5.17-eagle" / "dynocell-h200" / "dynocell.db"
    two = dynocell(cli_env, "--store", str(eagle), "runs", columns=120).stdout
    assert two.count("┃ host") == 1  # one table
    hosts = {ln.split("│")[1].strip() for ln in _data_rows(two)}
    assert hosts == {"vm (3d12)", "vm (05d8)"}, hosts
    mixed = tmp_path / "mixed.db"
    shutil.copy(vllm, mixed)
    with sqlite3.connect(mixed) as db:
        db.execute("UPDATE runs SET kind = 'bench' WHERE id = ?", (rows[0]["id"],))
    with_kind = dynocell(cli_env, "--store", str(mixed), "runs", columns=120).stdout
    assert "┃ kind" in with_kind and "bench" in with_kind


@pytest.mark.parametrize("args, says", [
    (("compare",), "Error: Missing argument 'RUNS...'."),
    (("runs", "--bogus"), "Error: No such option: --bogus"),
    (("run", "--timeout", "soon"), "Error: Invalid value for '--timeout'"),
])
def test_usage_errors_print_the_error_and_hint_lines_of_every_other_error(cli_env, args, says):
    """Typer printed a usage error as a boxed panel (``╭─ Error ─…``) under its usage line (issue 39): now the
    one-line ``Error:`` then a ``hint:`` with the usage and ``-h``, as every other error; exit code 2."""
    r = dynocell(cli_env, *args, columns=200)
    assert r.returncode == 2
    lines = r.stderr.splitlines()
    assert lines[0].startswith(says), r.stderr
    assert lines[1].startswith(f"hint: usage: dynocell {args[0]} [OPTIONS]") and f"`dynocell {args[0]} -h`" in lines[1]
    assert len(lines) == 2 and "╭" not in r.stderr and "│" not in r.stderr
    narrow = dynocell(cli_env, *args, columns=40)
    assert all(len(ln) <= 40 or "`" in ln for ln in narrow.stderr.splitlines()), narrow.stderr


def test_experiment_run_prints_each_runs_steps(cli_env, tmp_path, model_pair):
    """``experiment run`` printed only "[1/2] incumbent …" and then nothing for the minute a run takes (issue 39):
    each run's finished steps now follow as ``dynocell run`` prints them, its last line once. The two configs'
    port is held by this test, so each run ends at its boot (port_in_use) within seconds."""
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        for name, src in (("pa", "tiny-plain.toml"), ("pb", "tiny.toml")):
            text = re.sub(r"(?m)^port = 0.*$", f"port = {port}", (EXAMPLES / src).read_text())
            (tmp_path / f"{name}.toml").write_text(text)
            assert dynocell(cli_env, "config", "add", str(tmp_path / f"{name}.toml"), "--name", name).returncode == 0
        made = dynocell(cli_env, "experiment", "create", "fast", "--incumbent", "pa", "--arm", "pb", "--repeats", "1",
                        "--no-lossless-check", "--no-profile")
        assert made.returncode == 0, made.stderr
        ran = dynocell(cli_env, "experiment", "run", "fast", columns=400)
    lines = [ln.strip() for ln in ran.stderr.splitlines() if ln.strip()]
    assert "[1/2] incumbent pa (repeat 1)" in lines and "[2/2] arm pb (repeat 1)" in lines, ran.stderr
    assert lines.count("config completed") == 2 and lines.count("model completed") == 2, ran.stderr
    assert sum(ln.startswith("boot failed:") and "port_in_use" in ln for ln in lines) == 2, ran.stderr
    assert all(a != b for a, b in zip(lines, lines[1:])), ran.stderr  # no line said twice in a row
