"""Small read/write functions for configs and their labels (plain values in, records out).

Configs are content-addressed and immutable: :func:`insert_config` is an
insert-or-ignore by ``config_hash``. Labels are append-only rows of
``config_labels``; the newest row of a name (highest id) is where the name
points now, older rows are its history.

Every function takes a :class:`~dynocell.db.session.Store` first and opens its
own short transaction. Nothing here parses TOML or knows the config model.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from dynocell.db.tables import Config, ConfigLabel, ConfigTrust
from dynocell.db import rows
from dynocell.db.session import Store


@dataclass(frozen=True)
class StoredConfig(rows.Record):
    """One row of ``configs``: hash (``"sha256:…"``), engine, model path, canonical JSON, TOML as given."""

    config_hash: str
    engine: str
    model_path: str
    canonical_json: str
    source_toml: str
    created_at: datetime


@dataclass(frozen=True)
class LabelRow(rows.Record):
    """One row of ``config_labels``: ``name`` pointed at ``config_hash`` from ``created_at`` on."""

    id: int
    name: str
    config_hash: str
    created_at: datetime


def insert_config(store: Store, config_hash: str, engine: str, model_path: str,
                  canonical_json: str, source_toml: str) -> bool:
    """Insert a config unless its hash is already stored; True when a row was written."""
    return rows.insert_once(store, Config, config_hash, config_hash=config_hash, engine=engine,
                            model_path=model_path, canonical_json=canonical_json, source_toml=source_toml)


def get_config(store: Store, config_hash: str) -> StoredConfig | None:
    """The config with exactly this hash, or None."""
    return rows.get_as(store, Config, config_hash, StoredConfig.of)


def all_configs(store: Store) -> list[StoredConfig]:
    """Every stored config, newest first."""
    return rows.newest_first(store, Config, StoredConfig.of)


def current_target(store: Store, name: str) -> str | None:
    """The hash ``name`` points at now (its newest label row), or None if the name is unknown."""
    with store.session() as s:
        return s.scalar(
            select(ConfigLabel.config_hash).where(ConfigLabel.name == name)
            .order_by(ConfigLabel.id.desc()).limit(1)
        )


def add_label(store: Store, name: str, config_hash: str) -> bool:
    """Point ``name`` at ``config_hash`` (append a row) unless it already does; True when appended."""
    if current_target(store, name) == config_hash:
        return False
    with store.session() as s:
        s.add(ConfigLabel(name=name, config_hash=config_hash))
    return True


def current_labels(store: Store) -> dict[str, str]:
    """``{name: hash}`` for every name, where each name points now."""
    out: dict[str, str] = {}
    with store.session() as s:
        for row in s.scalars(select(ConfigLabel).order_by(ConfigLabel.id)):
            out[row.name] = row.config_hash
    return out


def label_history(store: Store, name: str) -> list[LabelRow]:
    """Every row of ``name``, oldest first (the last one is current)."""
    with store.session() as s:
        rows = s.scalars(select(ConfigLabel).where(ConfigLabel.name == name).order_by(ConfigLabel.id))
        return [LabelRow.of(r) for r in rows]


def names_ever_pointing_at(store: Store, config_hash: str) -> list[str]:
    """Names that point, or once pointed, at ``config_hash``, in order of first use."""
    with store.session() as s:
        rows = s.scalars(
            select(ConfigLabel.name).where(ConfigLabel.config_hash == config_hash).order_by(ConfigLabel.id)
        )
        return list(dict.fromkeys(rows))


def get_trust(store: Store, config_hash: str) -> tuple[str, datetime] | None:
    """``(trusted_by, trusted_at)`` of a config marked trusted, or None."""
    with store.session() as s:
        row = s.get(ConfigTrust, config_hash)
        return (row.trusted_by, row.trusted_at) if row else None


def set_trust(store: Store, config_hash: str, who: str) -> bool:
    """Mark ``config_hash`` trusted by ``who`` now; False (and the first mark kept) if already marked."""
    if get_trust(store, config_hash) is not None:
        return False
    try:
        with store.session() as s:
            s.add(ConfigTrust(config_hash=config_hash, trusted_by=who))
    except IntegrityError:  # marked by another process meanwhile
        return False
    return True
