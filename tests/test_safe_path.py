"""Issue 32 item 2: the working directory is not on any import path dynocell gives a child.

Engines started as ``python -m …`` with no ``cwd`` and no ``-P`` put the caller's working directory
first on ``sys.path``, so a ``psutil.py`` or ``uvicorn.py`` planted in a shared directory ran when the
operator ran ``dynocell boot`` there; the ``python -c`` probes (builds' locate, hostinfo's versions)
read a planted package as the engine's. Each test plants modules that write a marker file when
imported, runs the real thing from that directory, and checks that the marker never appears.

Real parts: the ``dynocell`` console script, the detached supervisor and the reference engine as
real processes; the probes as real interpreters.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.test_cli_config import run

REPO = Path(__file__).resolve().parents[1]


def _plant(folder: Path, marker: Path, names: tuple[str, ...]) -> None:
    """``NAME.py`` for each name: writes ``marker`` when imported, then fails the import."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / f"{name}.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\nraise ImportError('planted {name}')\n",
            encoding="utf-8")


def test_boot_from_a_planted_directory_imports_nothing_from_it(cli_env, tmp_path: Path):
    planted, marker = tmp_path / "shared", tmp_path / "PWNED"
    # psutil: the supervisor and the reference engine import it; uvicorn: the engine's server
    _plant(planted, marker, ("psutil", "uvicorn", "fastapi"))
    cfg = tmp_path / "tiny.toml"
    cfg.write_text((REPO / "examples" / "tiny.toml").read_text(encoding="utf-8"), encoding="utf-8")
    proc = run(cli_env, "boot", str(cfg), "--detach", "--json", ok=False, cwd=planted)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        boot = json.loads(proc.stdout)
        assert boot["state"] == "ready"
    finally:
        if proc.returncode == 0:
            run(cli_env, "stop", json.loads(proc.stdout)["id"], cwd=planted)
    assert not marker.exists(), marker.read_text()


def test_locate_probe_does_not_read_a_planted_package(tmp_path: Path, monkeypatch):
    from dynocell.engine.builds import locate_installed
    from dynocell.errors import UserError
    from dynocell.settings import child_base_env

    planted = tmp_path / "shared"
    (planted / "sglang").mkdir(parents=True)
    (planted / "sglang" / "__init__.py").write_text("", encoding="utf-8")
    (planted / "sglang-0.0.1.dist-info").mkdir()
    (planted / "sglang-0.0.1.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: sglang\nVersion: 0.0.1\n", encoding="utf-8")
    monkeypatch.chdir(planted)
    try:
        dist = locate_installed(sys.executable, "sglang", env=child_base_env())
    except UserError:
        return  # no sglang installed here: the planted one was not taken for it
    assert not Path(dist.location).resolve().is_relative_to(planted.resolve()), dist


def test_versions_probe_does_not_read_planted_metadata(tmp_path: Path, monkeypatch):
    from dynocell.engine.hostinfo import engine_versions
    from dynocell.settings import child_base_env

    planted = tmp_path / "shared"
    meta = planted / "sglang-9.9.9.dist-info"
    meta.mkdir(parents=True)
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9.9\n", encoding="utf-8")
    wrapper = tmp_path / "engine-python"  # another interpreter path, so the probe runs as a subprocess
    wrapper.write_text(f'#!/bin/sh\nexec {sys.executable} "$@"\n', encoding="utf-8")
    wrapper.chmod(0o755)
    monkeypatch.chdir(planted)
    for env in (None, child_base_env()):  # inherited or given: neither reads the working directory
        versions = engine_versions(str(wrapper)) if env is None else engine_versions(str(wrapper), env)
        assert versions.get("sglang") != "9.9.9", versions


@pytest.mark.parametrize("key", ["PYTHONSAFEPATH"])
def test_engine_env_has_the_safe_path_switch_over_any_config(key: str):
    from dynocell.engine.adapters import render
    from dynocell.engine.config import EngineConfig

    cfg = EngineConfig(engine="reference", model_path="/m", env={key: ""})
    assert render(cfg, python="python", port=1, base_env={}).env[key] == "1"
