"""What the replays of a stored H200 session share (tests/test_h200_eagle.py, tests/test_h200_same_pair.py,
tests/test_h200_greedy_text.py): the CLI run in this process (Typer's CliRunner) over a copy of the session's
real store as DYNOCELL_HOME, each test starting and ending without the CLI's per-process settings and store."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dynocell.cli.app import build_app

app = build_app()


@pytest.fixture(autouse=True)
def fresh_cli_state():
    """The CLI keeps its settings and store per process (``cli.common.state``); each test starts and ends
    without them, so the DYNOCELL_HOME it sets is the one used. Autouse where imported."""
    from dynocell.cli.common import state

    state.settings = state.cell = None
    yield
    state.settings = state.cell = None


def store_home(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``tmp_path`` holding a copy of ``data``/dynocell.db, set as DYNOCELL_HOME (the SQLite store, never a
    DYNOCELL_DATABASE_URL of the environment)."""
    shutil.copy(data / "dynocell.db", tmp_path / "dynocell.db")
    monkeypatch.setenv("DYNOCELL_HOME", str(tmp_path))
    monkeypatch.delenv("DYNOCELL_DATABASE_URL", raising=False)
    return tmp_path


def cli(*args: str) -> str:
    """``dynocell ARGS…`` in this process; its output. Fails the test on a non-zero exit."""
    res = CliRunner().invoke(app, list(args), catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.output


def taus(run_id: str) -> dict[str, float]:
    """τ per text class of a stored run (``dynocell show RUN --json``)."""
    return {c["text_class"]: c["tau"] for c in json.loads(cli("show", run_id, "--json"))["curves"]}
