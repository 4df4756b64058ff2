"""Issue 24 item 3: the speculative step's phase split stored with the profile — for runs already in a
store (`dynocell reanalyze RUN`, on copies of the real H200 stores brought back from the GPU hosts, whose
trace paths are the GPU host's), for imported traces, and in the faces (`show` at 80 columns and
`--json`, `compare`, the web run page). The main job's profile step on the reference engine is
tests/test_spec_phases_run.py."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynocell.errors import NotFound, UserError

DATA = Path(__file__).parent / "data"
H200 = DATA / "sglang-0.5.17" / "dynocell-h200"  # SGLang 0.5.17, one H200 (schema 0006)
TP2 = DATA / "sglang-0.5.17-tp2" / "dynocell-2xh200"  # SGLang 0.5.17, TP 2 on two H200s
VLLM = DATA / "vllm-0.26.0" / "dynocell-h200"  # vLLM 0.26.0 and SGLang 0.5.17, one H200

STANDALONE = "2d8a3ffa5459"  # h200-standalone-pair, boot 5fa1a635a4b6 (profile #3)
PLAIN = "e0c4da1d051a"  # h200-plain-eager, boot abb2d923339c
VLLM_DRAFT = "1bed080560e5"  # h200-vllm-draft-eager, boot dd4f31340195
TP2_EAGLE = "e74f634ecd56"  # h200-tp2-standalone-pair, boot 8e9d340ddfd1, two ranks


def _home(settings, data: Path, boots: list[str] = ()) -> None:
    """The store of ``data`` (and the listed boots' folders) as this test's data directory."""
    shutil.copy(data / "dynocell.db", settings.home / "dynocell.db")
    for b in boots:
        shutil.copytree(data / "boots" / b, settings.boots_dir / b)


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    settings.home.mkdir(parents=True, exist_ok=True)
    return open_cell(settings)


def _phases(cell, run_id):
    from dynocell.runbooks import views

    return views.run_detail(cell, run_id)["profile"]["phases"]


def test_reanalyze_a_stored_h200_run_from_its_trace(cell):
    """The stored trace path is the GPU host's (/root/dynocell-home/…): the file is found under this data
    directory's boots/<boot id>/ by name and sha256; the split is stored with the profile."""
    from dynocell.runbooks.phase_split import reanalyze

    _home(cell.settings, H200, ["5fa1a635a4b6", "abb2d923339c"])
    assert _phases(cell, STANDALONE) is None  # stored before the split existed
    res = reanalyze(cell, STANDALONE[:6])
    assert res["run_id"] == STANDALONE and res["files"] == [
        str(cell.settings.boots_dir / "5fa1a635a4b6" / "2d8a3ffa5459-TP-0.trace.json.gz")]
    ph = _phases(cell, STANDALONE)
    assert ph["state"] == "split" and ph["source"] == "gpu" and ph["reason"] is None
    by = {p["phase"]: p for p in ph["phases"]}
    assert {k: round(v["pct"]) for k, v in by.items() if v["pct"] is not None} == {
        "draft_forward": 26, "draft_extend": 22, "target_verify": 37, "sampling": 3, "glue": 12}
    # 64 output tokens in the window: launches per token is launches / 64
    assert by["target_verify"]["launches"] == 1080 and by["target_verify"]["launches_per_token"] == 1080 / 64
    assert by["target_verify"]["ranges"] == by["draft_forward"]["ranges"] == 27
    again = reanalyze(cell, STANDALONE)  # recomputed in place: still one row
    assert again["phases"]["phases"] == ph["phases"]
    plain = reanalyze(cell, PLAIN)
    assert plain["phases"] is None and "not speculative" in plain["note"] and _phases(cell, PLAIN) is None


def test_reanalyze_two_ranks_combines_them_and_keeps_each(cell):
    from dynocell.runbooks.phase_split import reanalyze

    _home(cell.settings, TP2, ["8e9d340ddfd1"])
    ph = reanalyze(cell, TP2_EAGLE)["phases"]
    assert [r["rank"] for r in ph["ranks"]] == [0, 1]
    by = {p["phase"]: p for p in ph["phases"]}
    for phase in ("draft_forward", "target_verify", "glue"):
        per_rank = [next(p for p in r["phases"] if p["phase"] == phase)["ms"] for r in ph["ranks"]]
        assert by[phase]["ms"] == pytest.approx(sum(per_rank))
    assert ph["total_ms"] == pytest.approx(sum(r["total_ms"] for r in ph["ranks"]))
    from dynocell.cli.render import phases_text
    from rich.console import Console

    con = Console(width=80, record=True)
    con.print(phases_text(ph))
    text = con.export_text()
    assert "2 ranks summed" in text and "  rank 1: draft 10 %, draft extend 41 %, verify 17 %" in text


def test_reanalyze_a_vllm_run_says_why_there_is_no_split(cell):
    from dynocell.runbooks.phase_split import reanalyze

    _home(cell.settings, VLLM, ["dd4f31340195"])
    ph = reanalyze(cell, VLLM_DRAFT)["phases"]
    assert ph["state"] == "unavailable" and ph["phases"] == []
    assert "vLLM 0.26.0" in ph["reason"] and "execute_context" in ph["reason"]


def test_a_missing_or_changed_trace_is_named_and_never_read(cell, tmp_path):
    from dynocell.runbooks.phase_split import reanalyze

    _home(cell.settings, H200)
    with pytest.raises(NotFound) as e:
        reanalyze(cell, STANDALONE)
    assert "2d8a3ffa5459-TP-0.trace.json.gz" in str(e.value) and "--trace-dir" in e.value.hint
    elsewhere = tmp_path / "brought-back"
    elsewhere.mkdir()
    # same name, other content (the plain run's trace): refused by its sha256
    shutil.copy(H200 / "boots" / "abb2d923339c" / "e0c4da1d051a-TP-0.trace.json.gz",
                elsewhere / "2d8a3ffa5459-TP-0.trace.json.gz")
    with pytest.raises(NotFound):
        reanalyze(cell, STANDALONE, elsewhere)
    shutil.copy(H200 / "boots" / "5fa1a635a4b6" / "2d8a3ffa5459-TP-0.trace.json.gz", elsewhere)
    assert reanalyze(cell, STANDALONE, elsewhere)["phases"]["state"] == "split"
    with pytest.raises(UserError, match="--trace-dir"):
        reanalyze(cell, STANDALONE, tmp_path / "nope")
    with pytest.raises(UserError, match="23827e74a02f was made with --no-profile: it has no profile"):
        reanalyze(cell, "23827e74a02f")  # a run made with --no-profile


def test_imported_traces_get_their_split(cell):
    """`import trace`: a speculative SGLang trace is split without a config (its ranges say so); a plain one
    gets no split; a vLLM trace is unavailable with vLLM's reason."""
    from dynocell.runbooks.imports import import_trace

    spec = import_trace(cell, H200 / "boots" / "5fa1a635a4b6" / "2d8a3ffa5459-TP-0.trace.json.gz",
                        output_tokens=64)
    assert spec["phase_split"]["state"] == "split"
    assert {p["phase"]: round(p["pct"]) for p in spec["phase_split"]["phases"] if p["pct"] is not None}[
        "target_verify"] == 37
    from dynocell.db import runs as db_runs

    stored = db_runs.get_phases(cell.store, spec["profile_id"])
    assert stored.phases == spec["phase_split"]["phases"]
    plain = import_trace(cell, H200 / "boots" / "abb2d923339c" / "e0c4da1d051a-TP-0.trace.json.gz")
    assert plain["phase_split"] is None and db_runs.get_phases(cell.store, plain["profile_id"]) is None
    vllm = import_trace(cell, next((VLLM / "boots" / "dd4f31340195").glob("rank0.*.pt.trace.json.gz")))
    assert vllm["phase_split"]["state"] == "unavailable" and "vLLM 0.26.0" in vllm["phase_split"]["reason"]


def test_a_trace_imported_before_the_split_gets_it_when_imported_again(cell):
    from sqlalchemy import text

    from dynocell.db import runs as db_runs
    from dynocell.runbooks.imports import import_trace

    trace = H200 / "boots" / "5fa1a635a4b6" / "2d8a3ffa5459-TP-0.trace.json.gz"
    first = import_trace(cell, trace)
    with cell.store.engine.begin() as c:  # as an import made before 0008_s24phase_phases left it
        c.execute(text("DELETE FROM profile_phases"))
    assert db_runs.get_phases(cell.store, first["profile_id"]) is None
    again = import_trace(cell, trace)
    assert again["created"] is False and again["profile_id"] == first["profile_id"]
    assert again["phase_split"]["phases"] == first["phase_split"]["phases"]
    assert db_runs.get_phases(cell.store, first["profile_id"]).state == "split"


def _cli(env, *args):
    proc = subprocess.run([sys.executable, "-m", "dynocell", *args], env=env, capture_output=True, text=True,
                          timeout=300)
    return proc


def test_cli_reanalyze_show_and_compare_at_80_columns(settings, cli_env):
    settings.home.mkdir(parents=True, exist_ok=True)
    _home(settings, H200, ["5fa1a635a4b6", "abb2d923339c", "186dadf69d78"])
    env = dict(cli_env, COLUMNS="80")
    shown = _cli(env, "show", STANDALONE)
    assert shown.returncode == 0, shown.stderr
    assert f"phases: not computed for this profile: dynocell reanalyze {STANDALONE}" in shown.stdout
    done = _cli(env, "reanalyze", STANDALONE)
    assert done.returncode == 0, done.stderr
    assert "phases: draft 26 %, draft extend 22 %, verify 37 %, sampling 3 %, glue 12 %" in done.stdout
    shown = _cli(env, "show", STANDALONE).stdout
    lines = shown.splitlines()
    head = lines.index("phases: draft 26 %, draft extend 22 %, verify 37 %, sampling 3 %, glue 12 %")
    assert lines.index(next(x for x in lines if x.startswith("  memcpy_gather"))) < head  # under the categories
    verify = next(x for x in lines[head:] if x.startswith("  verify "))
    assert verify.split()[-1] == f"{1080 / 64:.1f}/tok" and "3.53 ms" in verify
    assert max(len(x) for x in lines) <= 80
    js = json.loads(_cli(env, "show", STANDALONE, "--json").stdout)
    assert js["profile"]["phases"]["state"] == "split"
    assert _cli(env, "reanalyze", "716d5c0555aa").returncode == 0
    cmp = _cli(env, "compare", STANDALONE, PLAIN, "716d5c0555aa")
    assert cmp.returncode == 0, cmp.stderr
    def cells(label: str) -> list[str]:
        row = next(x for x in cmp.stdout.splitlines() if x.strip("│┃ ").split("│")[0].strip() == label)
        return [c.strip() for c in row.strip("│┃ ").split("│")]

    assert cells("spec step phases")[1:] == ["split", "-", "split"]
    assert cells("verify %")[1:] == ["37", "-", "37"] and cells("draft %")[1] == "26"
    table = json.loads(_cli(env, "compare", STANDALONE, PLAIN, "--json").stdout)["table"]
    assert table[0]["profile"]["phases"]["state"] == "split" and table[1]["profile"]["phases"] is None
    missing = _cli(dict(env, DYNOCELL_HOME=str(settings.home)), "reanalyze", "zzzz-none")
    assert missing.returncode != 0 and "Error:" in missing.stderr


def test_web_run_page_shows_the_phases(cell):
    from fastapi.testclient import TestClient

    from dynocell.runbooks.phase_split import reanalyze
    from dynocell.web.app import create_app

    _home(cell.settings, VLLM, ["abdcdc008dd4", "dd4f31340195"])
    token = "dcl_test-launch-token"
    app = create_app(cell.settings, cell=cell, launch_token=token)
    with TestClient(app) as c:
        assert c.get(f"/?token={token}", follow_redirects=False).status_code == 303
        before = c.get("/runs/1df9b0825866").text  # SGLang STANDALONE eager, stored without a split
        assert "dynocell reanalyze 1df9b0825866" in before
        reanalyze(cell, "1df9b0825866")
        reanalyze(cell, VLLM_DRAFT)
        page = c.get("/runs/1df9b0825866").text
        assert '<table class="grid num small" id="phases">' in page
        assert "<td>verify</td>" in page and "<meter" in page
        vllm = c.get(f"/runs/{VLLM_DRAFT}").text
        assert "Phase split of the speculative step unavailable: vLLM 0.26.0" in vllm
        assert c.get(f"/api/runs/{VLLM_DRAFT}").json()["profile"]["phases"]["state"] == "unavailable"


def test_the_stores_under_tests_data_are_untouched():
    """The tests above work on copies: the shipped stores stay at their schema, without the new table."""
    import sqlite3

    for data in (H200, TP2, VLLM):
        con = sqlite3.connect(f"file:{data / 'dynocell.db'}?immutable=1", uri=True)  # no -shm / -wal made
        try:
            names = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        finally:
            con.close()
        assert "profile_phases" not in names, data
        assert not list(data.glob("dynocell.db-*")), data


def test_a_trace_the_phase_reader_refuses_is_reported_not_raised():
    """The kernel split is stored before the phase split: a trace the phase reader refuses gives an
    ``unavailable`` row naming the error, and the profile stays completed."""
    from dynocell.runbooks.phase_split import compute

    rep = compute([DATA / "traces" / "truncated.trace.json.gz"], engine="sglang", speculative=True,
                  output_tokens=64)
    assert rep["state"] == "unavailable" and rep["reason"].startswith("the trace could not be read")
    assert "truncated.trace.json.gz" in rep["reason"]


NO_PROFILE = "11cee15fe6e2"  # vLLM store: a run made with --no-profile (its profile step skipped for that reason)


def test_cli_reanalyze_of_a_run_made_with_no_profile_says_how_to_get_one(settings, cli_env):
    """It said `has no completed profile window with trace files` and pointed at `import a trace`; a run made
    with --no-profile is now named as such, with the two ways to get a profile — and the config it names
    resolves."""
    settings.home.mkdir(parents=True, exist_ok=True)
    _home(settings, VLLM)
    env = dict(cli_env, COLUMNS="80")
    proc = _cli(env, "reanalyze", NO_PROFILE)
    assert proc.returncode == 2, proc.stderr
    err, hint = (" ".join(part.split()) for part in proc.stderr.split("\nhint: ", 1))  # wrapped at 80 columns
    hint = "hint: " + hint
    assert err == f"Error: run {NO_PROFILE} was made with --no-profile: it has no profile to reanalyze"
    config = json.loads(_cli(env, "show", NO_PROFILE, "--json").stdout)["run"]["config_hash"][7:19]
    assert hint.startswith("hint: profile a ready boot of its config (dynocell profile BOOT)")
    assert hint.endswith(f"dynocell run {config} --profile")
    assert _cli(env, "config", "show", config).returncode == 0
