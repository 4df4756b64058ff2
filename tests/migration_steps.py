"""What the per-migration tests share: move a real store (SQLite or PostgreSQL) to one Alembic revision."""

from __future__ import annotations

from alembic import command

from dynocell.db.session import Store, alembic_config


def migrate(store: Store, revision: str, how: str = "downgrade") -> None:
    """``alembic downgrade|upgrade REVISION`` on ``store``'s database, in one transaction of its engine."""
    cfg = alembic_config(store.url)
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        getattr(command, how)(cfg, revision)
