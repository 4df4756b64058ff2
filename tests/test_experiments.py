"""Experiments, pins and rollback: procedures on a real temporary store, and the whole thing end to end
on the reference engine through the real CLI in subprocesses (create, run, Ctrl-C, resume, show, pin,
rollback).

The end-to-end experiment is incumbent = no speculation, arms = STANDALONE k=3 and NGRAM, 2 repeats,
on the small workload in tests/data/experiments (CI time). The made-locally model pair comes from the
session cache (``model_pair``) and is linked into the temporary data directory.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXP = Path(__file__).parent / "data" / "experiments"
PLAIN, STANDALONE, NGRAM, WORKLOAD = (str(EXP / f) for f in ("plain.toml", "standalone.toml", "ngram.toml",
                                                             "tiny-workload.toml"))
CLI_MODULE = "dynocell.cli.commands.experiment"
# The CLI with the experiment commands registered even before the lead adds the module to COMMAND_MODULES.
CLI = ("import sys; from dynocell.cli import app as a\n"
       f"if {CLI_MODULE!r} not in a.COMMAND_MODULES: a.COMMAND_MODULES += ({CLI_MODULE!r},)\n"
       "sys.exit(a.run(sys.argv[1:]))")


def cli(env: dict[str, str], *args: str, ok: bool = True, timeout: float = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-c", CLI, *args], env=env, cwd=REPO, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    if ok:
        assert proc.returncode == 0, f"dynocell {' '.join(args)} → {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


# ---------------------------------------------------------------- create / schedule (no engine)

def test_create_writes_the_interleaved_schedule(cell):
    from dynocell.runbooks import experiments as ex

    res = ex.create_experiment(cell, "spec", PLAIN, [STANDALONE, NGRAM], workload=WORKLOAD, repeats=2,
                               lossless=False)
    assert [s["label"] for s in res["slots"]] == ["exp-plain", "exp-standalone", "exp-ngram",
                                                  "exp-ngram", "exp-standalone", "exp-plain"]
    assert [s["role"] for s in res["slots"]] == ["incumbent", "arm", "arm", "arm", "arm", "incumbent"]
    assert all(s["state"] == "pending" and s["run_id"] is None for s in res["slots"])
    assert res["options"] == {"workload": str(Path(WORKLOAD).resolve()), "lossless": False, "profile": False,
                              "diagnose": True, "boot_timeout_s": None}
    assert res["experiment"]["state"] == "created" and res["verdicts"] is None
    assert [a["role"] for a in res["arms"]] == ["incumbent", "arm", "arm"]
    listed = ex.list_experiments(cell)
    assert listed[0]["name"] == "spec" and listed[0]["done"] == 0 and listed[0]["total"] == 6
    assert listed[0]["arms"] == ["exp-standalone", "exp-ngram"]


def test_create_refuses_bad_input(cell):
    from dynocell.errors import NotFound, UserError
    from dynocell.runbooks import experiments as ex

    ex.create_experiment(cell, "taken", PLAIN, [NGRAM], repeats=2)
    with pytest.raises(UserError, match="already exists"):
        ex.create_experiment(cell, "taken", PLAIN, [NGRAM])
    with pytest.raises(UserError, match="same config as the incumbent"):
        ex.create_experiment(cell, "dup", PLAIN, [PLAIN])
    with pytest.raises(UserError, match="same config as arm"):
        ex.create_experiment(cell, "dup2", PLAIN, [NGRAM, NGRAM])
    with pytest.raises(UserError, match="repeats"):
        ex.create_experiment(cell, "zero", PLAIN, [NGRAM], repeats=0)
    with pytest.raises(UserError, match="invalid experiment name 'bad name!'"):  # it said "config name"
        ex.create_experiment(cell, "bad name!", PLAIN, [NGRAM])
    with pytest.raises(UserError, match="workload"):
        ex.create_experiment(cell, "wl", PLAIN, [NGRAM], workload=str(EXP / "missing.toml"))
    with pytest.raises(NotFound):
        ex.create_experiment(cell, "nf", "no-such-config", [NGRAM])
    with pytest.raises(NotFound):
        ex.show_experiment(cell, "never-made")


# ---------------------------------------------------------------- judging stored runs (no engine)

def _fake_run(cell, config_hash: str, *, decode: float, ttft: float, tau: float | None = None,
              lossless: str | None = None, failed_step: str | None = None, finding: str | None = None) -> str:
    """Write a run the way run_job does (real rows through the db functions)."""
    from dynocell.db import runs as db_runs
    from dynocell.db.tables import Finding
    from dynocell.runbooks.boots import new_id

    rid = new_id()
    store = cell.store
    db_runs.create_run(store, id=rid, kind="run", config_hash=config_hash, state="running", step="config")
    for step in ("config", "boot", "health", "bench"):
        sid = db_runs.start_step(store, rid, step)
        if step == failed_step:
            db_runs.end_step(store, sid, "failed", {}, f"{step} went wrong")
            db_runs.update_run(store, rid, state="failed", error=f"{step}: went wrong")
            return rid
        db_runs.end_step(store, sid, "completed", {})
    pct = {"p50": ttft, "p90": ttft, "p99": ttft * 1.5, "mean": ttft, "n": 3}
    db_runs.add_bench(store, run_id=rid, text_class=None, concurrency=1, num_requests=3, duration_s=1.0,
                      prompt_tokens=100, completion_tokens=48, request_throughput=3.0, output_tok_s=decode,
                      total_tok_s=decode, prefill_tok_s=1000.0, decode_tok_s=decode, ttft_ms=pct,
                      tpot_ms={"p50": 1000.0 / decode}, itl_ms={}, e2e_ms={})
    if tau is not None:
        k = round((tau - 1) * 10)
        db_runs.add_curve(store, [(1, 0.5, 0.5)], run_id=rid, text_class="prose", num_drafts=3, steps=10,
                          tau=tau, accept_rate=(tau - 1) / 3, histogram=[10 - k, k, 0, 0])
    if finding:
        with store.session() as s:
            s.add(Finding(run_id=rid, rule=finding, severity="error", message="output is garbage",
                          evidence={}, entries=[]))
    db_runs.update_run(store, rid, state="completed", lossless=lossless,
                       lossless_detail={"mismatches": [{"prompt": "x"}]} if lossless == "no" else None)
    return rid


def _fill(cell, name: str, values: dict[str, list[dict]]) -> None:
    """Attach fake runs to the slots of ``name`` in schedule order: ``values[label]`` popped per slot."""
    from dynocell.db import experiments as db

    exp = db.get_experiment(cell.store, name)
    by_hash = {a["config_hash"]: a["label"] for a in exp.arms}
    for slot in db.slots(cell.store, name):
        spec = values[by_hash[slot.config_hash]].pop(0)
        rid = _fake_run(cell, slot.config_hash, **spec)
        db.update_slot(cell.store, slot.id, run_id=rid,
                       state="failed" if spec.get("failed_step") else "completed")


def test_judge_better_worse_and_rejected_from_stored_runs(cell):
    from dynocell.runbooks import experiments as ex

    ex.create_experiment(cell, "judge", PLAIN, [STANDALONE, NGRAM], repeats=3)
    _fill(cell, "judge", {
        "exp-plain": [dict(decode=100.0, ttft=20.0), dict(decode=101.0, ttft=20.2), dict(decode=99.5, ttft=19.9)],
        "exp-standalone": [dict(decode=150.0, ttft=20.1, tau=2.5), dict(decode=152.0, ttft=20.0, tau=2.5),
                           dict(decode=149.0, ttft=19.9, tau=2.5)],
        "exp-ngram": [dict(decode=300.0, ttft=20.0, tau=3.0, lossless="no"), dict(decode=301.0, ttft=20.0, tau=3.0),
                      dict(decode=299.0, ttft=20.0, tau=3.0, finding="garbage_output")],
    })
    res = ex.judge(cell, "judge")
    assert res["complete"] and res["method"].startswith("welch-t")
    arms = {a["label"]: a for a in res["arms"]}
    sa = arms["exp-standalone"]
    assert sa["verdict"] == "better"
    assert ("decode_tok_s", "c=1") in {(d["metric"], d["level"]) for d in sa["drivers"]}
    assert ("tau", "acceptance") in {(d["metric"], d["level"]) for d in sa["drivers"]}
    tau = next(c for c in sa["comparisons"] if c["metric"] == "tau")
    assert tau["incumbent_mean"] == 1.0  # no speculation: one token per step
    ng = arms["exp-ngram"]
    assert ng["verdict"] == "rejected"
    assert ng["verdict_label"].startswith("rejected: lossless check failed")
    assert "garbage output" in ng["verdict_label"]
    shown = ex.show_experiment(cell, "judge")
    assert shown["experiment"]["state"] == "done"
    assert {a["label"]: a["verdict_label"] for a in shown["verdicts"]["arms"]}["exp-standalone"] == "better"
    assert ex.list_experiments(cell)[0]["verdicts"]["exp-standalone"] == "better"


def test_a_failed_boot_rejects_the_arm_and_few_runs_are_inconclusive(cell):
    from dynocell.runbooks import experiments as ex

    ex.create_experiment(cell, "boots", PLAIN, [STANDALONE, NGRAM], repeats=2)
    _fill(cell, "boots", {
        "exp-plain": [dict(decode=100.0, ttft=20.0), dict(decode=115.0, ttft=24.0)],
        "exp-standalone": [dict(decode=0.0, ttft=0.0, failed_step="boot"), dict(decode=120.0, ttft=20.0, tau=2.0)],
        "exp-ngram": [dict(decode=118.0, ttft=19.0, tau=1.2), dict(decode=131.0, ttft=23.0, tau=1.3)],
    })
    res = ex.judge(cell, "boots")
    arms = {a["label"]: a for a in res["arms"]}
    assert arms["exp-standalone"]["verdict_label"].startswith("rejected: boot failed")
    ng = arms["exp-ngram"]
    dec = next(c for c in ng["comparisons"] if c["metric"] == "decode_tok_s")
    assert dec["verdict"] == "inconclusive" and dec["n_incumbent"] == 2 and dec["n_arm"] == 2


# ---------------------------------------------------------------- pins and rollback (no engine)

def test_pin_history_and_rollback(cell):
    from dynocell.errors import NotFound, UserError
    from dynocell.runbooks import experiments as ex

    with pytest.raises(NotFound, match="nothing is pinned"):
        ex.rollback(cell)
    with pytest.raises(UserError, match="note"):
        ex.pin(cell, PLAIN, note=" ")
    first = ex.pin(cell, PLAIN, note="what serves today")
    with pytest.raises(NotFound, match="no previous pin"):
        ex.rollback(cell)
    second = ex.pin(cell, STANDALONE, note="qualified by experiment spec")
    assert second["evidence"]["replaces_pin"] == first["id"]
    pins = ex.list_pins(cell)
    assert [p["label"] for p in pins] == ["exp-standalone", "exp-plain"] and pins[0]["current"]
    rb = ex.rollback(cell)
    assert rb["previous"]["id"] == first["id"] and rb["current"]["id"] == second["id"]
    r = rb["recipe"]
    assert r["source_toml"] == Path(PLAIN).read_text()
    assert 'model_path = "dynocell:tiny"' in r["canonical_toml"]
    assert "dynocell.engine.reference" in r["argv"] and r["boot_command"].startswith("dynocell boot ")
    assert rb["applied"] is None
    applied = ex.rollback(cell, apply=True)["applied"]
    assert applied["config_hash"] == first["config_hash"] and applied["evidence"]["rollback_of"] == second["id"]
    assert ex.list_pins(cell)[0]["id"] == applied["id"]
    with pytest.raises(NotFound, match="build"):
        ex.pin(cell, PLAIN, note="x", build="sha256:deadbeef")


def test_pin_keeps_the_name_it_was_pinned_by(cell):
    """A config with two names (exp-plain, and aaa-plain added later for the same file) pinned as exp-plain
    was listed (`pin --list`, `rollback`) under aaa-plain, the first name in sort order — `dynocell pin tiny`
    showed as `embedded` in the newcomer pass (n6check). Now the pin keeps its name while that name points
    at the config; a rollback --apply re-pins under the previous pin's name."""
    from dynocell.runbooks import experiments as ex
    from dynocell.runbooks.configs import add_config

    first = ex.pin(cell, PLAIN, note="what serves today")
    add_config(cell, Path(PLAIN), "aaa-plain")  # a second name of the same config
    assert ex.pin(cell, "exp-plain", note="the same, by name")["label"] == "exp-plain"
    ex.pin(cell, STANDALONE, note="qualified")
    assert [p["label"] for p in ex.list_pins(cell)] == ["exp-standalone", "exp-plain", "exp-plain"]
    assert first["label"] == "exp-plain"
    applied = ex.rollback(cell, apply=True)["applied"]
    assert ex.list_pins(cell)[0]["id"] == applied["id"] and ex.list_pins(cell)[0]["label"] == "exp-plain"


# ---------------------------------------------------------------- end to end on the reference engine

def _link_models(home: Path, pair) -> None:
    """Put the session's cached model pair where the data directory expects it (no retraining)."""
    src = Path(pair.target).parent
    dst = home / "models" / src.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        os.symlink(src, dst)


def _configs(tmp: Path, pair) -> tuple[str, str, str]:
    """The experiment's configs: the data files as they are (``dynocell:tiny``) when the procedures
    resolve built-in model names, else copies pointing at the cached pair's directories."""
    import importlib.util

    if importlib.util.find_spec("dynocell.runbooks.model_pair") is not None:
        return PLAIN, STANDALONE, NGRAM
    out = []
    for src in (PLAIN, STANDALONE, NGRAM):
        text = Path(src).read_text().replace('"dynocell:tiny-draft"', f'"{pair.draft}"') \
            .replace('"dynocell:tiny"', f'"{pair.target}"')
        dst = tmp / Path(src).name
        dst.write_text(text)
        out.append(str(dst))
    return out[0], out[1], out[2]


def _slots(home: Path, name: str) -> list[tuple]:
    with sqlite3.connect(home / "dynocell.db", timeout=30) as c:
        return c.execute("SELECT seq, state, run_id FROM experiment_runs WHERE experiment = ? ORDER BY seq",
                         (name,)).fetchall()


def _run_state(home: Path, run_id: str) -> str | None:
    with sqlite3.connect(home / "dynocell.db", timeout=30) as c:
        row = c.execute("SELECT state FROM runs WHERE id = ?", (run_id,)).fetchone()
    return row[0] if row else None


@pytest.fixture(scope="module")
def e2e(tmp_path_factory, model_pair):
    """The reference-engine experiment, created, interrupted after its first run, resumed and judged."""
    home = tmp_path_factory.mktemp("exp-home")
    _link_models(home, model_pair)
    env = dict(os.environ, DYNOCELL_HOME=str(home), PYTHONUNBUFFERED="1")
    env.pop("DYNOCELL_DATABASE_URL", None)
    plain, standalone, ngram = _configs(home, model_pair)
    cli(env, "experiment", "create", "spec", "--incumbent", plain, "--arm", standalone, "--arm", ngram,
        "--workload", WORKLOAD, "--repeats", "2", "--no-lossless-check", "--no-profile")

    # Run, and Ctrl-C once the first run is stored and the second one has started.
    proc = subprocess.Popen([sys.executable, "-c", CLI, "experiment", "run", "spec"], env=env, cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    interrupted_run = None
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            slots = _slots(home, "spec")
            if slots and slots[0][1] in ("completed", "failed") and slots[1][2] \
                    and _run_state(home, slots[1][2]) == "running":
                interrupted_run = slots[1][2]
                proc.send_signal(signal.SIGINT)
                break
            time.sleep(0.2)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    first = {"rc": proc.returncode, "stdout": out, "stderr": err, "slots": _slots(home, "spec"),
             "interrupted_run": interrupted_run}
    resumed = cli(env, "experiment", "run", "spec")
    shown = json.loads(cli(env, "experiment", "show", "spec", "--json").stdout)
    table = cli(env, "experiment", "show", "spec").stdout
    return {"home": home, "env": env, "first": first, "resumed": resumed, "shown": shown, "table": table,
            "configs": (plain, standalone, ngram)}


def test_e2e_interrupt_records_and_resume_redoes_only_the_interrupted_run(e2e):
    first = e2e["first"]
    assert first["interrupted_run"], f"never reached the second run:\n{first['stderr'][-3000:]}"
    assert first["rc"] == 130, first["stderr"][-3000:]
    assert "resume with `dynocell experiment run spec`" in first["stderr"]
    seq0, seq1 = first["slots"][0], first["slots"][1]
    assert seq0[1] == "completed", first["stderr"][-3000:]
    assert seq1[1] == "interrupted" and seq1[2] == first["interrupted_run"]
    assert all(s[1] == "pending" for s in first["slots"][2:])
    assert _run_state(e2e["home"], first["interrupted_run"]) == "interrupted"
    # after resuming: the completed run kept, the interrupted one redone under a new run id
    final = _slots(e2e["home"], "spec")
    assert final[0][2] == seq0[2]
    assert final[1][2] != first["interrupted_run"]
    assert all(s[1] == "completed" for s in final), (final, e2e["resumed"].stderr[-3000:])
    assert "5 to go" in e2e["resumed"].stderr


def test_e2e_verdicts_stored_and_printed(e2e):
    shown = e2e["shown"]
    v = shown["verdicts"]
    assert shown["experiment"]["state"] == "done" and v["complete"]
    assert v["incumbent"]["label"] == "exp-plain" and len(v["incumbent"]["runs"]) == 2
    arms = {a["label"]: a for a in v["arms"]}
    assert set(arms) == {"exp-standalone", "exp-ngram"}
    for a in arms.values():
        assert a["verdict"] in ("better", "worse", "neutral", "inconclusive")  # the reference pair is lossless
        keys = {(c["metric"], c["level"]) for c in a["comparisons"]}
        assert {("decode_tok_s", "c=1"), ("prefill_tok_s", "c=1"), ("ttft_p50_ms", "c=1"), ("ttft_p99_ms", "c=1"),
                ("tpot_ms", "c=1"), ("tau", "acceptance")} <= keys
        assert all(c["n_incumbent"] == 2 and c["n_arm"] == 2 for c in a["comparisons"])
    tau = next(c for c in arms["exp-standalone"]["comparisons"] if c["metric"] == "tau")
    assert tau["incumbent_mean"] == 1.0 and tau["arm_mean"] > 1.0
    table = e2e["table"]
    assert "arms × metrics × levels" in table and "exp-standalone" in table and "welch-t" in table
    # the table for the report
    print("\n" + table)
    listed = json.loads(cli(e2e["env"], "experiment", "list", "--json").stdout)
    assert listed[0]["name"] == "spec" and listed[0]["done"] == 6


def test_e2e_pin_the_winner_with_evidence(e2e):
    env = e2e["env"]
    plain, standalone, _ = e2e["configs"]
    cli(env, "pin", plain, "--note", "serving today")
    row = json.loads(cli(env, "pin", standalone, "--note", "experiment spec", "--json").stdout)
    exps = row["evidence"]["experiments"]
    assert exps and exps[0]["name"] == "spec" and exps[0]["role"] == "arm" and exps[0]["verdict"]
    assert len(row["evidence"]["runs"]) == 2
    listed = json.loads(cli(env, "pin", "--list", "--json").stdout)
    assert [p["label"] for p in listed] == ["exp-standalone", "exp-plain"] and listed[0]["current"]
    text = cli(env, "rollback").stdout
    assert "previous pin" in text and "exp-plain" in text and "model_path = " in text
    assert "--port" in text and "dynocell boot " in text
    bad = cli(env, "pin", plain, ok=False)
    assert bad.returncode == 2 and "needs --note" in bad.stderr


def test_e2e_verdict_report_fits_80_columns(e2e):
    """`experiment show` at COLUMNS=80 printed "incumbent … (2 runs); method: welch-t 95% (…); noise floor = …"
    at 118 columns (newcomer pass n6check); now its prose lines wrap like its tables."""
    text = cli(dict(e2e["env"], COLUMNS="80"), "experiment", "show", "spec").stdout
    assert [ln for ln in text.splitlines() if len(ln) > 80] == []
    joined = " ".join(text.splitlines())
    assert "method: welch-t 95%" in joined and "noise floor = max(2%, incumbent CV)" in joined
