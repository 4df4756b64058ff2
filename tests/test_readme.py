"""README.md promises exactly two set-up commands, and .ci/run runs the test one as written."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    section = text.split("## Set up on a fresh machine", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```sh\n(.*?)```", section, flags=re.S)]


def test_exactly_two_setup_commands():
    cmds = setup_commands()
    assert len(cmds) == 2, cmds
    assert all("\n" not in c for c in cmds), "each set-up command is one line"
    main, tests = cmds
    assert main.endswith("dynocell run") and "torch==2.13.0" in main
    assert "'.[test]'" in tests and "pytest" in tests and "torch==2.13.0" in tests


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    lines = {line.strip() for line in ci.splitlines() if not line.lstrip().startswith("#")}
    for part in setup_commands()[1].split(" && "):
        assert part in lines, f"{part!r} is not a line of .ci/run"
    assert "set -euo pipefail" in ci and '"$rc" -eq 5' in ci
