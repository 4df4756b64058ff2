"""``dynocell export`` (issue 18, item 6): runs, curves, splits and phase splits (``profile_phases``,
migration 0008) since a time, as Parquet and CSV, from every host of one store (SQLite and PostgreSQL),
read back with pyarrow / csv."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from dynocell.db import runs as db_runs
from dynocell.errors import UserError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def filled(backend_settings, tmp_path):
    """Two hosts' runs in one store: an old run (before --since) and two new ones with a curve and splits."""
    from dynocell.runbooks import hosts
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config
    from dynocell.settings import load_settings

    a, b = (open_cell(load_settings(home=tmp_path / n, machine_id=n, database_url=backend_settings.db_url))
            for n in ("host-a", "host-b"))
    config_hash = add_config(a, REPO / "examples" / "tiny.toml", None).hash
    now = datetime.now(timezone.utc)
    db_runs.create_run(a.store, id="old", kind="run", config_hash=config_hash, state="completed",
                       host_id=hosts.this_host_id(a), started_at=now - timedelta(days=30))
    for cell, rid in ((a, "newA"), (b, "newB")):
        db_runs.create_run(cell.store, id=rid, kind="run", config_hash=config_hash, state="completed",
                           host_id=hosts.this_host_id(cell), summary={"decode_tok_s": 123.5}, started_at=now)
        db_runs.add_curve(cell.store, [(1, 0.9, 0.9), (2, 0.8, 0.889)], run_id=rid, text_class="code", num_drafts=2,
                          steps=10, tau=2.7, accept_rate=0.85, histogram=[1, 1, 8], completion_tokens=27)
        prof = db_runs.create_profile(cell.store, run_id=rid, state="running", host_id=hosts.this_host_id(cell))
        db_runs.finish_profile(cell.store, prof.id, state="completed",
                               splits=[{"rank": -1, "category": "gemm", "ms": 40.0, "pct": 80.0, "launches": 10},
                                       {"rank": -1, "category": "pointwise", "ms": 10.0, "pct": 20.0, "launches": 30}])
        db_runs.put_phases(cell.store, prof.id, PHASES[rid])
    return a, config_hash


def _phase(phase, ms, pct, launches):
    return {"phase": phase, "label": phase.replace("_", " "), "ms": ms, "pct": pct, "launches": launches,
            "launches_per_token": launches / 10, "ranges": 2}


# host-a: a two-rank EAGLE window split by phase (shapes of dynocell.engine.spec_phases.phase_report);
# host-b: a vLLM window whose traces carry no phase ranges.
PHASES = {
    "newA": {"state": "split", "source": "gpu", "total_ms": 12.0, "reason": None,
             "phases": [_phase("draft", 4.0, 33.3, 20), _phase("target_verify", 8.0, 66.7, 30)],
             "ranks": [{"rank": 0, "total_ms": 6.0, "phases": [_phase("draft", 2.0, 33.3, 10),
                                                               _phase("target_verify", 4.0, 66.7, 15)]},
                       {"rank": 1, "total_ms": 6.0, "phases": [_phase("draft", 2.0, 33.3, 10),
                                                               _phase("target_verify", 4.0, 66.7, 15)]}]},
    "newB": {"state": "unavailable", "source": "gpu", "total_ms": None, "phases": [], "ranks": [],
             "reason": "no speculative phase ranges in the trace (vLLM 0.26.0)"},
}


def test_parquet_and_csv_hold_both_hosts_rows_since(filled, tmp_path):
    import pyarrow.parquet as pq

    from dynocell.runbooks.export import export, parse_since

    cell, config_hash = filled
    since = parse_since("7d")
    rep = export(cell, since, "parquet", tmp_path / "pq")
    assert rep["rows"] == {"runs": 2, "curves": 2, "splits": 4, "phases": 7}
    runs = pq.read_table(rep["files"]["runs"]).to_pylist()
    assert sorted((r["id"], r["host_id"]) for r in runs) == [("newA", "host-a"), ("newB", "host-b")]
    assert json.loads(runs[0]["summary"]) == {"decode_tok_s": 123.5} and runs[0]["started_at"] is not None
    curves = pq.read_table(rep["files"]["curves"]).to_pylist()
    assert {c["run_id"] for c in curves} == {"newA", "newB"} and json.loads(curves[0]["histogram"]) == [1, 1, 8]
    splits = pq.read_table(rep["files"]["splits"]).to_pylist()
    assert sorted({(s["host_id"], s["category"], s["pct"]) for s in splits}) == [
        ("host-a", "gemm", 80.0), ("host-a", "pointwise", 20.0), ("host-b", "gemm", 80.0), ("host-b", "pointwise",
                                                                                            20.0)]
    phases = pq.read_table(rep["files"]["phases"]).to_pylist()
    split = [(p["rank"], p["phase"], p["ms"], p["total_ms"]) for p in phases if p["host_id"] == "host-a"]
    assert split == [(-1, "draft", 4.0, 12.0), (-1, "target_verify", 8.0, 12.0), (0, "draft", 2.0, 6.0),
                     (0, "target_verify", 4.0, 6.0), (1, "draft", 2.0, 6.0), (1, "target_verify", 4.0, 6.0)]
    assert {p["run_id"] for p in phases if p["host_id"] == "host-a"} == {"newA"}
    assert phases[0]["config_hash"] == config_hash and phases[0]["launches_per_token"] == 2.0
    (none,) = [p for p in phases if p["host_id"] == "host-b"]
    assert none["state"] == "unavailable" and none["phase"] is None and "vLLM 0.26.0" in none["reason"]

    rep = export(cell, since, "csv", tmp_path / "csv", host="host-b")
    assert rep["rows"] == {"runs": 1, "curves": 1, "splits": 2, "phases": 1}
    with open(rep["files"]["runs"], newline="") as f:
        rows = list(csv.DictReader(f))
    assert [r["id"] for r in rows] == ["newB"] and rows[0]["config_hash"] == config_hash
    assert datetime.fromisoformat(rows[0]["started_at"]).tzinfo is not None
    assert not list((tmp_path / "csv").glob(".*tmp*"))  # no temporary file left


def test_bad_export_input_is_a_clear_error(settings, tmp_path, cli_env):
    from dynocell.runbooks.export import parse_since

    with pytest.raises(UserError, match="--since"):
        parse_since("last tuesday")
    assert parse_since("2026-12-01") == datetime(2026, 12, 1, tzinfo=timezone.utc)
    proc = subprocess.run([sys.executable, "-m", "dynocell", "export", "--since", "1d", "--format", "xlsx",
                           "--out", str(tmp_path / "x")], env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: --format") and "csv" in proc.stderr
    proc = subprocess.run([sys.executable, "-m", "dynocell", "export", "--since", "1d", "--format", "csv", "--json",
                           "--out", str(tmp_path / "y")], env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == {"runs": 0, "curves": 0, "splits": 0, "phases": 0}
    assert (tmp_path / "y" / "runs.csv").exists() and (tmp_path / "y" / "phases.csv").exists()
    (tmp_path / "afile").write_text("")
    proc = subprocess.run([sys.executable, "-m", "dynocell", "export", "--since", "1d", "--format", "csv",
                           "--out", str(tmp_path / "afile")], env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"Error: --out: {tmp_path / 'afile'} is a file, not a directory")


def test_parquet_without_pyarrow_names_the_extra(settings, tmp_path, cli_env):
    # A real interpreter in which pyarrow cannot be imported (a None entry in sys.modules makes import fail).
    code = ("import sys; sys.modules['pyarrow'] = None; sys.modules['pyarrow.parquet'] = None\n"
            "from dynocell.cli.app import run\n"
            f"sys.exit(run(['export', '--since', '1d', '--out', {str(tmp_path / 'z')!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "pyarrow" in proc.stderr and "dynocell[export]" in proc.stderr
    assert not (tmp_path / "z").exists()


@pytest.mark.parametrize("span", ["99999999999d", "9999999d", "999999999999999999999w"])
def test_a_span_reaching_past_year_one_exports_everything(span, tmp_path, cli_env):
    """`--since 99999999999d` was `Error: internal error: OverflowError` (newcomer pass)."""
    from dynocell.runbooks.export import parse_since

    assert parse_since(span) == datetime.min.replace(tzinfo=timezone.utc)
    proc = subprocess.run([sys.executable, "-m", "dynocell", "export", "--since", span, "--format", "csv", "--json",
                           "--out", str(tmp_path / "all")], env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["rows"] == {"runs": 0, "curves": 0, "splits": 0, "phases": 0}
