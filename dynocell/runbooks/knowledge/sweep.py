"""The two-way sweep of entries' log regexes over real engine logs (issue 36; ``dynocell runbook lint --logs``).

A corpus manifest (TOML) names real engine logs by glob, relative to the manifest's folder::

    [[logs]]
    glob = "sglang-0.5.17/*.server.log"       # or paths = ["…/boots/<id>/engine.log", …]
    engine = "sglang"
    version = "0.5.17"          # the exact version that wrote them; "" when unknown
    healthy = true              # the boot reached ready and was stopped (no failure)

    [[skip]]                    # *.log files under the folder that are no engine log
    glob = "logs/*.log"
    reason = "hand-written signature fixtures"

    [[exempt]]                  # a signature whose real lines are only in a public excerpt
    slug = "nccl-watchdog-timeout"
    pattern = "(?i)watchdog caught collective operation timeout"
    reason = "…"
    source = "https://…"        # where the excerpt was published, or a file under the folder (a field report)
    excerpt = "the public line"

Two checks, both per entry and only over logs its ``engines`` ranges name (engine known, version inside the
range): (1) no ``signatures.log`` regex may match a line of a healthy boot's log — an entry whose regex
matches a benign line is attached to every failed boot; (2) every regex must match a line of some log of
the versions the entry names, unless exempted with a reason, a source (a public URL, or a field report
kept under the folder) and the excerpt it matches.
Lines are cut to 4,000 characters, like engine log lines elsewhere.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from dynocell.errors import UserError
from dynocell.runbooks.knowledge.entry import Entry, LintError
from dynocell.runbooks.knowledge.versions import version_in_range

LINE_MAX = 4000
#: An exact PEP 440 version: release, optional pre-release, post and dev parts (``0.5.3.post3``).
_VERSION = re.compile(r"^\d+(?:\.\d+){1,3}(?:(?:a|b|rc)\d+)?(?:\.post\d+)?(?:\.dev\d+)?$")


@dataclass(frozen=True)
class EngineLog:
    """One real engine log: its ``path``, ``engine``, exact ``version`` ("" = unknown), ``healthy`` boot."""

    path: Path
    engine: str
    version: str
    healthy: bool


@dataclass(frozen=True)
class Exemption:
    """A signature (``slug`` + ``pattern``) excused from check (2): ``reason``, ``source`` (public URL or a file
    under the manifest's folder), ``excerpt`` (the published line, which the pattern matches)."""

    slug: str
    pattern: str
    reason: str
    source: str
    excerpt: str


@dataclass(frozen=True)
class Corpus:
    """The logs of a manifest, the files it skips (with reasons) and the exemptions."""

    root: Path
    logs: tuple[EngineLog, ...]
    skipped: tuple[Path, ...]
    exemptions: tuple[Exemption, ...]


def _field(item: dict[str, Any], key: str, where: str, kind: type = str) -> Any:
    v = item.get(key)
    if not isinstance(v, kind) or (kind is str and key not in ("version",) and not str(v).strip()):
        raise UserError(f"{where}.{key}: required ({kind.__name__})", "see dynocell/runbooks/knowledge/sweep.py")
    return v


def load_corpus(manifest: Path) -> Corpus:
    """Read a corpus manifest (see the module docstring). Raises :class:`UserError` naming the field at fault."""
    try:
        data = tomllib.loads(Path(manifest).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UserError(f"cannot read the log corpus manifest {manifest}: {exc}",
                        "give a TOML file with [[logs]] tables (see dynocell/runbooks/knowledge/sweep.py)") from None
    root = Path(manifest).parent
    logs: dict[Path, EngineLog] = {}
    for i, item in enumerate(data.get("logs", [])):
        where = f"logs[{i}]"
        engine = _field(item, "engine", where)
        version, healthy = _field(item, "version", where), _field(item, "healthy", where, bool)
        if version and not _VERSION.match(version):
            raise UserError(f"{where}.version: {version!r} is no exact version", "write e.g. \"0.5.17\" or \"\"")
        if "paths" in item:
            names = _field(item, "paths", where, list)
            found = [root / n for n in names if isinstance(n, str) and ".." not in Path(n).parts]
            missing = [str(p) for p in found if not p.is_file()]
            if missing or len(found) != len(names):
                raise UserError(f"{where}.paths: no such file under {root}: {(missing or names)[0]}",
                                "list files relative to the manifest's folder")
        else:
            glob = _field(item, "glob", where)
            found = sorted(p for p in root.glob(glob) if p.is_file())
            if not found:
                raise UserError(f"{where}.glob: {glob!r} matches no file under {root}", "fix the glob or remove it")
        for p in found:
            logs[p] = EngineLog(p, engine, version, healthy)
    skipped = [p for i, item in enumerate(data.get("skip", [])) for p in root.glob(_field(item, "glob", f"skip[{i}]"))
               if _field(item, "reason", f"skip[{i}]")]
    exemptions = []
    for i, item in enumerate(data.get("exempt", [])):
        where = f"exempt[{i}]"
        ex = Exemption(*(_field(item, k, where) for k in ("slug", "pattern", "reason", "source", "excerpt")))
        local = root / ex.source
        if not ex.source.startswith("https://") and (".." in Path(ex.source).parts or not local.is_file()):
            raise UserError(f"{where}.source: must be a public https:// URL or a file under {root}",
                            "cite where the excerpt was published")
        if not re.search(ex.pattern, ex.excerpt[:LINE_MAX]):
            raise UserError(f"{where}.excerpt: the pattern does not match its own excerpt",
                            "copy the public line unchanged")
        exemptions.append(ex)
    return Corpus(root, tuple(logs.values()), tuple(sorted(set(skipped))), tuple(exemptions))


def unlisted_logs(corpus: Corpus, pattern: str = "*.log*") -> list[Path]:
    """Files under the manifest's folder named like a log that it neither lists nor skips."""
    known = {x.path for x in corpus.logs} | set(corpus.skipped)
    return sorted(p for p in corpus.root.rglob(pattern) if p.is_file() and p not in known)


def _named(entry: Entry, log: EngineLog) -> bool:
    """True when ``entry`` names ``log``'s engine and its exact version lies in that engine's range (any
    version for a ``*`` range)."""
    spec = entry.engines.get(log.engine)
    if spec is None:
        return False
    return spec.strip() in ("", "*") or (bool(log.version) and version_in_range(log.version, spec))


def _lines(path: Path) -> list[str]:
    return [line[:LINE_MAX] for line in path.read_text(encoding="utf-8", errors="replace").splitlines()]


def sweep(entries: Iterable[Entry], corpus: Corpus) -> list[LintError]:
    """Both checks of the module docstring over ``entries`` (valid, regex-safe ones); one error per finding."""
    cache: dict[Path, list[str]] = {}
    exempt = {(x.slug, x.pattern) for x in corpus.exemptions}
    errors: list[LintError] = []
    entries = list(entries)
    known = {(e.slug, p) for e in entries for p in e.signatures.get("log", [])}
    swept = {e.slug for e in entries}
    for x in corpus.exemptions:
        if x.slug in swept and (x.slug, x.pattern) not in known:
            errors.append(LintError(str(corpus.root / "engine_logs.toml"), f"exempt[{x.slug}]",
                                    f"exempts {x.pattern!r}, which is no log signature of {x.slug}: remove it"))
    for e in entries:
        pats = [p for p in e.signatures.get("log", []) if isinstance(p, str)]
        if not pats:
            continue
        logs = [x for x in corpus.logs if _named(e, x)]
        for i, pat in enumerate(pats):
            rx = re.compile(pat)
            hit_any = False
            for log in logs:
                lines = cache.setdefault(log.path, _lines(log.path))
                n, m = next(((k, m) for k, line in enumerate(lines, 1) if (m := rx.search(line))), (None, None))
                if m is None or n is None:  # both None together: no line matched
                    continue
                hit_any = True
                if log.healthy:
                    around = lines[n - 1][max(0, m.start() - 80):m.end() + 80]
                    errors.append(LintError(e.path, f"signatures.log[{i}]",
                                            f"matches line {n} of a healthy {log.engine} {log.version} boot's log "
                                            f"({log.path.relative_to(corpus.root)}): …{around!r}…; "
                                            "anchor the pattern to the failure's own wording"))
                    break
            if hit_any and (e.slug, pat) in exempt:
                errors.append(LintError(e.path, f"signatures.log[{i}]", "exempted, but real logs of the named "
                                        "versions now match it: remove its exemption"))
            if not hit_any and (e.slug, pat) not in exempt:
                named = ", ".join(f"{k} {v}" for k, v in e.engines.items() if k != "reference")
                errors.append(LintError(e.path, f"signatures.log[{i}]",
                                        f"matches no line of the real logs of the versions the entry names ({named}; "
                                        f"{len(logs)} logs): match what that version prints, or exempt it with a "
                                        "reason, a source and the excerpt"))
    return errors
