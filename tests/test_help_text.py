"""Every ``--help`` shows its text whole: a TOML table name such as ``[env]``,
``[[nodes]]`` or an extra such as ``dynocell[export]`` is not eaten as rich markup.

Typer renders help with rich markup, so an unescaped ``[env]`` in a docstring or an
option's help vanished from the output (``A config whose  sets LD_PRELOAD``). Walks
every command of the real app and renders its help in a subprocess-free CliRunner.
"""

from __future__ import annotations

import re

import typer
from typer.testing import CliRunner

from dynocell.cli.app import build_app

BRACKETED = re.compile(r"\[\[?[a-z_]+\]\]?")


def _commands(cmd, path: tuple[str, ...] = ()):
    yield path, cmd
    if hasattr(cmd, "commands"):  # a group (typer vendors its own click)
        for name, sub in cmd.commands.items():
            yield from _commands(sub, (*path, name))


def _raw_help(cmd) -> str:
    parts = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
    return "\n".join(parts).replace("\\[", "[")


def test_bracketed_words_in_help_are_shown_literally():
    the_app = build_app()
    root = typer.main.get_command(the_app)
    runner = CliRunner()
    checked = 0
    for path, cmd in _commands(root):
        words = set(BRACKETED.findall(_raw_help(cmd)))
        if not words:
            continue
        res = runner.invoke(the_app, [*path, "--help"], env={"COLUMNS": "250"}, terminal_width=250)
        assert res.exit_code == 0, (path, res.output)
        flat = " ".join(res.output.split())
        for w in words:
            assert w in flat, f"dynocell {' '.join(path)} --help lost {w!r}"
        checked += 1
    assert checked >= 3  # config trust, plan, export at least


def test_every_command_help_has_an_example():
    """README: "Every command has `--help` with an example"."""
    root = typer.main.get_command(build_app())
    missing = [" ".join(p) for p, c in _commands(root) if p and "Example" not in (c.help or "")]
    assert not missing, f"--help without an example: {missing}"


def test_every_command_summary_is_one_line_in_its_group_list():
    """The command lists (`dynocell --help`, `dynocell import --help`) show each command's first
    paragraph with its line breaks kept (rich markup mode): a summary written over two docstring lines
    read "phases, failure signature,⏎ acceptance lines" at 80 columns (newcomer pass)."""
    root = typer.main.get_command(build_app())
    broken = [" ".join(path) for path, cmd in _commands(root)
              if path and "\n" in (cmd.short_help or cmd.help or "").strip().split("\n\n")[0]]
    assert broken == []
