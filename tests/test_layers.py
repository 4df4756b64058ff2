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


#: The db/ module that is the one way in for each kind of row (issue 23). The rest of db/ are composites that
#: read or write across kinds on purpose: listings (the faces' list/detail views, one transaction), exports,
#: imports (one transaction per import), refs (the one resolver), session (the store itself), tables.
OWNER = {
    "Config": "configs", "ConfigLabel": "configs", "ConfigTrust": "configs", "EngineBuild": "builds",
    "Boot": "boots", "BootEvent": "boots", "HealthCheck": "boots", "Run": "runs", "RunStep": "runs",
    "BenchRun": "runs", "AcceptanceCurve": "runs", "AcceptancePoint": "runs", "ProfileRun": "runs",
    "ProfileSplit": "runs", "ProfileKernel": "runs", "ProfilePhases": "runs", "Golden": "runs",
    "Experiment": "experiments", "ExperimentRun": "experiments", "Pin": "experiments",
    "RunbookEntry": "knowledge", "Note": "knowledge", "Finding": "knowledge", "Host": "hosts",
    "ImportRecord": "imports", "WebToken": "web",
}
COMPOSITES = {"listings", "exports", "imports", "refs", "session", "tables", "rows", "fulltext", "__init__"}


def test_each_kind_of_row_has_one_door_in_db():
    """No db/ module but a kind's own (or a named composite) reads or writes that kind's table: the doctor's
    second door to runs (``db/knowledge.py``'s curves_of_run, bench_of_run, completed_runs_with_configs in
    other dict shapes) and boots (``db/experiments.py``'s boots_of_config_between, as dicts) were such."""
    import ast

    from dynocell.db import tables

    every_table = {c.__name__ for c in tables.Base.__subclasses__()}
    assert set(OWNER) == every_table, "a new table needs its owning db/ module in OWNER"
    strays = []
    for path in sorted((REPO / "dynocell" / "db").glob("*.py")):
        mod = path.stem
        if mod in COMPOSITES:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name in OWNER and OWNER[name] != mod:
                strays.append(f"db/{path.name}:{node.lineno}: {name} (one way in: db/{OWNER[name]}.py)")
    assert not strays, "\n".join(strays)


def test_architecture_names_every_module():
    """docs/ARCHITECTURE.md's module tables match the tree (issue 23): every module of dynocell (Alembic's own
    ``migrations/`` aside) is named there, by file name or by path, so a reader knows where a change belongs."""
    import re

    named = set(re.findall(r"`([\w/.]+)`", (REPO / "docs" / "ARCHITECTURE.md").read_text(encoding="utf-8")))
    missing = []
    for path in sorted((REPO / "dynocell").rglob("*.py")):
        rel = path.relative_to(REPO / "dynocell")
        if path.name == "__init__.py" or rel.parts[:2] == ("db", "migrations"):
            continue
        if not ({path.name, path.stem, str(rel), f"dynocell/{rel}"} & named
                or any(n.endswith("/" + path.name) for n in named)):
            missing.append(str(rel))
    assert not missing, "modules docs/ARCHITECTURE.md does not name: " + ", ".join(missing)
