"""Mutation score of the modules whose numbers dynocell prints (issue 26), with mutmut.

A green suite has to mean the printed numbers are right. For each module below,
mutmut (3.x) plants one small change at a time (an operator, a constant, a
comparison, a dropped argument …) and runs only that module's fast test files
(the test map); a mutant the tests still pass on *survived*. The script prints
killed / survived per module and lists the survivors; survivors named in
:data:`EQUIVALENT` are shown with the reason they cannot change behaviour.

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
yet plus the survivors not in :data:`EQUIVALENT` (against the tests as they are now). Modules
restricted to some functions (``only`` globs below) always re-run their mutants. One mutmut worker
by default (``--workers``): the machine is shared.

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
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GOAL = 0.90
COPY = ("dynocell", "tests", "examples", "pyproject.toml")


@dataclass(frozen=True)
class Target:
    """One module under mutation: the file mutmut mutates, the mutant-name globs counted, the tests run."""

    name: str
    path: str
    tests: tuple[str, ...]
    only: tuple[str, ...] = ()  # mutant-name globs (empty = every mutant of the file)


# The test map: each module's mutants run only these (fast) test files. One table, to update when code
# moves: the store-free break-even maths (runbooks/run.py::_breakeven, _verify_step_ms, _engine_tau) is
# moving to engine/ (point "breakeven" at its new path and function globs), and analyze_trace() is being
# split for complexity (the trace survivors in EQUIVALENT are keyed by mutant name: re-check them after).
# tests/test_trace_torch.py stays out of the trace map: profiling in a forked mutmut worker hangs.
TARGETS: tuple[Target, ...] = (
    Target("acceptance", "dynocell/engine/acceptance.py", ("tests/test_acceptance.py",)),
    Target("verdicts", "dynocell/engine/verdicts.py", ("tests/test_verdicts.py",)),
    Target("breakeven", "dynocell/engine/breakeven.py",
           ("tests/test_breakeven_maths.py", "tests/test_breakeven_band.py", "tests/test_breakeven.py")),
    Target("breakeven_step", "dynocell/runbooks/run/breakeven_step.py",
           ("tests/test_breakeven.py", "tests/test_breakeven_workload.py"),
           ("dynocell.runbooks.run.breakeven_step.x__breakeven__mutmut_*",)),
    Target("no_net_win", "dynocell/runbooks/doctor.py", ("tests/test_breakeven.py", "tests/test_doctor.py"),
           ("dynocell.runbooks.doctor.x_rule_no_net_win__mutmut_*",)),
    Target("health", "dynocell/engine/health.py", ("tests/test_health_oracle.py",)),
    Target("trace", "dynocell/engine/trace.py", ("tests/test_trace.py",)),
    Target("rules", "dynocell/engine/rules/__init__.py", ("tests/test_rules.py",)),
    Target("config_hash", "dynocell/engine/config.py", ("tests/test_config.py", "tests/test_config_hash.py"),
           ("dynocell.engine.config.xǁEngineConfigǁcanonical*", "dynocell.engine.config.xǁEngineConfigǁconfig_hash*")),
    Target("web_auth", "dynocell/web/auth.py", ("tests/test_web_auth.py",)),
)

# Survivors that cannot change behaviour, by mutant name, with the reason. Keep each entry
# justified; a survivor that is not equivalent needs a test instead.
_NO_CURVES = "max(…, default=…) over no curves is unreachable: without curves τ is None and the rule returned"
_JSON_NATIVE = ("every EngineConfig field is JSON-native (str, int, float, bool, None, list, dict), so "
                "model_dump in python mode (pydantic treats any mode but 'json' as python) gives the same values")
_BISECT = ("the normal quantile's bisection converges to the same double from [-41, 40] / [-40, 41] or with a "
           "201st halving (200 halvings of 80 already reach below one ulp); < vs <= at an exact float tie")
_DEN_POSITIVE = "den > 0 whenever unit_var > 0 (unit_var == 0 returned 2 before), so the guard never takes its else"
_KNOWN_METRICS = "only metrics in METRIC_BY_KEY reach comparisons and drivers (unknown keys are filtered out first)"
_FLOAT_TIE = "differs only when two computed floats are exactly equal (a half-width exactly equal to the margin)"
_TIE_SAME = "a tie (< vs <=, > vs >=) assigns the value the variable already holds"
_YAJL_STR = ("yajl2_c's JSONError carries a str message (bytes only from other backends), and str(exc) of a "
             "one-argument exception is that message, so the bytes branch and its decode never run")
_YAJL_FLOAT = ("without use_float ijson gives Decimal; float(Decimal(text)) is the correctly rounded double of the "
               "text, the same as the float parse, and _num() makes every ts/dur a float")
_T = "dynocell.engine.trace."
_V = "dynocell.engine.verdicts."
_R = "dynocell.engine.rules."
_A = "dynocell.web.auth."
_H = "dynocell.engine.health."
EQUIVALENT: dict[str, str] = {
    **{_V + f"x__norm_quantile__mutmut_{i}": _BISECT for i in (3, 4, 6, 18)},
    **{_V + f"x_repeats_to_decide__mutmut_{i}": _DEN_POSITIVE for i in (43, 48)},
    _V + "x_repeats_to_decide__mutmut_5": "margin exactly 1e-12 is a float tie; both sides then return None or n",
    _V + "x_repeats_to_decide__mutmut_61": _FLOAT_TIE,
    _V + "x_judge_arm__mutmut_17": _KNOWN_METRICS + " (so the 99 for an unknown one is never used)",
    **{_V + f"x__describe__mutmut_{i}": _KNOWN_METRICS for i in (4, 10, 11)},
    _V + "x__level_key__mutmut_8": "(2, level) → (3, level) keeps the order: numbers (0), bad numbers (1), names",
    **{_V + f"x__betacf__mutmut_{i}": ("the 1e-300 guard against a zero denominator (Numerical Recipes) only acts "
                                       "below 1e-300, which the t CDF's arguments never reach")
       for i in (19, 21, 48, 50, 57, 59, 81, 83, 90, 92)},
    **{_V + f"x__betacf__mutmut_{i}": ("the continued fraction has converged long before: more iterations "
                                       "(301, or never breaking) multiply h by 1 ± 1 ulp")
       for i in (28, 98, 99, 100)},
    **{_V + f"x__betai__mutmut_{i}": "x = df / (df + t²) lies in (0, 1] for df > 0: x ≤ 0 never happens, and "
                                     "x = 1 (t = 0) gives 1 on both paths" for i in (1, 3, 4)},
    **{_V + f"x__betai__mutmut_{i}": ("both branches evaluate I_x(a, b) (Numerical Recipes picks the one whose "
                                       "continued fraction converges faster); moving the switch point changes "
                                       "the value below 1e-9") for i in (21, 22, 23, 24, 25, 26, 27)},
    _V + "x_t_cdf__mutmut_21": "at t = 0 the tail is exactly 0.5, so 1 − tail and tail agree",
    **{_V + f"x_t_quantile__mutmut_{i}": "_t_quantile() refuses p outside (0, 1) with the same message"
       for i in (3, 4, 5)},
    _V + "x_t_quantile__mutmut_15": "p is rounded to 9 or 10 places: the same for every confidence written with "
                                    "fewer than 9 decimals",
    _V + "x_t_quantile__mutmut_16": "round(inf, 3) is inf, so the isinf() guard is a no-op either way",
    _V + "x_repeats_to_decide__mutmut_17": _FLOAT_TIE + " (a per-run variance of exactly 1.0)",
    _V + "x__mean_sd__mutmut_18": "the sd of one sample is never used: CVs and the Welch interval need n ≥ 2",
    _V + "x__ratio_ci__mutmut_26": _FLOAT_TIE + " (a relative se of exactly 1.0)",
    _V + "x__ratio_ci__mutmut_28": "the se returned for a zero spread is discarded by compare()",
    **{_V + f"x__ratio_ci__mutmut_{i}": "compare() calls _ratio_ci only with n ≥ 2 on both sides"
       for i in (32, 38, 40, 42, 48, 50)},
    **{_V + f"x__ratio_ci__mutmut_{i}": "den > 0 whenever se > 0 (se == 0 returned before)" for i in (53, 58)},
    **{_V + f"x__decide__mutmut_{i}": _FLOAT_TIE + " (an interval end exactly on ±floor)" for i in (1, 8, 18, 19)},
    **{_V + f"x_compare__mutmut_{i}": "with one sample the sd is 0, so its CV is 0 on either branch"
       for i in (90, 93, 102)},
    # engine/trace (the split, its two readers' shared accumulator, the ijson reader and its guard)
    **{_T + n: _TIE_SAME for n in ("xǁ_Splitǁfeed__mutmut_32", "xǁ_Splitǁfeed__mutmut_34", "xǁ_Splitǁfeed__mutmut_79",
                                   "xǁ_Splitǁfeed__mutmut_81", "xǁ_Splitǁ_cpu_op__mutmut_33",
                                   "xǁ_Splitǁ_cpu_op__mutmut_35", "xǁ_Unionǁ_emit__mutmut_10")},
    **{_T + f"xǁ_Splitǁfeed__mutmut_{i}": ("kinds caches cat → kind (bounded at 256 entries); a miss, or not "
                                           "caching, recomputes the same kind") for i in (39, 40, 56, 57, 58)},
    **{_T + f"x__event__mutmut_{i}": ("str() of a str name is itself, and a None name becomes 'None', which is "
                                      "what feed() names a nameless event anyway") for i in (51, 53)},
    _T + "x__event__mutmut_57": "a non-string ph is unequal to 'X' whether it is kept or made None",
    **{_T + f"x__event__mutmut_{i}": ("an unusable event already has ts or dur None, so feed() skips it whether "
                                      "or not the other is blanked too") for i in (60, 62)},
    _T + "xǁ_Unionǁ_emit__mutmut_8": ("a late interval clipped to zero length (e == s == cur_s ≤ cur_e) extends "
                                      "nothing on either path"),
    _T + "xǁ_Unionǁ_emit__mutmut_9": ("touching intervals (s == cur_e) give the same union length merged, or "
                                      "closed and restarted"),
    _T + "xǁ_Unionǁfinish__mutmut_6": "finish() runs once per split; cur_s is not read after it",
    **{_T + f"xǁ_Unionǁ__init____mutmut_{i}": ("cur_e is set together with cur_s at the first emitted interval, "
                                               "before it is ever read") for i in (5, 6)},
    _T + "xǁ_Unionǁ__init____mutmut_1": ("the horizon is a memory bound: only a trace with events more than 65 536 "
                                         "out of order could tell 65 536 from 65 537 (the union test sets it to 2)"),
    **{_T + f"xǁ_Splitǁresult__mutmut_{i}": "hi == lo gives hi − lo = 0 on either branch" for i in (89, 136)},
    **{_T + f"xǁ_Splitǁfeed_items__mutmut_{i}": ("feed() carries its state across batches: the split is the same "
                                                 "whatever the batch size") for i in (1, 22)},
    _T + "xǁ_Guardǁ__init____mutmut_4": "None and False are both falsy for in_str and escaped",
    _T + "xǁ_Guardǁ_scan__mutmut_26": ("dropping a pair of adjacent quotes only shortens k: kept, it splits into an "
                                       "empty part and flips in_str twice, leaving the same brackets and state"),
    **{_T + f"x__combine__mutmut_{i}": ("_combine() is called only by analyze_ranks(), which refuses no paths: "
                                        "splits is never empty, so the empty-input defaults are never used")
       for i in (87, 89, 90, 92, 95, 97, 99, 100)},
    _T + "x__combine__mutmut_76": "rank=None is TraceSplit's default: leaving the argument out gives the same split",
    **{_T + f"x__read_ijson__mutmut_{i}": _YAJL_STR for i in (10, 11, 12, 14, 16, 18, 19, 20, 21, 22, 23, 24, 25)},
    **{_T + f"x__read_ijson__mutmut_{i}": "ijson's error messages are never blank" for i in (29, 31)},
    **{_T + f"x__read_ijson__mutmut_{i}": ("yajl2_c words a truncated document 'premature EOF'; 'Incomplete JSON' "
                                           "is the pure-Python backend's wording") for i in (37, 38, 39)},
    _T + "x__read_ijson__mutmut_54": ("yajl2_c reports invalid UTF-8 as a JSONError ('invalid bytes in UTF8'), so "
                                      "no UnicodeDecodeError reaches this handler"),
    _T + "x__read_ijson__mutmut_55": ("an OSError after the file opened (a disk fault mid-read): no file a test can "
                                      "make reaches it (a directory fails at open, gzip errors are caught before)"),
    **{_T + f"x__iter_events__mutmut_{i}": ("the flag only saves the second pass: over an object-form file with "
                                            "events that pass finds its traceEvents list and returns (slower, same "
                                            "split)") for i in (34, 35)},
    _T + "x__iter_events__mutmut_20": "found starts None instead of False: both falsy",
    _T + "x__iter_events__mutmut_41": ("the first pass read the whole file under the same limits, so the second "
                                       "pass's guard never refuses and its path is never shown"),
    **{_T + f"x__iter_events__mutmut_{i}": _YAJL_FLOAT for i in (29, 32, 33)},
    **{_T + f"x__iter_events__mutmut_{i}": ("after a map_key ijson yields the value's event or raises on a truncated "
                                            "stream; the default is never used") for i in (60, 62, 63, 64, 65)},
    **{_T + f"x__iter_events__mutmut_{i}": ("every value event ijson gives after a key is in _JSON_KINDS "
                                            "(start_array returned before)") for i in (75, 76, 77)},
    **{_T + f"x__first_byte__mutmut_{i}": ("a longer head (all of it, or 4097 bytes) has the same first "
                                           "significant byte") for i in (3, 4)},
    **{_T + f"x__first_byte__mutmut_{i}": ("yajl refuses a byte-order mark with the same message whichever prefix "
                                           "is asked for, so leaving it in the head changes nothing")
       for i in (5, 7)},
    **{_T + f"x__open__mutmut_{i}": "GzipFile takes its file object's mode ('rb') when none is given"
       for i in (18, 20)},
    _T + "x__read_fast__mutmut_10": ("NotFast's message is never shown: the ijson reader reads the file and words "
                                     "any error"),
    _T + "x_analyze_trace__mutmut_2": ("both readers give the same split to the last bit (test_trace_reader.py); "
                                       "the default only picks the faster one"),
    # break-even, no_net_win, config hash, web auth
    "dynocell.runbooks.run.x__breakeven__mutmut_216": _FLOAT_TIE + " (a speculative step exactly equal to the budget)",
    **{f"dynocell.runbooks.run.x__breakeven__mutmut_{i}": ("a given plain step has no samples: the band and the "
                                                          "result read plain.get('samples') or [] either way")
       for i in (63, 64)},
    "dynocell.runbooks.run.x__breakeven__mutmut_176": ("neither '' nor 'XXXX' is an ISO time: fromisoformat raises the "
                                                      "same ValueError on either"),
    "dynocell.engine.config.xǁEngineConfigǁcanonical_json__mutmut_4": "ensure_ascii=None is falsy like False",
    _A + "xǁSessionsǁ__init____mutmut_3": "secrets.token_bytes(None) draws the default 32 bytes, the same as 32",
    _A + "x_new_launch_token__mutmut_4": "secrets.token_urlsafe(None) draws the default 32 bytes, the same as 32",
    **{_A + f"xǁSessionsǁissue__mutmut_{i}": "token_urlsafe() never contains '.', so the replace() never acts"
       for i in (11, 12)},
    **{_A + f"xǁLoginBackoffǁreserve__mutmut_{i}": _FLOAT_TIE + " (a monotonic time exactly on the forget or "
                                                   "wait boundary)" for i in (7, 9)},
    _A + "xǁSessionsǁverify__mutmut_18": _FLOAT_TIE + " (time.time() exactly on the expiry second)",
    _A + "xǁLoginLimiterǁ_prune__mutmut_4": _FLOAT_TIE + " (a failure exactly window_s old)",
    # engine/health
    _H + "x_progress_from_metrics__mutmut_26": "a sample without a mode label matches neither 'decode' nor "
                                               "'prefill*' whether the default is '' or 'XXXX'",
    **{_H + f"x__server_info_mismatches__mutmut_{i}": "reached only when server_args is a dict, so the get() "
                                                      "default is never used" for i in (9, 11)},
    _H + "x__server_info_mismatches__mutmut_32": "a missing model_path normalises to 'None' instead of None: still "
                                                 "unequal to any expected path",
    _H + "xǁExpectedServerǁfrom_config__mutmut_21": ("served_model_name is an EngineConfig field (None when unset), so "
                                                 "getattr's default is never used"),
    _H + "x__server_info_mismatches__mutmut_55": "both sides are normalised by the same function (upper or lower)",
    **{_H + f"x__timed__mutmut_{i}": "a scale of the time spent on a failed request (ms/1000, ×1001): only an "
                                     "assertion on elapsed time could tell, and tests never assert on timing"
       for i in (5, 7)},
    **{_H + f"x__progress_check__mutmut_{i}": ("prometheus_client's parse errors are printable and never empty, "
                                               "so the 'parse error' fallback never acts") for i in (35, 36)},
    **{_H + f"x__progress_check__mutmut_{i}": ("an empty /metrics body parses (no families), so the head of an "
                                               "unparsable body is never taken from an empty text") for i in (39, 42)},
    **{_H + f"x_check_health__mutmut_{i}": ("the default api only has to differ from 'vllm': any other value takes "
                                            "the SGLang checks") for i in (4, 5)},
    # engine/rules
    _R + "x_compile_safe__mutmut_16": "None and False are both falsy for inside_unbounded",
    _R + "x_match_text__mutmut_4": "the escape-sequence pattern needs \\x1b: without one, sub() changes nothing",
    _R + "x__read_toml__mutmut_2": "encoding=None is the locale's: UTF-8 on UTF-8 locales (and C/POSIX, which "
                                  "Python coerces to UTF-8)",
    _R + "x__read_toml__mutmut_4": "'UTF-8' and 'utf-8' name the same codec",
    **{_R + f"x_phase_timeline__mutmut_{i}": "'' and None are both falsy as 'no timestamp yet'" for i in (5, 6)},
    _R + "x_phase_timeline__mutmut_39": "first and last are set together at the first timestamp: and/or agree",
    **{_R + f"x_classify_log__mutmut_{i}": "exit_code is recorded by callers, not used by classify()"
       for i in (19, 24)},
    **{f"dynocell.runbooks.doctor.x_rule_no_net_win__mutmut_{i}": _NO_CURVES for i in (30, 32, 33)},
    "dynocell.runbooks.doctor.x_rule_no_net_win__mutmut_27": _FLOAT_TIE + " (|speedup − 1| exactly the noise band)",
    **{f"dynocell.engine.config.xǁEngineConfigǁcanonical__mutmut_{i}": _JSON_NATIVE for i in (2, 4, 6, 7)},
    "dynocell.engine.config.xǁEngineConfigǁcanonical__mutmut_26": ("every key left out while unstated is a model "
                                                                  "field, so model_dump always has it and pop() "
                                                                  "never needs its default"),
}


@dataclass
class Score:
    """One module's result: mutant name → mutmut status, and the wall time."""

    target: Target
    status: dict[str, str] = field(default_factory=dict)
    changes: dict[str, str] = field(default_factory=dict)  # survivor → "old ⇒ new" line
    seconds: float = 0.0
    error: str | None = None

    def count(self, *states: str) -> int:
        return sum(1 for s in self.status.values() if s in states)

    @property
    def survivors(self) -> list[str]:
        return sorted(n for n, s in self.status.items() if s in ("survived", "no tests"))

    @property
    def score(self) -> float | None:
        judged = [n for n, s in self.status.items() if s not in ("skipped", "not checked")]
        real = [n for n in judged if n not in EQUIVALENT]
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
        out[n] = f"{' '.join(minus)[:110]} ⇒ {' '.join(plus)[:110]}"
    return out


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
    run = subprocess.run([*base, *t.only], cwd=ws, env=env, capture_output=True, text=True)
    log = run.stdout + run.stderr
    if reused and run.returncode == 0 and not t.only:  # named globs (t.only) re-run everything anyway
        again = [n for n, s in _results(ws, t, mutmut, env).items()
                 if s in ("survived", "no tests") and n not in EQUIVALENT]
        if again:
            run = subprocess.run([*base, *again], cwd=ws, env=env, capture_output=True, text=True)
            log += run.stdout + run.stderr
    sc.seconds = time.monotonic() - t0
    (ws / "mutmut-run.log").write_text(log)
    sc.status = _results(ws, t, mutmut, env)
    sc.changes = _changed_lines(ws, t, sc.survivors, env)
    if run.returncode != 0 or not sc.status:
        sc.error = f"mutmut run exited {run.returncode}: {(run.stderr or run.stdout).strip()[-400:]}"
    return sc


def report(scores: list[Score]) -> str:
    """The per-module table and the survivors, as printed.

    Columns: mutants judged; killed (a test failed); timeout (killed by mutmut's time limit, e.g. an
    endless loop); survived (no test failed and not in :data:`EQUIVALENT`); equiv. (survivors
    explained as equivalent); score = (killed + timeout) / (mutants − equiv.).
    """
    lines = [f"{'module':<12} {'mutants':>7} {'killed':>6} {'timeout':>7} {'survived':>8} {'equiv.':>6} "
             f"{'score':>6} {'time':>7}"]
    for sc in scores:
        surv = sc.survivors
        eq = sum(1 for n in surv if n in EQUIVALENT)
        pct = f"{sc.score:.1%}" if sc.score is not None else "—"
        lines.append(f"{sc.target.name:<12} {len(sc.status):>7} {sc.count('killed'):>6} "
                     f"{sc.count('timeout', 'segfault'):>7} {len(surv) - eq:>8} {eq:>6} {pct:>6} {sc.seconds:>6.0f}s"
                     + (f"  ERROR {sc.error}" if sc.error else ""))
    for sc in scores:
        for title, names in (("not explained (each needs a test or an EQUIVALENT entry)",
                              [n for n in sc.survivors if n not in EQUIVALENT]),
                             ("explained as equivalent", [n for n in sc.survivors if n in EQUIVALENT])):
            if names:
                lines.append(f"\nsurvivors of {sc.target.name} ({sc.target.path}), {title}:")
                for n in names:
                    lines.append(f"  {n}: {sc.changes.get(n, '')}")
                    if n in EQUIVALENT:
                        lines.append(f"      equivalent: {EQUIVALENT[n]}")
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
                                          "survived": {n: s.changes.get(n) for n in s.survivors if n not in EQUIVALENT},
                                          "equivalent": {n: EQUIVALENT[n] for n in s.survivors if n in EQUIVALENT},
                                          "score": s.score, "seconds": round(s.seconds),
                                          "error": s.error} for s in scores], indent=2, ensure_ascii=False))
    return 0 if all(s.score is not None and s.score >= GOAL and not s.error for s in scores) else 1


if __name__ == "__main__":
    sys.exit(main())
