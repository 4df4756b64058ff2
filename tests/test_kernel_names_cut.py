"""Kernel names cut in `trace split` and `show RUN` end with "…" (left-over defects, item 5).

C++ kernel names run to hundreds of characters (965 in the real H200 store below). Both tables cut
them at 90 characters; before, the cut was silent (``name[:90]``), so a reader could not tell a cut
name from a whole one. Run on a wide terminal (COLUMNS=300, so the table itself cuts nothing) with
the real console script: the real SGLang 0.5.17 H200 trace ``tests/data/sglang-0.5.17/A.…trace.json.gz``
and a copy of the real store ``tests/data/sglang-0.5.17/dynocell-h200/dynocell.db`` (see the READMEs).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data" / "sglang-0.5.17"
TRACE = DATA / "A.1796009075.4916983-TP-0.trace.json.gz"
STORE = DATA / "dynocell-h200" / "dynocell.db"


def _run(env, *args) -> str:
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    proc = subprocess.run([exe, *args], env={**env, "COLUMNS": "300", "NO_COLOR": "1"}, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _kernel_cells(text: str, names: list[str]) -> list[str]:
    """The kernel column's cell of each table row that begins with one of ``names``' first 40 characters."""
    cells = []
    for line in text.splitlines():
        cell = line.split("│")[0].strip()
        if "│" in line and any(cell[:40] == n[:40] for n in names):
            cells.append(cell)
    return cells


def _check(cells: list[str], names: list[str]) -> None:
    long_names = [n for n in names if len(n) > 90]
    assert long_names and len(cells) == len(names)
    for cell, name in zip(cells, names, strict=True):
        if len(name) > 90:
            assert cell == name[:89] + "…", cell
        else:
            assert cell == name


def test_trace_split_marks_cut_kernel_names(cli_env):
    res = json.loads(_run(cli_env, "trace", "split", str(TRACE), "--top", "10", "--json"))
    names = [k["name"] for k in res["top"][:10]]
    _check(_kernel_cells(_run(cli_env, "trace", "split", str(TRACE), "--top", "10"), names), names)


def test_show_marks_cut_kernel_names(tmp_path, cli_env):
    shutil.copy(STORE, tmp_path / "dynocell.db")
    env = {**cli_env, "DYNOCELL_HOME": str(tmp_path)}
    run = json.loads(_run(env, "show", "2d8a3ffa5459", "--json"))
    names = [k["name"] for k in run["profile"]["kernels"][:20]]
    _check(_kernel_cells(_run(env, "show", "2d8a3ffa5459"), names), names)


def test_shorten_is_printable_and_marks_the_cut():
    from dynocell.text import shorten

    assert shorten("abc", 3) == "abc" and shorten("abcd", 3) == "ab…"
    assert shorten("a\x1b[2Jb\x07" + "c" * 10, 5) == "ab?c…"
