"""mypy is clean on dynocell/ with pyproject.toml's [tool.mypy], as `.ci/run`'s types stage runs it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_mypy_is_clean_on_the_package(tmp_path: Path) -> None:
    # its own cache: two workers (or a developer's own mypy run) never share one
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
         "--cache-dir", str(tmp_path / "mypy-cache")],
        cwd=REPO, capture_output=True, text=True, timeout=880,
    )
    assert proc.returncode == 0, f"mypy found problems (exit {proc.returncode}):\n{proc.stdout[-6000:]}{proc.stderr}"
