"""The store: migrations to head on a real SQLite file and a real PostgreSQL database (the ``db_url``
fixture runs each case on both), exact schema, no model/migration drift, pragmas, FTS5 / tsvector,
and the config/label read-write functions with their procedures."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import inspect, text

from dynocell.db import configs as dbc
from dynocell.db.tables import Base
from dynocell.db.session import Store, alembic_config, head_revision, include_object, open_store
from dynocell.errors import ConfigError, NotFound, UserError

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"

# The schema at head. A change here is a deliberate schema change: add a migration too.
EXPECTED_COLUMNS: dict[str, set[str]] = {
    "acceptance_curves": {"id", "run_id", "text_class", "num_drafts", "steps", "tau", "accept_rate", "histogram",
                          "completion_tokens", "engine_tau", "engine_source", "disagreement_pct", "warning",
                          "requests"},
    "acceptance_points": {"id", "curve_id", "position", "p_uncond", "a_cond"},
    "alembic_version": {"version_num"},
    "bench_runs": {"id", "run_id", "boot_id", "text_class", "concurrency", "num_requests", "num_failed",
                   "length_mismatches", "duration_s", "prompt_tokens", "completion_tokens", "request_throughput",
                   "output_tok_s", "total_tok_s", "prefill_tok_s", "decode_tok_s", "ttft_ms", "tpot_ms", "itl_ms",
                   "e2e_ms", "extra", "created_at"},
    "boot_events": {"id", "boot_id", "ts", "offset_s", "kind", "name", "detail"},
    "boots": {"id", "config_hash", "build_hash", "engine", "hostname", "host", "host_id", "port", "node_rank", "argv",
              "env", "pid", "pgid", "supervisor_pid", "supervisor_create_time", "engine_create_time", "state",
              "last_phase", "log_path", "log_size", "log_sha256",
              "started_at", "ready_at", "ready_s", "ended_at", "exit_code", "stop_how", "stop_s", "zombies",
              "failure_signature", "failure_detail", "kind", "source_sha256"},
    "config_labels": {"id", "name", "config_hash", "created_at"},
    "config_trust": {"config_hash", "trusted_by", "trusted_at"},
    "configs": {"config_hash", "engine", "model_path", "canonical_json", "source_toml", "created_at", "observed"},
    "engine_builds": {"build_hash", "base_dist", "base_version", "patches", "manifest", "path", "created_at"},
    "experiment_runs": {"id", "experiment", "seq", "config_hash", "role", "repeat", "run_id", "state"},
    "experiments": {"name", "incumbent_hash", "arms", "workload", "repeats", "state", "verdicts", "created_at"},
    "findings": {"id", "run_id", "boot_id", "rule", "severity", "message", "evidence", "entries", "created_at"},
    "goldens": {"id", "config_hash", "kind", "prompt_sha256", "prompt", "max_new_tokens", "output_text",
                "output_ids", "created_at"},
    "imports": {"id", "kind", "sha256", "files", "config_hash", "boot_id", "run_id", "profile_id", "summary",
                "created_at"},
    "hosts": {"id", "hostname", "os", "cpu", "cpu_count", "memory_bytes", "gpus", "cuda", "engine_versions",
              "first_seen_at", "last_seen_at"},
    "health_checks": {"id", "boot_id", "ts", "verdict", "failed", "checks"},
    "notes": {"id", "target_kind", "target_id", "text", "created_at"},
    "pins": {"id", "config_hash", "build_hash", "note", "evidence", "created_at"},
    "profile_kernels": {"id", "profile_id", "rank", "name", "category", "ms", "launches"},
    "profile_runs": {"id", "run_id", "boot_id", "host_id", "state", "error", "trace_dir", "traces", "source",
                     "num_ranks",
                     "device_ms", "window_ms", "busy_pct", "launches", "graph_launches", "output_tokens",
                     "ms_per_token", "launches_per_token", "rank_skew", "warnings", "created_at"},
    "profile_splits": {"id", "profile_id", "rank", "category", "ms", "pct", "launches"},
    "profile_phases": {"id", "profile_id", "state", "source", "total_ms", "phases", "ranks", "reason", "created_at"},
    "run_steps": {"id", "run_id", "name", "state", "started_at", "ended_at", "detail", "error"},
    "runbook_entries": {"slug", "title", "kind", "tags", "origin", "source_path", "sha256", "front_matter", "body",
                        "indexed_at"},
    "runs": {"id", "kind", "config_hash", "boot_id", "build_hash", "host_id", "state", "step", "error", "pid",
             "workload",
             "workload_sha256", "options", "lossless", "lossless_detail", "breakeven", "summary", "started_at",
             "ended_at"},
    "web_tokens": {"id", "token_hash", "label", "created_at", "revoked_at", "expires_at"},
    # FTS5 virtual table (raw SQL in the migration) and the shadow tables SQLite makes for it
    "runbook_fts": {"slug", "title", "tags", "body"},
}
FTS_SHADOW = {"runbook_fts_config", "runbook_fts_content", "runbook_fts_data", "runbook_fts_docsize", "runbook_fts_idx"}


# PostgreSQL's runbook_fts is a plain table with a generated tsvector column (migration 0005_pgsearch).
PG_COLUMNS = {**EXPECTED_COLUMNS, "runbook_fts": {"slug", "title", "tags", "body", "doc"}}


@pytest.fixture
def store(db_url: str) -> Store:
    return Store(db_url)


@pytest.fixture
def sqlite_store(tmp_path: Path) -> Store:
    return Store(f"sqlite:///{tmp_path / 'cell' / 'dynocell.db'}")


def _tables_at_head(st: Store) -> set[str]:
    return set(EXPECTED_COLUMNS) | FTS_SHADOW if st.engine.dialect.name == "sqlite" else set(PG_COLUMNS)


def test_empty_database_migrates_to_head_with_exact_schema(tmp_path: Path):
    db = tmp_path / "new" / "dynocell.db"
    assert not db.exists()
    st = Store(f"sqlite:///{db}")
    assert db.exists()
    assert st.revision_before is None
    assert st.revision == head_revision() != ""
    insp = inspect(st.engine)
    tables = set(insp.get_table_names())
    assert tables == set(EXPECTED_COLUMNS) | FTS_SHADOW
    for table, columns in EXPECTED_COLUMNS.items():
        got = {c["name"] for c in insp.get_columns(table)}
        assert got == columns, f"{table}: extra {got - columns}, missing {columns - got}"
    with st.engine.connect() as c:
        sql = c.execute(text("SELECT sql FROM sqlite_master WHERE name = 'runbook_fts'")).scalar_one()
        assert "fts5" in sql.lower()
        assert c.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == head_revision()
    # a second open finds it at head and changes nothing
    again = Store(f"sqlite:///{db}")
    assert again.revision_before == again.revision == head_revision()


def test_empty_postgresql_database_migrates_to_head_with_exact_schema(pg_url: str):
    db_url = pg_url
    st = Store(db_url)
    assert st.revision_before is None and st.revision == head_revision()
    insp = inspect(st.engine)
    assert set(insp.get_table_names()) == set(PG_COLUMNS)
    for table, columns in PG_COLUMNS.items():
        got = {c["name"] for c in insp.get_columns(table)}
        assert got == columns, f"{table}: extra {got - columns}, missing {columns - got}"
    assert "runbook_fts_doc" in {i["name"] for i in insp.get_indexes("runbook_fts")}
    again = Store(db_url)
    assert again.revision_before == again.revision == head_revision()


def test_autogenerate_finds_no_difference_between_models_and_migrations(store: Store):
    with store.engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={"compare_type": True, "include_object": include_object,
                                                     "render_as_batch": conn.dialect.name == "sqlite"})
        diff = compare_metadata(ctx, Base.metadata)
    assert diff == []


def test_downgrade_to_base_and_back(store: Store):
    cfg = alembic_config(store.url)
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "base")
    assert set(inspect(store.engine).get_table_names()) == {"alembic_version"}
    with store.engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    assert set(inspect(store.engine).get_table_names()) == _tables_at_head(store)


def test_sqlite_pragmas(sqlite_store: Store):
    store = sqlite_store
    with store.engine.connect() as c:
        assert c.execute(text("PRAGMA journal_mode")).scalar_one().lower() == "wal"
        assert c.execute(text("PRAGMA foreign_keys")).scalar_one() == 1
        assert c.execute(text("PRAGMA busy_timeout")).scalar_one() == 30_000


def test_foreign_keys_enforced_and_fts_searchable(sqlite_store: Store):
    store = sqlite_store
    with pytest.raises(Exception, match="FOREIGN KEY"), store.engine.begin() as c:
        c.execute(text("INSERT INTO config_labels (name, config_hash, created_at) "
                       "VALUES ('x', 'sha256:none', '2026-01-01')"))
    with store.engine.begin() as c:
        c.execute(text("INSERT INTO runbook_fts (slug, title, tags, body) VALUES "
                       "('spec-collapse', 'Acceptance collapses', 'speculative', "
                       "'static buffers are never refreshed')"))
        hits = c.execute(text("SELECT slug FROM runbook_fts WHERE runbook_fts MATCH 'refresh'")).scalars().all()
    assert hits == ["spec-collapse"]  # porter stemming: refresh ~ refreshed


def test_open_store_is_shared_per_url(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'a.db'}"
    assert open_store(url) is open_store(url)
    # the file is a plain SQLite database other tools can read
    with sqlite3.connect(tmp_path / "a.db") as raw:
        assert raw.execute("SELECT count(*) FROM configs").fetchone() == (0,)


# ------------------------------------------------------------ db.configs

def test_insert_config_is_insert_or_ignore(store: Store):
    assert dbc.insert_config(store, "sha256:aa", "reference", "dynocell:tiny", "{}", "x = 1") is True
    assert dbc.insert_config(store, "sha256:aa", "reference", "dynocell:tiny", "{}", "changed") is False
    row = dbc.get_config(store, "sha256:aa")
    assert row is not None and row.source_toml == "x = 1"  # immutable: the first text stays
    assert dbc.get_config(store, "sha256:bb") is None
    assert [r.config_hash for r in dbc.all_configs(store)] == ["sha256:aa"]


def test_labels_keep_history(store: Store):
    for h in ("sha256:aa", "sha256:bb"):
        dbc.insert_config(store, h, "sglang", "org/m", "{}", "")
    assert dbc.current_target(store, "prod") is None
    assert dbc.add_label(store, "prod", "sha256:aa") is True
    assert dbc.add_label(store, "prod", "sha256:aa") is False  # already points there
    assert dbc.add_label(store, "prod", "sha256:bb") is True
    assert dbc.add_label(store, "prod", "sha256:aa") is True
    assert dbc.current_target(store, "prod") == "sha256:aa"
    assert [r.config_hash for r in dbc.label_history(store, "prod")] == ["sha256:aa", "sha256:bb", "sha256:aa"]
    assert dbc.current_labels(store) == {"prod": "sha256:aa"}
    assert dbc.names_ever_pointing_at(store, "sha256:bb") == ["prod"]
    # a label names its newest target through the one resolver too
    from dynocell.db import refs

    assert refs.resolve_key(store, "prod", "config") == "sha256:aa"


# ------------------------------------------------------------ runbooks.configs

@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import init, open_cell

    c = open_cell(settings)
    init(c)
    return c


def test_init_reports_paths_and_revision(settings):
    from dynocell.runbooks.cell import init, open_cell

    report = init(open_cell(settings))
    assert report["revision_before"] is None and report["revision"] == report["head"] == head_revision()
    assert report["migrated"] is True
    for key in ("home", "boots_dir", "models_dir", "builds_dir"):
        assert Path(report[key]).is_dir()
    assert report["db_url"] == settings.db_url
    assert (settings.home / "dynocell.db").exists()


def test_add_resolve_list_show_diff(cell, tmp_path: Path):
    from dynocell.engine.config import load_config
    from dynocell.runbooks import configs as rc

    rec = rc.add_config(cell, EXAMPLES / "tiny.toml")
    tiny = load_config(EXAMPLES / "tiny.toml")
    assert (rec.hash, rec.name, rec.created, rec.relabelled) == (tiny.config_hash, "tiny", True, True)
    again = rc.add_config(cell, EXAMPLES / "tiny.toml")
    assert (again.created, again.relabelled) == (False, False)

    row = dbc.get_config(cell.store, rec.hash)
    assert row.source_toml == (EXAMPLES / "tiny.toml").read_text()  # the file as given
    assert row.canonical_json == tiny.canonical_json()

    hexpart = rec.hash.removeprefix("sha256:")
    for ref in ("tiny", rec.hash, hexpart, hexpart[:4], hexpart[:6], "sha256:" + hexpart[:8], hexpart[:10].upper()):
        cfg, h = rc.resolve_config(cell, ref)
        assert h == rec.hash and cfg.config_hash == rec.hash, ref
    cfg, _ = rc.resolve_config(cell, "tiny")
    assert cfg.meta.name == "tiny" and "embedded default" in (cfg.meta.notes or "")

    with pytest.raises(NotFound, match="at least 4 characters"):
        rc.resolve_config(cell, hexpart[:3])
    with pytest.raises(NotFound, match="no config named 'nothing'"):
        rc.resolve_config(cell, "nothing")
    with pytest.raises(ConfigError, match="no such config file"):
        rc.resolve_config(cell, "missing/dir/x.toml")

    # a path is added on the fly, named by its [meta] name
    cfg, h = rc.resolve_config(cell, str(EXAMPLES / "tiny-plain.toml"))
    assert dbc.current_target(cell.store, "tiny-plain") == h

    # same content under another name: one config row, two names
    copy = tmp_path / "copy.toml"
    copy.write_text((EXAMPLES / "tiny.toml").read_text().replace('name = "tiny"', 'name = "tiny-copy"'))
    rec2 = rc.add_config(cell, copy)
    assert rec2.hash == rec.hash and rec2.created is False and rec2.name == "tiny-copy"
    listed = rc.list_configs(cell)
    assert [r["names"] for r in listed if r["hash"] == rec.hash] == [["tiny", "tiny-copy"]]
    assert {r["hash"] for r in listed} == {rec.hash, h}

    # re-label: tiny now points at an edited file; history is kept
    edited = tmp_path / "tiny.toml"
    edited.write_text((EXAMPLES / "tiny.toml").read_text().replace("num_draft_tokens = 4", "num_draft_tokens = 5"))
    rec3 = rc.add_config(cell, edited)
    assert rec3.name == "tiny" and rec3.created and rec3.relabelled and rec3.hash != rec.hash
    shown = rc.show_config(cell, rec.hash)
    assert shown["names"] == ["tiny-copy"]
    tiny_label = next(lab for lab in shown["labels"] if lab["name"] == "tiny")
    assert tiny_label["current"] is False
    assert [x["config_hash"] for x in tiny_label["history"]] == [rec.hash, rec3.hash]
    assert shown["canonical"]["speculative"]["num_draft_tokens"] == 4
    assert shown["source_toml"] == (EXAMPLES / "tiny.toml").read_text()

    d = rc.diff_configs(cell, rec.hash, "tiny")
    assert d["differences"] == [{"field": "speculative.num_draft_tokens", "a": 4, "b": 5}]
    assert rc.diff_configs(cell, "tiny-copy", rec.hash)["differences"] == []


def test_ambiguous_prefix_and_bad_name(cell, tmp_path: Path):
    from dynocell.runbooks import configs as rc

    for h in ("sha256:abcdef01" + "0" * 56, "sha256:abcdef02" + "0" * 56):
        dbc.insert_config(cell.store, h, "sglang", "org/m", '{"model_path": "org/m"}', "")
    with pytest.raises(NotFound, match="ambiguous: matches config abcdef010000, config abcdef020000"):
        rc.resolve_hash(cell, "abcdef0")
    assert rc.resolve_hash(cell, "abcdef01") == "sha256:abcdef01" + "0" * 56
    with pytest.raises(UserError, match="invalid config name"):
        rc.add_config(cell, EXAMPLES / "tiny.toml", name="bad name/with slash")
    assert dbc.current_labels(cell.store) == {}


def test_bad_files_write_nothing(cell):
    from dynocell.runbooks import configs as rc

    bad_files = sorted((Path(__file__).parent / "data" / "configs" / "bad").glob("*.toml"))
    assert len(bad_files) >= 12
    for bad in bad_files:
        with pytest.raises(ConfigError) as info:
            rc.add_config(cell, bad, name="x")
        assert info.value.exit_code == 2
    assert dbc.all_configs(cell.store) == [] and dbc.current_labels(cell.store) == {}


@pytest.mark.parametrize("url", ["mysql://u@127.0.0.1/db", "postgres://u@127.0.0.1/db", "mssql+pyodbc://h/db"])
def test_a_store_url_of_another_database_is_refused_with_the_shape_to_use(cli_env, url):
    """It said ``pip install MySQLdb`` (no such package, and no such store)."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    proc = subprocess.run([exe, "runs"], env={**cli_env, "DYNOCELL_DATABASE_URL": url}, capture_output=True,
                          text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2 and proc.stderr.startswith("Error: database_url: ")
    assert "is not a store dynocell supports" in proc.stderr
    assert "hint: set DYNOCELL_DATABASE_URL=postgresql+psycopg://" in proc.stderr and "pip install" not in proc.stderr


@pytest.mark.parametrize("command", [["runs"], ["show", "abc"], ["ps"], ["logs", "abc"]])
def test_read_only_commands_do_not_create_a_mistyped_store_directory(cli_env, tmp_path, command):
    """DYNOCELL_DATABASE_URL naming a SQLite file in a directory that does not exist: a command that
    only reads says so (the field and the fix) and creates nothing; `init` still creates it."""
    import shutil
    import subprocess
    import sys

    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    missing = tmp_path / "nonexistent" / "deeper"
    env = {**cli_env, "DYNOCELL_DATABASE_URL": f"sqlite:///{missing / 'dynocell.db'}"}
    proc = subprocess.run([exe, *command], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"Error: database_url: no store at {missing / 'dynocell.db'}"), proc.stderr
    assert "DYNOCELL_DATABASE_URL" in proc.stderr
    assert not (tmp_path / "nonexistent").exists()
    init = subprocess.run([exe, "init"], env=env, capture_output=True, text=True, timeout=120)
    assert init.returncode == 0, init.stderr
    assert (missing / "dynocell.db").is_file()
    again = subprocess.run([exe, *command], env=env, capture_output=True, text=True, timeout=120)
    assert "no store at" not in again.stderr
