"""The knowledge in effect: bundled entries overridden by the operator's by slug, and its lookups
(by slug, by failure signature, by doctor rule, by config).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from dynocell.errors import NotFound
from dynocell.runbooks.knowledge.entry import BUNDLED_DIR, KINDS, Entry, LintError
from dynocell.runbooks.knowledge.lint import (
    md_files, example_problems, operator_dir, parse_file,
)
from dynocell.runbooks.knowledge.regex import slow_patterns
from dynocell.runbooks.knowledge.selectors import cond_holds, selector_matches
from dynocell.runbooks.knowledge.versions import version_in_range


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
        """The entry ``slug``: exact, else a unique prefix of at least
        :data:`~dynocell.db.refs.MIN_PREFIX` characters (the one resolver's rule, so CLI and web agree).
        Raises :class:`~dynocell.db.refs.AmbiguousRef` listing the entries a prefix names, NotFound else."""
        from dynocell.db.refs import MAX_REF, MIN_PREFIX, AmbiguousRef, Ref

        if slug in self.entries:
            return self.entries[slug]
        hits = sorted(s for s in self.entries if s.startswith(slug)) if len(slug) >= MIN_PREFIX else []
        if len(hits) == 1:
            return self.entries[hits[0]]
        if hits:
            raise AmbiguousRef(slug, [Ref("entry", s) for s in hits])
        short = f" (a prefix needs at least {MIN_PREFIX} characters)" if len(slug) < MIN_PREFIX else ""
        raise NotFound(f"no runbook entry {slug[:MAX_REF]!r}{short}",
                       "dynocell runbook search WORDS lists matching entries")

    def for_rule(self, rule: str) -> list[str]:
        """Slugs whose ``signatures.rules`` name doctor rule ``rule``."""
        return sorted(s for s, e in self.entries.items() if rule in e.signatures.get("rules", []))

    def for_signature(self, signature_id: str) -> list[str]:
        """Slugs whose ``signatures.ids`` name failure signature ``signature_id``."""
        return sorted(s for s, e in self.entries.items() if signature_id in e.signatures.get("ids", []))

    def for_log(self, lines: Iterable[str], max_line: int = 4000) -> dict[str, list[str]]:
        """``{slug: [first matching line, …]}`` for entries whose log regexes match any line (lines cut to
        ``max_line`` chars)."""
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
        """Known traps for a config: entries whose ``applies_to`` selects ``cfg`` (and whose engine range
        admits ``engine_version``)."""
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
    return cond_holds(value, {k: v for k, v in cond.items() if k != "metric"})


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
        parsed = [(path, *parse_file(path, origin)) for path in md_files(Path(d))]
        slow = (
            slow_patterns(p for _, e, _ in parsed if e is not None for p in e.signatures.get("log", []))
            if origin == "operator"
            else {}
        )
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
                errors.append(
                    LintError(str(path), "slug", f"duplicate slug {entry.slug!r} (also in {seen[entry.slug]})")
                )
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
