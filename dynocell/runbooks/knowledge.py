"""Runbook knowledge: markdown entries with YAML front matter, their lint, index, search and links.

An entry is a markdown file whose first lines are YAML between ``---`` lines::

    ---
    slug: draft-parallel-config-copies-every-size     # [a-z0-9-], unique
    title: The draft model's parallel config must carry every parallel size
    kind: trap                                        # law | trap | fix | procedure
    tags: [speculative, parallel]
    engines: {sglang: ">=0.5.10,<0.6", vllm: ">=0.10"} # engine → version range (bundled entries: required)
    signatures:                                       # optional
      ids: [cuda_graph_no_valid_sizes]                # failure-signature rule ids (engine/rules)
      rules: [scales_with_parallel]                   # acceptance-doctor rule ids
      log: ["(?i)address already in use"]             # regexes over engine log lines
      metrics: [{metric: tau, le: 1.3}]               # conditions over run metrics
    applies_to:                                       # config selector, optional (see below)
      speculative.algorithm: {in: [EAGLE, NEXTN]}
      parallel.dcp_size: {gt: 1}
    sources:                                          # where the facts come from (see SOURCE_RE)
      - "vllm vllm/config/speculative.py @ v0.26.0"   # engine + file + version (tag or commit)
      - "https://github.com/vllm-project/vllm/pull/1" # or a public URL
      - "field report 001"                            # or a field report (shared/seeds/NNN_*.txt)
    evidence:                                         # required, ≥ 1
      - {fact: "a claim with its numbers", source: 1} # a claim marked as fact: source = 1-based index(es) into sources
      - "a plain string: reasoning, not marked as fact"
    examples:                                         # real log lines; required with signatures.log / ids
      - "(EngineCore_DP0 pid=1) ValueError: No valid cudagraph sizes after rounding to multiple of 6 (…)"
    fix: ["what to try"]                              # required, ≥ 1
    ---
    markdown body

Lint refuses a claim marked as fact without a source, a source that is none of
the accepted forms, and an entry whose signatures (``log`` regexes, failure
signature ``ids``) match none of its own ``examples`` — each ``log`` regex must
match at least one example line, and with ``ids`` at least one example must
match one of those failure signatures' regexes (dynocell/engine/rules).

Selector language (no eval): a mapping of dotted :class:`EngineConfig` field
paths (``parallel.tp_size``, ``speculative.algorithm``, ``speculative.num_drafts``,
``env.NAME``, ``extra_args``, ``engine`` …) to a condition; all must hold.
A condition is a scalar (equality) or a mapping of operators ``eq ne in not_in
gt ge lt le exists contains``. The keys ``any`` (list of selectors, one must
hold), ``all`` (list, all hold) and ``not`` (a selector that must not hold)
combine selectors.

Bundled entries live in ``dynocell/runbooks/knowledge/``; the operator directory
(``settings.runbooks_dir``, default ``<home>/runbooks``) adds entries and
overrides bundled ones by slug.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import yaml

from dynocell.errors import NotFound, UserError

BUNDLED_DIR = Path(__file__).parent / "knowledge"
KINDS = ("law", "trap", "fix", "procedure")
SLUG_RE = re.compile(r"^[a-z0-9][a-z0-9-]{1,126}$")
KNOWN_FIELDS = ("slug", "title", "kind", "tags", "engines", "signatures", "applies_to", "sources", "evidence",
                "examples", "fix")
#: Engines an entry may name in ``engines`` (vLLM: knowledge about logs and configs read from vLLM hosts).
ENGINES = ("sglang", "vllm", "reference")
#: One source: a public URL; ``<engine or project> <file path> @ <version tag or commit>``; a field report
#: (``field report 004``, the files in shared/seeds); or dynocell's measured engine artifacts (``artifacts/<dir> …``,
#: ``gpu/README.md`` — the facts measured on the H200 host, shared/gpu).
SOURCE_RE = re.compile(
    r"^(?:https?://\S+"
    r"|[a-z][\w.-]* \S+ @ (?:v?\d[\w.+-]*|[0-9a-f]{7,40})\b"
    r"|field report \d{3}\b"
    r"|artifacts/[\w.-]+\b"
    r"|gpu/[\w.-]+\b)")
SIGNATURE_KEYS = ("ids", "rules", "log", "metrics")
OPERATORS = ("eq", "ne", "in", "not_in", "gt", "ge", "lt", "le", "exists", "contains")
METRIC_OPS = ("eq", "ne", "gt", "ge", "lt", "le")
#: Doctor rule ids an entry may name in ``signatures.rules`` (see runbooks/doctor.py).
DOCTOR_RULES = (
    "pinned_near_one", "recursive_collapse", "depth_decay", "zero_past_length", "scales_with_parallel",
    "graph_vs_eager", "no_net_win", "definitions_mismatch", "independence", "garbage_output",
    "engine_vs_oracle",
    # issue 22
    "baseline_regression", "confounded_comparison", "tau_up_throughput_down", "spread_collapse", "concurrency_loss",
    "corrupt_output", "lossless_near_tie", "length_cliff", "rate_above_one", "skipped_steps_average",
    "health_lies", "stalled_queue", "nccl_startup_skew", "nccl_serving_timeout", "profile_no_trace",
    "graph_launches_missing", "capture_size_miss", "config_smell",
)
#: Derived (property) paths a selector may name besides model fields.
DERIVED_PATHS = ("speculative.num_drafts", "speculative_enabled", "name", "config_hash")
REGEX_TIME_LIMIT_S = 0.25
ADVERSARIAL_INPUTS = (
    "a" * 10_000 + "!",
    " " * 10_000 + "!",
    "0" * 10_000 + "x",
    "ab" * 5_000 + "!",
    "a " * 5_000 + "\n",
    "-" * 10_000 + "\x00",
)


@dataclass(frozen=True)
class LintError:
    """One problem in one entry file: ``path``, dotted ``field`` (None = the file), ``message``."""

    path: str
    field: str | None
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.field}: {self.message}" if self.field else f"{self.path}: {self.message}"


@dataclass(frozen=True)
class Entry:
    """A parsed, validated runbook entry.

    ``origin`` is ``bundled`` or ``operator``; ``sha256`` hashes the file's bytes;
    ``signatures`` is ``{ids, rules, log, metrics}`` (lists, possibly empty).
    ``evidence`` holds display strings (a fact ends with its source numbers, e.g.
    ``… [1, 2]``); ``facts`` the claims marked as fact with their 1-based
    indexes into ``sources``; ``examples`` real log lines the signatures match.
    """

    slug: str
    title: str
    kind: str
    tags: tuple[str, ...]
    engines: dict[str, str]
    signatures: dict[str, list[Any]]
    applies_to: dict[str, Any]
    evidence: tuple[str, ...]
    fix: tuple[str, ...]
    body: str
    path: str
    origin: str
    sha256: str
    front_matter: dict[str, Any] = field(default_factory=dict)
    sources: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    facts: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def as_row(self) -> dict[str, Any]:
        """The entry as the plain dict :func:`dynocell.db.knowledge.upsert_entries` stores."""
        return {
            "slug": self.slug, "title": self.title, "kind": self.kind, "tags": list(self.tags),
            "origin": self.origin, "source_path": self.path, "sha256": self.sha256,
            "front_matter": self.front_matter, "body": self.body,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of every field."""
        return {
            "slug": self.slug, "title": self.title, "kind": self.kind, "tags": list(self.tags),
            "engines": self.engines, "signatures": self.signatures, "applies_to": self.applies_to,
            "evidence": list(self.evidence), "fix": list(self.fix), "body": self.body,
            "sources": list(self.sources), "examples": list(self.examples),
            "path": self.path, "origin": self.origin, "sha256": self.sha256,
        }


# ------------------------------------------------------------------ regex safety

_LIST_COMMANDS = {"boot": "dynocell ps --all", "run": "dynocell runs", "config": "dynocell config list", "entry": "dynocell runbook search", "experiment": "dynocell experiment list"}

def _regex_parser():
    try:
        import re._parser as p  # Python ≥ 3.11
    except ImportError:  # pragma: no cover - older Pythons
        import sre_parse as p  # type: ignore[no-redef]
    return p


def _has_nested_quantifier(pattern: str) -> bool:
    """True when a repeat (max > 1) contains another unbounded repeat, e.g. ``(a+)+`` or ``(\\w*x?)*``."""
    p = _regex_parser()
    tree = p.parse(pattern)
    REPEATS = {p.MAX_REPEAT, p.MIN_REPEAT}
    POSSESSIVE = getattr(p, "POSSESSIVE_REPEAT", None)
    MAXREPEAT = p.MAXREPEAT

    def walk(items: Any, inside_repeat: bool) -> bool:
        for op, av in items:
            if op in REPEATS or (POSSESSIVE is not None and op == POSSESSIVE):
                lo, hi, sub = av
                unbounded = hi == MAXREPEAT or hi > 100
                if inside_repeat and unbounded:
                    return True
                if walk(sub, inside_repeat or (hi > 1)):
                    return True
            elif op == p.SUBPATTERN:
                if walk(av[-1], inside_repeat):
                    return True
            elif op == p.BRANCH:
                for branch in av[1]:
                    if walk(branch, inside_repeat):
                        return True
            elif op in (p.ASSERT, p.ASSERT_NOT):
                if walk(av[1], inside_repeat):
                    return True
        return False

    return walk(tree, False)


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
    if _has_nested_quantifier(pattern):
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
            [sys.executable, "-c", _TIMING_CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
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


# ------------------------------------------------------------------ selector

def _config_field_paths() -> set[str]:
    from pydantic import BaseModel

    from dynocell.engine.config import EngineConfig

    paths: set[str] = set()

    def walk(model: type[BaseModel], prefix: str) -> None:
        for name, f in model.model_fields.items():
            ann = f.annotation
            if isinstance(ann, type) and issubclass(ann, BaseModel):
                walk(ann, prefix + name + ".")
            else:
                paths.add(prefix + name)

    walk(EngineConfig, "")
    return paths | set(DERIVED_PATHS)


def _known_path(path: str, paths: set[str]) -> bool:
    return path in paths or (path.startswith("env.") and len(path) > 4)


_OP_WORDS = {"eq": "=", "ne": "≠", "gt": ">", "ge": "≥", "lt": "<", "le": "≤", "in": "one of",
             "not_in": "none of", "contains": "contains"}


def selector_text(selector: Any) -> str:
    """An ``applies_to`` selector in words, e.g. ``speculative.algorithm one of EAGLE, NEXTN and
    parallel.dcp_size > 1`` (for people; :func:`selector_matches` is what decides). '' when empty."""
    if not isinstance(selector, dict) or not selector:
        return ""
    parts = []
    for key, cond in selector.items():
        if key in ("any", "all") and isinstance(cond, list):
            joined = (" or " if key == "any" else " and ").join(f"({selector_text(c)})" for c in cond)
            parts.append(joined)
        elif key == "not":
            parts.append(f"not ({selector_text(cond)})")
        elif isinstance(cond, dict):
            for op, v in cond.items():
                if op == "exists":
                    parts.append(f"{key} {'is set' if v else 'is not set'}")
                else:
                    val = ", ".join(map(str, v)) if isinstance(v, (list, tuple)) else str(v).lower() \
                        if isinstance(v, bool) else str(v)
                    parts.append(f"{key} {_OP_WORDS.get(op, op)} {val}")
        else:
            parts.append(f"{key} = {str(cond).lower() if isinstance(cond, bool) else cond}")
    return " and ".join(parts)


def validate_selector(selector: Any, where: str = "applies_to") -> list[tuple[str, str]]:
    """Problems of a selector as ``(dotted field, message)``; empty when valid."""
    errors: list[tuple[str, str]] = []
    if selector is None:
        return errors
    if not isinstance(selector, dict):
        return [(where, "must be a mapping of config field to condition")]
    paths = _config_field_paths()
    for key, cond in selector.items():
        here = f"{where}.{key}"
        if key in ("any", "all"):
            if not isinstance(cond, list) or not cond:
                errors.append((here, "must be a non-empty list of selectors"))
                continue
            for i, sub in enumerate(cond):
                errors.extend(validate_selector(sub, f"{here}[{i}]"))
            continue
        if key == "not":
            errors.extend(validate_selector(cond, here))
            continue
        if not isinstance(key, str) or not _known_path(key, paths):
            import difflib

            close = difflib.get_close_matches(str(key), sorted(paths), n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            errors.append((here, f"unknown config field{hint}"))
            continue
        if isinstance(cond, dict):
            for op, val in cond.items():
                if op not in OPERATORS:
                    errors.append((f"{here}.{op}", f"unknown operator; use one of {', '.join(OPERATORS)}"))
                elif op in ("in", "not_in") and not isinstance(val, list):
                    errors.append((f"{here}.{op}", "must be a list"))
                elif op in ("gt", "ge", "lt", "le") and (not isinstance(val, (int, float)) or isinstance(val, bool)):
                    errors.append((f"{here}.{op}", "must be a number"))
                elif op == "exists" and not isinstance(val, bool):
                    errors.append((f"{here}.{op}", "must be true or false"))
        elif isinstance(cond, list):
            errors.append((here, "a list is ambiguous; write {in: [...]}"))
    return errors


def _resolve(cfg: Any, path: str) -> Any:
    if isinstance(cfg, dict) and path in cfg:  # a flattened config (doctor knobs): {"parallel.tp_size": 4, …}
        return cfg[path]
    if path.startswith("env."):
        return (getattr(cfg, "env", {}) or {}).get(path[4:])
    node = cfg
    for part in path.split("."):
        if node is None:
            return None
        if isinstance(node, dict):
            node = node.get(part)
        else:
            node = getattr(node, part, None)
    return node


def _norm(v: Any) -> Any:
    return v.upper() if isinstance(v, str) else v


def _cond_holds(value: Any, cond: Any) -> bool:
    if not isinstance(cond, dict):
        if isinstance(value, str) and isinstance(cond, str):
            return value.upper() == cond.upper()
        return value == cond
    for op, want in cond.items():
        if op == "exists":
            ok = (value is not None and value != "" and value != ()) == bool(want)
        elif op == "eq":
            ok = _cond_holds(value, want)
        elif op == "ne":
            ok = not _cond_holds(value, want)
        elif op == "in":
            ok = _norm(value) in [_norm(w) for w in want]
        elif op == "not_in":
            ok = _norm(value) not in [_norm(w) for w in want]
        elif op == "contains":
            ok = value is not None and any(str(want) in str(x) for x in (value if isinstance(value, (list, tuple)) else [value]))
        else:
            if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                return False
            ok = {"gt": value > want, "ge": value >= want, "lt": value < want, "le": value <= want}[op]
        if not ok:
            return False
    return True


def selector_matches(selector: dict[str, Any] | None, cfg: Any) -> bool:
    """True when ``cfg`` (an EngineConfig, or any object/dict with the same attribute paths) satisfies ``selector``.

    An empty or missing selector matches nothing (an entry without ``applies_to``
    is not a "known trap" of any particular config).
    """
    if not selector:
        return False
    return _all_hold(selector, cfg)


def _all_hold(selector: dict[str, Any], cfg: Any) -> bool:
    for key, cond in selector.items():
        if key == "any":
            if not any(_all_hold(s, cfg) for s in cond):
                return False
        elif key == "all":
            if not all(_all_hold(s, cfg) for s in cond):
                return False
        elif key == "not":
            if _all_hold(cond, cfg):
                return False
        elif not _cond_holds(_resolve(cfg, key), cond):
            return False
    return True


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


# ------------------------------------------------------------------ parsing / lint

class _FrontMatterLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses aliases.

    Front matter is small, flat data written out by hand; an alias can make a
    value recursive (``&a [*a]``) or exponentially large ("billion laughs"),
    which every later walk over the entry would choke on.
    """

    def compose_node(self, parent: Any, index: Any) -> Any:  # noqa: D102 - PyYAML hook
        if self.check_event(yaml.AliasEvent):
            raise yaml.composer.ComposerError(
                None, None, "YAML aliases (*name) are not allowed; write the values out",
                self.peek_event().start_mark)
        return super().compose_node(parent, index)


def split_front_matter(text: str) -> tuple[str | None, str]:
    """``(yaml text, body)``; yaml is None when the file does not start with a ``---`` line."""
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        return None, text
    for i in range(1, len(lines)):
        if lines[i].strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1:])
    return None, text


def _str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) and x.strip() for x in v)


def _evidence(raw: Any, n_sources: int, err: Any) -> tuple[list[str], list[tuple[str, tuple[int, ...]]]]:
    """Evidence items as display strings plus the claims marked as fact.

    An item is a string (reasoning, not a claim of fact) or ``{fact: TEXT,
    source: N | [N, …]}`` with 1-based indexes into ``sources``; a fact without
    a valid source is an error (reported through ``err``).
    """
    if not isinstance(raw, list) or not raw:
        err("evidence", "required: a non-empty list (strings, or {fact: ..., source: N} for claims of fact)")
        return [], []
    out: list[str] = []
    facts: list[tuple[str, tuple[int, ...]]] = []
    for i, item in enumerate(raw):
        here = f"evidence[{i}]"
        if isinstance(item, str) and item.strip():
            out.append(item)
            continue
        if not isinstance(item, dict) or not isinstance(item.get("fact"), str) or not item["fact"].strip():
            err(here, "must be a string or {fact: TEXT, source: N} (N = position in sources, from 1)")
            continue
        extra = set(item) - {"fact", "source"}
        if extra:
            err(f"{here}.{sorted(map(str, extra))[0]}", "unknown key; a fact has fact and source")
        src = item.get("source")
        refs = src if isinstance(src, list) else [src]
        if src is None or not refs:
            err(f"{here}.source", "a claim marked as fact needs a source: the position (from 1) of an entry in sources")
            continue
        if any(not isinstance(r, int) or isinstance(r, bool) or not 1 <= r <= n_sources for r in refs):
            err(f"{here}.source", f"must name sources by position, 1..{n_sources}" if n_sources else
                "the entry has no sources: add sources and name them by position")
            continue
        facts.append((item["fact"], tuple(refs)))
        out.append(f"{item['fact']} [{', '.join(map(str, refs))}]")
    return out, facts


def _signature_example_problems(sigs: dict[str, list[Any]], examples: list[str],
                                skip: Iterable[str] = ()) -> list[tuple[str, str]]:
    """``(field, message)`` for signatures that match none of the entry's ``examples`` lines.

    Log patterns in ``skip`` (those the timed check found slow) are not run;
    example lines are cut to 4,000 characters, like engine log lines.
    """
    problems: list[tuple[str, str]] = []
    skip = set(skip)
    examples = [line[:4000] for line in examples]
    logs = [p for p in sigs.get("log", []) if isinstance(p, str) and regex_problem(p) is None and p not in skip]
    ids = [i for i in sigs.get("ids", []) if isinstance(i, str)]
    if (logs or ids) and not examples:
        return [("examples", "required with signatures.log or signatures.ids: real log lines (with their source) "
                             "that the signatures must match")]
    for i, pat in enumerate(sigs.get("log", [])):
        if pat in logs and not any(re.search(pat, line) for line in examples):
            problems.append((f"signatures.log[{i}]", "matches none of the entry's examples"))
    if ids:
        from dynocell.engine.rules import load_signatures

        known = [s for s in load_signatures() if s.id in ids]
        if known and not any(rx.search(line) for s in known for rx in s.regexes for line in examples):
            problems.append(("signatures.ids", "none of these failure signatures matches the entry's examples"))
    return problems


def parse_entry(text: str, path: str, origin: str = "bundled") -> tuple[Entry | None, list[LintError]]:
    """Parse and validate one entry; returns ``(entry or None, errors)``.

    Errors name the file and the dotted front-matter field. Regexes get the
    static check only (see :func:`lint_paths` for the timed one).
    """
    errs: list[LintError] = []

    def err(fieldname: str | None, msg: str) -> None:
        errs.append(LintError(path, fieldname, msg))

    fm_text, body = split_front_matter(text)
    if fm_text is None:
        err(None, "no front matter: the file must start with a '---' line and YAML closed by another '---'")
        return None, errs
    try:
        fm = yaml.load(fm_text, Loader=_FrontMatterLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}, column {mark.column + 1}" if mark else ""
        err(None, f"front matter is not valid YAML{where}: {getattr(exc, 'problem', exc)}")
        return None, errs
    except RecursionError:
        err(None, "front matter is nested too deeply to read; write flat fields (see a bundled entry)")
        return None, errs
    if not isinstance(fm, dict):
        err(None, "front matter must be a YAML mapping")
        return None, errs
    for key in fm:
        if key not in KNOWN_FIELDS:
            err(str(key), f"unknown field; known fields: {', '.join(KNOWN_FIELDS)}")
    slug = fm.get("slug")
    if not isinstance(slug, str) or not SLUG_RE.match(slug):
        err("slug", "required: lowercase letters, digits and '-', 2–127 characters")
    title = fm.get("title")
    if not isinstance(title, str) or not title.strip():
        err("title", "required: a non-empty string")
    kind = fm.get("kind")
    if kind not in KINDS:
        err("kind", f"required: one of {', '.join(KINDS)}" + (f" (got {kind!r})" if kind is not None else ""))
    tags = fm.get("tags", [])
    if not _str_list(tags):
        err("tags", "must be a list of strings")
        tags = []
    engines = fm.get("engines") or {}
    if not isinstance(engines, dict):
        err("engines", "must be a mapping of engine name to version range, e.g. {sglang: \">=0.5,<0.6\"}")
        engines = {}
    for name, spec in engines.items():
        if name not in ENGINES:
            err(f"engines.{name}", f"unknown engine; use {', '.join(ENGINES)}")
        problem = version_range_problem(spec)
        if problem:
            err(f"engines.{name}", problem)
    sigs_raw = fm.get("signatures") or {}
    sigs: dict[str, list[Any]] = {k: [] for k in SIGNATURE_KEYS}
    if not isinstance(sigs_raw, dict):
        err("signatures", "must be a mapping with ids, rules, log, metrics")
    else:
        for key, val in sigs_raw.items():
            if key not in SIGNATURE_KEYS:
                err(f"signatures.{key}", f"unknown key; use {', '.join(SIGNATURE_KEYS)}")
                continue
            if not isinstance(val, list):
                err(f"signatures.{key}", "must be a list")
                continue
            if key in ("ids", "rules", "log") and not _str_list(val):
                err(f"signatures.{key}", "must be a list of non-empty strings")
                continue
            if key == "rules":
                for r in val:
                    if r not in DOCTOR_RULES:
                        err("signatures.rules", f"unknown doctor rule {r!r}; known: {', '.join(DOCTOR_RULES)}")
            if key == "log":
                for i, pat in enumerate(val):
                    problem = regex_problem(pat)
                    if problem:
                        err(f"signatures.log[{i}]", problem)
            if key == "metrics":
                for i, cond in enumerate(val):
                    if not isinstance(cond, dict) or not isinstance(cond.get("metric"), str):
                        err(f"signatures.metrics[{i}]", "must be {metric: NAME, <op>: number}")
                        continue
                    ops = [k for k in cond if k != "metric"]
                    if not ops or any(o not in METRIC_OPS for o in ops):
                        err(f"signatures.metrics[{i}]", f"needs operators among {', '.join(METRIC_OPS)}")
                    elif any(not isinstance(cond[o], (int, float)) or isinstance(cond[o], bool) for o in ops):
                        err(f"signatures.metrics[{i}]", "operator values must be numbers")
            sigs[key] = list(val)
    applies = fm.get("applies_to") or {}
    for fieldname, msg in validate_selector(applies):
        err(fieldname, msg)
    sources = fm.get("sources", [])
    if not _str_list(sources):
        err("sources", "must be a list of strings (engine file @ version, a public URL, or a field report)")
        sources = []
    for i, src in enumerate(sources):
        if not SOURCE_RE.match(src.strip()):
            err(f"sources[{i}]", "not a source: write '<engine> <file> @ <version or commit>' (e.g. 'vllm "
                                 "vllm/config/speculative.py @ v0.26.0'), a public https:// URL, 'field report NNN' "
                                 "or 'artifacts/<dir>'")
    evidence, facts = _evidence(fm.get("evidence"), len(sources), err)
    examples = fm.get("examples", [])
    if not _str_list(examples):
        err("examples", "must be a list of log lines (strings)")
        examples = []
    if origin == "bundled":  # operator entries: after the timed regex check (see example_problems)
        for fieldname, msg in _signature_example_problems(sigs, examples):
            err(fieldname, msg)
    fix = fm.get("fix")
    if isinstance(fix, str) and fix.strip():
        fix = [fix]
    if not _str_list(fix) or not fix:
        err("fix", "required: a non-empty list of strings (what to try)")
        fix = []
    if errs:
        return None, errs
    entry = Entry(
        slug=slug, title=title.strip(), kind=kind, tags=tuple(tags),
        engines={k: str(v) for k, v in engines.items()}, signatures=sigs,
        applies_to=applies if isinstance(applies, dict) else {}, evidence=tuple(evidence), fix=tuple(fix),
        body=body.strip() + "\n", path=path, origin=origin,
        sha256=hashlib.sha256(text.encode()).hexdigest(), front_matter=fm,
        sources=tuple(s.strip() for s in sources), examples=tuple(examples), facts=tuple(facts),
    )
    return entry, []


def example_problems(entry: Entry, skip: Iterable[str] = ()) -> list[LintError]:
    """Lint errors for an entry whose signatures match none of its ``examples`` (see the module docstring).

    Bundled entries are checked while parsing; operator entries after the timed
    regex check, with the patterns it refused passed as ``skip``.
    """
    return [LintError(entry.path, f, m) for f, m in _signature_example_problems(entry.signatures, list(entry.examples), skip)]


def parse_file(path: Path, origin: str = "bundled") -> tuple[Entry | None, list[LintError]]:
    """Read and :func:`parse_entry` the file at ``path``."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, [LintError(str(path), None, f"cannot read: {exc}")]
    return parse_entry(text, str(path), origin)


def operator_dir(settings: Any) -> Path:
    """The operator's entry directory: ``settings.runbooks_dir`` or ``<home>/runbooks``."""
    return Path(settings.runbooks_dir) if getattr(settings, "runbooks_dir", None) else Path(settings.home) / "runbooks"


def _md_files(d: Path) -> list[Path]:
    return sorted(p for p in d.glob("*.md") if p.is_file() and p.name.lower() != "readme.md") if d.is_dir() else []


@dataclass
class Knowledge:
    """All entries in effect: bundled ones, overridden by slug by the operator's.

    ``entries``: slug → :class:`Entry`; ``errors``: lint errors of files left
    out; ``overridden``: slugs whose bundled entry an operator file replaced.
    """

    entries: dict[str, Entry]
    errors: list[LintError] = field(default_factory=list)
    overridden: list[str] = field(default_factory=list)

    def get(self, slug: str) -> Entry:
        """The entry ``slug`` (exact, else a unique prefix). Raises NotFound."""
        if slug in self.entries:
            return self.entries[slug]
        hits = [s for s in self.entries if s.startswith(slug)]
        if len(hits) == 1:
            return self.entries[hits[0]]
        raise NotFound(f"no runbook entry {slug!r}" + (f" (ambiguous: {', '.join(hits[:5])})" if hits else ""),
                       "dynocell runbook search WORDS lists matching entries")

    def for_rule(self, rule: str) -> list[str]:
        """Slugs whose ``signatures.rules`` name doctor rule ``rule``."""
        return sorted(s for s, e in self.entries.items() if rule in e.signatures.get("rules", []))

    def for_signature(self, signature_id: str) -> list[str]:
        """Slugs whose ``signatures.ids`` name failure signature ``signature_id``."""
        return sorted(s for s, e in self.entries.items() if signature_id in e.signatures.get("ids", []))

    def for_log(self, lines: Iterable[str], max_line: int = 4000) -> dict[str, list[str]]:
        """``{slug: [first matching line, …]}`` for entries whose log regexes match any line (lines cut to ``max_line`` chars)."""
        compiled = [(s, re.compile(p)) for s, e in self.entries.items() for p in e.signatures.get("log", [])]
        hits: dict[str, list[str]] = {}
        for line in lines:
            line = line[:max_line]
            for slug, rx in compiled:
                if rx.search(line) and len(hits.setdefault(slug, [])) < 3:
                    hits[slug].append(line.rstrip("\n"))
        return hits

    def for_metrics(self, metrics: dict[str, float]) -> list[str]:
        """Slugs with a ``signatures.metrics`` list all of whose conditions hold for ``metrics``."""
        out = []
        for slug, e in self.entries.items():
            conds = e.signatures.get("metrics") or []
            if conds and all(_metric_holds(metrics.get(c["metric"]), c) for c in conds):
                out.append(slug)
        return sorted(out)

    def for_config(self, cfg: Any, engine_version: str | None = None) -> list[Entry]:
        """Known traps for a config: entries whose ``applies_to`` selects ``cfg`` (and whose engine range admits ``engine_version``)."""
        out = []
        engine = getattr(cfg, "engine", None)
        for e in self.entries.values():
            if not selector_matches(e.applies_to, cfg):
                continue
            if e.engines and engine and engine not in e.engines:
                continue
            if engine_version and engine in e.engines and not version_in_range(engine_version, e.engines[engine]):
                continue
            out.append(e)
        return sorted(out, key=lambda e: (KINDS.index(e.kind) if e.kind in KINDS else 9, e.slug))


def _metric_holds(value: Any, cond: dict[str, Any]) -> bool:
    if value is None:
        return False
    return _cond_holds(value, {k: v for k, v in cond.items() if k != "metric"})


def load_knowledge(operator: Path | None = None, bundled: Path = BUNDLED_DIR) -> Knowledge:
    """Load bundled entries, then the operator directory's (same slug → operator wins).

    Files that fail lint are left out and listed in ``errors``; two bundled (or
    two operator) files with one slug are an error on the second. Operator
    entries' log regexes also get the timed check (:func:`slow_patterns`): one
    that backtracks catastrophically is refused here, before any log line
    reaches it (bundled entries are linted in the test suite).
    """
    entries: dict[str, Entry] = {}
    errors: list[LintError] = []
    overridden: list[str] = []
    for origin, d in (("bundled", bundled), ("operator", operator)):
        if d is None:
            continue
        seen: dict[str, str] = {}
        parsed = [(path, *parse_file(path, origin)) for path in _md_files(Path(d))]
        slow = slow_patterns(p for _, e, _ in parsed if e is not None for p in e.signatures.get("log", [])) \
            if origin == "operator" else {}
        for path, entry, errs in parsed:
            errors.extend(errs)
            if entry is None:
                continue
            bad = [(i, p) for i, p in enumerate(entry.signatures.get("log", [])) if p in slow]
            if bad:
                errors.extend(LintError(str(path), f"signatures.log[{i}]", slow[p]) for i, p in bad)
                continue
            if origin == "operator":
                ex = example_problems(entry, slow)
                if ex:
                    errors.extend(ex)
                    continue
            if entry.slug in seen:
                errors.append(LintError(str(path), "slug", f"duplicate slug {entry.slug!r} (also in {seen[entry.slug]})"))
                continue
            seen[entry.slug] = str(path)
            if origin == "operator" and entry.slug in entries:
                overridden.append(entry.slug)
            entries[entry.slug] = entry
    return Knowledge(entries=entries, errors=errors, overridden=sorted(overridden))


_BUNDLED_CACHE: Knowledge | None = None


def bundled_knowledge() -> Knowledge:
    """The bundled entries only (cached for the process)."""
    global _BUNDLED_CACHE
    if _BUNDLED_CACHE is None:
        _BUNDLED_CACHE = load_knowledge(None)
    return _BUNDLED_CACHE


def knowledge_for(settings: Any) -> Knowledge:
    """Entries in effect for ``settings`` (bundled + :func:`operator_dir`)."""
    return load_knowledge(operator_dir(settings))


def lint_paths(paths: Iterable[Path], timed: bool = True) -> tuple[list[Entry], list[LintError]]:
    """Lint files and directories (``*.md`` inside): ``(valid entries, errors)``.

    With ``timed`` each log regex also runs against 10 kB adversarial strings
    under a time limit (:func:`regex_timing_problems`), and then — the patterns
    now known safe — each entry's signatures are matched against its
    ``examples`` (:func:`example_problems`; skipped without ``timed``).
    Duplicate slugs among the given files are errors.
    """
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            files.extend(_md_files(p))
        elif p.is_file():
            files.append(p)
        else:
            raise UserError(f"no such file or directory: {p}", "give entry files (*.md) or directories of them")
    entries: list[Entry] = []
    errors: list[LintError] = []
    seen: dict[str, str] = {}
    for f in files:
        entry, errs = parse_file(f, "operator")
        errors.extend(errs)
        if entry is None:
            continue
        if entry.slug in seen:
            errors.append(LintError(str(f), "slug", f"duplicate slug {entry.slug!r} (also in {seen[entry.slug]})"))
            continue
        seen[entry.slug] = str(f)
        entries.append(entry)
    if timed:
        where = {(p, e.path, i) for e in entries for i, p in enumerate(e.signatures.get("log", []))}
        slow = slow_patterns(p for p, _, _ in where)
        bad_paths = set()
        for pat, path, i in sorted(where, key=lambda t: (t[1], t[2])):
            if pat in slow:
                errors.append(LintError(path, f"signatures.log[{i}]", slow[pat]))
                bad_paths.add(path)
        entries = [e for e in entries if e.path not in bad_paths]
    slow_all = slow_patterns(p for e in entries for p in e.signatures.get("log", [])) if timed else {}
    kept = []
    for e in entries:
        ex = example_problems(e, slow_all) if timed else []
        errors.extend(ex)
        if not ex:
            kept.append(e)
    return kept, errors


# ------------------------------------------------------------------ index and search

def sync_index(store: Any, knowledge: Knowledge) -> int:
    """Write every entry in effect into ``runbook_entries`` + the FTS5 table; drop stale rows. Returns the count."""
    from dynocell.db import knowledge as dbk

    return dbk.upsert_entries(store, [e.as_row() for e in knowledge.entries.values()], replace_all=True)


def search(store: Any, knowledge: Knowledge, query: str, limit: int = 10) -> list[dict[str, Any]]:
    """Full-text search (bm25, title weighted over tags over body) after syncing the index.

    Returns ``[{slug, title, kind, score, snippet}]``, best first (lower bm25 score = better).
    Raises UserError for an empty query.
    """
    from dynocell.db import knowledge as dbk

    if not query or not re.search(r"\w", query):
        raise UserError("empty search query", "give one or more words, e.g. dynocell runbook search cuda graph")
    sync_index(store, knowledge)
    return dbk.search_entries(store, query, limit=limit)


def add_entry_file(settings: Any, source: Path) -> tuple[Entry, Path, bool]:
    """Lint ``source`` (timed regex check) and copy it into the operator directory as ``<slug>.md``.

    Returns ``(entry, destination, overrides_bundled)``. Raises UserError with the
    lint errors when the file is not a valid entry.
    """
    entries, errors = lint_paths([Path(source)])
    if errors or not entries:
        raise UserError("not a valid runbook entry:\n  " + "\n  ".join(str(e) for e in errors),
                        "fix the fields named above and run dynocell runbook lint FILE")
    entry = entries[0]
    dest_dir = operator_dir(settings)
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / f"{entry.slug}.md"
    for other in _md_files(dest_dir):  # one file per slug in the operator directory
        if other != dest:
            e, _ = parse_file(other, "operator")
            if e is not None and e.slug == entry.slug:
                other.unlink()
    dest.write_bytes(Path(source).read_bytes())
    return entry, dest, entry.slug in bundled_knowledge().entries


# ------------------------------------------------------------------ notes

NOTE_KINDS = ("config", "boot", "run", "entry", "experiment")


def resolve_note_target(store: Any, knowledge: Knowledge, target: str) -> tuple[str, str]:
    """Resolve ``TARGET`` to ``(kind, id)``.

    Accepts ``kind:ID`` (kind in config, boot, run, entry, experiment) or a bare
    id tried as entry slug, run id prefix, boot id prefix, config name, config
    hash prefix, experiment name. Raises NotFound when nothing or more than one
    thing matches.
    """
    from dynocell.db import knowledge as dbk

    if ":" in target and target.split(":", 1)[0] in NOTE_KINDS:
        kind, ident = target.split(":", 1)
        if kind == "entry":
            return kind, knowledge.get(ident).slug
        found = dbk.resolve_target(store, kind, ident)
        if not found:
            raise NotFound(f"no {kind} matches {ident!r}",
                           f"list them with `{_LIST_COMMANDS.get(kind, 'dynocell --help')}`, or check the id")
        return kind, found
    hits: list[tuple[str, str]] = []
    if target in knowledge.entries:
        hits.append(("entry", target))
    for kind in ("run", "boot", "config", "experiment"):
        found = dbk.resolve_target(store, kind, target)
        if found:
            hits.append((kind, found))
    if not hits:
        raise NotFound(f"nothing matches {target!r}",
                       "write KIND:ID, e.g. run:0a1b…, boot:…, config:NAME, entry:SLUG, experiment:NAME")
    if len(hits) > 1:
        raise NotFound(f"{target!r} is ambiguous: " + ", ".join(f"{k}:{i}" for k, i in hits),
                       "prefix it with the kind, e.g. run:" + target)
    return hits[0]


def list_notes(cell: Any, kind: str, ident: str) -> list[dict[str, Any]]:
    """Notes attached to ``(kind, ident)``, oldest first (for faces, which never touch the store)."""
    from dynocell.db import knowledge as dbk

    return dbk.list_notes(cell.store, kind, ident)


def add_note(cell: Any, kind: str, ident: str, text: str) -> dict[str, Any]:
    """Attach a timestamped note to ``(kind, ident)``; returns the stored note."""
    from dynocell.db import knowledge as dbk

    return dbk.add_note(cell.store, kind, ident, text)
