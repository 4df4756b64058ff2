"""Issue 38: bugs an independent audit planted by hand that no test caught (its survivors 1 and 3-7;
2 is ``tests/test_bench.py::test_a_native_chunk_whose_text_did_not_grow_is_not_content``; 8 and 9 belong to
the refs and owned-flags suites). Each test here fails with its bug planted and passes without it; the
bug each one kills is named in its docstring.

Real parts only: the phase split reads a Chrome trace written to disk, the bench imports read result
files in each tool's shape, the log import reads the real SGLang 0.5.17 logs of ``tests/data``, the
listings read a real store (SQLite, and PostgreSQL where ``DYNOCELL_TEST_POSTGRES_URL`` names a server).
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from tests.test_bad_inputs import cli

DATA = Path(__file__).parent / "data"
BENCH = DATA / "bench"
SGL = DATA / "sglang-0.5.17"
SGL_TP2 = DATA / "sglang-0.5.17-tp2"


# ---------------------------------------------------------------- 1. spec_phases: the innermost range

def _x(name, cat, ts, dur, tid=1, **args):
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 1, "tid": tid, "args": args}


def test_a_kernel_belongs_to_the_innermost_of_nested_phase_ranges(tmp_path):
    """Survivor 1: ``spec_phases`` picking the outermost containing range instead of the innermost.

    SGLang's ``spec_stage_span("draft")`` wraps the draft worker's forwards; a draft-extend forward
    (``step[DRAFT_EXTEND_V2 bs=N]``) launched inside it is draft extend, not draft. Ranges of two phases
    nest here, the inner one short: its kernel must go to the inner phase, the outer range's own kernel
    to the outer one, and a range that ended before the launch claims nothing."""
    from dynocell.engine.spec_phases import split_phases

    ev = [
        _x("scheduler.run_batch", "user_annotation", 0, 2000),
        _x("step[TARGET_VERIFY bs=1]", "user_annotation", 1, 5),  # ends before every launch
        _x("draft", "user_annotation", 10, 1000),
        _x("step[DRAFT_EXTEND_V2 bs=1]", "user_annotation", 20, 100),  # nested in "draft"
        _x("cudaLaunchKernel", "cuda_runtime", 30, 5, correlation=1),  # inside both: the inner wins
        _x("cudaLaunchKernel", "cuda_runtime", 500, 5, correlation=2),  # inside "draft" only
        _x("gemm_kernel", "kernel", 40, 70, tid=7, correlation=1),
        _x("gemm_kernel", "kernel", 510, 30, tid=7, correlation=2),
    ]
    p = tmp_path / "nested.trace.json.gz"
    p.write_bytes(gzip.compress(json.dumps({"traceEvents": ev}).encode()))
    s = split_phases(p)
    assert s.ms == pytest.approx({"draft_extend": 0.07, "draft_forward": 0.03})
    assert s.launches == {"draft_extend": 1, "draft_forward": 1}


# ---------------------------------------------------------------- 3, 4. bench result files

def _guidellm_with_request_latency(tmp_path: Path) -> Path:
    """GuideLLM's report (``tests/data/bench/guidellm-benchmarks.json``) with the first benchmark's
    ``request_latency``, which GuideLLM reports in seconds (``GenerativeRequestStats.request_latency``:
    end − start, seconds; its ``*_ms`` metrics are in ms), as a ``DistributionSummary``."""
    doc = json.loads((BENCH / "guidellm-benchmarks.json").read_text())
    doc["benchmarks"][0]["metrics"]["request_latency"] = {"successful": {
        "mean": 3.6, "median": 3.5, "min": 2.9, "max": 4.5, "count": 10,
        "percentiles": {"p50": 3.5, "p90": 4.1, "p99": 4.4}}}
    out = tmp_path / "guidellm.json"
    out.write_text(json.dumps(doc))
    return out


def test_guidellm_request_latency_in_seconds_is_stored_in_ms(tmp_path):
    """Survivor 3: GuideLLM's ``request_latency`` (seconds) not scaled to ms: e2e of 3.5 ms, not 3,500."""
    from dynocell.engine.results import read_bench

    tool, levels = read_bench(_guidellm_with_request_latency(tmp_path))
    assert tool == "guidellm"
    e2e = levels[0].e2e_ms
    assert (e2e["p50"], e2e["p90"], e2e["p99"], e2e["mean"]) == pytest.approx((3500.0, 4100.0, 4400.0, 3600.0))
    assert levels[0].ttft_ms["p50"] == 120.0  # already in ms: not scaled


def _with_p90(tmp_path: Path, name: str) -> Path:
    """A bench_serving / ``vllm bench serve`` result with ``--metric-percentiles 90,99``: both tools then
    write ``p90_<metric>_ms`` beside ``p99_<metric>_ms`` (the values here differ from the p99s on purpose)."""
    text = (BENCH / name).read_text()
    obj = json.loads(text.splitlines()[0])
    e2e = "e2el" if "vllm" in name else "e2e_latency"  # vLLM's name, with e2el among --percentile-metrics
    if e2e == "e2el":
        obj.update(mean_e2el_ms=8100.0, median_e2el_ms=8000.75)
    for n, metric in enumerate(("ttft", "tpot", "itl", e2e)):
        obj.setdefault(f"p99_{metric}_ms", 1000.0 + n)
        obj[f"p90_{metric}_ms"] = round(obj[f"p99_{metric}_ms"] * 0.9, 2)
    out = tmp_path / name
    out.write_text(json.dumps(obj) + "\n")
    return out, obj, e2e


@pytest.mark.parametrize("name,tool", [("sglang-bench-serving.jsonl", "sglang-bench-serving"),
                                       ("vllm-bench-serve.json", "vllm-bench-serve")])
def test_bench_serving_p90_is_read_from_the_p90_key(tmp_path, name, tool):
    """Survivor 4: SGLang / vLLM bench import reading p90 from the ``p99_*`` key."""
    from dynocell.engine.results import read_bench

    path, obj, e2e = _with_p90(tmp_path, name)
    got, (level,) = read_bench(path)
    assert got == tool
    for field, metric in (("ttft_ms", "ttft"), ("tpot_ms", "tpot"), ("itl_ms", "itl"), ("e2e_ms", e2e)):
        pct = getattr(level, field)
        assert pct["p90"] == obj[f"p90_{metric}_ms"] != obj[f"p99_{metric}_ms"] == pct["p99"], field
        assert pct["p50"] == obj.get(f"median_{metric}_ms") and pct["mean"] == obj.get(f"mean_{metric}_ms")


# ---------------------------------------------------------------- 5. log import: the first ready line

def _ready_twice(tmp_path: Path) -> Path:
    """The real SGLang 0.5.17 log A (ready 59 s after its first line) with a second "fired up" line 60 s
    after the first one: the boot was ready at the first."""
    out = tmp_path / "A-ready-twice.server.log"
    out.write_text((SGL / "A.server.log").read_text() + "[2026-11-30 03:25:30] The server is fired up and ready "
                   "to roll!\n")
    return out


def test_read_log_takes_ready_from_the_first_ready_line(tmp_path):
    """Survivor 5 (engine): ``LogReport.ready_s`` from the last "ready" line instead of the first."""
    from dynocell.engine.logfile import read_log

    assert read_log(SGL / "A.server.log").ready_s == pytest.approx(59, abs=1)
    assert read_log(_ready_twice(tmp_path)).ready_s == pytest.approx(59, abs=1)


def test_import_log_stores_ready_from_the_first_ready_line(isolated_home, tmp_path):
    """Survivor 5 (the import): the stored boot's ``ready_s`` and the import's answer agree with
    :func:`read_log`: the first ready line."""
    code, out, err = cli("import", "log", str(_ready_twice(tmp_path)), "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["ready_s"] == pytest.approx(59, abs=1)
    assert res["nodes"]["0"]["ready"] == pytest.approx(59, abs=1)


# ---------------------------------------------------------------- 6. multi-node phase skew

def _import_nodes(*paths: Path) -> dict:
    code, out, err = cli("import", "log", *map(str, paths), "--allow-mismatch", "--json")
    assert code == 0, err
    return json.loads(out)


def test_phase_skew_is_max_minus_min_over_the_nodes_in_any_order(isolated_home, tmp_path):
    """Survivor 6: multi-node phase skew computed as last node − first node (order-dependent, negative when
    the first file's node is the late one, 0 when the first and last nodes agree) instead of max − min.

    The two real TP2 boots T and T0 stand in for two nodes (as in tests/test_imports.py); a copy of T is a
    third node that agrees with the first."""
    t, t0 = SGL_TP2 / "T.server.log", SGL_TP2 / "T0.server.log"
    third = shutil.copyfile(t, tmp_path / "T-again.server.log")
    for order in ((t, t0), (t0, t), (t, t0, third)):
        res = _import_nodes(*order)
        nodes = res["nodes"].values()
        want = {name: round(max(n[name] for n in nodes if name in n) - min(n[name] for n in nodes if name in n), 3)
                for name in {k for n in nodes for k in n} if sum(name in n for n in nodes) > 1}
        assert res["phase_skew_s"] == want, [p.name for p in order]
        assert res["phase_skew_s"]["ready"] == pytest.approx(60, abs=1)


# ---------------------------------------------------------------- 7. listings: health only when ready

STATES = ("starting", "ready", "stopping", "stopped", "failed", "crashed", "lost")


def test_a_listing_shows_health_only_for_a_ready_boot(db_url):
    """Survivor 7: a listing showing a stopped / starting boot's last verdict as its current health.

    One boot per state, each with a "healthy" verdict stored: only the ready boot has ``health`` (the dashboard,
    ``ps`` and ``ps --all`` alike, and the host's verdicts); every boot keeps the verdict as ``last_health``."""
    from dynocell.db import boots as dbboots, configs as dbc, listings
    from dynocell.db.session import Store

    store = Store(db_url)
    try:
        dbc.insert_config(store, "sha256:cc", "reference", "dynocell:tiny", "{}", "x = 3")
        for st in STATES:
            dbboots.create_boot(store, id=f"b-{st}", config_hash="sha256:cc", engine="reference", hostname="h",
                                host="127.0.0.1", port=30000, argv="x", env={}, state=st, log_path=f"/nowhere/{st}")
            dbboots.add_health(store, f"b-{st}", "healthy", [{"name": "health", "ok": True, "latency_ms": 1.0,
                                                              "reason": ""}])
        every = {b["id"]: b for b in listings.list_boots(store, all=True)}
        assert set(every) == {f"b-{st}" for st in STATES}
        for st in STATES:
            b = every[f"b-{st}"]
            assert b["last_health"]["verdict"] == "healthy", st
            assert (b["health"] or {}).get("verdict") == ("healthy" if st == "ready" else None), st
        live = listings.list_boots(store)
        dash = listings.dashboard(store)
        for rows in (live, dash["live_boots"]):
            assert {b["id"]: (b["health"] or {}).get("verdict") for b in rows} == {
                "b-starting": None, "b-ready": "healthy", "b-stopping": None}
        verdicts = [v for h in dash["hosts"] for v in h["verdicts"]]
        assert [v["boot_id"] for v in verdicts] == ["b-ready"]
    finally:
        store.engine.dispose()
