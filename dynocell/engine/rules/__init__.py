"""Phase rules and failure signatures, kept as data (TOML files next to this module).

Files:

- ``<engine>.toml`` (``sglang.toml``, ``reference.toml``): ``[[phase]]`` entries
  ``{name, regex}``; named regex groups become the phase ``detail``.
  ``ready_phase`` names the phase that means "the engine says it is ready".
- ``signatures.toml``: ``[[signature]]`` entries ``{id, title, regex (str or
  list), hint, last_phase?, ready?, context?}``; order is priority (see the
  file's header). Operators (and runbook knowledge) add files through
  ``load_signatures(extra_paths=...)``; extra entries are tried *before* the
  bundled ones so a more specific operator rule wins.

API:

- :func:`load_phase_rules` ``(engine) -> list[PhaseRule]`` (cached);
  :class:`PhaseMatcher` ``(engine).match(line) -> PhaseHit | None``;
  :func:`match_phase` ``(line, engine="sglang")``.
- :func:`load_signatures` ``(extra_paths=()) -> list[Signature]``;
  :func:`classify` ``(log_tail, *, last_phase, was_ready, exit_code, signatures=None)
  -> SignatureMatch`` (``id == "unknown"`` when nothing matches — never a guess).
- :func:`classify_log` ``(lines, engine, exit_code)``: classify a whole log file
  (e.g. a stored boot log or a real SGLang log), deriving the last phase and
  readiness from the lines themselves.
- :func:`phase_timeline` ``(lines, engine)``: phases of a log that carries
  SGLang's own ``[YYYY-mm-dd HH:MM:SS]`` timestamps, with offsets in seconds from
  the first timestamped line.

Regexes are compiled once per load. Patterns from files are checked before
use: nested unbounded repetition such as ``(a+)+`` or ``(a*)*`` (catastrophic
backtracking) is refused with :class:`~dynocell.errors.ConfigError`; lines are
cut to :data:`MAX_LINE_CHARS` and terminal escape sequences (colours, titles)
are removed before matching (:func:`match_text`).
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Iterable, Sequence

from dynocell.engine.regex_safety import nested_repeat
from dynocell.errors import ConfigError, NotFound
from dynocell.text import ESCAPE_SEQUENCE, strip_escapes

RULES_DIR = Path(__file__).parent
SIGNATURES_FILE = RULES_DIR / "signatures.toml"
MAX_LINE_CHARS = 4096
NO_PHASE = "none"

# dynocell's own log prefix (written by the supervisor): "2026-11-30T03:25:28.123Z | text"
_DYNO_PREFIX = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?Z \| ")
# SGLang's logger prefix: "[2026-11-30 03:25:28] " or "[2026-11-30 03:25:28 TP0] "
_SGLANG_TS = re.compile(r"^\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?: [^\]]*)?\] ")
# Terminal escape sequences some engines print (colour, cursor, window title): CSI, OSC, two-byte ESC.
# Bounded repeats that cannot cross another ESC keep this linear on any line.
_ANSI = ESCAPE_SEQUENCE


# ---------------------------------------------------------------- regex safety

def compile_safe(pattern: str, source: str, field_name: str) -> re.Pattern[str]:
    """Compile ``pattern`` or raise ConfigError naming ``source``/``field_name``.

    Refuses syntax errors and nested unbounded repetition (``(a+)+``,
    ``(x*y)*`` …), the shape behind catastrophic backtracking.
    """
    try:
        compiled = re.compile(pattern)
        nested = nested_repeat(pattern)
    except re.error as exc:
        raise ConfigError(source, field_name, f"bad regex {pattern!r}: {exc}", "fix the pattern") from None
    if nested:
        raise ConfigError(
            source, field_name,
            f"regex {pattern!r} nests unbounded repetition (catastrophic backtracking)",
            "remove the outer or inner + / * (e.g. write (ab)+ instead of (a+b)+)",
        )
    return compiled


def strip_prefix(line: str) -> str:
    """The engine's text of a log line: dynocell's ``<ISO time>Z | `` prefix and the newline removed."""
    line = line.rstrip("\r\n")
    m = _DYNO_PREFIX.match(line)
    return line[m.end():] if m else line


def match_text(line: str) -> str:
    """What rules see of a log line: :func:`strip_prefix`, cut to :data:`MAX_LINE_CHARS`, escape sequences removed."""
    text = strip_prefix(line)[:MAX_LINE_CHARS]
    return strip_escapes(text)


# ---------------------------------------------------------------- phases

@dataclass(frozen=True)
class PhaseRule:
    """One phase pattern: ``name`` and compiled ``regex`` (named groups → detail)."""

    name: str
    regex: re.Pattern[str]


@dataclass(frozen=True)
class PhaseHit:
    """A log line that matched a phase rule: ``name``, ``detail`` (named groups, strings), ``line``."""

    name: str
    detail: dict[str, str]
    line: str


@dataclass(frozen=True)
class PhaseRules:
    """All phase rules of one engine plus its ``ready_phase`` name."""

    engine: str
    ready_phase: str
    rules: tuple[PhaseRule, ...]


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise NotFound(f"rules file not found: {path}", "check the path") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(str(path), None, f"TOML syntax error: {exc}", "fix the line and column shown") from None


@functools.lru_cache(maxsize=None)
def load_engine_rules(engine: str) -> PhaseRules:
    """Phase rules of ``engine`` ("sglang" or "reference") from ``rules/<engine>.toml`` (cached).

    Raises NotFound for an engine without a rules file, ConfigError for a bad file.
    """
    path = RULES_DIR / f"{engine}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in RULES_DIR.glob("*.toml") if p.stem != "signatures")
        raise NotFound(f"no phase rules for engine {engine!r}", f"known engines: {', '.join(known)}")
    data = _read_toml(path)
    rules = []
    for i, entry in enumerate(data.get("phase", [])):
        where = f"phase[{i}]"
        if not isinstance(entry, dict) or "name" not in entry or "regex" not in entry:
            raise ConfigError(str(path), where, "each [[phase]] needs name and regex", "add both keys")
        rules.append(PhaseRule(entry["name"], compile_safe(entry["regex"], str(path), f"{where}.regex")))
    return PhaseRules(engine, data.get("ready_phase", "ready"), tuple(rules))


def load_phase_rules(engine: str) -> list[PhaseRule]:
    """The ``[[phase]]`` rules of ``engine`` in file order (see :func:`load_engine_rules`)."""
    return list(load_engine_rules(engine).rules)


class PhaseMatcher:
    """Matches log lines against one engine's phase rules (first matching rule wins)."""

    def __init__(self, engine: str) -> None:
        self.rules = load_engine_rules(engine)

    @property
    def ready_phase(self) -> str:
        return self.rules.ready_phase

    def match(self, line: str) -> PhaseHit | None:
        """The phase a log line reports, or None. Accepts raw or dynocell-prefixed lines."""
        text = match_text(line)
        for segment in text.split("\r"):  # tqdm progress bars share a line with log lines
            for rule in self.rules.rules:
                m = rule.regex.search(segment)
                if m:
                    detail = {k: v for k, v in m.groupdict().items() if v is not None}
                    return PhaseHit(rule.name, detail, segment)
        return None


@functools.lru_cache(maxsize=None)
def _matcher(engine: str) -> PhaseMatcher:
    return PhaseMatcher(engine)


def match_phase(line: str, engine: str = "sglang") -> PhaseHit | None:
    """Shortcut for ``PhaseMatcher(engine).match(line)`` with a cached matcher."""
    return _matcher(engine).match(line)


@dataclass(frozen=True)
class TimelineEntry:
    """A phase of a log with SGLang timestamps: offset (s) from the first timestamped line."""

    name: str
    offset_s: float
    detail: dict[str, str]
    occurrence: int


def phase_timeline(lines: Iterable[str], engine: str = "sglang") -> list[TimelineEntry]:
    """Phases of a log whose lines carry SGLang's ``[YYYY-mm-dd HH:MM:SS …]`` stamps.

    Offsets are seconds (1 s resolution, SGLang's) from the first stamped line;
    a phase line without a stamp gets the last stamp seen. ``occurrence``
    counts hits of the same phase name from 1.
    """
    matcher = _matcher(engine)
    first: datetime | None = None
    last: datetime | None = None
    counts: dict[str, int] = {}
    out: list[TimelineEntry] = []
    for line in lines:
        text = match_text(line)
        m = _SGLANG_TS.match(text)
        if m:
            last = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
            first = first or last
        hit = matcher.match(text)
        if hit:
            counts[hit.name] = counts.get(hit.name, 0) + 1
            off = (last - first).total_seconds() if (first and last) else 0.0
            out.append(TimelineEntry(hit.name, off, hit.detail, counts[hit.name]))
    return out


def phase_marks(pairs: Iterable[tuple[str, float | None]]) -> dict[str, float]:
    """``{phase name: offset (s)}`` of a boot's phases, given as ``(name, offset)`` in log order.

    The one rule for a phase reached several times — once per model (target, then the draft worker's
    model: ``weights_begin``/``weights_end``, ``kv_cache_allocated``…), per rank, or per capture pass: it
    counts at its **last** occurrence, the moment the boot has done it for everything it loads (the
    draft's ``weights_end`` ends loading). Offsets that are None (a line before any timestamp) are
    skipped. Used by ``import log`` (each node's timeline, skew, ready) and ``compare`` (phase ends).

    Except :data:`FIRST_OCCURRENCE` (``ready``): the boot was ready at its first ready line, as
    :func:`dynocell.engine.logfile.read_log` says; a later one is a re-announcement or a restart of the
    server within the same log, not a slower boot (issue 38, survivor 5).
    """
    marks: dict[str, float] = {}
    for name, off in pairs:
        if off is not None and not (name in FIRST_OCCURRENCE and name in marks):
            marks[name] = off
    return marks


#: Phases that count at their first occurrence in :func:`phase_marks`.
FIRST_OCCURRENCE = frozenset({"ready"})


# ---------------------------------------------------------------- signatures

@dataclass(frozen=True)
class Signature:
    """One failure-signature entry (see ``signatures.toml`` for field meanings)."""

    id: str
    title: str
    hint: str
    regexes: tuple[re.Pattern[str], ...]
    last_phase: tuple[str, ...] | None = None
    ready: bool | None = None
    context: tuple[re.Pattern[str], ...] = ()
    source: str = ""
    phase: str | None = None


#: The phases a boot goes through, in order (issue 35): what a failure is classified by before any signature
#: refines it. ``serving`` = after the engine was ready.
FAILURE_PHASES = ("config_check", "weight_load", "kv_cache_sizing", "cuda_graph_capture", "warmup", "serving")
#: A boot phase rule's name (rules/<engine>.toml) → the failure phase a failure right after it belongs to.
_AFTER_PHASE = {
    "config": "config_check", "engine_init": "weight_load", "weights_begin": "weight_load",
    "weights_end": "kv_cache_sizing", "compile_begin": "kv_cache_sizing", "compile_end": "kv_cache_sizing",
    "kv_cache_allocated": "cuda_graph_capture", "memory_pool_end": "cuda_graph_capture",
    "cuda_graph_begin": "cuda_graph_capture", "cuda_graph_end": "warmup", "engine_ready": "warmup",
    "http_listening": "warmup", "ready": "serving",
}
#: Traceback frames and engine lines that say which phase a failure came in (the engines' function names:
#: vLLM ``create_engine_config`` / ``_verify_args``, ``load_weights`` / ``load_model``,
#: ``determine_num_available_blocks`` / ``profile_run``, ``capture_model`` / ``torch.cuda.graph``,
#: ``warmup_kernels`` / ``compile_or_warm_up_model``; SGLang ``check_server_args``, ``init_memory_pool``,
#: ``CudaGraphRunner``), tried from the last phase back.
_PHASE_FRAMES = (
    ("warmup", re.compile(r"warmup_kernels|warm_?up_model|_warmup\b|kernel_warmup")),
    ("cuda_graph_capture", re.compile(r"capture_model|capture_end\(|torch\.cuda\.graph\(|CudaGraphRunner|"
                                      r"cuda_graph_runner|Capturing CUDA graph|Capture cuda graph")),
    ("kv_cache_sizing", re.compile(r"determine_num_available_blocks|profile_run|init_memory_pool|"
                                   r"KV cache (?:is )?needed|Available KV cache memory|GPU KV cache size")),
    ("weight_load", re.compile(r"load_weights|load_model\b|Loading (?:safetensors|pt) checkpoint shards|"
                               r"Load weight begin|Loading drafter model")),
    ("config_check", re.compile(r"create_engine_config|_verify_args|verify_with_parallel_config|"
                                r"check_server_args|error: (?:unrecognized )?argument")),
)


def failure_phase(lines: Sequence[str], last_phase: str | None, was_ready: bool,
                  signature_phase: str | None = None) -> str | None:
    """The phase a failure came in (one of :data:`FAILURE_PHASES`), or None when nothing says.

    In order: after ready = ``serving``; the signature's own phase (``phase`` in signatures.toml: a config
    refusal is ``config_check`` whatever the log shows); the latest phase named by the tail's traceback frames
    or engine lines (:data:`_PHASE_FRAMES`); the phase after the last boot phase line reached. ``lines``: the
    log tail (engine text)."""
    if was_ready:
        return "serving"
    if signature_phase:
        return signature_phase
    found = [name for name, rx in _PHASE_FRAMES if any(rx.search(t) for t in lines)]
    if found:
        return max(found, key=FAILURE_PHASES.index)
    return _AFTER_PHASE.get(last_phase or "")


@dataclass(frozen=True)
class SignatureMatch:
    """Result of :func:`classify`: ``id`` (``unknown`` when nothing matched), ``title``,
    ``hint``, ``groups`` (named regex groups of the matched line), ``line`` (the
    matched line or None), ``source`` (rules file), ``phase`` (:func:`failure_phase`: the phase the
    failure came in, None when nothing says)."""

    id: str
    title: str
    hint: str
    groups: dict[str, str] = field(default_factory=dict)
    line: str | None = None
    source: str = ""
    phase: str | None = None

    @property
    def known(self) -> bool:
        return self.id != "unknown"

    def as_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (for storing on a boot row)."""
        return {"id": self.id, "title": self.title, "hint": self.hint, "groups": dict(self.groups),
                "line": self.line, "source": self.source, "phase": self.phase}


UNKNOWN = SignatureMatch(
    "unknown", "Unknown failure", "no failure signature matched: read the log tail and add a signature if it recurs"
)


def _as_list(v: Any) -> list[Any]:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def _parse_signatures(path: Path) -> list[Signature]:
    data = _read_toml(path)
    out = []
    for i, e in enumerate(data.get("signature", [])):
        where = f"signature[{i}]"
        if not isinstance(e, dict):
            raise ConfigError(str(path), where, "must be a table", "write [[signature]] entries")
        for key in ("id", "title", "regex", "hint"):
            if key not in e:
                raise ConfigError(str(path), f"{where}.{key}", "missing", "each signature needs id, title, regex, hint")
        unknown_keys = set(e) - {"id", "title", "regex", "hint", "last_phase", "ready", "context", "phase"}
        if unknown_keys:
            raise ConfigError(str(path), f"{where}.{sorted(unknown_keys)[0]}", "unknown key",
                              "keys: id, title, regex, hint, last_phase, ready, context, phase")
        if e.get("phase") is not None and e["phase"] not in FAILURE_PHASES:
            raise ConfigError(str(path), f"{where}.phase", f"{e['phase']!r} is not a failure phase",
                              "one of " + ", ".join(FAILURE_PHASES))
        regexes = tuple(compile_safe(p, str(path), f"{where}.regex") for p in _as_list(e["regex"]))
        context = tuple(compile_safe(p, str(path), f"{where}.context") for p in _as_list(e.get("context", [])))
        lp = e.get("last_phase")
        out.append(Signature(
            id=e["id"], title=e["title"], hint=e["hint"], regexes=regexes,
            last_phase=tuple(_as_list(lp)) if lp is not None else None,
            ready=e.get("ready"), context=context, source=str(path), phase=e.get("phase"),
        ))
    return out


@functools.lru_cache(maxsize=16)
def _load_cached(paths: tuple[str, ...]) -> tuple[Signature, ...]:
    sigs: list[Signature] = []
    for p in paths:
        sigs.extend(_parse_signatures(Path(p)))
    return tuple(sigs)


def load_signatures(extra_paths: Sequence[str | Path] = ()) -> list[Signature]:
    """Signatures of ``extra_paths`` (first, in order) then the bundled ``signatures.toml``.

    Compiled once per distinct list of paths (cached). Raises ConfigError for a
    bad file or pattern, NotFound for a missing extra file.
    """
    paths = tuple(str(Path(p)) for p in extra_paths) + (str(SIGNATURES_FILE),)
    return list(_load_cached(paths))


def classify(
    log_tail: Sequence[str],
    *,
    last_phase: str | None,
    was_ready: bool,
    exit_code: int | None = None,
    signatures: Sequence[Signature] | None = None,
) -> SignatureMatch:
    """Name the failure that ``log_tail`` shows, or ``unknown``.

    ``log_tail``: the last lines of the log (raw or dynocell-prefixed);
    ``last_phase``: name of the last phase reached (None = none);
    ``was_ready``: whether the engine had been ready (crash while serving);
    ``exit_code``: recorded by callers, not used by the bundled rules.
    Signatures are tried in order; for a matching signature the *last*
    matching line of the tail provides ``groups``.
    """
    sigs = signatures if signatures is not None else load_signatures()
    texts = [match_text(line) for line in log_tail]
    # Lines may hold several \r-separated segments (progress bars); match each.
    segments = [seg for t in texts for seg in t.split("\r")]
    phase = last_phase or NO_PHASE
    for sig in sigs:
        if sig.ready is not None and sig.ready != was_ready:
            continue
        if sig.last_phase is not None and phase not in sig.last_phase:
            continue
        if sig.context and not any(c.search(s) for c in sig.context for s in segments):
            continue
        for seg in reversed(segments):
            for rx in sig.regexes:
                m = rx.search(seg)
                if m:
                    groups = {k: v for k, v in m.groupdict().items() if v is not None}
                    return SignatureMatch(sig.id, sig.title, sig.hint, groups, seg, sig.source,
                                          failure_phase(segments, last_phase, was_ready, sig.phase))
    return UNKNOWN


def classify_log(
    lines: Sequence[str],
    engine: str = "sglang",
    exit_code: int | None = None,
    tail: int = 200,
    signatures: Sequence[Signature] | None = None,
) -> tuple[SignatureMatch, str | None, bool]:
    """Classify a whole log: ``(match, last_phase, was_ready)``.

    The last phase and readiness are derived from all ``lines`` with the
    engine's phase rules; the last ``tail`` lines are classified.
    """
    matcher = _matcher(engine)
    last_phase: str | None = None
    ready = False
    for line in lines:
        hit = matcher.match(line)
        if hit:
            last_phase = hit.name
            ready = ready or hit.name == matcher.ready_phase
    match = classify(list(lines)[-tail:], last_phase=last_phase, was_ready=ready,
                     exit_code=exit_code, signatures=signatures)
    return match, last_phase, ready
