"""The one catastrophic-backtracking check of dynocell's regexes (failure-signature rules in
``engine/rules``, runbook entries' ``signatures.log``): an unbounded repeat nested inside another
repeat — ``(a+)+``, ``(x*y)*`` — is the shape behind exponential backtracking in Python's ``re``.

A repeat counts as unbounded when its maximum is open or above 100 (``{0,1000}`` backtracks like
``*``). Read from the stdlib parser's tree (``re._parser``, Python ≥ 3.11).
"""

from __future__ import annotations

import re
import re._parser as sre_parse  # the stdlib regex parser (Python ≥ 3.11)
from typing import Any

_REPEATS = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT}
if hasattr(sre_parse, "POSSESSIVE_REPEAT"):  # possessive repeats cannot backtrack; treated like the others
    _REPEATS.add(sre_parse.POSSESSIVE_REPEAT)


def _nested(items: Any, inside: bool, strict: bool) -> bool:
    for op, av in items:
        if op in _REPEATS:
            _lo, hi, sub = av
            unbounded = hi == sre_parse.MAXREPEAT or hi > 100
            if unbounded and inside:
                return True
            if _nested(sub, inside or (hi > 1 if strict else unbounded), strict):
                return True
        elif op == sre_parse.SUBPATTERN:
            if _nested(av[-1], inside, strict):
                return True
        elif op == sre_parse.BRANCH:
            if any(_nested(b, inside, strict) for b in av[1]):
                return True
        elif op in (sre_parse.ASSERT, sre_parse.ASSERT_NOT) and _nested(av[1], inside, strict):
            return True
    return False


def nested_repeat(pattern: str, *, strict: bool = False) -> bool:
    """True when ``pattern`` nests an unbounded repeat inside a repeat.

    ``strict=False``: only inside an *unbounded* repeat (``(a+)+``; ``(a+){2}`` passes) — the rule
    for the engines' failure-signature patterns. ``strict=True``: inside any repeat of maximum > 1
    (``(a+){2}`` too) — the rule for operator-written runbook entries, which also get a timed check.
    Raises ``re.error`` when ``pattern`` does not parse.
    """
    re.compile(pattern)
    return _nested(list(sre_parse.parse(pattern)), False, strict)
