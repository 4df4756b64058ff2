"""Shared fixtures: every test gets a private data directory; the reference model pair is made once.

- ``isolated_home`` (autouse): ``DYNOCELL_HOME`` points at a fresh tmp dir, so no
  test can touch the real data directory; ``settings`` is built from it.
- ``model_pair`` (session): the made-locally reference pair; the default seed's
  ships with the package, other seeds are cached in ``<repo>/.cache/models``
  (git-ignored).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
MODEL_CACHE = REPO / ".cache" / "models"


def pytest_sessionstart(session):
    """Make (or find) the reference model pair before any test runs.

    Making it costs a few CPU minutes once per machine; doing it here keeps
    that out of every test's timeout, and every later process finds it cached.
    """
    # Every Settings built in this test process (session fixtures included, which run before
    # the per-test isolated_home) and every dynocell subprocess shares the one model cache.
    os.environ["DYNOCELL_MODEL_CACHE"] = str(MODEL_CACHE)
    if getattr(session.config.option, "collectonly", False):
        return
    from dynocell.engine.reference.models import ensure_pair

    # The default pair ships with the package (dynocell/engine/reference/pair/), so this finds it
    # without training; test_reference_training checks the training path on a shortened recipe.
    ensure_pair(MODEL_CACHE, progress=lambda msg: print(f"[dynocell tests] {msg}", flush=True))


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("dynocell-home")
    monkeypatch.setenv("DYNOCELL_HOME", str(home))
    monkeypatch.setenv("DYNOCELL_MODEL_CACHE", str(MODEL_CACHE))
    monkeypatch.delenv("DYNOCELL_DATABASE_URL", raising=False)
    return home


@pytest.fixture
def settings(isolated_home):
    from dynocell.settings import load_settings

    return load_settings()


@pytest.fixture(scope="session")
def model_pair():
    """(target_dir, draft_dir) of the default made-locally pair."""
    from dynocell.engine.reference.models import ensure_pair

    return ensure_pair(MODEL_CACHE)


@pytest.fixture
def cli_env(isolated_home):
    """Environment for running the real ``dynocell`` console script in a subprocess."""
    env = dict(os.environ)
    env["DYNOCELL_HOME"] = str(isolated_home)
    env["DYNOCELL_MODEL_CACHE"] = str(MODEL_CACHE)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="session")
def python_exe() -> str:
    return sys.executable
