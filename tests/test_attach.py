"""``dynocell attach``: a running engine dynocell did not start, driven like any boot.

The engine is the reference engine started by hand as a real subprocess
(``dynocell.engine.reference.launch.start_engine``, not dynocell's supervisor),
with STANDALONE speculative decoding. dynocell attaches to it, checks health,
runs the main job on it (bench, acceptance, profile, diagnose), refuses to stop
it, and leaves it running.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dynocell.engine.reference.launch import start_engine

REPO = Path(__file__).resolve().parents[1]
VLLM = Path(__file__).parent / "data" / "vllm-0.26.0"


@pytest.fixture(scope="module")
def engine(model_pair, tmp_path_factory):
    target, draft = model_pair.target, model_pair.draft
    log = tmp_path_factory.mktemp("hand-started") / "engine.log"
    # The operator's launch lets profile output go under pytest's base temp dir, which holds every
    # test's data directory (the engine confines /start_profile's output_dir to --profile-dir).
    eng = start_engine(target, ["--enable-metrics", "--profile-dir", str(tmp_path_factory.getbasetemp()),
                                "--speculative-algorithm", "STANDALONE",
                                "--speculative-draft-model-path", str(draft), "--speculative-num-steps", "3",
                                "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"], log)
    yield eng
    eng.stop()


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


def test_attach_health_run_and_stop_refused(cell, engine):
    from dynocell.db import boots as db_boots, runs as db_runs
    from dynocell.errors import UserError
    from dynocell.runbooks import boots
    from dynocell.runbooks.attach import attach
    from dynocell.runbooks.run import run_on_boot

    res = attach(cell, engine.url)
    assert res["created"] and res["observed"] and res["engine"] == "sglang"
    f = res["config_fields"]
    assert f["speculative.algorithm"] == "STANDALONE" and f["speculative.num_draft_tokens"] == 4
    assert f["model_path"] == str(engine_model(engine))
    row = db_boots.get_boot(cell.store, res["boot_id"])
    assert row.kind == "attached" and row.pid is None and row.state == "ready"
    assert attach(cell, engine.url)["boot_id"] == res["boot_id"]  # attached once

    assert [b["id"] for b in boots.reconcile_and_list(cell)] == [res["boot_id"]]
    verdict = boots.health(cell, res["boot_id"])
    assert verdict.verdict == "healthy", verdict

    run_id = run_on_boot(cell, res["boot_id"])
    run = db_runs.get_run(cell.store, run_id)
    assert run.state == "completed", (run.error, db_runs.steps(cell.store, run_id))
    steps = {s.name: s.state for s in db_runs.steps(cell.store, run_id)}
    assert steps == {"health": "completed", "bench": "completed", "acceptance": "completed",
                     "profile": "completed", "diagnose": "completed"}
    curves = db_runs.curves(cell.store, run_id)
    assert curves and all(c.num_drafts == 3 and c.steps > 0 for c in curves)
    assert db_runs.profiles(cell.store, run_id=run_id)[0].state == "completed"

    with pytest.raises(UserError, match="attached: dynocell did not start it"):
        boots.stop(cell, res["boot_id"])
    with pytest.raises(UserError, match=f"not the process listening on port {engine.port}"):
        boots.stop(cell, res["boot_id"], pid=1)
    assert engine.proc.poll() is None  # the engine still runs
    assert db_boots.get_boot(cell.store, res["boot_id"]).state == "ready"


def engine_model(engine) -> str:
    cmd = engine.proc.args
    return cmd[cmd.index("--model-path") + 1]


def test_two_real_scrapes_of_the_attached_engine_give_its_window(cell, engine):
    """Two /metrics scrapes around a bench: the per-position counter deltas give the window's curve,
    the same numbers as the bench's own acceptance curves merged."""
    import httpx

    from dynocell.db import runs as db_runs
    from dynocell.engine.acceptance import Curve, merge
    from dynocell.runbooks.attach import attach
    from dynocell.runbooks.evidence import import_metrics
    from dynocell.runbooks.run import bench

    boot_id = attach(cell, engine.url)["boot_id"]
    d = Path(cell.settings.home)
    (d / "before.txt").write_text(httpx.get(engine.url + "/metrics", trust_env=False).text)
    run_id = bench(cell, boot_id)
    (d / "after.txt").write_text(httpx.get(engine.url + "/metrics", trust_env=False).text)
    res = import_metrics(cell, [d / "before.txt", d / "after.txt"])
    assert res["window"].startswith("delta") and res["acceptance"]["source"] == "sglang per-position counters"
    bench_curves = [Curve.from_histogram(c.histogram) for c in db_runs.curves(cell.store, run_id)]
    merged = merge(bench_curves)
    # the bench's calibration and warm-up requests are in the window too: τ close, not equal
    assert res["acceptance"]["drafts"] >= merged.steps
    assert abs(res["acceptance"]["tau"] - merged.tau) < 0.25


def test_cli_attach_and_stop_refused(cli_env, engine):
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    att = subprocess.run([exe, "attach", engine.url, "--json"], env=cli_env, capture_output=True, text=True,
                         timeout=120, cwd=REPO)
    assert att.returncode == 0, att.stderr
    boot_id = json.loads(att.stdout)["boot_id"]
    stop = subprocess.run([exe, "stop", boot_id], env=cli_env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert stop.returncode == 2 and stop.stderr.startswith("Error: ") and "--pid" in stop.stderr
    assert engine.proc.poll() is None


def test_attached_boot_says_attached_not_ready_0_0_s(cli_env, cell, engine):
    """The ready time of an engine dynocell did not start is unknown: `ps` and the run header of
    `show` say "attached" (they said "ready 0.0 s"), and the store holds no made-up 0.0."""
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))

    def cli(*args: str) -> str:
        p = subprocess.run([exe, *args], env=cli_env, capture_output=True, text=True, timeout=300, cwd=REPO)
        assert p.returncode == 0, p.stderr
        return p.stdout

    boot_id = json.loads(cli("attach", engine.url, "--json"))["boot_id"]
    ps = cli("ps")
    row = next(ln for ln in ps.splitlines() if boot_id in ln)
    assert "attached" in row and "0.0 s" not in row, ps
    wl = str(Path(__file__).parent / "data" / "experiments" / "tiny-workload.toml")
    run_id = json.loads(cli("bench", boot_id, "--workload", wl, "--json"))["run"]["id"]
    show = cli("show", run_id)
    head = next((ln for ln in show.splitlines() if f"boot   {boot_id}" in ln), "")  # the run header's boot line
    assert "attached (ready time unknown)" in head and "ready 0.0 s" not in head, show
    shown = json.loads(cli("show", run_id, "--json"))
    assert shown["boot"]["boot"]["ready_s"] is None and shown["boot"]["boot"]["kind"] == "attached"
    # the TUI's boot panel reads the same
    from datetime import datetime, timezone
    from types import SimpleNamespace

    from dynocell.cli.tui.screens import boot_summary_lines
    from dynocell.runbooks import views

    dash = SimpleNamespace(alias=lambda i: i, now=lambda: datetime.now(timezone.utc))
    panel = str(boot_summary_lines(dash, views.boot_detail(cell, boot_id), None, 120)[0])
    assert "attached" in panel and "ready" not in panel.split("attached", 1)[1], panel
    assert engine.proc.poll() is None


def test_stop_with_the_listening_pid_stops_only_that_engine(cell, model_pair, tmp_path):
    from dynocell.db import boots as db_boots
    from dynocell.runbooks import boots
    from dynocell.runbooks.attach import attach

    eng = start_engine(model_pair.target, [], tmp_path / "plain.log")
    try:
        boot_id = attach(cell, eng.url)["boot_id"]
        row = boots.stop(cell, boot_id, grace_s=10, pid=eng.proc.pid)
        assert row["state"] == "stopped" and row["stop_how"] == "graceful"
        assert eng.proc.wait(10) is not None
        assert db_boots.get_boot(cell.store, boot_id).kind == "attached"
    finally:
        eng.stop()


@pytest.mark.parametrize("url,why", [
    ("ftp://127.0.0.1:1", "scheme 'ftp'"),
    ("http://user:pw@127.0.0.1:1", "user info"),
    ("http://127.0.0.1:1/v1/chat", "has a path"),
    ("not a url at all", "scheme"),
    ("http://127.0.0.1:99999", "port 99999 is not a TCP port"),  # was tried ("nothing answers at …")
    ("http://[::1]:0", "port 0 is not a TCP port"),
])
def test_bad_urls_are_refused(cell, url, why):
    from dynocell.errors import UserError
    from dynocell.runbooks.attach import attach

    with pytest.raises(UserError, match=why):
        attach(cell, url)


def test_nothing_listening_is_refused_and_nothing_stored(cell):
    from dynocell.db import boots as db_boots
    from dynocell.engine.reference.launch import free_port
    from dynocell.errors import UserError
    from dynocell.runbooks.attach import attach

    with pytest.raises(UserError, match="nothing answers at"):
        attach(cell, f"http://127.0.0.1:{free_port()}")
    assert db_boots.list_boots(cell.store) == []


def test_health_oracle_reads_vllm_metric_families():
    """The progress check counts vLLM's own families (real vLLM 0.26.0 scrape)."""
    from dynocell.engine.health import progress_from_metrics
    from dynocell.engine.metrics import parse_metrics

    text = (VLLM / "C_draft_graph.metrics.txt").read_text()
    snap = parse_metrics(text)
    s = progress_from_metrics(text, 0.0)
    assert s.generated == snap.sum("vllm:generation_tokens_total") > 0
    assert s.prompt == snap.sum("vllm:prompt_tokens_total") > 0
    busy = text.replace('vllm:num_requests_waiting{engine="0",model_name="m"} 0.0',
                        'vllm:num_requests_waiting{engine="0",model_name="m"} 5.0')
    assert progress_from_metrics(busy, 1.0).queued == 5.0


def test_profile_refused_by_the_engine_says_why_in_full(cli_env, model_pair, tmp_path):
    """An engine whose profile directory does not cover dynocell's: the engine's own reason
    whole (it was cut mid-word at 200 characters of raw JSON) and a hint that names a way out."""
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    eng = start_engine(model_pair.target, ["--profile-dir", str(tmp_path / "elsewhere")], tmp_path / "e.log")
    try:
        att = subprocess.run([exe, "attach", eng.url, "--json"], env=cli_env, capture_output=True, text=True,
                             timeout=120, cwd=REPO)
        assert att.returncode == 0, att.stderr
        boot_id = json.loads(att.stdout)["boot_id"]
        prof = subprocess.run([exe, "profile", boot_id], env=cli_env, capture_output=True, text=True,
                              timeout=120, cwd=REPO)
        assert prof.returncode != 0 and "Traceback" not in prof.stderr
        assert "/start_profile answered 400: output_dir" in prof.stderr
        assert "profile output stays inside it" in prof.stderr and '{"object"' not in prof.stderr
        assert "SGLANG_TORCH_PROFILER_DIR" in prof.stderr and "run --no-profile" in prof.stderr
    finally:
        eng.stop()


def test_experiment_on_attached_boots_runs_judges_and_leaves_the_engines_up(cell, engine, model_pair, tmp_path):
    """Issue 17: arms given as ``boot:ID`` (engines started by hand, attached) are run on, never booted or
    stopped; the verdicts come as for any arm (τ from the speculative engine's own acceptance step)."""
    from dynocell.db import boots as db_boots, runs as db_runs
    from dynocell.errors import UserError
    from dynocell.runbooks import boots, experiments as ex
    from dynocell.runbooks.attach import attach

    workload = str(Path(__file__).parent / "data" / "experiments" / "tiny-workload.toml")
    plain = start_engine(model_pair.target, ["--enable-metrics"], tmp_path / "plain.log")
    try:
        inc = attach(cell, plain.url)["boot_id"]
        arm = attach(cell, engine.url)["boot_id"]
        res = ex.create_experiment(cell, "hand", f"boot:{inc}", [f"boot:{arm}"], workload=workload, repeats=2,
                                   lossless=False)
        assert [a.get("boot_id") for a in res["arms"]] == [inc, arm]
        assert [s["label"] for s in res["slots"]] == [f"attached {inc}", f"attached {arm}",
                                                      f"attached {arm}", f"attached {inc}"]
        done = ex.run_experiment(cell, "hand")
        slots = done["slots"]
        assert [s["state"] for s in slots] == ["completed"] * 4, done
        for s in slots:
            run = db_runs.get_run(cell.store, s["run_id"])
            assert run.boot_id == (inc if s["role"] == "incumbent" else arm) and run.kind == "run"
            names = {st.name for st in db_runs.steps(cell.store, s["run_id"])}
            assert "boot" not in names and {"health", "bench"} <= names
        v = ex.judge(cell, "hand", store=False)
        assert v["complete"] and v["incumbent"]["gates"] == [] and v["arms"][0]["rejections"] == []
        comps = {(c["metric"], c["level"]): c for c in v["arms"][0]["comparisons"]}
        assert ("decode_tok_s", "c=1") in comps and comps[("decode_tok_s", "c=1")]["verdict"]
        assert v["incumbent"]["samples"]["tau@acceptance"] == [1.0, 1.0]  # plain: one token per step
        assert all(t > 1.0 for t in v["arms"][0]["samples"]["tau@acceptance"])  # STANDALONE k=3
        # dynocell booted nothing and stopped nothing
        assert sorted(b.id for b in db_boots.list_boots(cell.store)) == sorted([inc, arm])
        assert plain.proc.poll() is None and engine.proc.poll() is None
        for b in (inc, arm):
            assert db_boots.get_boot(cell.store, b).state == "ready"
            with pytest.raises(UserError, match="attached: dynocell did not start it"):
                boots.stop(cell, b)
        assert plain.proc.poll() is None and engine.proc.poll() is None

        # The incumbent's engine goes away (stopped by its operator): its slots fail, the arm is judged
        # against nothing; creating one on that boot now is refused.
        ex.create_experiment(cell, "gone", f"boot:{inc}", [f"boot:{arm}"], workload=workload, repeats=1,
                             lossless=False)
        plain.stop()
        gone = ex.run_experiment(cell, "gone")
        states = {s["role"]: s["state"] for s in gone["slots"]}
        assert states == {"incumbent": "failed", "arm": "completed"}, gone
        gates = ex.judge(cell, "gone", store=False)["incumbent"]["gates"]
        assert any(f"boot {inc} (attached) does not answer /health" in g for g in gates), gates
        row = next(r for r in boots.reconcile_and_list(cell) if r["id"] == inc)  # ps does not show it as if it answered
        assert row["state_note"].startswith("not answering /health") and row["engine_alive"] is False
        with pytest.raises(UserError, match=f"boot:{inc}: boot {inc} is .*not ready"):
            ex.create_experiment(cell, "late", f"boot:{inc}", [f"boot:{arm}"], workload=workload)
        assert engine.proc.poll() is None
    finally:
        plain.stop()


def test_attached_vllm_engine_is_judged_on_vllms_surface(cell, model_pair, tmp_path):
    """An attached vLLM engine (here the reference engine speaking vLLM's routes) is probed with
    vLLM's checks — /v1/models, a 1-token completion, the vllm: counters — not SGLang's
    /get_server_info and /health_generate, which it does not serve (a newcomer found `health`
    degraded and `run --boot` failing)."""
    from dynocell.runbooks import boots
    from dynocell.runbooks.attach import attach
    from dynocell.runbooks.run import run_on_boot

    eng = start_engine(model_pair.target, ["--surface", "vllm"], tmp_path / "vllm.log")
    try:
        res = attach(cell, eng.url)
        assert res["engine"] == "vllm"
        verdict = boots.health(cell, res["boot_id"])
        names = {c["name"] for c in verdict.checks}
        assert verdict.verdict == "healthy", verdict.failed
        assert {"models", "completion"} <= names and not names & {"health_generate", "server_info"}
        run_id = run_on_boot(cell, res["boot_id"], profile=False)
        from dynocell.db import runs as db_runs

        assert db_runs.get_run(cell.store, run_id).state == "completed"
        assert eng.proc.poll() is None  # still the operator's engine
    finally:
        eng.stop()


def test_an_engine_attached_at_https_is_asked_over_tls(cell, engine):
    """Liveness (``ps``, ``show``, the polls), health and bench of an engine attached at ``https://`` go over
    TLS, never silently over plain http: the plain-HTTP reference engine recorded as attached at
    ``https://127.0.0.1:PORT`` does not answer (the TLS handshake fails) — the old probe built
    ``http://`` from host and port and called it alive — while the same engine attached at ``http://`` does."""
    import dataclasses

    from dynocell.runbooks.attach import attach, attached_alive, attached_scheme
    from dynocell.runbooks.boots import AttachedBoot, reconcile

    res = attach(cell, engine.url)
    plain = reconcile(cell, _boot(cell, res["boot_id"]))
    assert res["url"].startswith("http://") and attached_scheme(plain["argv"]) == "http" and plain["engine_alive"]
    tls = dataclasses.replace(_boot(cell, res["boot_id"]), argv=plain["argv"].replace("(attached: http://",
                                                                                         "(attached: https://"))
    assert tls.argv.startswith("(attached: https://127.0.0.1:") and attached_scheme(tls.argv) == "https"
    assert not attached_alive(tls)
    assert AttachedBoot.from_row(tls.to_dict(), None).base_url == f"https://127.0.0.1:{tls.port}"
    assert attached_scheme("python -m sglang.launch_server --port 30000") == "http"  # dynocell's own boots


def _boot(cell, boot_id):
    from dynocell.db import boots as db_boots

    return db_boots.get_boot(cell.store, boot_id)
