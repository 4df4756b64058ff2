"""The row helpers every record module shares: :class:`Record` (the one kind of value db/ reads
return), an ORM row as a plain dict, insert one (or once, for content-addressed rows), update one,
read one or all as the module's record type.

Each opens its own short transaction on the :class:`~dynocell.db.session.Store`.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, TypeVar

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from dynocell.db.session import Store

T = TypeVar("T")
R = TypeVar("R", bound="Record")


@dataclass(frozen=True)
class Record:
    """Base of the records db/ modules return: a frozen dataclass whose fields are columns of one table
    (same names). :meth:`to_dict` is the plain ``{field: value}`` form for JSON output and for callers
    that merge a row into a wider dict; :meth:`of` builds one from an ORM row."""

    def to_dict(self) -> dict[str, Any]:
        """``{field: value}`` in field order (values as stored: lists/dicts are the record's own; a tuple of
        records, the rows nested under this one, as a list of their ``to_dict()``)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    @classmethod
    def of(cls: type[R], obj: Any, **given: Any) -> R:
        """The record of ORM row ``obj`` (each field read from the column of the same name; fields in
        ``given``, e.g. nested rows read by another query, taken from there instead)."""
        return cls(**{f.name: given[f.name] if f.name in given else getattr(obj, f.name) for f in fields(cls)})


def _plain(value: Any) -> Any:
    """``value`` for :meth:`Record.to_dict`: a tuple of records (records keep nested rows as tuples; an empty
    one too) becomes a list of dicts, the rest is kept."""
    if isinstance(value, tuple) and all(isinstance(v, Record) for v in value):
        return [v.to_dict() for v in value]
    return value


def row_dict(obj: Any) -> dict[str, Any]:
    """Every column of the ORM row ``obj`` as ``{column: value}``."""
    return {c.key: getattr(obj, c.key) for c in obj.__table__.columns}


def insert(store: Store, model: type, **values: Any) -> dict[str, Any]:
    """Insert one ``model`` row with ``values`` (its columns); returns it as :func:`row_dict`."""
    with store.session() as s:
        obj = model(**values)
        s.add(obj)
        s.flush()
        return row_dict(obj)


def update_as(store: Store, model: type, key: Any, convert: Callable[[Any], T], **values: Any) -> T:
    """Set columns of the ``model`` row with primary key ``key``; returns ``convert(row)``.
    Raises KeyError if absent."""
    with store.session() as s:
        obj = get_or_raise(s, model, key, **values)
        s.flush()
        return convert(obj)


def get_or_raise(s: Session, model: type, key: Any, **values: Any) -> Any:
    """The ``model`` row with primary key ``key`` in session ``s``, with ``values`` set on it.
    Raises KeyError if absent."""
    obj = s.get(model, key)
    if obj is None:
        raise KeyError(key)
    for k, v in values.items():
        setattr(obj, k, v)
    return obj


def insert_once(store: Store, model: type, key: Any, **values: Any) -> bool:
    """Insert-or-ignore of a content-addressed row (primary key ``key``, e.g. a ``sha256:`` hash):
    True when this call wrote it, False when it was stored already (also when a concurrent writer
    stored the same key first)."""
    with store.session() as s:
        if s.get(model, key) is not None:
            return False
    try:
        with store.session() as s:
            s.add(model(**values))
    except IntegrityError:  # a concurrent writer stored the same key first
        return False
    return True


def get_as(store: Store, model: type, key: Any, convert: Callable[[Any], T]) -> T | None:
    """``convert(row)`` of the ``model`` row with primary key ``key``, or None."""
    with store.session() as s:
        row = s.get(model, key)
        return convert(row) if row is not None else None


def newest_first(store: Store, model: type[Any], convert: Callable[[Any], T]) -> list[T]:
    """``convert(row)`` of every ``model`` row, newest ``created_at`` first."""
    with store.session() as s:
        return [convert(r) for r in s.scalars(select(model).order_by(model.created_at.desc()))]
