"""Hosts in one shared store (issue 18, items 3–5): two simulated hosts (different machine ids, one
store — SQLite and PostgreSQL) write boots and runs; each judges only its own processes, the other's
boots show ``unknown (host … last seen …)`` once that host goes quiet, lists filter by host, compare
warns across hardware, and the panel serves a boot's files only on the host that has them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from dynocell.db import boots as db_boots
from dynocell.db import hosts as db_hosts
from dynocell.db import runs as db_runs
from dynocell.db.tables import utcnow
from dynocell.engine import hostinfo

REPO = Path(__file__).resolve().parents[1]


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


@pytest.fixture
def two_hosts(backend_settings, tmp_path):
    """(cell_a, cell_b, config_hash): host-a and host-b, each with its own data directory, one store."""
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config
    from dynocell.settings import load_settings

    cells = []
    for name in ("host-a", "host-b"):
        home = tmp_path / name
        cells.append(open_cell(load_settings(home=home, machine_id=name, database_url=backend_settings.db_url)))
    config_hash = add_config(cells[0], REPO / "examples" / "tiny.toml", None).hash
    return cells[0], cells[1], config_hash


def live_boot(cell, boot_id: str, config_hash: str) -> None:
    """A boot row of ``cell``'s host in state ready whose supervisor and engine are both gone."""
    from dynocell.runbooks import hosts

    pid = dead_pid()
    db_boots.create_boot(cell.store, id=boot_id, config_hash=config_hash, engine="reference", hostname="node",
                         host="127.0.0.1", port=1, argv="", env={}, state="ready", pid=pid, pgid=pid,
                         supervisor_pid=pid, host_id=hosts.this_host_id(cell),
                         log_path=str(cell.settings.boots_dir / boot_id / "engine.log"),
                         supervisor_create_time=1.0, engine_create_time=1.0)


def make_quiet(cell, host_id: str, hours: float) -> None:
    with cell.store.engine.begin() as c:
        c.execute(text("UPDATE hosts SET last_seen_at = :t WHERE id = :id"),
                  {"t": utcnow() - timedelta(hours=hours), "id": host_id})


def test_a_boot_of_one_host_is_never_reconciled_by_the_other(two_hosts):
    from dynocell.runbooks import boots

    a, b, config_hash = two_hosts
    live_boot(b, "bootB", config_hash)
    live_boot(a, "bootA", config_hash)
    rows = {r["id"]: r for r in boots.reconcile_and_list(a)}
    # A judges its own boot (supervisor and engine gone → lost) but leaves B's as B recorded it.
    assert db_boots.get_boot(a.store, "bootA").state == "lost"
    assert "bootA" not in rows
    assert rows["bootB"]["state"] == "ready" and rows["bootB"]["state_note"] is None
    assert rows["bootB"]["engine_alive"] is None and "(host-b)" in rows["bootB"]["host_label"]
    assert db_boots.get_boot(a.store, "bootB").state == "ready"
    # B goes quiet: A shows it unknown, with when B was last heard from — still not lost.
    make_quiet(a, "host-b", hours=2)
    row = {r["id"]: r for r in boots.reconcile_and_list(a)}["bootB"]
    assert row["state"] == "ready" and row["state_note"].startswith("unknown (host ")
    # the terminal dashboard's poll carries the same note, and its state cell prints it
    from dynocell.cli.tui import format as tui_fmt
    from dynocell.cli.tui.app import poll_snapshot

    polled = {r["id"]: r for r in poll_snapshot(a)["boots"]}["bootB"]
    assert polled["state_note"] == row["state_note"]
    assert str(tui_fmt.state_text(polled["state"], polled["state_note"])) == f"● ready {row['state_note']}"
    assert "last seen 2.0 h ago" in row["state_note"]
    assert db_boots.get_boot(a.store, "bootB").state == "ready"
    # Another host cannot stop or probe it.
    from dynocell.errors import UserError

    with pytest.raises(UserError, match="runs on host"):
        boots.stop(a, "bootB")
    with pytest.raises(UserError, match="runs on host"):
        boots.health(a, "bootB")
    # B itself settles it.
    boots.reconcile_and_list(b)
    assert db_boots.get_boot(b.store, "bootB").state == "lost"


def test_runs_reconcile_locally_and_lists_filter_by_host(two_hosts, cli_env):
    from dynocell.runbooks import hosts, views
    from dynocell.runbooks.run import reconcile_runs

    a, b, config_hash = two_hosts
    for cell, run_id in ((a, "runA"), (b, "runB")):
        db_runs.create_run(cell.store, id=run_id, kind="run", config_hash=config_hash, state="running",
                           pid=dead_pid(), host_id=hosts.this_host_id(cell))
    assert reconcile_runs(a) == ["runA"]
    assert db_runs.get_run(a.store, "runB").state == "running"  # B's pid means nothing on A
    assert reconcile_runs(b) == ["runB"]

    everything = {r["id"]: r["host_label"] for r in views.list_runs(a)}
    assert set(everything) == {"runA", "runB"} and everything["runA"] != everything["runB"]
    only_b = views.list_runs(a, host_ids=hosts.resolve(a, "host-b"))
    assert [r["id"] for r in only_b] == ["runB"]

    env = dict(cli_env, DYNOCELL_DATABASE_URL=a.settings.db_url, DYNOCELL_MACHINE_ID="host-a",
               DYNOCELL_HOME=str(a.settings.home))
    proc = subprocess.run([sys.executable, "-m", "dynocell", "runs", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert {r["id"] for r in json.loads(proc.stdout)} == {"runA", "runB"}
    proc = subprocess.run([sys.executable, "-m", "dynocell", "runs", "--host", "host-b"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "runB" in proc.stdout and "runA" not in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "dynocell", "show", "runB"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "host   " in proc.stdout and "(host-b)" in proc.stdout, proc.stderr
    proc = subprocess.run([sys.executable, "-m", "dynocell", "ps", "--all", "--host", "nowhere"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0 and proc.stderr.startswith("Error:") and "host" in proc.stderr


def test_dashboard_groups_live_boots_by_host_and_compare_warns_across_hardware(two_hosts):
    from dynocell.runbooks import hosts, views

    a, b, config_hash = two_hosts
    live_boot(a, "liveA", config_hash)
    live_boot(b, "liveB", config_hash)
    groups = views.dashboard(a)["hosts"]
    assert sorted(g["host_id"] for g in groups) == ["host-a", "host-b"]
    assert {g["host_id"]: [x["id"] for x in g["boots"]] for g in groups} == {"host-a": ["liveA"], "host-b": ["liveB"]}
    assert not any(g["quiet"] for g in groups)
    make_quiet(a, "host-b", hours=1)
    assert {g["host_id"]: g["quiet"] for g in views.dashboard(a)["hosts"]} == {"host-a": False, "host-b": True}

    for cell, run_id in ((a, "cmpA"), (b, "cmpB")):
        db_runs.create_run(cell.store, id=run_id, kind="run", config_hash=config_hash, state="completed",
                           host_id=hosts.this_host_id(cell))
    assert views.compare_runs(a, ["cmpA", "cmpB"])["hardware_warning"] is None  # same machine, same hardware
    inv = hostinfo.probe()
    db_hosts.upsert_host(a.store, "host-b", {**inv, "gpus": [{"index": 0, "name": "NVIDIA H200", "memory_mib": 143771,
                                                              "driver": "570.1", "uuid": "GPU-1"}], "cuda": "12.8"})
    warning = views.compare_runs(a, ["cmpA", "cmpB"])["hardware_warning"]
    assert warning and "different hardware" in warning


def test_panel_serves_a_boot_file_only_on_its_own_host(two_hosts):

    from dynocell.web.app import create_app
    from tests.weblogin import LAUNCH, logged_in

    a, b, config_hash = two_hosts
    live_boot(b, "filesB", config_hash)
    log = b.settings.boots_dir / "filesB" / "engine.log"
    log.parent.mkdir(parents=True)
    log.write_text("engine says hello\n")
    with logged_in(create_app(b.settings, cell=b, launch_token=LAUNCH)) as cb:
        r = cb.get("/boots/filesB/artifacts/log")
        assert r.status_code == 200 and "engine says hello" in r.text
    with logged_in(create_app(a.settings, cell=a, launch_token=LAUNCH)) as ca:
        r = ca.get("/boots/filesB/artifacts/log")
        assert r.status_code == 404 and "host" in r.text and str(log.parent) in r.text
        assert "engine says hello" not in r.text
        page = ca.get("/boots/filesB")
        assert page.status_code == 200 and 'id="files-elsewhere"' in page.text and str(log.parent) in page.text


def test_host_record_and_machine_id(tmp_path, settings):
    from dynocell.runbooks import hosts
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    # The machine id: the setting wins; else /etc/machine-id; else one generated and kept in the data dir.
    assert hostinfo.read_machine_id((tmp_path / "absent", )) is None
    kept = tmp_path / "machine-id"
    kept.write_text("0123456789abcdef0123456789abcdef\n")
    assert hostinfo.read_machine_id((tmp_path / "absent", kept)) == "0123456789abcdef0123456789abcdef"
    cell = open_cell(settings)
    first = hosts.machine_id(cell)
    assert first == hosts.machine_id(cell) and len(first) >= 16
    assert hosts.machine_id(open_cell(load_settings(machine_id="rig-7"))) == "rig-7"
    # A machine without /etc/machine-id (many containers): one id, generated once, kept in the data dir.
    generated = hosts.machine_id(cell, system_files=())
    assert (settings.home / "machine-id").read_text().strip() == generated
    assert hosts.machine_id(cell, system_files=()) == generated
    unwritable = open_cell(load_settings(home=tmp_path / "file-not-dir" / "home"))
    (tmp_path / "file-not-dir").write_text("")  # its data dir cannot be created: a hostname-derived id
    assert hosts.machine_id(unwritable, system_files=()) == hosts.machine_id(unwritable, system_files=())

    hid = hosts.this_host_id(cell)
    row = db_hosts.get_host(cell.store, hid)
    assert row.hostname and row.os and row.cpu and row.cpu_count >= 1 and row.memory_bytes > 0
    assert "torch" in row.engine_versions and isinstance(row.gpus, list)
    from dynocell.db.tables import Host

    assert row.to_dict()["id"] == hid and set(row.to_dict()) == {c.key for c in Host.__table__.columns}


def test_gpu_inventory_from_nvidia_smi(tmp_path):
    """The real parsing path over an ``nvidia-smi`` stand-in that prints what the real one prints."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"""#!{sys.executable}
import sys
if "--query-gpu=index,name,memory.total,driver_version,uuid" in sys.argv:
    print("0, NVIDIA H200, 143771, 570.133.20, GPU-aaaa")
    print("1, NVIDIA H200, 143771, 570.133.20, GPU-bbbb")
else:
    print("| NVIDIA-SMI 570.133.20   Driver Version: 570.133.20   CUDA Version: 12.8 |")
""")
    smi.chmod(0o755)
    inv = hostinfo.gpu_inventory(str(smi))
    assert inv["cuda"] == "12.8"
    assert inv["gpus"] == [
        {"index": 0, "name": "NVIDIA H200", "memory_mib": 143771, "driver": "570.133.20", "uuid": "GPU-aaaa"},
        {"index": 1, "name": "NVIDIA H200", "memory_mib": 143771, "driver": "570.133.20", "uuid": "GPU-bbbb"},
    ]
    assert hostinfo.gpu_inventory(str(tmp_path / "missing")) == {"gpus": [], "cuda": None}
    assert isinstance(hostinfo.probe()["gpus"], list)


def test_tui_boot_panel_names_the_host_and_where_its_files_are(two_hosts):
    from types import SimpleNamespace

    from dynocell.cli.tui.screens import boot_summary_lines
    from dynocell.runbooks import views

    a, b, config_hash = two_hosts
    live_boot(b, "tuiB", config_hash)
    dash = SimpleNamespace(alias=lambda i: i, now=utcnow)  # the two app attributes the panel reads
    text_lines = [str(x) for x in boot_summary_lines(dash, views.boot_detail(a, "tuiB"), None, 100)]
    host_line = next(x for x in text_lines if x.startswith("host "))
    assert "(host-b)" in host_line and str(b.settings.boots_dir / "tuiB") in host_line
    own = [str(x) for x in boot_summary_lines(dash, views.boot_detail(b, "tuiB"), None, 100)]
    assert any(x.startswith("host ") and "files there" not in x for x in own)


def test_cli_hosts_lists_both_machines(two_hosts, cli_env):
    a, b, _ = two_hosts
    from dynocell.runbooks import hosts

    hosts.this_host_id(b)
    env = dict(cli_env, DYNOCELL_DATABASE_URL=a.settings.db_url, DYNOCELL_MACHINE_ID="host-a",
               DYNOCELL_HOME=str(a.settings.home))
    proc = subprocess.run([sys.executable, "-m", "dynocell", "hosts", "--json"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rows = {h["id"]: h for h in json.loads(proc.stdout)}
    assert set(rows) == {"host-a", "host-b"} and rows["host-a"]["this"] and not rows["host-b"]["this"]
    assert rows["host-b"]["memory_bytes"] > 0 and "torch" in rows["host-b"]["engine_versions"]
    human = subprocess.run([sys.executable, "-m", "dynocell", "hosts"], env=env, capture_output=True, text=True,
                           timeout=120)
    assert human.returncode == 0 and "(host-a)" in human.stdout and "(host-b)" in human.stdout


def test_web_lists_show_both_hosts_and_filter_by_host(two_hosts):

    from dynocell.runbooks import hosts
    from dynocell.web.app import create_app
    from tests.weblogin import LAUNCH, logged_in

    a, b, config_hash = two_hosts
    for cell, run_id in ((a, "webA"), (b, "webB")):
        db_runs.create_run(cell.store, id=run_id, kind="run", config_hash=config_hash, state="completed",
                           host_id=hosts.this_host_id(cell))
    with logged_in(create_app(a.settings, cell=a, launch_token=LAUNCH)) as web:
        page = web.get("/runs")
        assert page.status_code == 200 and 'data-run="webA"' in page.text and 'data-run="webB"' in page.text
        assert "(host-a)" in page.text and "(host-b)" in page.text and 'id="host-filter"' in page.text
        page = web.get("/runs", params={"host": "host-b"})
        assert 'data-run="webB"' in page.text and 'data-run="webA"' not in page.text
        assert [r["id"] for r in web.get("/api/runs", params={"host": "host-a"}).json()] == ["webA"]
        assert web.get("/api/runs", params={"host": "nowhere"}).status_code == 404
