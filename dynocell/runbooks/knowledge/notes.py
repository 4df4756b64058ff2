"""Notes on configs, boots, runs, entries and experiments: targets by reference, list and add (the one
writer is :func:`dynocell.db.knowledge.add_note`).
"""

from __future__ import annotations

from typing import Any

from dynocell.db.knowledge import NoteRow
from dynocell.errors import NotFound
from dynocell.runbooks.knowledge.loader import Knowledge

# ------------------------------------------------------------------ notes

NOTE_KINDS = ("config", "boot", "run", "entry", "experiment")


def resolve_note_target(store: Any, knowledge: Knowledge, target: str) -> tuple[str, str]:
    """Resolve ``TARGET`` to ``(kind, id)``.

    Accepts ``kind:ID`` (kind in config, boot, run, entry, experiment) or a bare
    id tried as entry slug and then by the one resolver (:mod:`dynocell.db.refs`: run or
    boot id or prefix, config name, hash or prefix, experiment name). Raises NotFound when
    nothing matches, :class:`~dynocell.db.refs.AmbiguousRef` when more than one thing does.
    """
    from dynocell.db import refs

    if ":" in target and target.split(":", 1)[0] in NOTE_KINDS:
        kind, ident = target.split(":", 1)
        if kind == "entry":
            return kind, knowledge.get(ident).slug
        return kind, refs.resolve_key(store, ident, kind)
    kinds = ("run", "boot", "config", "experiment")
    hits = [refs.Ref("entry", target)] if target in knowledge.entries else []
    hits += refs.candidates(store, target, kinds)
    if not hits:
        try:  # the resolver's reason: unknown, a prefix too short, a reference too long
            hits = [refs.resolve(store, target, kinds)]
        except NotFound as exc:
            raise NotFound(exc.message, "write KIND:ID, e.g. run:0a1b…, boot:…, config:NAME, entry:SLUG, "
                                        "experiment:NAME") from None
    if len(hits) > 1:
        raise refs.AmbiguousRef(target, hits)
    return hits[0].kind, hits[0].key


def list_notes(cell: Any, kind: str, ident: str) -> list[NoteRow]:
    """Notes attached to ``(kind, ident)``, oldest first (for faces, which never touch the store)."""
    from dynocell.db import knowledge as dbk

    return dbk.list_notes(cell.store, kind, ident)


def add_note(cell: Any, kind: str, ident: str, text: str) -> NoteRow:
    """Attach a timestamped note to ``(kind, ident)``; returns the stored note."""
    from dynocell.db import knowledge as dbk

    return dbk.add_note(cell.store, kind, ident, text)


def add_note_by_ref(cell: Any, kind: str, ref: str, text: str) -> NoteRow:
    """:func:`add_note` to a target named by ``ref`` — an id, unique prefix, name or entry slug resolved
    as ``dynocell note KIND:REF`` resolves it (:func:`resolve_note_target`) — as the web panel's note form
    sends it. Raises UserError on an empty text, an unknown kind or more than 20000 characters (the one
    writer's checks, :func:`dynocell.db.knowledge.add_note`), NotFound for an unknown target."""
    from dynocell.runbooks.knowledge.loader import knowledge_for

    if kind in NOTE_KINDS:
        kind, ref = resolve_note_target(cell.store, knowledge_for(cell.settings), f"{kind}:{ref}")
    return add_note(cell, kind, ref, text)
