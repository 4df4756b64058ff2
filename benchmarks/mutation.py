"""Mutation score of the modules whose numbers dynocell prints (issue 26), with mutmut.

A green suite has to mean the printed numbers are right. For each module below,
mutmut (3.x) plants one small change at a time (an operator, a constant, a
comparison, a dropped argument …) and runs only that module's fast test files
(the test map); a mutant the tests still pass on *survived*. The script prints
killed / survived per module and lists the survivors; survivors named in
:data:`EQUIVALENT` are shown with the reason they cannot change behaviour.

The equivalence table lives in ``benchmarks/mutation_equivalent.toml``: groups of one module (a
target name below), one reason, and the mutants it explains, each keyed by what it changes —
``"<function>: <old source> ⇒ <mutated source>"`` (:func:`mutant_key`) — not by mutmut's number,
which shifts whenever the function gains or loses a mutable spot, nor by a line number. A key stays
valid while that statement and its function's name stay; entries that match no survivor any more
are listed after the survivors, to re-check.

Why mutmut: it runs each mutant in a forked worker of one pytest process
(trampolines select the mutant at call time), so a module's few hundred
mutants take minutes instead of one interpreter start-up each (cosmic-ray's
model). Each module runs in its own scratch copy of the tree (mutmut mutates
into ``mutants/`` of its working directory and reads its configuration from
``pyproject.toml`` there), so the checkout is never touched and modules can use
different test files.

Usage::

    pip install -e '.[bench]'          # mutmut
    python benchmarks/mutation.py                 # every module (tens of minutes on 2 cores)
    python benchmarks/mutation.py verdicts rules  # some modules
    python benchmarks/mutation.py --json out.json --keep
    nice -n 10 python benchmarks/mutation.py --workdir /tmp/mut   # resumable: run again to finish or re-check

With ``--workdir`` the scratch copies are kept there: a run that was stopped resumes where it
stopped (mutmut keeps each mutant's result), and a later run re-runs only the mutants not judged
yet plus the survivors not in :data:`EQUIVALENT` (against the tests as they are now); modules
restricted to some functions (``only`` globs below) name just those mutants to mutmut. One mutmut
worker by default (``--workers``): the machine is shared.

Exit code 0 when every module reaches :data:`GOAL` of non-equivalent mutants
killed, 1 otherwise. Not part of CI's critical path.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL = 0.90
COPY = ("dynocell", "tests", "examples", "pyproject.toml")
EQUIVALENT_FILE = Path(__file__).with_name("mutation_equivalent.toml")


@dataclass(frozen=True)
class Target:
    """One module under mutation: the file mutmut mutates, the mutant-name globs counted, the tests run."""

    name: str
    path: str
    tests: tuple[str, ...]
    only: tuple[str, ...] = ()  # mutant-name globs (empty = every mutant of the file)


# The test map: each module's mutants run only these (fast) test files. One table, to update when code
# moves (the target name, not the path, keys the equivalence table). Break-even is two modules: the
# store-free maths (engine/breakeven.py, whole) and the main job's step that finds the plain step time
# and records the verdict (runbooks/run/breakeven_step.py, its run_breakeven). The doctor's no_net_win
# stays in runbooks/doctor.py after the doctor's split into doctor_*.py. The trace split is
# engine/trace.py (its _Split/_Union accumulator and the ijson reader; trace_chunks.py is the fast
# reader, checked against the ijson one bit for bit by tests/test_trace_reader.py).
# tests/test_trace_torch.py stays out of the trace map: profiling in a forked mutmut worker hangs.
TARGETS: tuple[Target, ...] = (
    Target("acceptance", "dynocell/engine/acceptance.py", ("tests/test_acceptance.py",)),
    Target("verdicts", "dynocell/engine/verdicts.py", ("tests/test_verdicts.py",)),
    Target("breakeven", "dynocell/engine/breakeven.py",
           ("tests/test_breakeven_maths.py", "tests/test_breakeven_band.py", "tests/test_breakeven.py")),
    Target("breakeven_step", "dynocell/runbooks/run/breakeven_step.py",
           ("tests/test_breakeven.py", "tests/test_breakeven_workload.py"),
           ("dynocell.runbooks.run.breakeven_step.x_run_breakeven__mutmut_*",)),
    Target("no_net_win", "dynocell/runbooks/doctor.py", ("tests/test_breakeven.py", "tests/test_doctor.py"),
           ("dynocell.runbooks.doctor.x_rule_no_net_win__mutmut_*",)),
    Target("health", "dynocell/engine/health.py", ("tests/test_health_oracle.py",)),
    Target("trace", "dynocell/engine/trace.py", ("tests/test_trace.py",)),
    Target("rules", "dynocell/engine/rules/__init__.py", ("tests/test_rules.py",)),
    Target("config_hash", "dynocell/engine/config.py", ("tests/test_config.py", "tests/test_config_hash.py"),
           ("dynocell.engine.config.xǁEngineConfigǁcanonical*", "dynocell.engine.config.xǁEngineConfigǁconfig_hash*")),
    Target("web_auth", "dynocell/web/auth.py", ("tests/test_web_auth.py",)),
)

@dataclass
class Score:
    """One module's result: mutant name → mutmut status, the survivors' changes and equivalence, the wall time."""

    target: Target
    status: dict[str, str] = field(default_factory=dict)
    changes: dict[str, str] = field(default_factory=dict)  # survivor → "old ⇒ new" (whitespace collapsed)
    equivalent: dict[str, str] = field(default_factory=dict)  # survivor → the reason it is equivalent
    seconds: float = 0.0
    error: str | None = None

    def count(self, *states: str) -> int:
        return sum(1 for s in self.status.values() if s in states)

    @property
    def survivors(self) -> list[str]:
        return sorted(n for n, s in self.status.items() if s in ("survived", "no tests"))

    @property
    def unexplained(self) -> list[str]:
        return [n for n in self.survivors if n not in self.equivalent]

    @property
    def score(self) -> float | None:
        """(killed + timeout) / (judged mutants − equivalent survivors); None when nothing is left to judge."""
        judged = [n for n, s in self.status.items() if s not in ("skipped", "not checked")]
        real = [n for n in judged if n not in self.equivalent]
        if not real:
            return None
        return sum(1 for n in real if self.status[n] in ("killed", "timeout", "segfault")) / len(real)


def _workspace(root: Path, t: Target) -> Path:
    """The module's scratch copy under ``root``: made, or refreshed with the checkout's sources and
    tests while its ``mutants/`` (mutmut's results) is kept, so an interrupted run resumes."""
    ws = root / t.name
    ws.mkdir(parents=True, exist_ok=True)
    for item in COPY:
        src = REPO / item
        if src.is_dir():
            shutil.copytree(src, ws / item, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.db-wal", "*.db-shm"))
        else:
            shutil.copy2(src, ws / item)
    with open(ws / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write("\n[tool.mutmut]\n"
                'source_paths = ["dynocell"]\n'
                f"only_mutate = {json.dumps([t.path])}\n"
                f"pytest_add_cli_args_test_selection = {json.dumps(list(t.tests))}\n"
                'pytest_add_cli_args = ["-p", "no:randomly", "-p", "no:cacheprovider", "-q"]\n'
                'also_copy = ["examples"]\n')
    return ws


_RESULT = re.compile(r"^\s*(\S+__mutmut_\d+): (.+?)\s*$")


def _results(ws: Path, t: Target, mutmut: str, env: dict[str, str]) -> dict[str, str]:
    """Every counted mutant's status as ``mutmut results`` gives it (mutant name → status)."""
    res = subprocess.run([mutmut, "results", "--all", "true"], cwd=ws, env=env, capture_output=True, text=True)
    out = {}
    for line in res.stdout.splitlines():
        m = _RESULT.match(line)
        if m and (not t.only or any(fnmatch.fnmatchcase(m.group(1), g) for g in t.only)):
            out[m.group(1)] = m.group(2)
    return out


_DIFFS = """
import json, sys
from mutmut.mutation.diff_apply import get_diff_for_mutant
path, names = sys.argv[1], json.loads(sys.stdin.read())
print(json.dumps({n: get_diff_for_mutant(n, path=path) for n in names}))
"""


def _changed_lines(ws: Path, t: Target, names: list[str], env: dict[str, str]) -> dict[str, str]:
    """Each mutant's change in one line (``old ⇒ new``, from mutmut's diff), for the survivor listing."""
    if not names:
        return {}
    run = subprocess.run([sys.executable, "-c", _DIFFS, t.path], cwd=ws, env=env, input=json.dumps(names),
                         capture_output=True, text=True)
    try:
        diffs = json.loads(run.stdout)
    except ValueError:
        return {}
    out = {}
    for n, diff in diffs.items():
        lines = diff.splitlines()
        minus = [ln[1:].strip() for ln in lines if ln.startswith("-") and not ln.startswith("---")]
        plus = [ln[1:].strip() for ln in lines if ln.startswith("+") and not ln.startswith("+++")]
        out[n] = " ".join(f"{' '.join(minus)} ⇒ {' '.join(plus)}".split())
    return out


def function_of(name: str, path: str) -> str:
    """The function a mutmut mutant name is in: ``dynocell.engine.trace.xǁ_Splitǁfeed__mutmut_32`` of
    ``dynocell/engine/trace.py`` → ``_Split.feed``; ``…verdicts.x__betacf__mutmut_19`` → ``_betacf``."""
    module = path.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
    f = name.rsplit("__mutmut_", 1)[0].removeprefix(module + ".")
    if f.startswith("xǁ"):
        return f[2:].replace("ǁ", ".")
    return f.removeprefix("x_")


def mutant_key(name: str, path: str, change: str) -> str:
    """The key of a mutant in the equivalence table: ``"<function>: <old> ⇒ <new>"`` (the changed source
    lines of mutmut's diff, whitespace collapsed). It names the mutant by what it changes, so it stays valid
    when other code in the module or in the function moves or changes, unlike mutmut's per-function
    counter; two identical mutations of identical lines in one function share a key (and a reason)."""
    return f"{function_of(name, path)}: {change}"


def load_equivalent(path: Path = EQUIVALENT_FILE) -> dict[tuple[str, str], str]:
    """The equivalence table: ``(module, mutant key) → reason``, from ``[[equivalent]]`` groups of
    ``mutation_equivalent.toml`` (``module``: a target name, ``reason``: one line, ``mutants``: keys as
    :func:`mutant_key` writes them). Raises ValueError naming the group that lacks a field or repeats a key."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    out: dict[tuple[str, str], str] = {}
    for i, g in enumerate(data.get("equivalent", []), start=1):
        if not (isinstance(g.get("module"), str) and isinstance(g.get("reason"), str)
                and isinstance(g.get("mutants"), list)):
            raise ValueError(f"{path.name}: [[equivalent]] group {i} needs module, reason and mutants")
        for k in g["mutants"]:
            key = (g["module"], " ".join(str(k).split()))
            if key in out:
                raise ValueError(f"{path.name}: group {i} repeats {key[1]!r}")
            out[key] = g["reason"]
    return out


EQUIVALENT = load_equivalent()


def _explain(sc: Score) -> None:
    """Fill ``sc.equivalent`` from :data:`EQUIVALENT` by each survivor's key."""
    t = sc.target
    sc.equivalent = {}
    for n in sc.survivors:
        reason = EQUIVALENT.get((t.name, mutant_key(n, t.path, sc.changes.get(n, ""))))
        if reason is not None:
            sc.equivalent[n] = reason


def stale_entries(sc: Score) -> list[str]:
    """Keys of ``sc``'s module in :data:`EQUIVALENT` that matched no survivor (killed now, or the code they
    name changed): each is to re-check, then delete or re-key."""
    used = {mutant_key(n, sc.target.path, sc.changes.get(n, "")) for n in sc.equivalent}
    return sorted(k for (m, k) in EQUIVALENT if m == sc.target.name and k not in used)


def run_target(root: Path, t: Target, mutmut: str, workers: int = 1) -> Score:
    """Mutate one module in a scratch copy and collect every mutant's status.

    ``workers``: mutmut's ``--max-children`` (forked pytest workers at a time). In a kept scratch
    copy (``--workdir``) killed mutants keep their result, unjudged ones run, and the survivors not
    explained in :data:`EQUIVALENT` run again against the current tests (a test added since may kill them).
    """
    sc = Score(t)
    reused = (root / t.name / "mutants").is_dir()
    ws = _workspace(root, t)
    t0 = time.monotonic()
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNOCELL_")}
    base = [mutmut, "run", "--max-children", str(workers)]

    def pending() -> list[str]:
        """Mutants not judged yet, and survivors not explained (against the tests as they are now)."""
        before = Score(t, status=_results(ws, t, mutmut, env))
        before.changes = _changed_lines(ws, t, before.survivors, env)
        _explain(before)
        return sorted(n for n, s in before.status.items() if s == "not checked") + before.unexplained

    # mutmut re-runs every mutant it is given by name (t.only's globs), so a kept copy of a module restricted
    # to some functions names only its pending mutants; a whole module's run resumes by itself, then its
    # unexplained survivors run again
    log = ""
    run = subprocess.CompletedProcess([], 0, "", "")
    names = pending() if reused and t.only else list(t.only)
    if names or not t.only:
        run = subprocess.run([*base, *names], cwd=ws, env=env, capture_output=True, text=True)
        log += run.stdout + run.stderr
    if reused and not t.only and run.returncode == 0:
        again = pending()
        if again:
            run = subprocess.run([*base, *again], cwd=ws, env=env, capture_output=True, text=True)
            log += run.stdout + run.stderr
    sc.seconds = time.monotonic() - t0
    (ws / "mutmut-run.log").write_text(log)
    sc.status = _results(ws, t, mutmut, env)
    sc.changes = _changed_lines(ws, t, sc.survivors, env)
    _explain(sc)
    if run.returncode != 0 or not sc.status:
        sc.error = f"mutmut run exited {run.returncode}: {(run.stderr or run.stdout).strip()[-400:]}"
    return sc


def report(scores: list[Score]) -> str:
    """The per-module table and the survivors, as printed.

    Columns: mutants judged; killed (a test failed); timeout (killed by mutmut's time limit, e.g. an
    endless loop); survived (no test failed and not in :data:`EQUIVALENT`); equiv. (survivors
    explained as equivalent); score = (killed + timeout) / (mutants − equiv.). Each survivor is shown
    as its equivalence key (``function: old ⇒ new``) after mutmut's name (``mutmut show NAME`` in a kept
    scratch copy); entries of the table that matched no survivor are listed last, to re-check.
    """
    lines = [f"{'module':<14} {'mutants':>7} {'killed':>6} {'timeout':>7} {'survived':>8} {'equiv.':>6} "
             f"{'score':>6} {'time':>7}"]
    for sc in scores:
        eq = len(sc.equivalent)
        pct = f"{sc.score:.1%}" if sc.score is not None else "—"
        lines.append(f"{sc.target.name:<14} {len(sc.status):>7} {sc.count('killed'):>6} "
                     f"{sc.count('timeout', 'segfault'):>7} {len(sc.survivors) - eq:>8} {eq:>6} {pct:>6} "
                     f"{sc.seconds:>6.0f}s" + (f"  ERROR {sc.error}" if sc.error else ""))
    for sc in scores:
        for title, names in (("not explained (each needs a test or an entry in mutation_equivalent.toml)",
                              sc.unexplained),
                             ("explained as equivalent", [n for n in sc.survivors if n in sc.equivalent])):
            if names:
                lines.append(f"\nsurvivors of {sc.target.name} ({sc.target.path}), {title}:")
                for n in names:
                    lines.append(f"  {n.rsplit('.', 1)[-1]}  {mutant_key(n, sc.target.path, sc.changes.get(n, ''))}")
                    if n in sc.equivalent:
                        lines.append(f"      equivalent: {sc.equivalent[n]}")
        stale = stale_entries(sc)
        if stale:
            lines.append(f"\nentries of {sc.target.name} in mutation_equivalent.toml that matched no survivor "
                         "(killed now, or the code changed: re-check, then delete or re-key):")
            lines.extend(f"  {k}" for k in stale)
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", help=f"some of: {', '.join(t.name for t in TARGETS)} (default all)")
    ap.add_argument("--json", type=Path, help="write the per-module figures and survivors here")
    ap.add_argument("--keep", action="store_true", help="keep the scratch copies (mutmut show <name> there)")
    ap.add_argument("--workdir", type=Path,
                    help="scratch copies here, kept: a later run with the same --workdir resumes (judged mutants "
                         "keep their result) and reports cached modules without re-running them")
    ap.add_argument("--workers", type=int, default=1, help="mutmut workers per module (default 1: a shared machine)")
    args = ap.parse_args()
    known = {t.name: t for t in TARGETS}
    bad = [m for m in args.modules if m not in known]
    if bad:
        print(f"Error: unknown module(s) {', '.join(bad)}; pick from {', '.join(known)}", file=sys.stderr)
        return 2
    mutmut = shutil.which("mutmut", path=str(Path(sys.executable).parent)) or shutil.which("mutmut")
    if not mutmut:
        print("Error: mutmut is not installed (pip install -e '.[bench]')", file=sys.stderr)
        return 2
    if args.workers < 1:
        print(f"Error: --workers must be ≥ 1, got {args.workers}", file=sys.stderr)
        return 2
    root = args.workdir.resolve() if args.workdir else Path(tempfile.mkdtemp(prefix="dynocell-mutation-"))
    scores: list[Score] = []
    try:
        for t in [known[m] for m in args.modules] or list(TARGETS):
            print(f"[{t.name}] mutating {t.path} against {', '.join(t.tests)} …", flush=True)
            sc = run_target(root, t, mutmut, args.workers)
            scores.append(sc)
            pct = f"{sc.score:.1%}" if sc.score is not None else "—"
            print(f"[{t.name}] {len(sc.status)} mutants, {sc.count('killed')} killed, {len(sc.survivors)} survived "
                  f"({pct}) in {sc.seconds:.0f} s" + (f"; {sc.error}" if sc.error else ""), flush=True)
    finally:
        if args.keep or args.workdir:
            print(f"scratch copies kept in {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print()
    print(report(scores))
    if args.json:
        args.json.write_text(json.dumps([{"module": s.target.name, "path": s.target.path, "mutants": len(s.status),
                                          "killed": s.count("killed"), "timeout": s.count("timeout", "segfault"),
                                          "survived": {n: s.changes.get(n) for n in s.unexplained},
                                          "equivalent": {n: [s.changes.get(n), r] for n, r in s.equivalent.items()},
                                          "stale_equivalent": stale_entries(s),
                                          "score": s.score, "seconds": round(s.seconds),
                                          "error": s.error} for s in scores], indent=2, ensure_ascii=False))
    return 0 if all(s.score is not None and s.score >= GOAL and not s.error for s in scores) else 1


if __name__ == "__main__":
    sys.exit(main())
