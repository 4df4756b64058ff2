"""The evaluation corpus (issue 22): real incidents from public threads, fed through dynocell's CLI.

Each folder under ``tests/data/cases/`` is one case: ``case.toml`` names the
source thread(s), the engine and version, the evidence files (verbatim
excerpts, or the thread's numbers in the form a user would hold them) and the
commands a user runs on them; the harness runs those commands through the real
Typer app against a fresh store (the case folder as the working directory, so
the arguments read as a user types them), then ``dynocell diagnose REF --json``
on the boot or run a step produced, and asserts:

- every id in ``expect.findings`` is found (a finding's rule id, or for a
  failed boot the failure signature id in the ``boot_failure`` finding);
- every slug in ``expect.entries`` is linked from a finding;
- no id in ``expect.unexpected`` is found;
- with ``expect.quiet = true`` (healthy evidence): no warn or error finding at all.

No case is skipped; an optional ``expect.waits_for`` names what a case still needs before it can
pass, and runs it as a strict xfail (it fails the suite the day it passes, so the mark comes off).
The table of cases is ``tests/data/cases/README.md``; ``test_readme_lists_every_case`` keeps it whole.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

CASES = Path(__file__).parent / "data" / "cases"
CASE_DIRS = sorted(p for p in CASES.iterdir() if p.is_dir())
_REF = re.compile(r"\{(?P<path>[\w-]+(?:\.[\w-]+)+)\}")  # {step.key[.key…]} of an earlier step's JSON


def _load(case_dir: Path) -> dict[str, Any]:
    return tomllib.loads((case_dir / "case.toml").read_text())


def _invoke(args: list[str]) -> Any:
    from dynocell.cli.app import build_app

    return CliRunner().invoke(build_app(), args, catch_exceptions=False)


def _lookup(done: dict[str, Any], path: str) -> str:
    value: Any = done
    for key in path.split("."):
        value = value[key]
    return str(value)


def _subst(arg: str, done: dict[str, dict[str, Any]]) -> str:
    return _REF.sub(lambda m: _lookup(done, m.group("path")), arg)


def _finding_ids(findings: list[dict[str, Any]]) -> set[str]:
    ids = {f["rule"] for f in findings}
    ids |= {str(f["evidence"]["signature"]) for f in findings if (f.get("evidence") or {}).get("signature")}
    return ids


def run_case(case_dir: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run a case's steps and its diagnose; returns (step outputs by name, findings)."""
    from dynocell.cli import common

    monkeypatch.setattr(common.state, "settings", None)
    monkeypatch.setattr(common.state, "cell", None)
    monkeypatch.chdir(case_dir)
    case = _load(case_dir)
    done: dict[str, dict[str, Any]] = {}
    for step in case["step"]:
        args = [_subst(a, done) for a in step["args"]]
        res = _invoke([*args, "--json"])
        assert res.exit_code == 0, f"{case_dir.name} step {step['name']}: dynocell {' '.join(args)}\n{res.output}"
        done[step["name"]] = json.loads(res.stdout)
    target = _subst(case["expect"]["diagnose"], done)
    res = _invoke(["diagnose", target, "--json"])
    assert res.exit_code == 0, f"{case_dir.name}: dynocell diagnose {target}\n{res.output}"
    return done, json.loads(res.stdout)


def test_the_corpus_has_at_least_25_public_cases():
    public = [p for p in CASE_DIRS if any(s.startswith("https://") for s in _load(p)["sources"])]
    assert len(public) >= 25


@pytest.mark.parametrize("case_dir", CASE_DIRS, ids=[p.name for p in CASE_DIRS])
def test_case_is_complete(case_dir: Path):
    """Every case names a public source, the engine and version, what happened, its evidence files
    (each present, logs with their source line) and what must and must not be found."""
    case = _load(case_dir)
    # a public thread, one of the project's own GPU artifacts, or the reference engine (the healthy runs)
    assert case["sources"] and all(s.startswith(("https://", "artifacts/", "reference engine"))
                                   for s in case["sources"])
    assert case["engine"] in ("sglang", "vllm", "llamacpp", "trtllm", "specforge", "reference")
    assert case["engine_version"] and case["summary"] and case["evidence_note"]
    assert case["step"] and case["expect"]["diagnose"]
    for name in case["evidence"]:
        p = case_dir / name
        assert p.is_file(), f"{case_dir.name}: evidence {name} missing"
        if p.suffix in (".log", ".txt") and p.parent == case_dir:  # excerpts; artifacts keep their README
            assert p.read_text().startswith("# source: https://"), \
                f"{case_dir.name}/{name}: first line names its source"
    exp = case["expect"]
    assert exp.get("findings") or exp.get("quiet"), "a case expects a finding, or silence"
    assert exp.get("unexpected"), "a case names what must not fire"
    assert not set(exp.get("findings", [])) & set(exp["unexpected"])


def _case_param(p: Path) -> Any:
    """A case as a parameter: strict xfail while its ``expect.waits_for`` names what it still needs."""
    waits = _load(p)["expect"].get("waits_for")
    marks = [pytest.mark.xfail(strict=True, reason=f"waits for: {waits}")] if waits else []
    return pytest.param(p, id=p.name, marks=marks)


@pytest.mark.parametrize("case_dir", [_case_param(p) for p in CASE_DIRS])
def test_case(case_dir: Path, monkeypatch: pytest.MonkeyPatch):
    exp = _load(case_dir)["expect"]
    _, findings = run_case(case_dir, monkeypatch)
    ids = _finding_ids(findings)
    entries = {s for f in findings for s in f.get("entries") or []}
    shown = "\n".join(f"[{f['severity']}] {f['rule']} {f['evidence']} → {f.get('entries')}" for f in findings)
    wait = f" (waits for: {exp['waits_for']})" if exp.get("waits_for") else ""
    missing = set(exp.get("findings", [])) - ids
    assert not missing, f"{case_dir.name}: expected {sorted(missing)} not found{wait}; findings:\n{shown or 'none'}"
    missing_entries = set(exp.get("entries", [])) - entries
    assert not missing_entries, \
        f"{case_dir.name}: entries {sorted(missing_entries)} not linked{wait}; findings:\n{shown}"
    wrong = set(exp["unexpected"]) & ids
    assert not wrong, f"{case_dir.name}: {sorted(wrong)} fired and must not; findings:\n{shown}"
    if exp.get("quiet"):
        loud = [f for f in findings if f["severity"] in ("warn", "error") and f["rule"] not in exp.get("findings", [])]
        assert not loud, f"{case_dir.name}: healthy evidence raised{wait}:\n{shown}"


def test_readme_lists_every_case():
    readme = (CASES / "README.md").read_text()
    for p in CASE_DIRS:
        assert f"`{p.name}`" in readme, f"README.md lacks {p.name}"
