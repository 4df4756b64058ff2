"""The one resolver of references: which stored config, build, boot, run, experiment or runbook
entry a string a person typed names.

One rule for every kind and every face (CLI, TUI, web, procedures):

1. an exact key wins: a boot or run id, a full config or build hash (``sha256:`` optional,
   any case; before a label spelled like it), a config label (its newest row), an experiment name, a runbook entry slug;
2. else a *prefix* of at least :data:`MIN_PREFIX` characters of an id, hash or entry slug (hashes
   compared in lower case, ``sha256:`` optional) names the one record it starts (experiment names
   are never abbreviated; ``Knowledge.get`` applies the same rule to the entries in effect);
3. more than one candidate (of one kind or across the kinds asked for) →
   :class:`AmbiguousRef` listing the candidates and their kinds; nothing →
   :class:`~dynocell.errors.NotFound` naming the reference and the command that lists
   the kinds asked for (``dynocell runs``, ``dynocell ps --all`` …).

Paths to ``.toml`` files are not references here (a procedure that accepts a path checks
for one first; a web request never names a path).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from sqlalchemy import desc, func, select
from sqlalchemy.orm import Session

from dynocell.db.tables import Boot, Config, ConfigLabel, EngineBuild, Experiment, Run, RunbookEntry
from dynocell.db.session import Store
from dynocell.errors import NotFound, UserError

KINDS = ("config", "build", "boot", "run", "experiment", "entry")
"""Every kind of record a reference can name."""

MIN_PREFIX = 4
"""Fewest characters of an id or hash (after ``sha256:``) that count as a prefix."""

MAX_REF = 200
"""Most characters a reference may have: no key is longer (ids ≤ 32, ``sha256:`` hashes 71, labels,
experiment names and slugs ≤ 200), so a longer one names nothing and is never looked up (a LIKE
pattern of 50,000 characters is "too complex" for SQLite)."""

HASH_PREFIX = "sha256:"

LIST_COMMANDS = {
    "config": "dynocell config list",
    "build": "dynocell engine list",
    "boot": "dynocell ps --all",
    "run": "dynocell runs",
    "experiment": "dynocell experiment list",
    "entry": "dynocell runbook search",
}
"""The command that lists each kind (named in not-found errors)."""


@dataclass(frozen=True)
class Ref:
    """A resolved reference: ``kind`` (one of :data:`KINDS`) and ``key`` (its primary key:
    id, full ``sha256:`` hash, experiment name or entry slug)."""

    kind: str
    key: str

    @property
    def short(self) -> str:
        """The key as shown in lists: a hash's first 12 hex digits, an id or name as is."""
        return self.key.removeprefix(HASH_PREFIX)[:12] if self.key.startswith(HASH_PREFIX) else self.key


class AmbiguousRef(NotFound):
    """A reference that names more than one record; ``candidates`` lists them (HTTP 404, exit 2)."""

    def __init__(self, ref: str, candidates: list[Ref]) -> None:
        shown = ", ".join(f"{c.kind} {c.short}" for c in candidates[:8])
        more = f" and {len(candidates) - 8} more" if len(candidates) > 8 else ""
        super().__init__(f"{ref!r} is ambiguous: matches {shown}{more}",
                         "give more characters of the id or hash, or the full name")
        self.candidates = candidates


def _kinds(kinds: Iterable[str] | str | None) -> tuple[str, ...]:
    if kinds is None:
        return KINDS
    ks = (kinds,) if isinstance(kinds, str) else tuple(kinds)
    bad = [k for k in ks if k not in KINDS]
    if bad:  # a programming error, not a user's
        raise ValueError(f"unknown reference kind(s) {bad}; known: {', '.join(KINDS)}")
    return ks


def _shown(ref: str) -> str:
    """``ref`` as an error message quotes it: its first 40 characters when it is longer than that."""
    return repr(ref[:40] + "…") if len(ref) > 40 else repr(ref)


def _like(prefix: str) -> str:
    return prefix.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def _exact(s: Session, kind: str, ref: str) -> list[Ref]:
    h = HASH_PREFIX + ref.lower().removeprefix(HASH_PREFIX)
    if kind == "config":
        if s.get(Config, h) is not None:  # a full hash is never shadowed by a label spelled like it
            return [Ref("config", h)]
        lab = s.scalars(select(ConfigLabel).where(ConfigLabel.name == ref)
                        .order_by(desc(ConfigLabel.id)).limit(1)).first()
        if lab is not None:
            return [Ref("config", lab.config_hash)]
        return []
    if kind == "build":
        return [Ref("build", h)] if s.get(EngineBuild, h) is not None else []
    model = {"boot": Boot, "run": Run, "experiment": Experiment, "entry": RunbookEntry}[kind]
    return [Ref(kind, ref)] if s.get(model, ref) is not None else []


def _by_prefix(s: Session, kind: str, ref: str, limit: int) -> list[Ref]:
    if kind in ("config", "build"):
        # hashes are stored in lower case and compared exactly (substr, not LIKE: SQLite's LIKE ignores case and
        # PostgreSQL's does not), so a prefix typed in upper case resolves on both backends because it is lowered
        col = Config.config_hash if kind == "config" else EngineBuild.build_hash
        pat = HASH_PREFIX + ref.lower().removeprefix(HASH_PREFIX)
        rows = s.scalars(select(col).where(func.substr(col, 1, len(pat)) == pat).order_by(col).limit(limit))
        return [Ref(kind, k) for k in rows]
    elif kind in ("boot", "run", "entry"):
        col = {"boot": Boot.id, "run": Run.id, "entry": RunbookEntry.slug}[kind]
        pat = ref
    else:  # experiments are named, never abbreviated
        return []
    rows = s.scalars(select(col).where(col.like(_like(pat), escape="\\")).order_by(col).limit(limit))
    return [Ref(kind, k) for k in rows]


def candidates(store: Store, ref: str, kinds: Iterable[str] | str | None = None, *, limit: int = 20) -> list[Ref]:
    """Every record of ``kinds`` (default: all) that ``ref`` names under the rule of this module:
    the exact matches when there are any, else the prefix matches (at most ``limit`` per kind)."""
    with store.session() as s:
        return candidates_in(s, ref, kinds, limit=limit)


def candidates_in(s: Session, ref: str, kinds: Iterable[str] | str | None = None, *, limit: int = 20) -> list[Ref]:
    """:func:`candidates` inside an open session ``s`` (for db/ modules that read more in it)."""
    ref = ref.strip()
    ks = _kinds(kinds)
    if len(ref) > MAX_REF:
        return []
    exact = [r for k in ks for r in _exact(s, k, ref)]
    if exact or len(ref.removeprefix(HASH_PREFIX)) < MIN_PREFIX:
        return exact
    return [r for k in ks for r in _by_prefix(s, k, ref, limit)]


def resolve(store: Store, ref: str, kinds: Iterable[str] | str | None = None) -> Ref:
    """The one record of ``kinds`` (default: all of :data:`KINDS`) that ``ref`` names.

    Raises :class:`~dynocell.errors.UserError` for an empty reference,
    :class:`AmbiguousRef` when it names several (listing them with their kinds),
    :class:`~dynocell.errors.NotFound` when it names none (saying why a short prefix
    does not count, and which command lists the kinds).
    """
    with store.session() as s:
        return resolve_in(s, ref, kinds)


def resolve_in(s: Session, ref: str, kinds: Iterable[str] | str | None = None) -> Ref:
    """:func:`resolve` inside an open session ``s``."""
    ks = _kinds(kinds)
    what = " or ".join(ks) if len(ks) <= 3 else "record"
    ref = (ref or "").strip()
    if not ref:
        raise UserError(f"empty {what} reference", "give an id, a hash or unique prefix of it, or a name")
    if len(ref) > MAX_REF:
        raise NotFound(f"no {what} matches {_shown(ref)} (a reference has at most {MAX_REF} characters, "
                       f"this one {len(ref)})", "give an id, a hash or unique prefix of it, or a name")
    found = candidates_in(s, ref, ks)
    if len(found) == 1:
        return found[0]
    if found:
        raise AmbiguousRef(ref, found)
    lists = " or ".join(f"`{LIST_COMMANDS[k]}`" for k in ks)
    if len(ref.removeprefix(HASH_PREFIX)) < MIN_PREFIX:
        raise NotFound(f"no {what} matches {ref!r} (a prefix needs at least {MIN_PREFIX} characters)",
                       f"give a longer prefix, or see {lists}")
    if ks == ("config",):
        raise NotFound(f"no config named {ref!r} and no hash starting with it",
                       f"see {lists}, or add one with `dynocell config add FILE`")
    raise NotFound(f"no {what} matches {ref!r}", f"see {lists}")


def resolve_key(store: Store, ref: str, kind: str) -> str:
    """:func:`resolve` for one kind, returning the key (id, full hash, name or slug)."""
    return resolve(store, ref, (kind,)).key
