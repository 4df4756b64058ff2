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



def test_no_module_imports_another_modules_private_names():
    """A name one module of dynocell takes from another is public (no leading underscore) in the module that
    owns it: runbooks/run/* and runbooks/boots/* took ``_Job``, ``_Skip``, ``_bench``, ``_refuse_foreign`` …
    from each other, the reference engine's heads ``_rms``/``_rope``/``_MLP`` from eagle.py."""
    import ast

    private = []
    for path in sorted((REPO / "dynocell").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("dynocell"):
                private += [f"{path.relative_to(REPO)}:{node.lineno}: from {node.module} import {a.name}"
                            for a in node.names if a.name.startswith("_") and not a.name.startswith("__")]
    assert not private, "\n".join(private)
