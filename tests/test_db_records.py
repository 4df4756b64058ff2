"""One kind of value from db/ reads (issue 23): every converted read returns a frozen ``rows.Record``
whose ``to_dict()`` is the plain ``{column: value}`` the faces print as JSON — on a real SQLite store."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dynocell.db import builds as dbb, configs as dbc, hosts as dbh, imports as dbi
from dynocell.db.rows import Record
from dynocell.db.session import Store
from dynocell.db.tables import Host, ImportRecord

INVENTORY = {"hostname": "rig", "os": "Linux", "cpu": "x86_64", "cpu_count": 2, "memory_bytes": 8 << 30,
             "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_mib": 143771}], "cuda": "12.8",
             "engine_versions": {"sglang": "0.5.17"}}


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'cell' / 'dynocell.db'}")


def _columns(table) -> set[str]:
    return {c.key for c in table.__table__.columns}


def _is_frozen_record(row) -> bool:
    if not isinstance(row, Record):
        return False
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(row, dataclasses.fields(row)[0].name, None)
    return True


def test_hosts_are_records_with_every_column(store: Store):
    written = dbh.upsert_host(store, "m-1", INVENTORY)
    row = dbh.get_host(store, "m-1")
    assert _is_frozen_record(row) and _is_frozen_record(written) and dbh.list_hosts(store) == [row]
    assert set(row.to_dict()) == _columns(Host)
    assert row.to_dict()["gpus"] == INVENTORY["gpus"] and row.hostname == "rig"
    assert dbh.get_host(store, "m-2") is None


def test_imports_are_records_and_the_same_source_is_found_again(store: Store):
    files = [{"path": "a.log", "size": 3, "sha256": "ab" * 32}]
    rec, created = dbi.record_import(store, kind="metrics", sha256="ab" * 32, files=files, summary={"n": 1})
    again, created_again = dbi.record_import(store, kind="metrics", sha256="ab" * 32, files=files, summary={"n": 2})
    assert created and not created_again
    found = dbi.find_import(store, "metrics", "ab" * 32)
    assert _is_frozen_record(rec) and _is_frozen_record(found) and again == found
    assert rec.id == found.id and found.summary == {"n": 1} and dbi.list_imports(store) == [found]
    assert set(rec.to_dict()) == _columns(ImportRecord)


def test_configs_and_builds_are_records(store: Store):
    dbc.insert_config(store, "sha256:aa", "reference", "dynocell:tiny", "{}", "x = 1")
    dbc.add_label(store, "prod", "sha256:aa")
    dbb.insert_build(store, "sha256:bb", "sglang", "0.5.17", ["p1"], {"k": 1}, "/tmp/b")
    for row in (dbc.get_config(store, "sha256:aa"), dbc.label_history(store, "prod")[0],
                dbb.get_build(store, "sha256:bb")):
        assert _is_frozen_record(row)
        assert row.to_dict() == {f.name: getattr(row, f.name) for f in dataclasses.fields(row)}


def test_web_tokens_are_records_without_their_hash(store: Store):
    from dynocell.db import web as dbw
    from dynocell.db.tables import WebToken

    clear = dbw.create_token(store, "ops")
    (row,) = dbw.list_tokens(store)
    assert _is_frozen_record(row) and row.label == "ops" and row.revoked_at is None
    assert set(row.to_dict()) == _columns(WebToken) - {"token_hash"}
    assert clear not in str(row.to_dict()) and dbw.verify_token(store, clear) == row.id


def test_experiments_slots_and_pins_are_records(store: Store):
    from dynocell.db import experiments as dbx
    from dynocell.db.tables import Experiment, ExperimentRun, Pin

    dbc.insert_config(store, "sha256:inc", "reference", "dynocell:tiny", "{}", "x = 1")
    dbc.insert_config(store, "sha256:arm", "reference", "dynocell:tiny", "{}", "x = 2")
    arms = [{"role": "incumbent", "config_hash": "sha256:inc", "label": "inc"},
            {"role": "arm", "config_hash": "sha256:arm", "label": "arm"}]
    exp = dbx.create_experiment(store, name="e", incumbent_hash="sha256:inc", arms=arms, workload=None, repeats=1,
                                slots=[("sha256:inc", "incumbent", 0), ("sha256:arm", "arm", 0)])
    assert _is_frozen_record(exp) and set(exp.to_dict()) == _columns(Experiment) and exp.state == "created"
    assert dbx.create_experiment(store, name="e", incumbent_hash="sha256:inc", arms=arms, workload=None,
                                 repeats=1, slots=[]) is None
    slots = dbx.slots(store, "e")
    assert all(_is_frozen_record(x) for x in slots) and set(slots[0].to_dict()) == _columns(ExperimentRun)
    assert [(x.seq, x.role, x.state) for x in slots] == [(0, "incumbent", "pending"), (1, "arm", "pending")]
    assert dbx.update_slot(store, slots[1].id, state="failed").state == "failed"
    assert dbx.update_experiment(store, "e", state="done").state == "done" == dbx.get_experiment(store, "e").state
    assert [x.name for x in dbx.list_experiments(store)] == ["e"] == [x.name for x in
                                                                      dbx.experiments_of_config(store, "sha256:arm")]
    pin = dbx.add_pin(store, config_hash="sha256:arm", build_hash=None, note="qualified", evidence={"runs": []})
    assert _is_frozen_record(pin) and set(pin.to_dict()) == _columns(Pin) and dbx.list_pins(store)[0].id == pin.id


def test_boots_events_and_health_are_records(store: Store):
    from dynocell.db import boots as dbboots
    from dynocell.db.tables import Boot, BootEvent, HealthCheck

    dbc.insert_config(store, "sha256:cc", "reference", "dynocell:tiny", "{}", "x = 3")
    made = dbboots.create_boot(store, id="b1", config_hash="sha256:cc", engine="reference", hostname="h",
                               host="127.0.0.1", port=30000, argv="x", env={}, state="starting", log_path="/tmp/b1.log")
    moved = dbboots.update_boot(store, "b1", pid=123)
    assert dbboots.transition(store, "b1", "starting", "ready")
    row = dbboots.get_boot(store, "b1")
    assert all(_is_frozen_record(x) for x in (made, moved, row)) and set(row.to_dict()) == _columns(Boot)
    assert (made.pid, moved.pid, row.pid, row.state) == (None, 123, 123, "ready")
    assert dbboots.list_boots(store) == [row] and dbboots.list_boots(store, ("stopped",)) == []
    assert dbboots.get_boot(store, "b2") is None
    (ev,) = dbboots.events(store, "b1")
    assert _is_frozen_record(ev) and set(ev.to_dict()) == _columns(BootEvent)
    assert (ev.kind, ev.name, ev.detail) == ("state", "ready", {"from": "starting"})
    checks = [{"name": "health", "ok": True, "latency_ms": 1.0, "reason": ""}]
    h = dbboots.add_health(store, "b1", "healthy", checks)
    assert _is_frozen_record(h) and set(h.to_dict()) == _columns(HealthCheck)
    (again,) = dbboots.health_history(store, "b1")
    assert _is_frozen_record(again) and again.id == h.id and again.checks == h.checks == checks
    assert again.verdict == h.verdict == "healthy"


def test_notes_findings_and_entries_are_records(store: Store):
    from dynocell.db import knowledge as dbk
    from dynocell.db.tables import Finding, Note, RunbookEntry

    note = dbk.add_note(store, "config", "sha256:aa", "  seen twice  ")
    assert _is_frozen_record(note) and set(note.to_dict()) == _columns(Note) and note.text == "seen twice"
    assert [n.id for n in dbk.list_notes(store, "config", "sha256:aa")] == [note.id]
    assert dbk.list_notes(store, "run") == []
    (fid,) = dbk.save_findings(store, [{"rule": "r", "severity": "warning", "message": "m", "entries": ["e"]}])
    (f,) = dbk.list_findings(store)
    assert _is_frozen_record(f) and set(f.to_dict()) == _columns(Finding)
    assert (f.id, f.rule, f.evidence, f.entries, f.run_id) == (fid, "r", {}, ["e"], None)
    dbk.upsert_entries(store, [{"slug": "s", "title": "T", "kind": "problem", "tags": ["x"], "origin": "bundled",
                                "source_path": "s.md", "sha256": "00" * 32, "front_matter": {"a": 1}, "body": "b"}])
    entry = dbk.get_entry(store, "s")
    assert _is_frozen_record(entry) and set(entry.to_dict()) == _columns(RunbookEntry)
    assert entry.tags == ["x"] and dbk.list_entries(store) == [entry] and dbk.get_entry(store, "t") is None


def _old_shape(store: Store, table, key, **nested) -> dict:
    """The plain dict ``db/runs.py`` returned before its records (every column; nested rows as lists of
    dicts), read straight from the table: what ``to_dict()`` must give back."""
    from dynocell.db.rows import row_dict

    with store.session() as s:
        d = row_dict(s.get(table, key))
        for name, (child, fk, order) in nested.items():
            q = s.query(child).filter(getattr(child, fk) == key).order_by(*order)
            d[name] = [row_dict(x) for x in q.all()]
        return d


def test_runs_steps_bench_curves_profiles_phases_goldens_are_records(store: Store):
    """Every public read (and write) of ``db/runs.py`` returns a frozen record; nested rows (curve points,
    profile splits and kernels) are tuples of records, not the ORM's lists; ``to_dict()`` is the dict the
    module returned before (the JSON shape the faces print) and goes through ``json.dumps``."""
    import json

    from dynocell.db import runs as dbr
    from dynocell.db.tables import (
        AcceptanceCurve, AcceptancePoint, BenchRun, Golden, ProfileKernel, ProfilePhases, ProfileRun, ProfileSplit,
        Run, RunStep,
    )

    dbc.insert_config(store, "sha256:rr", "reference", "dynocell:tiny", "{}", "x = 4")
    made = dbr.create_run(store, id="r1", kind="run", config_hash="sha256:rr", state="running", step="config",
                          options={"temperature": 0})
    moved = dbr.update_run(store, "r1", state="completed", summary={"tau": 2.5})
    run = dbr.get_run(store, "r1")
    assert all(_is_frozen_record(x) for x in (made, moved, run)) and dbr.list_runs(store) == [run]
    assert (made.state, moved.state, run.summary, run.options) == ("running", "completed", {"tau": 2.5},
                                                                   {"temperature": 0})
    assert dbr.get_run(store, "r2") is None and dbr.list_runs(store, states=("running",)) == []
    dbr.end_step(store, dbr.start_step(store, "r1", "bench"), "completed", {"levels": []})
    (step,) = dbr.steps(store, "r1")
    pct = {"p50": 7.0, "p90": 7.0, "p99": 7.0}
    bench = dbr.add_bench(store, run_id="r1", concurrency=1, num_requests=3, duration_s=1.0, prompt_tokens=30,
                          completion_tokens=30, request_throughput=3.0, output_tok_s=30.0, total_tok_s=60.0,
                          ttft_ms=pct, tpot_ms=pct, itl_ms=pct, e2e_ms=pct, extra={"samples": ["a"]})
    added = dbr.add_curve(store, [(1, 0.9, 0.9), (2, 0.72, 0.8)], run_id="r1", text_class="code", num_drafts=2,
                          steps=10, tau=2.62, accept_rate=0.81, histogram=[1, 2, 7])
    (curve,) = dbr.curves(store, "r1")
    prof = dbr.create_profile(store, run_id="r1", state="running")
    dbr.finish_profile(store, prof.id, [{"rank": -1, "category": "gemm", "ms": 4.0, "pct": 80.0, "launches": 2},
                                        {"rank": -1, "category": "attention", "ms": 1.0, "pct": 20.0,
                                         "launches": 3}],
                       [{"rank": -1, "name": "sm90_gemm", "category": "gemm", "ms": 4.0, "launches": 2}],
                       state="completed", busy_pct=50.0)
    (done,) = dbr.profiles(store, run_id="r1")
    phases = dbr.put_phases(store, prof.id, {"state": "split", "source": "gpu", "total_ms": 5.0,
                                             "phases": [{"phase": "verify", "ms": 5.0}]})
    golden = dbr.put_golden(store, config_hash="sha256:rr", kind="canary", prompt_sha256="ab" * 32, prompt="p",
                            max_new_tokens=4, output_text="q", output_ids=[1, 2])
    for rec in (step, bench, added, curve, prof, done, phases, golden, dbr.get_phases(store, prof.id),
                dbr.get_golden(store, "sha256:rr", "canary", "ab" * 32, 4), *curve.points, *done.splits,
                *done.kernels):
        assert _is_frozen_record(rec), rec
    assert added == curve and [p.position for p in curve.points] == [1, 2] and curve.points[1].a_cond == 0.8
    assert isinstance(curve.points, tuple) and isinstance(done.splits, tuple) and isinstance(done.kernels, tuple)
    assert [x.category for x in done.splits] == ["gemm", "attention"] and done.state == "completed"
    assert (prof.splits, prof.kernels, prof.state) == ((), (), "running")
    assert dbr.get_phases(store, 99) is None and dbr.get_golden(store, "sha256:rr", "lossless", "ab" * 32, 4) is None

    by_pos = (AcceptancePoint.position,)
    by_rank = (ProfileSplit.rank, ProfileSplit.ms.desc())
    assert dbr.get_run(store, "r1").to_dict() == _old_shape(store, Run, "r1")
    assert step.to_dict() == _old_shape(store, RunStep, step.id)
    assert dbr.bench_rows(store, "r1")[0].to_dict() == _old_shape(store, BenchRun, bench.id)
    assert curve.to_dict() == _old_shape(store, AcceptanceCurve, curve.id,
                                         points=(AcceptancePoint, "curve_id", by_pos))
    assert done.to_dict() == _old_shape(store, ProfileRun, done.id,
                                        splits=(ProfileSplit, "profile_id", by_rank),
                                        kernels=(ProfileKernel, "profile_id", (ProfileKernel.rank,)))
    assert dbr.get_phases(store, prof.id).to_dict() == _old_shape(store, ProfilePhases, phases.id)
    assert dbr.get_golden(store, "sha256:rr", "canary", "ab" * 32, 4).to_dict() == _old_shape(store, Golden,
                                                                                              golden.id)
    shape = json.loads(json.dumps(done.to_dict(), default=str))
    assert shape["splits"][0] == {"id": done.splits[0].id, "profile_id": done.id, "rank": -1, "category": "gemm",
                                  "ms": 4.0, "pct": 80.0, "launches": 2}
    assert json.loads(json.dumps(curve.to_dict()))["points"][0]["p_uncond"] == 0.9
