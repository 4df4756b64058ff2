"""A duplicate key is a constraint, never a corrupt store. PostgreSQL words a unique violation "Key
(config_hash)=(sha256:…) already exists"; the corrupt-store check (which reads "table … already exists" as a
half-made SQLite store) took it for one, so a `config add` racing another process for the same config was told
to move its store aside (a clean-clone CI run of three concurrent writers on PostgreSQL, 1 call of 120). Runs on
SQLite always and on PostgreSQL when DYNOCELL_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from dynocell.db import rows
from dynocell.db.session import Store, corrupt_store_error
from dynocell.db.tables import Config


def _config(h: str) -> Config:
    return Config(config_hash=h, engine="reference", model_path="m", canonical_json="{}", source_toml="")


def test_a_duplicate_key_is_raised_as_a_constraint_not_a_corrupt_store(db_url: str):
    store = Store(db_url)
    with store.session() as s:
        s.add(_config("sha256:dup"))
    # not StoreUnavailable ("corrupt or not a dynocell store")
    with pytest.raises(IntegrityError), store.session() as s:
        s.add(_config("sha256:dup"))
    # the insert-or-ignore of content-addressed rows relies on it: the second writer is told "already stored"
    assert rows.insert_once(store, Config, "sha256:dup", config_hash="sha256:dup", engine="reference",
                            model_path="m", canonical_json="{}", source_toml="") is False


def test_postgresql_wording_of_a_unique_violation_is_not_read_as_corruption():
    exc = IntegrityError("INSERT INTO configs …", {}, Exception(
        'duplicate key value violates unique constraint "pk_configs"\n'
        "DETAIL:  Key (config_hash)=(sha256:653d4ca8) already exists."))
    assert corrupt_store_error("postgresql+psycopg://u@h/db", exc) is None
