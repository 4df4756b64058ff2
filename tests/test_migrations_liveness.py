"""Migration 0007_s23core_liveness: the liveness create times leave ``failure_detail`` for their own
columns on boots (issue 23), on a real store migrated from 0006 with rows written the old way; and
back on downgrade. Runs on SQLite always, on PostgreSQL when DYNOCELL_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import json

from sqlalchemy import text

from dynocell.db.session import Store
from tests.migration_steps import migrate as _at

REV = "0007_s23core_liveness"

# (id, failure_detail as written before 0007)
OLD_ROWS = [
    ("b-healthy", {"supervisor_create_time": 1700000000.25, "engine_create_time": 1700000001.5}),
    ("b-failed", {"supervisor_create_time": 1700000002.0, "reason": "engine exited (1) before ready"}),
    ("b-plain", {"reason": "supervisor and engine gone", "last_state": "ready"}),
    ("b-none", None),
]




def _rows(store: Store, columns: str) -> dict[str, tuple]:
    with store.engine.connect() as c:
        out = {}
        for row in c.execute(text(f"SELECT id, {columns} FROM boots ORDER BY id")):
            detail = row[1]
            if isinstance(detail, str):
                detail = json.loads(detail)
            out[row[0]] = (detail, *row[2:])
        return out


def test_create_times_move_to_columns_and_back(db_url: str):
    store = Store(db_url)
    _at(store, "0006")
    with store.engine.begin() as c:
        c.execute(text("INSERT INTO configs (config_hash, engine, model_path, canonical_json, source_toml, created_at, "
                       "observed) VALUES ('sha256:c', 'sglang', 'm', '{}', '', CURRENT_TIMESTAMP, false)"))
        for boot_id, detail in OLD_ROWS:
            c.execute(text("INSERT INTO boots (id, config_hash, engine, hostname, host, argv, env, state, log_path, "
                           "started_at, failure_detail, kind) VALUES (:id, 'sha256:c', 'sglang', 'h', '127.0.0.1', "
                           "'', '{}', 'ready', '/x', CURRENT_TIMESTAMP, :d, 'started')"),
                      {"id": boot_id, "d": None if detail is None else json.dumps(detail)})

    _at(store, REV, "upgrade")
    got = _rows(store, "failure_detail, supervisor_create_time, engine_create_time")
    assert got["b-healthy"] == (None, 1700000000.25, 1700000001.5)  # nothing but liveness: the detail is gone
    assert got["b-failed"] == ({"reason": "engine exited (1) before ready"}, 1700000002.0, None)
    assert got["b-plain"] == ({"reason": "supervisor and engine gone", "last_state": "ready"}, None, None)
    assert got["b-none"] == (None, None, None)

    _at(store, "0006")
    back = _rows(store, "failure_detail")
    assert {k: v[0] for k, v in back.items()} == dict(OLD_ROWS)
    _at(store, "head", "upgrade")


def test_liveness_reads_the_columns(settings):
    """A boot row whose supervisor create time is in its column (not in failure_detail) is judged by it:
    the live pid of this process with a wrong create time is a recycled pid, not our supervisor."""
    import os

    from dynocell.engine.supervisor import process_create_time
    from dynocell.runbooks.boots import supervisor_alive

    from dataclasses import fields

    from dynocell.db.boots import BootRow

    def row(**cols):
        return BootRow(**{**{f.name: None for f in fields(BootRow)}, **cols})

    me = os.getpid()
    assert supervisor_alive(row(supervisor_pid=me + 0, supervisor_create_time=None)) is True  # this process
    other = os.getppid()
    ctime = process_create_time(other)
    assert supervisor_alive(row(supervisor_pid=other, supervisor_create_time=ctime, failure_detail=None))
    assert not supervisor_alive(row(supervisor_pid=other, supervisor_create_time=ctime - 1000.0,
                                    failure_detail={"supervisor_create_time": ctime}))
