"""``dynocell import …`` and ``dynocell trace split``: evidence from engines dynocell did not start.

Real data only: the vLLM 0.26.0 and SGLang 0.5.17 artifacts of the H200 runs
(``tests/data/vllm-0.26.0/``, ``tests/data/sglang-0.5.17*/``) and excerpts of
public issue threads (``tests/data/foreign/``, each with its source URL).
Procedures run in-process against a real SQLite store; a few commands run as
the real console script.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from dynocell.engine.logfile import LogReadError, read_log
from dynocell.engine.observed import ObservedConfigError, parse_server_args_line, parse_vllm_args_line

DATA = Path(__file__).parent / "data"
VLLM = DATA / "vllm-0.26.0"
SGL = DATA / "sglang-0.5.17"
SGL_TP2 = DATA / "sglang-0.5.17-tp2"
FOREIGN = DATA / "foreign"
REPO = Path(__file__).resolve().parents[1]
EXAMPLE = str(REPO / "examples" / "tiny.toml")


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


def _count(cell, model) -> int:
    from sqlalchemy import func, select

    with cell.store.session() as s:
        return s.scalar(select(func.count()).select_from(model))


def _counts(cell) -> dict[str, int]:
    from dynocell.db import tables as m

    return {t.__tablename__: _count(cell, t) for t in (m.Boot, m.BootEvent, m.Run, m.AcceptanceCurve,
                                                       m.ProfileRun, m.ImportRecord, m.Config, m.BenchRun)}


# ---------------------------------------------------------------- trace split

def test_trace_split_of_a_real_vllm_trace_stores_nothing(cell):
    from dynocell.runbooks.imports import trace_split

    before = _counts(cell)
    res = trace_split(next(VLLM.glob("A_graph.*.trace.json.gz")), top=5)
    assert res["source"] == "kernel"
    assert res["graph_launches"] > 0  # A_graph ran with CUDA graphs
    cats = {c["category"]: c for c in res["categories"]}
    assert cats["gemm"]["ms"] > 0 and cats["attention"]["ms"] > 0
    assert abs(sum(c["pct"] for c in res["categories"]) - 100.0) < 0.5
    assert len(res["top"]) == 5
    assert _counts(cell) == before


def test_import_trace_once_and_again_is_one_record(cell):
    from dynocell.db import tables as m
    from dynocell.runbooks.imports import import_trace

    trace = next(SGL.glob("A.*.trace.json.gz"))
    first = import_trace(cell, trace, output_tokens=64)
    assert first["created"] and first["profile_id"]
    again = import_trace(cell, trace)
    assert not again["created"] and again["import_id"] == first["import_id"]
    assert again["profile_id"] == first["profile_id"]
    assert _count(cell, m.ProfileRun) == 1 and _count(cell, m.ImportRecord) == 1


def test_trace_split_refuses_a_non_trace(tmp_path):
    from dynocell.errors import DynocellError
    from dynocell.runbooks.imports import trace_split

    junk = tmp_path / "junk.json.gz"
    junk.write_bytes(gzip.compress(b"\x00\x01binary junk" * 100))
    with pytest.raises(DynocellError):
        trace_split(junk)


# ---------------------------------------------------------------- config lines

def test_server_args_line_of_real_sglang_log_gives_observed_config():
    from dynocell.engine.observed import from_server_args

    line = next(ln for ln in (SGL / "C.server.log").read_text().splitlines() if "server_args=ServerArgs(" in ln)
    args = parse_server_args_line(line)
    cfg = from_server_args(args)
    assert cfg.fields["model_path"] == "/models/tiny-llama"
    assert cfg.fields["memory.mem_fraction_static"] == 0.2
    assert cfg.fields["attention_backend"] == "triton"
    # fields the engine printed as None stay unknown, never defaulted
    assert "memory.chunked_prefill_size" not in cfg.fields or cfg.fields["memory.chunked_prefill_size"] is not None
    assert cfg.canonical()["observed"] is True and cfg.config_hash.startswith("sha256:")


def test_vllm_non_default_args_with_object_reprs():
    line = next(ln for ln in (VLLM / "C_draft_graph.server.log").read_text().splitlines() if "non-default args" in ln)
    args = parse_vllm_args_line(line)
    assert args["speculative_config"]["num_speculative_tokens"] == 3
    cut = line[: len(line) // 2]
    with pytest.raises(ObservedConfigError, match="cut short"):
        parse_vllm_args_line(cut)


# ---------------------------------------------------------------- logs: real artifacts

def test_import_real_vllm_log_end_to_end(cell):
    from dynocell.db import boots as db_boots, runs as db_runs
    from dynocell.runbooks.configs import config_by_hash

    res = import_log_and_check(cell, VLLM / "C_draft_graph.server.log")
    assert res["engine"] == "vllm" and res["state"] == "stopped" and res["observed"]
    boot = db_boots.get_boot(cell.store, res["boot_id"])
    assert boot.kind == "imported" and boot.source_sha256 == res["files"][0]["sha256"]
    assert boot.pid is None and Path(boot.log_path).is_file()  # copied under the data directory
    phases = [e.name for e in db_boots.events(cell.store, res["boot_id"]) if e.kind == "phase"]
    assert phases[0] == "config" and phases[-1] == "ready" and "weights_end" in phases
    assert res["ready_s"] == 33.0
    # the observed config: what the log said, nothing else
    f = res["config_fields"]
    assert f["speculative.algorithm"] == "STANDALONE" and f["speculative.num_steps"] == 3
    assert f["serving.engine_version"] == "vllm 0.26.0" and "parallel.tp_size" not in f
    assert f["cuda_graph.mode"] == "full_and_piecewise"  # from the engine's own config line
    runtime = config_by_hash(cell, res["config_hash"])  # a runtime view still loads
    assert runtime.speculative.num_draft_tokens == 4 and runtime.model_path.endswith("target")
    # acceptance from the 4 SpecDecoding lines, step-weighted by drafts (= drafted tokens / 3)
    (curve,) = db_runs.curves(cell.store, res["run_id"])
    lines = [ln for ln in (VLLM / "C_draft_graph.server.log").read_text().splitlines() if "SpecDecoding metrics" in ln]
    assert len(lines) == 4 and curve.num_drafts == 3
    drafts = [567 // 3, 939 // 3, 699 // 3, 2112 // 3]
    p1 = (0.825 * drafts[0] + 0.511 * drafts[1] + 0.901 * drafts[2] + 0.866 * drafts[3]) / sum(drafts)
    assert curve.steps == sum(drafts)
    assert curve.points[0].p_uncond == pytest.approx(p1, abs=1e-9)
    assert curve.tau == pytest.approx(1 + sum(p.p_uncond for p in curve.points))


def test_config_show_of_an_observed_config_shows_only_what_was_seen(cell):
    from dynocell.runbooks.configs import show_config

    res = import_log_and_check(cell, VLLM / "C_draft_graph.server.log")
    shown = show_config(cell, res["config_hash"])
    assert shown["observed"] and shown["canonical"] == res["config_fields"]
    assert "parallel.tp_size" not in shown["canonical"] and "only the fields below" in shown["toml"]


def import_log_and_check(cell, *paths, **kw):
    from dynocell.runbooks.imports import import_log

    res = import_log(cell, list(paths), **kw)
    assert res["created"]
    again = import_log(cell, list(paths), **kw)
    assert not again["created"] and again["boot_id"] == res["boot_id"]
    return res


def test_import_real_failed_vllm_boot(cell):
    res = import_log_and_check(cell, VLLM / "fail3-draft-picks-FLASH_ATTN.C_draft_graph.server.log")
    assert res["state"] == "failed" and res["ready_s"] is None
    assert res["signature"]["id"]  # named (or "unknown"), never absent for a failed boot


@pytest.mark.parametrize("name", ["A", "C", "E"])
def test_import_real_sglang_logs(cell, name):
    from dynocell.db import runs as db_runs

    res = import_log_and_check(cell, SGL / f"{name}.server.log")
    assert res["engine"] == "sglang" and res["state"] == "stopped" and res["ready_s"] > 0
    assert res["config_fields"]["model_path"] == "/models/tiny-llama"
    curves = db_runs.curves(cell.store, res["run_id"])
    if name == "A":
        assert res["acceptance"] is None and curves == []
        assert res["config_fields"]["cuda_graph.disable"] is True
    else:  # C and E ran speculative decoding: the "Decode batch … accept len" lines
        assert res["acceptance"]["format"] == "sglang-decode" and curves[0].tau > 1


def test_two_logs_of_one_boot_are_one_boot_with_nodes_side_by_side(cell, tmp_path):
    """T and T0 are two real TP2 boots; imported together as the logs of one boot's two nodes
    (ranks by order), each node's phases are kept with its node rank and the skew is reported."""
    from dynocell.db import boots as db_boots, tables as m

    # T and T0 disagree (graphs on/off, each says nnodes=1 and node_rank=0): only --allow-mismatch joins them
    res = import_log_and_check(cell, SGL_TP2 / "T.server.log", SGL_TP2 / "T0.server.log", allow_mismatch=True)
    assert _count(cell, m.Boot) == 1
    assert set(res["nodes"]) == {"0", "1"}
    ev = [e for e in db_boots.events(cell.store, res["boot_id"]) if e.kind == "phase"]
    assert {e.detail["node_rank"] for e in ev} == {0, 1}
    ready = {r: per["ready"] for r, per in res["nodes"].items()}
    # offsets share one clock: seconds from the earliest first line of either log
    t, t0 = read_log(SGL_TP2 / "T.server.log"), read_log(SGL_TP2 / "T0.server.log")
    start = min(t.first_ts, t0.first_ts)
    assert ready["0"] == t.ready_s + (t.first_ts - start).total_seconds()
    assert ready["1"] == t0.ready_s + (t0.first_ts - start).total_seconds()
    assert res["phase_skew_s"]["ready"] == abs(ready["0"] - ready["1"]) > 0
    assert res["ready_s"] == max(ready.values())  # ready when the last node is
    # T ran with CUDA graphs, T0 without: the import says the nodes' configs differ
    assert "cuda_graph.disable" in res["config_mismatch"]


def test_two_nodes_logs_of_one_name_are_both_kept(cell, tmp_path):
    """Each node writes ``server.log``: the copies in the boot's directory overwrote each other, so the
    boot kept node 1's lines under node 0's sha256 and `dynocell logs` showed the wrong node (newcomer pass).
    The two real TP2 logs stand in for the nodes (as above)."""
    import hashlib

    from dynocell.db import boots as db_boots
    from dynocell.runbooks.imports import import_log

    sources = []
    for node, name in ((0, "T.server.log"), (1, "T0.server.log")):
        (tmp_path / f"node{node}").mkdir()
        sources.append(shutil.copyfile(SGL_TP2 / name, tmp_path / f"node{node}" / "server.log"))
    res = import_log(cell, sources, node_rank=[0, 1], allow_mismatch=True)
    boot = db_boots.get_boot(cell.store, res["boot_id"])
    kept = sorted(Path(boot.log_path).parent.iterdir())
    assert [p.name for p in kept] == ["node0-server.log", "node1-server.log"]
    for node, src in enumerate(sources):
        assert (kept[node]).read_bytes() == Path(src).read_bytes()
    assert Path(boot.log_path).read_bytes() == Path(sources[0]).read_bytes()
    assert hashlib.sha256(Path(boot.log_path).read_bytes()).hexdigest() == boot.log_sha256


# ---------------------------------------------------------------- logs: public excerpts

def test_cli_node_rank_once_per_file_names_each_node(cli_env, tmp_path):
    """`import log a.log --node-rank 1 b.log --node-rank 0`: one boot, each file under the rank given
    after it (here the reverse of file order), the phases side by side with the skew. No public thread
    found holds phase-bearing logs of both nodes of one multi-node boot, so the two real SGLang 0.5.17
    TP2 boots (T, T0; real H200 logs) stand in for the two nodes, as in the test above (--allow-mismatch: they
    are two boots, and say so)."""
    import json

    res = json.loads(_run(cli_env, "import", "log", str(SGL_TP2 / "T.server.log"), "--node-rank", "1",
                          str(SGL_TP2 / "T0.server.log"), "--node-rank", "0", "--allow-mismatch", "--json").stdout)
    assert [(Path(f["path"]).name, f["node_rank"]) for f in res["files"]] == [("T.server.log", 1),
                                                                              ("T0.server.log", 0)]
    t, t0 = read_log(SGL_TP2 / "T.server.log"), read_log(SGL_TP2 / "T0.server.log")
    start = min(t.first_ts, t0.first_ts)
    assert res["nodes"]["1"]["ready"] == t.ready_s + (t.first_ts - start).total_seconds()  # T is node 1
    assert res["nodes"]["0"]["ready"] == t0.ready_s + (t0.first_ts - start).total_seconds()
    assert res["phase_skew_s"]["ready"] == abs(res["nodes"]["0"]["ready"] - res["nodes"]["1"]["ready"]) > 0
    table = _run(cli_env, "import", "log", str(SGL_TP2 / "T.server.log"), "--node-rank", "1",
                 str(SGL_TP2 / "T0.server.log"), "--node-rank", "0", "--allow-mismatch").stdout
    assert "node 1 (s)" in table and "node 0 (s)" in table and "skew (s)" in table
    bad = _run(cli_env, "import", "log", str(SGL_TP2 / "T.server.log"), str(SGL_TP2 / "T0.server.log"),
               "--node-rank", "0", ok=False)
    assert bad.returncode != 0 and "Error: --node-rank: 1 rank(s) for 2 log file(s)" in bad.stderr
    twice = _run(cli_env, "import", "log", str(SGL_TP2 / "T.server.log"), "--node-rank", "0",
                 str(SGL_TP2 / "T0.server.log"), "--node-rank", "0", ok=False)
    assert "rank 0 given twice" in twice.stderr
    swapped = _run(cli_env, "import", "log", str(SGL_TP2 / "T.server.log"), "--node-rank", "0",
                   str(SGL_TP2 / "T0.server.log"), "--node-rank", "1", ok=False)  # not silently the old ranks
    assert swapped.returncode != 0 and "already imported" in swapped.stderr and "[1, 0], not [0, 1]" in swapped.stderr


FOREIGN_LOGS = {
    # file: (engine, acceptance format or None, tau or None, D or None, events, decode samples)
    "vllm-v1-spec-ngram.log": ("vllm", "vllm-v1", 5.44, 5, [], None),
    "vllm-v0-spec-0.6.3.log": ("vllm", "vllm-v0", 0.598 * 4, 3, [], None),
    "vllm-v0-spec-cumulative.log": ("vllm", "vllm-v0", 0.167 * 6, 5, [], None),
    "vllm-v1-queue-14-waiting.log": ("vllm", None, None, None, [], 3),
    "vllm-v0-pending-tp8.log": ("vllm", None, None, None, [], 1),
    "vllm-v0-stuck-pending-115.log": ("vllm", None, None, None, [], 1),
    "vllm-v0-concurrency-hang.log": ("vllm", None, None, None, [], 1),
    "vllm-v1-kvbm-serving.log": ("vllm", None, None, None, [], 1),
    "sglang-eagle-crash-while-serving.log": ("sglang", None, None, None, ["scheduler_exception"], None),
    "sglang-specv2-crash.log": ("sglang", None, None, None, ["scheduler_exception"], None),
    "sglang-decode-old-shape.log": ("sglang", None, None, None, [], 4),
    "sglang-decode-largest-len.log": ("sglang", None, None, None, [], 3),
    "sglang-2x8-h20-serving.log": ("sglang", None, None, None, [], 1),
    "sglang-decode-new-shape-accept.log": ("sglang", "sglang-decode", (3.05 + 2.63 + 2.83) / 3, 3, [], 3),
    "sglang-tp8-load-weight-begin.log": ("sglang", None, None, None, [], None),
    "llamacpp-boot-speculative.log": ("llamacpp", None, None, None, [], None),
    "llamacpp-accepted-per-round.log": ("llamacpp", "llamacpp-rounds", 1 + (1 + 2 + 16 + 16) / 4, 16, [], None),
    "llamacpp-draft-mtp-statistics.log": ("llamacpp", "llamacpp-stats", 1 + 0.662 + 0.507 + 0.394 + 0.296, 4, [], None),
}


def test_every_foreign_file_names_its_source():
    files = sorted(p for p in FOREIGN.iterdir() if p.name != "SOURCES.md")
    assert len(files) >= 20
    sources = (FOREIGN / "SOURCES.md").read_text()
    for p in files:
        head = p.read_text().splitlines()[0]
        assert head.startswith("# source: https://github.com/") or p.name in sources, p.name


@pytest.mark.parametrize("name", sorted(FOREIGN_LOGS))
def test_foreign_log_read(name):
    engine, fmt, tau, d, events, decode = FOREIGN_LOGS[name]
    rep = read_log(FOREIGN / name)
    assert rep.engine == engine
    if fmt is None:
        assert rep.acceptance is None
    else:
        assert rep.acceptance["format"] == fmt
        assert rep.acceptance["curve"].num_drafts == d
        assert rep.acceptance["curve"].tau == pytest.approx(tau, abs=0.006)
    assert [e.kind for e in rep.events] == events
    assert (rep.decode or {}).get("samples") == decode


def test_foreign_fragments_import_with_a_given_config(cell):
    from dynocell.db import runs as db_runs

    res = import_log_and_check(cell, FOREIGN / "vllm-v1-spec-ngram.log", config_ref=EXAMPLE)
    (curve,) = db_runs.curves(cell.store, res["run_id"])
    assert [round(p.p_uncond, 3) for p in curve.points] == [0.983, 0.949, 0.915, 0.881, 0.712]
    assert curve.engine_tau == 5.44
    crash = import_log_and_check(cell, FOREIGN / "sglang-eagle-crash-while-serving.log", config_ref=EXAMPLE)
    assert crash["state"] == "crashed" and crash["events"][0]["kind"] == "scheduler_exception"


def test_fragment_without_config_line_is_recorded_with_an_unknown_config(cell):
    """A fragment that prints no configuration imports anyway (issue 35): its config is the engine's
    unknown config (no field revealed), which the doctor reads as unknown, and --config can still name one."""
    from dynocell.runbooks.doctor_evidence import knobs_of
    from dynocell.runbooks.imports import import_log, unknown_config

    res = import_log(cell, [FOREIGN / "sglang-decode-old-shape.log"])
    assert res["created"] and res["observed"] and res["engine"] == "sglang"
    assert res["config_hash"] == unknown_config("sglang", "x").config_hash
    assert knobs_of(cell.store, res["config_hash"]) == {"engine": "sglang"}


# ---------------------------------------------------------------- bad input: nothing stored

@pytest.mark.parametrize("name", ["sglang-multinode-node1-truncated.log", "sglang-not-enough-memory-truncated.log"])
def test_truncated_config_line_is_a_warning_with_file_and_line(cell, name):
    """A config line cut short is read as far as it goes no more (issue 35): the import warns, naming file and
    line, and keeps the rest; a bad --engine is still refused with nothing stored."""
    from dynocell.runbooks.imports import import_log

    before = _counts(cell)
    with pytest.raises(LogReadError, match="--engine"):
        import_log(cell, [FOREIGN / name], engine="../../x")
    assert _counts(cell) == before
    res = import_log(cell, [FOREIGN / name])
    assert any(f"{name}: line 4" in w and "cut short" in w for w in res["warnings"])


def test_binary_junk_and_empty_and_foreign_text_are_refused(cell, tmp_path):
    from dynocell.runbooks.imports import import_log

    junk = tmp_path / "junk.log"
    junk.write_bytes(b"INFO ok\n" + bytes(range(256)) * 40)
    empty = tmp_path / "empty.log"
    empty.write_text("\n\n")
    prose = tmp_path / "notes.log"
    prose.write_text("shopping list\neggs\nmilk\n")
    before = _counts(cell)
    for path, why in ((junk, "line 2: binary content"), (empty, "empty"), (prose, "no line of this file")):
        with pytest.raises(LogReadError, match=why):
            import_log(cell, [path])
    assert _counts(cell) == before


def test_a_truncated_real_log_still_imports_what_it_has(cell, tmp_path):
    """A real log cut in the middle of a line after the config line: the phases up to the cut
    are imported, the boot is marked failed (never ready) and the cut is reported."""
    text = (VLLM / "C_draft_graph.server.log").read_text()
    cut = text[: text.index("Graph capturing finished") + 10]
    p = tmp_path / "cut.log"
    p.write_text(cut)
    res = import_log_and_check(cell, p)
    assert res["state"] == "failed" and res["truncated"] == [str(p)]
    assert "kv_cache_allocated" in res["nodes"]["0"] and "ready" not in res["nodes"]["0"]


# ---------------------------------------------------------------- the CLI

def _run(cli_env, *args, ok=True):
    exe = shutil.which("dynocell", path=str(Path(__import__("sys").executable).parent))
    proc = subprocess.run([exe, *args], env=cli_env, capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_cli_trace_split_and_import_log(cli_env):
    trace = next(VLLM.glob("A_graph.*.trace.json.gz"))
    split = json.loads(_run(cli_env, "trace", "split", str(trace), "--json").stdout)
    assert split["source"] == "kernel" and split["launches"] > 0
    out = _run(cli_env, "import", "log", str(VLLM / "C_draft_graph.server.log")).stdout
    assert "imported vllm log" in out and "(observed)" in out and "τ = " in out
    # a config line cut short is a warning naming the line; the rest of the log is imported
    cut = _run(cli_env, "import", "log", str(FOREIGN / "sglang-multinode-node1-truncated.log"), ok=False)
    said = " ".join((cut.stdout + cut.stderr).split())
    assert cut.returncode == 0 and "imported sglang log" in said
    assert "line 4" in said and "cut short" in said and "Traceback" not in said


def test_cli_import_trace_twice_prints_the_stored_profile(cli_env):
    trace = next(SGL.glob("A.*.trace.json.gz"))
    first = _run(cli_env, "import", "trace", str(trace)).stdout
    again = _run(cli_env, "import", "trace", str(trace)).stdout
    assert "(already imported: the stored record)" in again
    assert first.splitlines()[1] == again.splitlines()[1]  # the same "profile #N: …" line


# ---------------------------------------------------------------- metrics

def test_import_one_real_vllm_scrape_gives_the_per_position_curve(cell):
    from dynocell.db import runs as db_runs
    from dynocell.engine.metrics import parse_metrics

    res = import_metrics_and_check(cell, VLLM / "C_draft_graph.metrics.txt")
    assert res["window"] == "since the engine started" and res["observed"]
    snap = parse_metrics((VLLM / "C_draft_graph.metrics.txt").read_text())
    drafts = snap.sum("vllm:spec_decode_num_drafts_total")
    per = [snap.get("vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(i)) for i in range(3)]
    (curve,) = db_runs.curves(cell.store, res["run_id"])
    assert [p.p_uncond for p in curve.points] == pytest.approx([x / drafts for x in per])
    # τ = 1 + accepted / drafts, and it equals 1 + Σ p_i (vLLM counts every accepted token at its position)
    accepted = snap.sum("vllm:spec_decode_num_accepted_tokens_total")
    assert curve.tau == pytest.approx(1 + accepted / drafts) and curve.engine_tau == pytest.approx(curve.tau)
    assert curve.steps == drafts == 1995


def import_metrics_and_check(cell, *paths, **kw):
    from dynocell.runbooks.evidence import import_metrics

    res = import_metrics(cell, list(paths), **kw)
    assert res["created"]
    again = import_metrics(cell, list(paths), **kw)
    assert not again["created"] and again["run_id"] == res["run_id"]
    return res


def test_scrapes_of_two_engine_processes_are_refused(cell):
    from dynocell.errors import UserError
    from dynocell.runbooks.evidence import import_metrics

    before = _counts(cell)
    with pytest.raises(UserError, match="_created changed since"):
        import_metrics(cell, [VLLM / "C_draft_graph.metrics.txt", VLLM / "E_ngram_graph.metrics.txt"])
    assert _counts(cell) == before


def test_non_monotonic_counters_are_refused(cell, tmp_path):
    """Bad input: the later scrape shows a counter lower than the earlier one (scrapes swapped
    by hand: the real scrape, then the same scrape with one counter lowered)."""
    from dynocell.errors import UserError
    from dynocell.runbooks.evidence import import_metrics

    text = (VLLM / "C_draft_graph.metrics.txt").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("vllm:spec_decode_num_drafts_total{"))
    lowered = text.replace(line, line.rsplit(" ", 1)[0] + " 1000.0")
    later = tmp_path / "later.txt"
    later.write_text(lowered)
    before = _counts(cell)
    with pytest.raises(UserError) as err:
        import_metrics(cell, [VLLM / "C_draft_graph.metrics.txt", later])
    assert "vllm:spec_decode_num_drafts_total" in err.value.message and "went down from 1995 " in err.value.message
    assert "later.txt" in err.value.message
    assert _counts(cell) == before


def test_metrics_junk_is_refused(cell, tmp_path):
    from dynocell.errors import UserError
    from dynocell.runbooks.evidence import import_metrics

    junk = tmp_path / "junk.txt"
    junk.write_bytes(b"# HELP x\n" + bytes(range(256)))
    html = tmp_path / "page.txt"
    html.write_text("<html><body>502 Bad Gateway</body></html>\n")
    before = _counts(cell)
    for p, why in ((junk, "line 2: binary content"), (html, "line 1: .*not Prometheus text format")):
        with pytest.raises(UserError, match=why):
            import_metrics(cell, [p])
    assert _counts(cell) == before


def test_foreign_dp_scrape_sums_engines(cell):
    from dynocell.engine.metrics import parse_metrics

    snap = parse_metrics((FOREIGN / "vllm-dp-spec-drafts.metrics.txt").read_text())
    assert snap.sum("vllm:spec_decode_num_drafts_total") == 22 + 15 + 29 + 20 + 25 + 24 + 27 + 26
    res = import_metrics_and_check(cell, FOREIGN / "vllm-dp-spec-drafts.metrics.txt", config_ref=EXAMPLE)
    assert res["acceptance"] is None  # the excerpt has no per-position series: no curve invented


# ---------------------------------------------------------------- requests and bench files

def test_import_real_sglang_meta_info_requests(cell):
    from dynocell.db import runs as db_runs

    res = import_requests_and_check(cell, DATA / "requests" / "sglang-0.5.17-C.meta_info.jsonl", config_ref=EXAMPLE)
    assert res["format"] == "sglang-meta_info" and res["requests"] == 2
    (curve,) = db_runs.curves(cell.store, res["run_id"])
    lines = (DATA / "requests" / "sglang-0.5.17-C.meta_info.jsonl").read_text().splitlines()
    metas = [json.loads(ln)["meta_info"] for ln in lines]
    hist = [sum(col) for col in zip(*(m["spec_correct_drafts_histogram"] for m in metas))]
    assert curve.histogram == hist
    (row,) = db_runs.bench_rows(cell.store, res["run_id"])
    assert row.completion_tokens == sum(m["completion_tokens"] for m in metas)
    assert row.extra["per_request_tau"] == [m["spec_accept_length"] for m in metas]


def import_requests_and_check(cell, path, **kw):
    from dynocell.runbooks.evidence import import_requests

    res = import_requests(cell, path, **kw)
    assert res["created"]
    assert not import_requests(cell, path, **kw)["created"]
    return res


def test_import_real_vllm_probe_requests_and_vllm_spec_metrics(cell):
    res = import_requests_and_check(cell, VLLM / "C_draft_graph.result.json", config_ref=EXAMPLE)
    assert res["format"] == "openai-usage" and res["requests"] == 12 and res["acceptance"] is None
    spec = import_requests_and_check(cell, FOREIGN / "vllm-per-request-spec-metrics.jsonl", config_ref=EXAMPLE)
    # histogram [39, 1, 0, 3] over 43 steps: τ = 1 + (1 + 9) / 43 = vLLM's own mean_acceptance_length
    assert spec["acceptance"]["tau"] == pytest.approx(1 + 10 / 43, abs=1e-4)
    assert spec["acceptance"]["steps"] == 43


BENCH = DATA / "bench"


@pytest.mark.parametrize("name,tool,levels,ttft_p50", [
    ("sglang-bench-serving.jsonl", "sglang-bench-serving", 1, 6711.85),
    ("vllm-bench-serve.json", "vllm-bench-serve", 1, 7099.88),
    ("aiperf-profile_export_aiperf.json", "aiperf", 1, 787.5439584999999),
    ("guidellm-benchmarks.json", "guidellm", 2, 120.0),
])
def test_import_bench_files_of_each_tool(cell, name, tool, levels, ttft_p50):
    from dynocell.db import runs as db_runs
    from dynocell.runbooks.evidence import import_bench

    res = import_bench(cell, BENCH / name, config_ref=EXAMPLE)
    assert res["tool"] == tool and len(res["levels"]) == levels
    rows = db_runs.bench_rows(cell.store, res["run_id"])
    assert len(rows) == levels and rows[0].ttft_ms["p50"] == pytest.approx(ttft_p50)
    assert rows[0].extra["tool"] == tool and isinstance(rows[0].extra["lost"], list)
    assert not import_bench(cell, BENCH / name, config_ref=EXAMPLE)["created"]


def test_bench_field_mapping_details(cell):
    from dynocell.db import runs as db_runs
    from dynocell.runbooks.evidence import import_bench

    aip = import_bench(cell, BENCH / "aiperf-profile_export_aiperf.json", config_ref=EXAMPLE)
    (row,) = db_runs.bench_rows(cell.store, aip["run_id"])
    assert row.concurrency == 100 and row.num_requests == 200 and row.completion_tokens == 19370
    assert row.e2e_ms["p90"] == pytest.approx(8594.209632299999) and row.ttft_ms["p90"] is None
    assert "error_summary" in row.extra["lost"]
    sgl = import_bench(cell, BENCH / "sglang-bench-serving.jsonl", config_ref=EXAMPLE)
    (row,) = db_runs.bench_rows(cell.store, sgl["run_id"])
    assert row.e2e_ms["mean"] == 11746.39 and row.itl_ms["p99"] == 13753.42
    assert "p95_itl_ms" in row.extra["lost"] and "total_output_tokens_retokenized" in row.extra["lost"]


def test_unknown_bench_tool_and_broken_json_are_refused(cell, tmp_path):
    from dynocell.errors import UserError
    from dynocell.runbooks.evidence import import_bench, import_requests

    cut = tmp_path / "cut.jsonl"
    cut.write_text((BENCH / "sglang-bench-serving.jsonl").read_text()[:200])
    before = _counts(cell)
    with pytest.raises(UserError, match="not a result file of a benchmark tool dynocell knows"):
        import_bench(cell, BENCH / "unknown-tool.json", config_ref=EXAMPLE)
    with pytest.raises(UserError, match="line 1: not JSON"):
        import_bench(cell, cut, config_ref=EXAMPLE)
    with pytest.raises(UserError, match="line 1: neither an SGLang response"):
        import_requests(cell, BENCH / "unknown-tool.json", config_ref=EXAMPLE)
    assert _counts(cell) == before


def test_cli_import_metrics_and_bench(cli_env):
    out = _run(cli_env, "import", "metrics", str(VLLM / "C_draft_graph.metrics.txt")).stdout
    assert "0.8150" in out and "τ = 3.0226" in out
    bad = _run(cli_env, "import", "bench", str(BENCH / "unknown-tool.json"), "--config", EXAMPLE, ok=False)
    assert bad.returncode == 2 and bad.stderr.startswith("Error: ") and "unknown-tool.json: line 1" in bad.stderr


@pytest.mark.parametrize("kind", ["log", "metrics", "requests", "bench", "trace"])
def test_cli_import_of_a_directory_says_it_is_a_directory(cli_env, tmp_path, kind):
    bad = _run(cli_env, "import", kind, str(tmp_path), ok=False)
    assert bad.returncode == 2 and bad.stderr.startswith(f"Error: {tmp_path}: a directory, not a file")
    assert "Traceback" not in bad.stderr


def test_cli_trace_split_of_a_directory_says_it_is_a_directory(cli_env, tmp_path):
    bad = _run(cli_env, "trace", "split", str(tmp_path), ok=False)
    assert bad.returncode == 2 and bad.stderr.startswith(f"Error: {tmp_path}: a directory, not a file")


@pytest.mark.parametrize("body", ['{"traceEvents": []}', "[]", "[1, 2, 3]"])
def test_import_of_a_trace_without_events_stores_nothing(cli_env, tmp_path, body):
    empty = tmp_path / "empty.trace.json"
    empty.write_text(body)
    bad = _run(cli_env, "import", "trace", str(empty), ok=False)
    assert bad.returncode == 2 and "neither GPU kernels nor CPU ops" in bad.stderr
    assert bad.stderr.startswith("Error: ") and "hint: " in bad.stderr
    split = _run(cli_env, "trace", "split", str(empty)).stdout  # the split only warns
    assert "warning: trace holds neither GPU kernels nor CPU ops" in split


@pytest.mark.parametrize("kind", ["requests", "bench"])
@pytest.mark.parametrize("body,says", [("", "the file is empty"), ("[1, 2, 3]", ", not a "),
                                       ('{"a": [1, 2,\n', "not JSON")])
def test_cli_import_of_bad_json_is_an_error_with_a_hint(cli_env, tmp_path, kind, body, says):
    f = tmp_path / "result.json"
    f.write_text(body)
    bad = _run(cli_env, "import", kind, str(f), ok=False)
    assert bad.returncode == 2 and bad.stderr.startswith("Error: ") and says in bad.stderr
    assert "\nhint: " in bad.stderr and "Traceback" not in bad.stderr



def test_cut_config_line_imports_the_rest(cell, tmp_path):
    """A config line cut short (as reports paste it) refuses nothing (issue 35): without --config the real
    SGLang log imports with the configuration unknown and a warning naming the line; with a config named,
    that config is the boot's."""
    from dynocell.runbooks.imports import import_log

    lines = (SGL / "C.server.log").read_text().splitlines(keepends=True)
    i = next(n for n, line in enumerate(lines) if "server_args=ServerArgs(" in line)
    lines[i] = lines[i][: len(lines[i]) // 2] + "\n"
    cut = tmp_path / "C.cut.server.log"
    cut.write_text("".join(lines))
    bare = import_log(cell, [cut])
    assert bare["created"] and bare["state"] == "stopped" and bare["observed"]
    assert any("cut short" in w and "unknown" in w for w in bare["warnings"])
    cut2 = tmp_path / "C.cut2.server.log"
    cut2.write_text("".join(lines) + "\n")
    res = import_log(cell, [cut2], config_ref=EXAMPLE)
    assert res["created"] and res["state"] == "stopped" and res["ready_s"] > 0
    assert res["acceptance"]["format"] == "sglang-decode" and not res["observed"]


def test_imported_responses_keep_their_texts_for_the_doctor(cell):
    """The generated texts of imported responses are the run's samples (what the doctor's output
    rules judge), as a bench level's are: the 12 completions of the real vLLM probe file."""
    import json as _json

    from dynocell.db import runs as db_runs
    from dynocell.runbooks.doctor import inputs_for_run

    res = import_requests_and_check(cell, VLLM / "C_draft_graph.result.json", config_ref=EXAMPLE)
    probe = _json.loads((VLLM / "C_draft_graph.result.json").read_text())
    texts = [r["response"]["choices"][0]["text"] for run in probe["acceptance"] for r in run["requests"]]
    (bench,) = db_runs.bench_rows(cell.store, res["run_id"])
    assert bench.extra["samples"] == texts and len(texts) == 12
    assert inputs_for_run(cell, res["run_id"]).output_texts == texts


def test_bench_accept_length_per_level_becomes_a_curve_at_its_prompt_length(cell):
    """A bench level with the tool's accept length (no per-position rates) gets a τ-only curve with the
    config's draft count, paired with its own bench row, so the doctor sees τ by prompt length (the
    EAGLE3 context-length table of vllm-project/speculators PR 684, case 23 of the corpus)."""
    from dynocell.runbooks.doctor import inputs_for_run
    from dynocell.runbooks.evidence import import_bench

    case = DATA / "cases" / "23-vllm-eagle3-acceptance-by-context-length"
    res = import_bench(cell, case / "eagle3.bench.jsonl", config_ref=str(case / "config.toml"))
    curves = inputs_for_run(cell, res["run_id"]).curves
    assert [c.prompt_tokens for c in curves] == [2000.0 * k for k in range(1, 11)]
    assert curves[0].curve.tau == 2.295 and curves[-1].curve.tau == 1.084
    assert {c.curve.num_drafts for c in curves} == {3}
    plain = import_bench(cell, BENCH / "sglang-bench-serving.jsonl", config_ref=EXAMPLE)  # no accept length
    assert inputs_for_run(cell, plain["run_id"]).curves == []


def test_cli_metrics_scrape_with_a_bad_position_label_is_bad_input(cli_env, tmp_path):
    """A scrape whose per-position counter has a non-integer ``position`` label (here a real vLLM 0.26.0
    scrape, tests/data/vllm-0.26.0/C_draft_graph.metrics.txt, edited by hand) is bad input: exit 2 and an
    ``Error:`` line naming the file and the label, with the fix — not exit 3 (an engine fault); nothing stored."""
    real = (VLLM / "C_draft_graph.metrics.txt").read_text()
    assert 'position="0"' in real
    edited = tmp_path / "edited.metrics.txt"
    edited.write_text(real.replace('position="0"', 'position="first"'))
    proc = _run(cli_env, "import", "metrics", str(edited), "--config", EXAMPLE, ok=False)
    assert proc.returncode == 2, proc.stderr
    err = proc.stderr.splitlines()
    assert err[0].startswith(f"Error: {edited}: vllm:spec_decode_num_accepted_tokens_per_pos_total ")
    assert "'first'" in err[0] and err[1].startswith("hint: ") and "GET /metrics" in err[1]
    assert json.loads(_run(cli_env, "runs", "--json").stdout) == []


def test_offline_script_output_imports_as_a_run_with_its_acceptance(cell, tmp_path):
    """vLLM's offline spec_decode.py prints its totals one per line (vllm-ascend PR 7290): imported as a run
    whose τ is the script's mean acceptance length (1 + accepted / drafts) at k = draft tokens / drafts, not
    refused and not a failed boot (issue 35)."""
    from dynocell.db import runs as db_runs
    from dynocell.runbooks.imports import import_log

    log = tmp_path / "offline.log"
    log.write_text("total_num_output_tokens: 2400\nnum_drafts: 675\nnum_draft_tokens: 2025\n"
                   "num_accepted_tokens: 1722\nmean acceptance length: 3.55\nacceptance at token 0: 0.85\n")
    res = import_log(cell, [log], engine="vllm")
    assert res["state"] == "stopped" and res["signature"] is None
    (curve,) = db_runs.curves(cell.store, res["run_id"])
    assert curve.num_drafts == 3 and round(curve.tau, 2) == 3.55
