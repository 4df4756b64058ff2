"""The one resolver (dynocell.db.refs) as every face sees it: the same table of references gives the
same answer through the CLI (`dynocell show`, `dynocell config show`, `dynocell note`) and the web
panel (JSON mirrors of the run, boot and config pages), on a real SQLite store.

Issue 23: before, a 4-digit config prefix was "not found" in the CLI and found by the web, and
`show` picked the run when a prefix named a run and a boot.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime, timezone

import pytest

from dynocell.db import boots as db_boots, configs as db_configs, refs, runs as db_runs
from tests.weblogin import LAUNCH, logged_in

CONFIG = "sha256:" + "c0ffee12" + "0" * 56
OTHER_CONFIG = "sha256:" + "c0ffee34" + "0" * 56
BOOT = "ab12cd34ef56"        # shares "ab12" with RUN_A: ambiguous across kinds
RUN_A = "ab12ee000001"
RUN_B = "77aa00000001"        # shares "77aa" with RUN_C: ambiguous within runs
RUN_C = "77aa00000002"
RUN_D = "5e5e00000001"        # unique by 4 characters


def seeded_cell(settings, configs: tuple[str, ...], boot: str, runs: tuple[str, ...]):
    """A cell on a fresh store holding ``configs`` (the first labelled ``prod``), one failed boot ``boot`` and
    failed runs ``runs`` of the first config: the references the resolver tests name."""
    from dynocell.runbooks.cell import open_cell

    c = open_cell(settings)
    st = c.store
    for h in configs:
        db_configs.insert_config(st, h, "reference", "builtin:tiny", '{"model_path": "builtin:tiny"}', "")
    db_configs.add_label(st, "prod", configs[0])
    now = datetime.now(timezone.utc)
    db_boots.create_boot(st, id=boot, config_hash=configs[0], engine="reference", hostname="h", host="127.0.0.1",
                         port=1, argv="[]", env={}, state="failed", log_path=str(settings.home / "none.log"),
                         started_at=now, ended_at=now)
    for rid in runs:
        db_runs.create_run(st, id=rid, kind="run", config_hash=configs[0], state="failed", step="config",
                           started_at=now, ended_at=now, error="stand-in")
    return c


@pytest.fixture
def cell(settings):
    return seeded_cell(settings, (CONFIG, OTHER_CONFIG), BOOT, (RUN_A, RUN_B, RUN_C, RUN_D))


# (reference, kinds, expected kind:key or the words of the error)
CASES = [
    ("exact id", RUN_A, ("run", "boot"), f"run:{RUN_A}"),
    ("short prefix", "5e5e", ("run", "boot"), f"run:{RUN_D}"),
    ("boot prefix", "ab12cd", ("run", "boot"), f"boot:{BOOT}"),
    ("ambiguous across kinds", "ab12", ("run", "boot"), f"ambiguous: matches run {RUN_A}, boot {BOOT}"),
    ("ambiguous within a kind", "77aa", ("run",), f"ambiguous: matches run {RUN_B}, run {RUN_C}"),
    ("label", "prod", ("config",), f"config:{CONFIG}"),
    ("4-hex config prefix", "c0ffee12", ("config",), f"config:{CONFIG}"),
    ("sha256: and upper case", "sha256:C0FFEE34", ("config",), f"config:{OTHER_CONFIG}"),
    ("too short", "c0f", ("config",), "a prefix needs at least 4 characters"),
    ("unknown", "zzzz9999", ("run", "boot"), "no run or boot matches 'zzzz9999'"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_resolver_table(cell, case):
    from dynocell.errors import NotFound

    _, ref, kinds, want = case
    if ":" in want and not want.startswith(("ambiguous", "no ")):
        found = refs.resolve(cell.store, ref, kinds)
        assert f"{found.kind}:{found.key}" == want
    else:
        with pytest.raises(NotFound) as exc:
            refs.resolve(cell.store, ref, kinds)
        assert want in str(exc.value)
        if "ambiguous" in want:
            assert len(exc.value.candidates) == 2


def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=120)


def test_cli_applies_the_table(cell, cli_env):
    r = _cli(["show", RUN_A[:6], "--json"], cli_env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads(r.stdout)["run"]["id"] == RUN_A
    r = _cli(["show", "ab12cd", "--json"], cli_env)
    assert r.returncode == 0 and json.loads(r.stdout)["boot"]["id"] == BOOT
    # a prefix naming a run and a boot is refused, naming both and their kinds
    r = _cli(["show", "ab12"], cli_env)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and f"boot {BOOT}" in out and f"run {RUN_A}" in out, out
    r = _cli(["show", "zzzz9999"], cli_env)
    out = r.stdout + r.stderr
    assert r.returncode == 2 and "no run or boot matches 'zzzz9999'" in out and "dynocell runs" in out
    # configs: a label, a 4-hex prefix, too short
    for ref in ("prod", "c0ffee12"):
        r = _cli(["config", "show", ref, "--json"], cli_env)
        assert r.returncode == 0, r.stdout + r.stderr
        assert json.loads(r.stdout)["hash"] == CONFIG
    r = _cli(["config", "show", "c0f"], cli_env)
    assert r.returncode == 2 and "at least 4 characters" in r.stdout + r.stderr
    # notes: a bare prefix names the one record of any kind, or is refused listing the candidates
    r = _cli(["note", "5e5e", "seen"], cli_env)
    assert r.returncode == 0 and f"run:{RUN_D}" in r.stdout + r.stderr, r.stdout + r.stderr
    r = _cli(["note", "ab12", "which?"], cli_env)
    assert r.returncode == 2 and "ambiguous" in r.stdout + r.stderr and f"boot {BOOT}" in r.stdout + r.stderr


def test_web_applies_the_table(cell, settings):
    from dynocell.web.app import create_app

    app = create_app(settings, cell=cell, launch_token=LAUNCH)
    with logged_in(app) as c:
        assert c.get(f"/api/runs/{RUN_D[:4]}").json()["run"]["id"] == RUN_D
        assert c.get(f"/api/boots/{BOOT[:6]}").json()["boot"]["id"] == BOOT
        amb = c.get("/api/runs/77aa")
        assert amb.status_code == 404 and f"run {RUN_B}, run {RUN_C}" in amb.text
        gone = c.get("/api/runs/zzzz9999")
        assert gone.status_code == 404 and "zzzz9999" in gone.text and "dynocell runs" in gone.text
        for ref in ("prod", "c0ffee12", "sha256:c0ffee12"):
            r = c.get(f"/api/configs/{ref}")
            assert r.status_code == 200 and r.json()["config"]["config_hash"] == CONFIG, (ref, r.text)
        short = c.get("/api/configs/c0f")
        assert short.status_code == 404 and "at least 4 characters" in short.text
        page = c.get("/runs/77aa")
        assert page.status_code == 404 and "ambiguous" in page.text


def test_a_note_by_reference_goes_through_the_resolver_to_the_one_writer(cell):
    """The web's note form (runbooks.knowledge.add_note_by_ref, no longer a write in runbooks/views.py):
    a short prefix is resolved by db/refs and the note is stored under the full id."""
    from dynocell.db.refs import AmbiguousRef
    from dynocell.errors import NotFound
    from dynocell.runbooks.knowledge import add_note_by_ref, list_notes

    note = add_note_by_ref(cell, "run", RUN_D[:4], "seen on the 5e5e run")
    assert [n.id for n in list_notes(cell, "run", RUN_D)] == [note.id]
    with pytest.raises(AmbiguousRef):
        add_note_by_ref(cell, "run", "77aa", "which one?")
    with pytest.raises(NotFound):
        add_note_by_ref(cell, "run", "zzzz9999", "nothing there")
