"""First use trains nothing: the reference pair ships with the package (issue 20, item 1).

- ``ensure_pair`` serves the default recipe from the package, in place, for an empty data directory;
- a wheel built from the source carries the pair (non-editable installs find it too);
- a pair that must be made reports steps, loss and an ETA on every step once the progress
  interval has passed (``PROGRESS_EVERY_S``), and a second maker waiting on the lock says so.
"""

from __future__ import annotations

import fcntl
import shutil
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from dynocell.engine.reference import nets

REPO = Path(__file__).resolve().parents[1]


def test_default_pair_is_packaged_and_served_in_place(tmp_path):
    shipped = nets.packaged_pair(0)
    assert shipped is not None, "the default recipe's pair must ship in dynocell/engine/reference/pair/"
    assert shipped.target.parent.name == nets.recipe_id(0)
    assert shipped.target.is_relative_to(nets.PACKAGED_DIR)
    messages: list[str] = []
    cache = tmp_path / "fresh-home" / "models"
    pair = nets.ensure_pair(cache, progress=messages.append)
    assert pair == shipped
    assert not cache.exists(), "the packaged pair is read in place, nothing is copied or made"
    assert not any("making" in m for m in messages), messages


def test_other_seeds_are_not_served_from_the_package():
    assert nets.packaged_pair(12345) is None


@pytest.mark.slow
def test_wheel_carries_the_pair(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, src / name)
    shutil.copytree(REPO / "dynocell", src / "dynocell", ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                           "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    wheel = next((tmp_path / "dist").glob("dynocell-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    base = f"dynocell/engine/reference/pair/{nets.recipe_id(0)}"
    for sub in ("target", "draft"):
        for f in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                  "generation_config.json"):
            assert f"{base}/{sub}/{f}" in names, (sub, f)


def test_training_progress_has_steps_loss_and_eta(monkeypatch, tmp_path):
    monkeypatch.setitem(nets.TARGET, "steps", 3)
    monkeypatch.setitem(nets.DRAFT, "steps", 2)
    monkeypatch.setattr(nets, "CORPUS_MAX_BYTES", 200_000)
    monkeypatch.setattr(nets, "PROGRESS_EVERY_S", 0.0)  # every step is past the interval
    lines: list[str] = []
    nets.make_pair(tmp_path / "pair", seed=5, progress=lines.append)
    target_lines = [m for m in lines if m.startswith("target: step")]
    assert [m.split()[2] for m in target_lines] == ["1/3", "2/3", "3/3"], lines
    assert all(" loss " in m and "ETA" in m for m in target_lines), target_lines
    assert target_lines[-1].endswith("ETA 0 s)"), target_lines


def test_second_maker_says_it_is_waiting_for_the_lock(tmp_path):
    seed = 4242  # not packaged: the cache and its lock are used
    cache = tmp_path / "models"
    cache.mkdir()
    lock = open(cache / f".{nets.recipe_id(seed)}.lock", "a+")
    fcntl.flock(lock, fcntl.LOCK_EX)
    messages: list[str] = []
    waiting = threading.Event()

    def progress(msg: str) -> None:
        messages.append(msg)
        if msg.startswith("waiting"):
            waiting.set()

    result: list[object] = []
    t = threading.Thread(target=lambda: result.append(nets.ensure_pair(cache, seed=seed, progress=progress)))
    t.start()
    try:
        said_waiting = waiting.wait(60)
    finally:
        # The "other maker" finishes: its pair appears under the final name, then it lets go
        # (so the waiting thread finds it and never trains, whatever it printed).
        shutil.copytree(nets.PACKAGED_DIR / nets.recipe_id(0), cache / nets.recipe_id(seed))
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()
        t.join(120)
    assert said_waiting, messages
    assert result and result[0] == nets.ModelPair(cache / nets.recipe_id(seed) / "target",
                                                    cache / nets.recipe_id(seed) / "draft")
    assert not any(m.startswith("making") for m in messages), messages
