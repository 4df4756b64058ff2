"""The row helpers every record module shares: an ORM row as a plain dict, insert one, update one.

Each opens its own short transaction on the :class:`~dynocell.db.session.Store`.
"""

from __future__ import annotations

from typing import Any

from dynocell.db.session import Store


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


def update(store: Store, model: type, key: Any, **values: Any) -> dict[str, Any]:
    """Set columns of the ``model`` row with primary key ``key``; returns it. Raises KeyError if absent."""
    with store.session() as s:
        obj = s.get(model, key)
        if obj is None:
            raise KeyError(key)
        for k, v in values.items():
            setattr(obj, k, v)
        s.flush()
        return row_dict(obj)
