"""References for the faces: the one resolver (:mod:`dynocell.db.refs`) over a cell's store.

Faces never import ``dynocell.db``; they call :func:`resolve` here. See :mod:`dynocell.db.refs`
for the rule (exact key, else a unique prefix of at least ``MIN_PREFIX`` characters) and the
errors (``AmbiguousRef`` listing candidates with their kinds, ``NotFound`` naming what to try).
"""

from __future__ import annotations

from typing import Any, Iterable

from dynocell.db.refs import KINDS, MIN_PREFIX, AmbiguousRef, Ref, candidates, resolve as _resolve

__all__ = ["KINDS", "MIN_PREFIX", "AmbiguousRef", "Ref", "candidates", "resolve", "resolve_key"]


def resolve(cell: Any, ref: str, kinds: Iterable[str] | str | None = None) -> Ref:
    """The one record of ``kinds`` that ``ref`` names in ``cell.store`` (see :func:`dynocell.db.refs.resolve`)."""
    return _resolve(cell.store, ref, kinds)


def resolve_key(cell: Any, ref: str, kind: str) -> str:
    """The key (id, full hash, name, slug) of the one ``kind`` record ``ref`` names. Raises NotFound."""
    return _resolve(cell.store, ref, (kind,)).key
