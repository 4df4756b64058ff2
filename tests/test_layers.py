"""The import arrows of docs/ARCHITECTURE.md, checked by import-linter (contracts in pyproject.toml)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_import_contracts_hold():
    exe = Path(sys.executable).parent / "lint-imports"
    assert exe.exists(), "import-linter is not installed in this environment (pip install -e '.[test]')"
    proc = subprocess.run([str(exe), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 broken" in proc.stdout, proc.stdout

