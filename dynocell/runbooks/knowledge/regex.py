"""Regex safety of entries' ``signatures.log`` patterns: a structural check (nested quantifiers) and a
timed check of each pattern against adversarial inputs in a child process that is killed at the limit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from typing import Any, Iterable

from dynocell.engine.regex_safety import nested_repeat
from dynocell.runbooks.knowledge.entry import ADVERSARIAL_INPUTS, REGEX_TIME_LIMIT_S

# ------------------------------------------------------------------ regex safety


def regex_problem(pattern: Any) -> str | None:
    """Static check of one log regex: None when acceptable, else the reason.

    Rejects non-strings, patterns that do not compile, and nested quantifiers
    (a repeated group containing an unbounded repeat — the shape of
    catastrophic backtracking). The timing check is :func:`regex_timing_problems`.
    """
    if not isinstance(pattern, str) or not pattern:
        return "must be a non-empty string"
    if len(pattern) > 500:
        return "longer than 500 characters"
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"does not compile: {exc}"
    if nested_repeat(pattern, strict=True):
        return "nested quantifier (e.g. (a+)+) can backtrack catastrophically; rewrite without a repeat inside a repeat"
    return None


_TIMING_CHILD = r"""
import json, re, sys, time
pats = json.loads(sys.stdin.readline())
inputs = json.loads(sys.stdin.readline())
for i, pat in enumerate(pats):
    print("START", i, flush=True)
    rx = re.compile(pat)
    t0 = time.perf_counter()
    for s in inputs:
        rx.search(s)
    print("DONE", i, time.perf_counter() - t0, flush=True)
"""


def regex_timing_problems(patterns: list[str], limit_s: float = REGEX_TIME_LIMIT_S) -> dict[str, str]:
    """Run each pattern over 10 kB adversarial strings in a child process with a time limit.

    Returns ``{pattern: reason}`` for each pattern that took longer than
    ``limit_s`` seconds (all inputs together) or never finished. Python's ``re``
    cannot be interrupted in-process, so the search runs in a separate
    interpreter that is killed on overrun; one child serves all patterns and a
    fresh one continues after a kill.
    """
    import os
    import selectors

    problems: dict[str, str] = {}
    todo = list(dict.fromkeys(p for p in patterns if regex_problem(p) is None))
    while todo:
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", _TIMING_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, cwd="/",  # isolated, stdlib only: nothing of a working directory
        )
        assert proc.stdin and proc.stdout
        proc.stdin.write((json.dumps(todo) + "\n" + json.dumps(list(ADVERSARIAL_INPUTS)) + "\n").encode())
        proc.stdin.close()
        fd = proc.stdout.fileno()
        started = finished = -1
        deadline = time.monotonic() + 10.0 + limit_s * 4 * len(todo)  # interpreter start-up included
        start_t = time.monotonic()
        killed = False
        buf = b""
        sel = selectors.DefaultSelector()
        sel.register(fd, selectors.EVENT_READ)
        eof = False
        while not eof:
            now = time.monotonic()
            budget = (start_t + limit_s * 4 + 2.0) if started > finished else deadline
            if now > budget:
                proc.kill()
                killed = True
                break
            if not sel.select(timeout=min(0.05, max(0.0, budget - now))):
                continue
            chunk = os.read(fd, 65536)  # raw reads: no buffered lines hidden from select()
            if not chunk:
                eof = True
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                parts = line.decode().split()
                if not parts:
                    continue
                if parts[0] == "START":
                    started = int(parts[1])
                    start_t = time.monotonic()
                elif parts[0] == "DONE":
                    finished = int(parts[1])
                    took = float(parts[2])
                    if took > limit_s:
                        problems[todo[finished]] = (f"took {took:.2f} s on a 10 kB adversarial string "
                                                    f"(limit {limit_s} s)")
        proc.wait()
        sel.close()
        proc.stdout.close()
        if started > finished:
            problems[todo[started]] = (
                f"did not finish on a 10 kB adversarial string within the time limit ({limit_s} s)" if killed
                else "the regex engine failed on it")
            todo = todo[started + 1:]
        elif killed:  # the child never started (overloaded host): leave the rest unjudged
            todo = []
        else:
            todo = []
    return problems


_TIMED_VERDICTS: dict[str, str | None] = {}


def slow_patterns(patterns: Iterable[str]) -> dict[str, str]:
    """``{pattern: reason}`` for the patterns that fail :func:`regex_timing_problems`.

    Verdicts are cached for the process, so a long-lived face (web panel, TUI)
    times each operator pattern once; patterns that fail the static check are
    not timed (they never reach a matcher).
    """
    pats = [p for p in dict.fromkeys(patterns) if isinstance(p, str) and regex_problem(p) is None]
    todo = [p for p in pats if p not in _TIMED_VERDICTS]
    if todo:
        slow = regex_timing_problems(todo)
        for p in todo:
            _TIMED_VERDICTS[p] = slow.get(p)
    return {p: r for p in pats if (r := _TIMED_VERDICTS.get(p))}
