"""The GPU-host helpers beside gpu/h200_run.sh (issue 40 item 3), run as the recipe runs them: gpu/call_size.py
(the size check before a device call) over a real git checkout, gpu/headline.py over a real stored H200 run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MIB = 2**20


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def _size_check(cwd: Path, *carry: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "gpu" / "call_size.py"), *carry], cwd=cwd,
                          capture_output=True, text=True)


def test_call_size_counts_the_tree_and_the_carried_paths_only(tmp_path):
    """Tracked and untracked-not-ignored files count, ignored ones only when carried; over 64 MiB exits 1."""
    _git(tmp_path, "init", "-q")
    (tmp_path / ".gitignore").write_text(".gpu/\n")
    (tmp_path / "code.py").write_bytes(b"x" * MIB)              # tracked
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "t")
    (tmp_path / "notes.txt").write_bytes(b"y" * (2 * MIB))       # untracked, not ignored
    wheels = tmp_path / ".gpu" / "wheels"
    wheels.mkdir(parents=True)
    (wheels / "a.whl").write_bytes(b"z" * (4 * MIB))             # ignored: counts only when carried
    (tmp_path / ".gpu" / "other.whl").write_bytes(b"w" * (8 * MIB))

    res = _size_check(tmp_path, ".gpu/wheels")
    print(res.stdout)
    assert res.returncode == 0
    assert "tree    3.00 MiB" in res.stdout and ".gpu/wheels" in res.stdout and "total    7.00 MiB" in res.stdout

    with open(wheels / "big.whl", "wb") as fh:  # sparse: 61 MiB of apparent size, no disk
        fh.truncate(61 * MIB)
    res = _size_check(tmp_path, ".gpu/wheels")
    print(res.stdout)
    assert res.returncode == 1 and "total   68.00 MiB of 64 MiB: OVER THE LIMIT" in res.stdout


def test_headline_of_a_stored_h200_run(tmp_path):
    """The headline h200_run.sh prints after each config, from the 2026-12-01 EAGLE graph run's `show --json`
    and an nvidia-smi sample file (timestamp, utilization.gpu, memory.used, power.draw, clocks.sm)."""
    run_json = REPO / "tests" / "data" / "sglang-0.5.17-eagle" / "dynocell-h200" / "runs" / "h200-eagle-graph.run.json"
    csv = tmp_path / "g.csv"
    csv.write_text("2026/12/02 08:00:00.000, 40, 21000, 310.2, 1980\n2026/12/02 08:00:00.500, 0, 21000, 120.0, 345\n"
                   "2026/12/02 08:00:01.000, [N/A], 21000, 119.0, 345\n")
    res = subprocess.run([sys.executable, str(REPO / "gpu" / "headline.py"), "h200-eagle-graph", str(csv)],
                         stdin=run_json.open("rb"), capture_output=True, check=True)
    out = res.stdout.decode()
    print(out)
    assert "run 08abc20c19a1 completed" in out and "boot 79.4 s" in out
    assert "tok/s c=1 417, c=4 820; TTFT p50 13.4 ms, TPOT p50 2.11 ms (c=1)" in out
    assert "τ mean 1.578 over 5 classes (min 1.53, max 1.64); p1..p3 0.41/0.13/0.04" in out
    assert "lossless near-tie; break-even does NOT pay (margin -35.5 %)" in out
    assert "util mean 20 % (mean 40 % while > 0), max 40 %; memory max 21000 MiB; power max 310 W; n 2" in out
