"""Engine version ranges of entries (``>=0.5.10,<0.6``): validation and membership.
"""

from __future__ import annotations

import re
from typing import Any

# ------------------------------------------------------------------ version ranges

_VCLAUSE = re.compile(r"^\s*(>=|<=|==|!=|>|<)?\s*([0-9]+(?:\.[0-9]+)*)\s*$")


def _vtuple(v: str) -> tuple[int, ...]:
    nums = [int(x) for x in re.findall(r"\d+", v)[:4]]
    return tuple(nums + [0] * (4 - len(nums)))


def version_range_problem(spec: Any) -> str | None:
    """None when ``spec`` is ``*`` or comma-separated clauses like ``>=0.5.10,<0.6``; else the reason."""
    if not isinstance(spec, str):
        return "must be a string such as \">=0.5.10,<0.6\" or \"*\""
    if spec.strip() in ("*", ""):
        return None
    for clause in spec.split(","):
        if not _VCLAUSE.match(clause):
            return f"bad clause {clause.strip()!r}; use >=, <=, >, <, ==, != followed by a version"
    return None


def version_in_range(version: str, spec: str) -> bool:
    """True when ``version`` (e.g. ``0.5.17``) satisfies ``spec`` (see :func:`version_range_problem`)."""
    if spec.strip() in ("*", ""):
        return True
    v = _vtuple(version)
    for clause in spec.split(","):
        m = _VCLAUSE.match(clause)
        if not m:
            return False
        op, want = m.group(1) or "==", _vtuple(m.group(2))
        ok = {">=": v >= want, "<=": v <= want, ">": v > want, "<": v < want,
              "==": v == want, "!=": v != want}[op]
        if not ok:
            return False
    return True
