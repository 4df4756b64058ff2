"""Parsing and lint of entry files: front matter, required fields, sources and evidence, signatures
against their own examples; lint over folders.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import yaml

from dynocell.errors import UserError
from dynocell.runbooks.knowledge.entry import (
    CITATION_KEYS, CITED_PACKAGES, DOCTOR_RULES, ENGINES, EXACT_VERSION_RE, KINDS, KNOWN_FIELDS, METRIC_OPS, QUOTE_MAX,
    SIGNATURE_KEYS, SLUG_RE, SOURCE_RE, Citation, Entry, LintError,
)
from dynocell.runbooks.knowledge.regex import regex_problem, slow_patterns
from dynocell.runbooks.knowledge.selectors import validate_selector
from dynocell.runbooks.knowledge.versions import version_in_range, version_range_problem

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
        refs: list[Any] = src if isinstance(src, list) else [src]
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


Err = Callable[[Optional[str], str], None]


def _front_matter(text: str, err: Err) -> tuple[dict[str, Any], str] | None:
    """``(front matter mapping, body)`` of an entry's text, or None after reporting why not."""
    fm_text, body = split_front_matter(text)
    if fm_text is None:
        err(None, "no front matter: the file must start with a '---' line and YAML closed by another '---'")
        return None
    try:
        fm = yaml.load(fm_text, Loader=_FrontMatterLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 2}, column {mark.column + 1}" if mark else ""
        err(None, f"front matter is not valid YAML{where}: {getattr(exc, 'problem', exc)}")
        return None
    except RecursionError:
        err(None, "front matter is nested too deeply to read; write flat fields (see a bundled entry)")
        return None
    if not isinstance(fm, dict):
        err(None, "front matter must be a YAML mapping")
        return None
    return fm, body


def _identity(fm: dict[str, Any], err: Err) -> tuple[Any, Any, Any, list[str]]:
    """``(slug, title, kind, tags)`` checked: unknown fields, slug shape, title, kind, tags."""
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
    return slug, title, kind, tags


def _engines(fm: dict[str, Any], err: Err) -> dict[str, Any]:
    """The ``engines`` mapping checked: known engine names, valid version ranges."""
    engines = fm.get("engines") or {}
    if not isinstance(engines, dict):
        err("engines", "must be a mapping of engine name to version range, e.g. {sglang: \">=0.5,<0.6\"}")
        return {}
    for name, spec in engines.items():
        if name not in ENGINES:
            err(f"engines.{name}", f"unknown engine; use {', '.join(ENGINES)}")
        problem = version_range_problem(spec)
        if problem:
            err(f"engines.{name}", problem)
    return engines


def _metric_conditions(val: list[Any], err: Err) -> None:
    for i, cond in enumerate(val):
        if not isinstance(cond, dict) or not isinstance(cond.get("metric"), str):
            err(f"signatures.metrics[{i}]", "must be {metric: NAME, <op>: number}")
            continue
        ops = [k for k in cond if k != "metric"]
        if not ops or any(o not in METRIC_OPS for o in ops):
            err(f"signatures.metrics[{i}]", f"needs operators among {', '.join(METRIC_OPS)}")
        elif any(not isinstance(cond[o], (int, float)) or isinstance(cond[o], bool) for o in ops):
            err(f"signatures.metrics[{i}]", "operator values must be numbers")


def _signature_list(key: Any, val: Any, err: Err) -> bool:
    """Check one ``signatures`` key and its list; True when it is kept."""
    if key not in SIGNATURE_KEYS:
        err(f"signatures.{key}", f"unknown key; use {', '.join(SIGNATURE_KEYS)}")
        return False
    if not isinstance(val, list):
        err(f"signatures.{key}", "must be a list")
        return False
    if key in ("ids", "rules", "log") and not _str_list(val):
        err(f"signatures.{key}", "must be a list of non-empty strings")
        return False
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
        _metric_conditions(val, err)
    return True


def _signatures(fm: dict[str, Any], err: Err) -> dict[str, list[Any]]:
    """The ``signatures`` mapping checked (ids, rules, log regexes, metric conditions)."""
    sigs_raw = fm.get("signatures") or {}
    sigs: dict[str, list[Any]] = {k: [] for k in SIGNATURE_KEYS}
    if not isinstance(sigs_raw, dict):
        err("signatures", "must be a mapping with ids, rules, log, metrics")
        return sigs
    for key, val in sigs_raw.items():
        if _signature_list(key, val, err):
            sigs[key] = list(val)
    return sigs


def _citation(raw: dict[Any, Any], here: str, err: Err) -> Citation | None:
    """One mapping source checked as a :class:`Citation`, or None after reporting why not."""
    bad = 0
    for k in raw:
        if k not in CITATION_KEYS:
            err(f"{here}.{k}", f"unknown key; a citation has {', '.join(CITATION_KEYS)}")
            bad += 1
    values: list[Any] = [raw.get(k) for k in CITATION_KEYS]  # YAML's values, each checked below
    pkg, path, spec, at, quote = values
    if pkg not in CITED_PACKAGES:
        err(f"{here}.package", f"required: one of {', '.join(CITED_PACKAGES)} (the pip distribution read)")
        bad += 1
    if (not isinstance(path, str) or not path.strip() or path.startswith("/") or "\\" in path
            or ".." in path.split("/") or not path.endswith(".py")):
        err(f"{here}.file", "required: the .py file's path inside the wheel, e.g. sglang/srt/server_args.py")
        bad += 1
    problem = version_range_problem(spec) if isinstance(spec, str) and spec.strip() not in ("", "*") else (
        "required: the version range the claim states, e.g. \">=0.5.14,<0.6\"")
    if problem:
        err(f"{here}.versions", problem)
        bad += 1
    at = [str(v) for v in at] if isinstance(at, list) else at
    if not isinstance(at, list) or not at or not all(EXACT_VERSION_RE.match(v) for v in at):
        err(f"{here}.at", "required: a list of the exact released versions read, e.g. [\"0.5.14\", \"0.5.17\"]")
        bad += 1
    elif not problem and any(not version_in_range(v, spec) for v in at):
        err(f"{here}.at", f"every version read must lie in versions {spec!r}")
        bad += 1
    quotes = [quote] if isinstance(quote, str) else quote
    if (not _str_list(quotes) or not quotes
            or any("\n" in q or len(q) > QUOTE_MAX for q in quotes)):
        err(f"{here}.quote", f"required: an exact one-line excerpt of the file (≤ {QUOTE_MAX} characters), "
                             "or a list of them")
        bad += 1
    if bad:
        return None
    return Citation(pkg, path.strip(), spec.strip(), tuple(at), tuple(quotes))


def _sources(fm: dict[str, Any], err: Err) -> tuple[list[str], list[Citation]]:
    """The ``sources`` list checked: strings against :data:`SOURCE_RE`, mappings as citations
    (:data:`CITATION_KEYS`); ``(display strings, citations)``."""
    sources = fm.get("sources", [])
    if not isinstance(sources, list) or not all(
            isinstance(x, dict) or (isinstance(x, str) and x.strip()) for x in sources):
        err("sources", "must be a list of strings (engine file @ version, a public URL, or a field report) "
                       "or citations {package, file, versions, at, quote}")
        return [], []
    shown: list[str] = []
    cites: list[Citation] = []
    for i, src in enumerate(sources):
        if isinstance(src, dict):
            c = _citation(src, f"sources[{i}]", err)
            shown.append(c.label() if c else "")
            if c:
                cites.append(c)
            continue
        if not SOURCE_RE.match(src.strip()):
            err(f"sources[{i}]", "not a source: write a citation {package, file, versions, at, quote}, "
                                 "'<engine> <file> @ <version or commit>' (e.g. 'vllm "
                                 "vllm/config/speculative.py @ v0.26.0'), a public https:// URL, 'field report NNN' "
                                 "or a file of this repository (tests/data/…, gpu/…, docs/…)")
        shown.append(src.strip())
    return shown, cites


def _fix(fm: dict[str, Any], err: Err) -> list[str]:
    fix = fm.get("fix")
    if isinstance(fix, str) and fix.strip():
        fix = [fix]
    if not _str_list(fix) or not fix:
        err("fix", "required: a non-empty list of strings (what to try)")
        return []
    return fix


def parse_entry(text: str, path: str, origin: str = "bundled") -> tuple[Entry | None, list[LintError]]:
    """Parse and validate one entry; returns ``(entry or None, errors)``.

    Errors name the file and the dotted front-matter field. Regexes get the
    static check only (see :func:`lint_paths` for the timed one).
    """
    errs: list[LintError] = []

    def err(fieldname: str | None, msg: str) -> None:
        errs.append(LintError(path, fieldname, msg))

    parsed = _front_matter(text, err)
    if parsed is None:
        return None, errs
    fm, body = parsed
    slug, title, kind, tags = _identity(fm, err)
    engines = _engines(fm, err)
    sigs = _signatures(fm, err)
    applies = fm.get("applies_to") or {}
    for fieldname, msg in validate_selector(applies):
        err(fieldname, msg)
    sources, citations = _sources(fm, err)
    evidence, facts = _evidence(fm.get("evidence"), len(sources), err)
    examples = fm.get("examples", [])
    if not _str_list(examples):
        err("examples", "must be a list of log lines (strings)")
        examples = []
    if origin == "bundled":  # operator entries: after the timed regex check (see example_problems)
        for fieldname, msg in _signature_example_problems(sigs, examples):
            err(fieldname, msg)
    fix = _fix(fm, err)
    if errs:
        return None, errs
    entry = Entry(
        slug=slug, title=title.strip(), kind=kind, tags=tuple(tags),
        engines={k: str(v) for k, v in engines.items()}, signatures=sigs,
        applies_to=applies if isinstance(applies, dict) else {}, evidence=tuple(evidence), fix=tuple(fix),
        body=body.strip() + "\n", path=path, origin=origin,
        sha256=hashlib.sha256(text.encode()).hexdigest(), front_matter=fm,
        sources=tuple(sources), examples=tuple(examples), facts=tuple(facts), citations=tuple(citations),
    )
    return entry, []


def example_problems(entry: Entry, skip: Iterable[str] = ()) -> list[LintError]:
    """Lint errors for an entry whose signatures match none of its ``examples`` (see the module docstring).

    Bundled entries are checked while parsing; operator entries after the timed
    regex check, with the patterns it refused passed as ``skip``.
    """
    problems = _signature_example_problems(entry.signatures, list(entry.examples), skip)
    return [LintError(entry.path, f, m) for f, m in problems]


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


def md_files(d: Path) -> list[Path]:
    """The ``*.md`` entries of folder ``d`` (README.md excepted), sorted; [] when ``d`` is no folder."""
    return sorted(p for p in d.glob("*.md") if p.is_file() and p.name.lower() != "readme.md") if d.is_dir() else []


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
            files.extend(md_files(p))
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
