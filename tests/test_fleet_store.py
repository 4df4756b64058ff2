"""PostgreSQL as the store of a fleet (issue 18, item 1): ``dynocell init`` migrates an empty
PostgreSQL database, ``dynocell settings`` names the store with its password hidden, several
writer processes share one store (both backends), and a server that goes away mid-transaction is
a clear error with nothing written half.

The PostgreSQL server comes from ``DYNOCELL_TEST_POSTGRES_URL`` (see ``tests/conftest.py``).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from dynocell.db import configs as dbc
from dynocell.db.session import Store, head_revision
from dynocell.errors import StoreUnavailable

HERE = Path(__file__).parent
REPO = HERE.parent
WRITERS = HERE / "concurrent_writers.py"
SECRET = "s3cret-pw"


def dynocell(env, *args, timeout=180):
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def with_password(url: str) -> str:
    # The throwaway cluster trusts local connections, so any password works; it must never be printed.
    return make_url(url).set(password=SECRET).render_as_string(hide_password=False)


def test_init_migrates_an_empty_postgresql_database_and_settings_hide_the_password(pg_url, cli_env):
    env = dict(cli_env, DYNOCELL_DATABASE_URL=with_password(pg_url))
    proc = dynocell(env, "init", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["revision_before"] is None and report["revision"] == head_revision()
    assert report["store"] == "postgresql" and SECRET not in proc.stdout and "***" in report["db_url"]
    again = json.loads(dynocell(env, "init", "--json").stdout)
    assert again["revision_before"] == head_revision() and again["migrated"] is False

    proc = dynocell(env, "settings", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["name"]: r for r in json.loads(proc.stdout)}
    assert rows["store"]["value"] == "postgresql"
    assert rows["database_url"]["source"] == "env" and "***" in rows["database_url"]["value"]
    assert SECRET not in proc.stdout
    human = dynocell(env, "settings")
    assert human.returncode == 0 and SECRET not in human.stdout and "postgresql" in human.stdout


def test_unreachable_postgresql_is_one_clear_error_without_the_password(cli_env):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(cli_env, DYNOCELL_DATABASE_URL=f"postgresql+psycopg://dyno:{SECRET}@127.0.0.1:{port}/fleet")
    proc = dynocell(env, "init")
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    err = proc.stderr.strip()
    assert err.startswith("Error:") and "PostgreSQL store" in err and f"127.0.0.1:{port}/fleet" in err
    assert "DYNOCELL_DATABASE_URL" in err and SECRET not in err and "Traceback" not in err


def test_postgresql_gone_mid_transaction_is_a_clear_error_and_nothing_is_written_half(pg_url):
    store = Store(pg_url)
    admin = create_engine(pg_url, isolation_level="AUTOCOMMIT")
    try:
        with pytest.raises(StoreUnavailable, match="unreachable or went away") as info, store.session() as s:
            s.execute(text("INSERT INTO configs (config_hash, engine, model_path, canonical_json, source_toml, "
                           "created_at) VALUES ('sha256:half', 'reference', 'm', '{}', '', now())"))
            pid = s.execute(text("SELECT pg_backend_pid()")).scalar_one()
            with admin.connect() as c:  # the server ends this connection, as a restart or failover would
                c.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
            s.execute(text("INSERT INTO configs (config_hash, engine, model_path, canonical_json, source_toml, "
                           "created_at) VALUES ('sha256:second', 'reference', 'm', '{}', '', now())"))
        assert "nothing was written half" in str(info.value)
        # The store recovers (the pool drops the dead connection) and neither row was kept.
        assert dbc.get_config(store, "sha256:half") is None and dbc.get_config(store, "sha256:second") is None
        assert dbc.insert_config(store, "sha256:after", "reference", "m", "{}", "") is True
    finally:
        admin.dispose()
        store.engine.dispose()


def test_writer_processes_share_one_store(backend_settings, cli_env, tmp_path):
    """Three processes (the real Typer app, 40 calls each: notes and label moves) write one store at
    once, on SQLite and on PostgreSQL: every call succeeds and every note is there."""
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config

    env = dict(cli_env, DYNOCELL_DATABASE_URL=backend_settings.db_url)
    cell = open_cell(backend_settings)
    add_config(cell, REPO / "examples" / "tiny.toml", None)
    cfg_a, cfg_b = tmp_path / "moving-a.toml", tmp_path / "moving-b.toml"
    for path, ctx in ((cfg_a, 1024), (cfg_b, 2048)):
        path.write_text(f'engine = "reference"\nmodel_path = "dynocell:tiny"\n\n[memory]\ncontext_length = {ctx}\n')
    n, writers = 40, 3
    procs = [subprocess.Popen([sys.executable, str(WRITERS), "cli", str(n), str(tmp_path / f"w{i}.json"),
                               str(cfg_a), str(cfg_b)], env=env, cwd=REPO, stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(writers)]
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err[-2000:]
    for i in range(writers):
        summary = json.loads((tmp_path / f"w{i}.json").read_text())
        assert summary["ok"] == n and summary["errors"] == [], summary
    from dynocell.db import knowledge as dbk

    notes = [x.text for x in dbk.list_notes(cell.store)]
    assert sorted(notes) == sorted(f"cli {i}" for i in range(0, n, 5) for _ in range(writers))


def test_a_populated_store_from_before_hosts_migrates_keeping_every_row(db_url):
    """0002 → head on a store with boots, events and runs (foreign keys on): the host columns are added in
    place (no table rebuild), every row stays, and old rows read with no host."""
    from alembic import command

    from dynocell.db import boots as db_boots
    from dynocell.db.session import alembic_config, make_engine

    if db_url.startswith("sqlite:///"):
        Path(db_url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
    engine = make_engine(db_url)
    cfg = alembic_config(db_url)
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0002")
    with engine.begin() as c:
        c.execute(text("INSERT INTO configs (config_hash, engine, model_path, canonical_json, source_toml, created_at) "
                       "VALUES ('sha256:old', 'reference', 'm', '{}', '', CURRENT_TIMESTAMP)"))
        c.execute(text("INSERT INTO boots (id, config_hash, engine, hostname, host, argv, env, state, log_path, "
                       "started_at) VALUES ('oldboot', 'sha256:old', 'reference', 'h', '127.0.0.1', '', '{}', "
                       "'stopped', '/x', CURRENT_TIMESTAMP)"))
        c.execute(text("INSERT INTO boot_events (boot_id, ts, offset_s, kind, name) "
                       "VALUES ('oldboot', CURRENT_TIMESTAMP, 0, 'state', 'stopped')"))
        c.execute(text("INSERT INTO runs (id, kind, config_hash, boot_id, state, started_at) "
                       "VALUES ('oldrun', 'run', 'sha256:old', 'oldboot', 'completed', CURRENT_TIMESTAMP)"))
    engine.dispose()
    store = Store(db_url)
    try:
        assert store.revision_before == "0002" and store.revision == head_revision()
        row = db_boots.get_boot(store, "oldboot")
        assert row.state == "stopped" and row.host_id is None
        assert [e.name for e in db_boots.events(store, "oldboot")] == ["stopped"]
        with store.engine.connect() as c:
            assert c.execute(text("SELECT host_id, boot_id FROM runs WHERE id = 'oldrun'")).one() == (None, "oldboot")
    finally:
        store.engine.dispose()


def test_concurrent_first_use_of_an_empty_postgresql_database_migrates_once(pg_url, cli_env):
    """Three `dynocell init` at once on an empty database: the advisory lock lets one migrate, the others
    wait and find it at head (without it, two would create the same tables and one would fail)."""
    env = dict(cli_env, DYNOCELL_DATABASE_URL=pg_url)
    procs = [subprocess.Popen([sys.executable, "-m", "dynocell", "init", "--json"], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL) for _ in range(3)]
    reports = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        reports.append(json.loads(out))
    assert sorted(str(r["revision_before"]) for r in reports) == sorted(["None"] + [head_revision()] * 2)
    assert all(r["revision"] == head_revision() for r in reports)
