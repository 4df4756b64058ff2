"""Migration 0009_s24req_requests: ``acceptance_curves.requests`` (each request's acceptance evidence, issue
24) is added to existing curves as NULL without touching them, and dropped on downgrade with the curves kept.
Runs on SQLite always, on PostgreSQL when DYNOCELL_TEST_POSTGRES_URL is set."""

from __future__ import annotations

import json

from sqlalchemy import inspect, text

from dynocell.db.session import Store
from tests.migration_steps import migrate as _at

REV, BEFORE = "0009_s24req_requests", "0008_s24phase_phases"




def _columns(store: Store) -> set[str]:
    return {c["name"] for c in inspect(store.engine).get_columns("acceptance_curves")}


def test_requests_column_comes_and_goes_and_curves_stay(db_url: str):
    store = Store(db_url)
    _at(store, BEFORE)
    assert "requests" not in _columns(store)
    with store.engine.begin() as c:
        c.execute(text("INSERT INTO configs (config_hash, engine, model_path, canonical_json, source_toml, created_at) "
                       "VALUES ('sha256:c', 'reference', 'm', '{}', '', CURRENT_TIMESTAMP)"))
        c.execute(text("INSERT INTO runs (id, kind, config_hash, state, started_at) "
                       "VALUES ('r1', 'run', 'sha256:c', 'completed', CURRENT_TIMESTAMP)"))
        c.execute(text("INSERT INTO acceptance_curves (id, run_id, text_class, num_drafts, steps, tau, accept_rate, "
                       "histogram, completion_tokens) VALUES (3, 'r1', 'code', 2, 10, 1.5, 0.25, '[6, 3, 1]', 15)"))

    _at(store, REV, "upgrade")
    assert "requests" in _columns(store)
    with store.engine.begin() as c:
        assert c.execute(text("SELECT requests, tau FROM acceptance_curves WHERE id = 3")).one() == (None, 1.5)
        reqs = [{"index": 0, "prompt_sha256": "a" * 64, "output_sha256": "b" * 64, "output_chars": 9,
                 "spec_correct_drafts_histogram": [6, 3, 1], "spec_verify_ct": 10}]
        c.execute(text("UPDATE acceptance_curves SET requests = :r WHERE id = 3"), {"r": json.dumps(reqs)})
        got = c.execute(text("SELECT requests FROM acceptance_curves WHERE id = 3")).scalar_one()
    assert (json.loads(got) if isinstance(got, str) else got) == reqs

    _at(store, BEFORE)
    assert "requests" not in _columns(store)
    with store.engine.connect() as c:
        assert c.execute(text("SELECT text_class, tau, histogram FROM acceptance_curves WHERE id = 3")).one()[:2] == (
            "code", 1.5)
    _at(store, "head", "upgrade")
