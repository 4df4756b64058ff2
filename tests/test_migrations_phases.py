"""Migration 0008_s24phase_phases: the ``profile_phases`` table (a profile window's speculative step split by
phase, issue 24 item 3) is added next to existing profiles without touching them, and dropped on
downgrade with the profiles kept. Runs on SQLite always, on PostgreSQL when DYNOCELL_TEST_POSTGRES_URL is
set."""

from __future__ import annotations

import json

from sqlalchemy import inspect, text

from dynocell.db.session import Store
from tests.migration_steps import migrate as _at

REV, BEFORE = "0008_s24phase_phases", "0007_s23core_liveness"




def test_phase_table_comes_and_goes_and_profiles_stay(db_url: str):
    store = Store(db_url)
    _at(store, BEFORE)
    assert "profile_phases" not in inspect(store.engine).get_table_names()
    with store.engine.begin() as c:
        c.execute(text("INSERT INTO profile_runs (id, state, source, output_tokens, created_at) "
                       "VALUES (7, 'completed', 'kernel', 64, CURRENT_TIMESTAMP)"))

    _at(store, REV, "upgrade")
    cols = {c["name"] for c in inspect(store.engine).get_columns("profile_phases")}
    assert cols == {"id", "profile_id", "state", "source", "total_ms", "phases", "ranks", "reason", "created_at"}
    phases = [{"phase": "target_verify", "label": "verify", "ms": 0.58, "pct": 58.0, "launches": 2,
               "launches_per_token": 0.5, "ranges": 1}]
    with store.engine.begin() as c:
        c.execute(text("INSERT INTO profile_phases (profile_id, state, source, total_ms, phases, ranks, created_at) "
                       "VALUES (7, 'split', 'gpu', 1.0, :p, '[]', CURRENT_TIMESTAMP)"), {"p": json.dumps(phases)})
        got = c.execute(text("SELECT state, phases FROM profile_phases WHERE profile_id = 7")).one()
    assert got[0] == "split" and (json.loads(got[1]) if isinstance(got[1], str) else got[1]) == phases

    _at(store, BEFORE)
    assert "profile_phases" not in inspect(store.engine).get_table_names()
    with store.engine.connect() as c:
        assert c.execute(text("SELECT state, output_tokens FROM profile_runs WHERE id = 7")).one() == ("completed", 64)
    _at(store, "head", "upgrade")
