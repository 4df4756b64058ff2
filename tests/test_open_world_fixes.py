"""The open-world defects a newcomer found (issue 22, "Noticed, left alone"): import, attach, compare, plan.

Real data only: the engine logs the supervisor wrote on the H200 runs (``tests/data/vllm-0.26.0/
dynocell-h200/boots/*/engine.log``, SGLang 0.5.17 and vLLM 0.26.0 on one H200, 2026-12-01; see the
README next to them) and the SGLang / vLLM server logs of ``tests/data/vllm-0.26.0/`` and
``tests/data/sglang-0.5.17*/``. Every command runs as the real console script in a subprocess
against a real SQLite store in an isolated home.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"
H200 = DATA / "vllm-0.26.0" / "dynocell-h200"
#: SGLang 0.5.17 NGRAM on the H200: crashed at the first request (`ValueError: pool memory leak
#: detected!`), the scheduler's exception on physical line 66; tqdm progress bars (``\r``) before it.
NGRAM_CRASH = H200 / "boots" / "e85861e9375d" / "engine.log"
REPO = Path(__file__).resolve().parents[1]


def _run(cli_env, *args, ok=True, columns=None):
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    env = dict(cli_env)
    if columns:
        env["COLUMNS"] = str(columns)
    proc = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=180,
                          stdin=subprocess.DEVNULL, cwd=REPO)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def _json(cli_env, *args):
    return json.loads(_run(cli_env, *args, "--json").stdout)


# ---------------------------------------------------------------- 4. line numbers of runtime events

def test_runtime_event_line_is_the_physical_line_of_the_log(cli_env):
    """The SGLang NGRAM crash log has progress bars redrawn with ``\\r``; the scheduler exception is on
    line 66 (``grep -n``), not 141 (what ``str.splitlines`` counted)."""
    physical = NGRAM_CRASH.read_bytes().split(b"\n")
    want = next(i for i, ln in enumerate(physical, 1) if b"Scheduler hit an exception" in ln)
    assert want == 66
    res = _json(cli_env, "import", "log", str(NGRAM_CRASH))
    ev = [e for e in res["events"] if e["kind"] == "scheduler_exception"]
    assert [e["line"] for e in ev] == [66]
    assert ev[0]["text"] in physical[65].decode()
    shown = _run(cli_env, "import", "log", str(NGRAM_CRASH)).stdout  # the stored record, printed
    assert "runtime event: scheduler_exception at line 66 " in shown


# ---------------------------------------------------------------- 9. plan prints what runs by hand

def test_plan_of_the_tiny_config_prints_the_resolved_model_paths(cli_env):
    """`dynocell plan tiny` printed `--model-path dynocell:tiny`, a name only dynocell resolves: the
    engine run by hand from the printed line could not load it. The plan prints the pair's directories."""
    import shlex

    _run(cli_env, "config", "add", str(REPO / "examples" / "tiny.toml"))
    for ref in ("tiny", str(REPO / "examples" / "tiny.toml")):
        out = _run(cli_env, "plan", ref).stdout
        assert "dynocell:tiny" not in out
        argv = shlex.split(next(ln for ln in out.splitlines() if "--model-path" in ln))
        for flag, name in (("--model-path", "target"), ("--speculative-draft-model-path", "draft")):
            path = Path(argv[argv.index(flag) + 1])
            assert path.name == name and (path / "config.json").is_file() and (path / "model.safetensors").is_file()
        (row,) = _json(cli_env, "plan", ref)
        assert "dynocell:" not in " ".join(row["argv"])


# ---------------------------------------------------------------- 1. --engine against the log's own lines

SGL_LOG = DATA / "sglang-0.5.17" / "C.server.log"
VLLM_LOG = DATA / "vllm-0.26.0" / "C_draft_graph.server.log"


def test_import_log_refuses_an_engine_the_log_contradicts(cli_env):
    """`--engine sglang` on a vLLM log (and the reverse) was accepted and read with the wrong rules; it is
    refused naming --engine and the engine the log's own lines show, and nothing is stored."""
    for path, given, seen in ((VLLM_LOG, "sglang", "vllm"), (SGL_LOG, "vllm", "sglang")):
        bad = _run(cli_env, "import", "log", str(path), "--engine", given, ok=False)
        assert bad.returncode == 2 and bad.stderr.startswith("Error: --engine: ")
        assert f"is a {seen} log" in bad.stderr and f"--engine {seen}" in bad.stderr and "Traceback" not in bad.stderr
    assert json.loads(_run(cli_env, "ps", "--all", "--json").stdout) == []  # nothing recorded
    # the right engine, named or detected, imports
    assert _json(cli_env, "import", "log", str(VLLM_LOG), "--engine", "vllm")["engine"] == "vllm"
    assert _json(cli_env, "import", "log", str(SGL_LOG))["engine"] == "sglang"


# ---------------------------------------------------------------- 2. a re-import validates its options

def test_reimport_validates_its_options_and_refuses_ones_it_would_ignore(cli_env):
    """The second `import log` of the same file returned the first record and silently dropped (and never
    checked) its options: a bad --engine / --config passed, a different config was ignored."""
    first = _json(cli_env, "import", "log", str(SGL_LOG))
    assert first["created"] and first["observed"]
    bad_engine = _run(cli_env, "import", "log", str(SGL_LOG), "--engine", "tgi", ok=False)
    assert bad_engine.returncode == 2 and "Error: --engine: 'tgi' is not one of" in bad_engine.stderr
    bad_config = _run(cli_env, "import", "log", str(SGL_LOG), "--config", "no-such-config", ok=False)
    assert bad_config.returncode != 0 and bad_config.stderr.startswith("Error: ")
    assert "no-such-config" in bad_config.stderr
    other = _run(cli_env, "import", "log", str(SGL_LOG), "--config", str(REPO / "examples" / "tiny.toml"), ok=False)
    assert other.returncode != 0
    assert f"already imported (import #{first['import_id']}, boot {first['boot_id']})" in other.stderr
    assert "not --config" in other.stderr and "(observed from the log)" in other.stderr
    assert f"dynocell show {first['boot_id']}" in other.stderr and "another store" in other.stderr
    wrong = _run(cli_env, "import", "log", str(SGL_LOG), "--engine", "vllm", ok=False)
    assert wrong.returncode != 0 and "--engine" in wrong.stderr
    # the same options (or none): the stored record, said so
    again = _json(cli_env, "import", "log", str(SGL_LOG), "--engine", "sglang")
    assert not again["created"] and again["import_id"] == first["import_id"] and again["boot_id"] == first["boot_id"]
    said = _run(cli_env, "import", "log", str(SGL_LOG)).stdout
    assert f"import #{first['import_id']} (already imported: the stored record)" in said
    assert "kept with the options of their first import" in said
    assert len(json.loads(_run(cli_env, "ps", "--all", "--json").stdout)) == 1  # nothing else recorded


# ---------------------------------------------------------------- 6. the imported config keeps what the log shows

SGL_STANDALONE_FP16 = H200 / "boots" / "2c9a2c545f8a" / "engine.log"  # SGLang 0.5.17, STANDALONE, dtype float16
VLLM_DRAFT_FP16 = H200 / "boots" / "cbe7764493f2" / "engine.log"  # vLLM 0.26.0, draft_model k=3, dtype float16


def test_imported_config_keeps_model_path_dtype_and_draft_model_path(cli_env):
    """SGLang's `server_args=ServerArgs(model_path=…, dtype='float16', …, speculative_draft_model_path=…)` and
    vLLM's `non-default args: {'model': …, 'dtype': 'float16', 'speculative_config': {'model': …}}`: the
    observed config dropped dtype, and the import's report left the model paths out."""
    for log in (SGL_STANDALONE_FP16, VLLM_DRAFT_FP16):
        text = log.read_text()
        assert "dtype='float16'" in text or "'dtype': 'float16'" in text
        res = _json(cli_env, "import", "log", str(log))
        want = {"model_path": "/work/main/.gpu/models/pair/target", "dtype": "float16",
                "speculative.draft_model_path": "/work/main/.gpu/models/pair/draft"}
        assert {k: res["config_fields"].get(k) for k in want} == want
        shown = _run(cli_env, "config", "show", res["config_hash"], "--json").stdout
        for k, v in want.items():
            assert k.split(".")[-1] in shown and v in shown
        said = _run(cli_env, "import", "log", str(log)).stdout  # the stored record's report
        for k, v in want.items():
            assert f"{k}={v}" in said


# ---------------------------------------------------------------- 10. the headline throughput says its concurrency

def _h200_home(tmp_path, cli_env):
    """A copy of the real store of the H200 session (vLLM 0.26.0 and SGLang 0.5.17, same pair)."""
    home = tmp_path / "h200-home"
    home.mkdir()
    shutil.copy(H200 / "dynocell.db", home / "dynocell.db")
    env = dict(cli_env, DYNOCELL_HOME=str(home))
    env.pop("DYNOCELL_DATABASE_URL", None)
    return env


def _h200_run(config: str, workload: str = "gpu/workloads/h200.toml") -> dict:
    boots = json.loads((H200 / "boots.json").read_text())
    return next(b for b in boots if b["config"] == config and b["workload"] == workload and b["state"] == "completed")


def test_show_names_the_concurrency_of_the_headline_throughput(tmp_path, cli_env):
    """The stored `summary.decode_tok_s` of these runs is the best level's aggregate output tok/s (c=8 here), not a
    decode rate; the report names that level, and the per-request decode column says it is per request."""
    env = _h200_home(tmp_path, cli_env)
    run_id = _h200_run("h200-vllm-draft-graph")["run_id"]
    shown = _json(env, "show", run_id)
    levels = [b for b in shown["bench"] if not b["text_class"]]
    best = max(levels, key=lambda b: b["output_tok_s"])
    assert best["concurrency"] == 8 and shown["run"]["summary"]["decode_tok_s"] == best["output_tok_s"]
    text = _run(env, "show", run_id, columns=200).stdout
    assert f"best: {best['output_tok_s']:.1f} out tok/s at c=8" in text
    assert "decode tok/s/req" in text


# ---------------------------------------------------------------- 8. compare fits 80 columns

def test_compare_of_four_runs_at_80_columns_wraps_no_number(tmp_path, cli_env):
    """Four real H200 runs (vLLM draft graph / ngram / draft eager, SGLang standalone) side by side at 80
    columns: rich folded run ids and cells mid-number (`.43/.20/.0` + `7`). Now every line fits, the ids are
    short (named with their config above), and every number stands whole on the row of its label."""
    env = _h200_home(tmp_path, cli_env)
    names = ("h200-vllm-draft-graph", "h200-vllm-ngram", "h200-standalone-pair", "h200-vllm-draft-eager")
    ids = [_h200_run(n)["run_id"] for n in names]
    data = _json(env, "compare", *ids)
    text = _run(env, "compare", *ids, columns=80).stdout
    lines = text.splitlines()
    assert max(len(ln) for ln in lines) <= 80
    header = next(ln for ln in lines if all(i[:6] in ln for i in ids))  # one table: all four runs side by side
    assert "┃" in header
    row = {ln.split("│")[0].strip(): [c.strip() for c in ln.split("│")[1:]] for ln in lines if "│" in ln}
    for k, t in enumerate(data["table"]):
        taus = {c["text_class"]: c for c in t["curves"]}
        for cls, c in taus.items():
            assert row[f"τ {cls}"][k] == f"{c['tau']:.3f}"
        lv = {x["concurrency"]: x for x in t["levels"]}
        assert row["c=8 out tok/s"][k] == f"{lv[8]['output_tok_s']:.0f}"
        assert row["c=8 decode/req tok/s"][k] == f"{lv[8]['decode_tok_s']:.0f}"
        assert row["profile device ms"][k] == f"{t['profile']['device_ms']:.2f}"
    p1 = [ln for ln in lines if ln.strip().startswith("p1/p2/p3")]
    assert len(p1) == 5 and all(len(ln.split("│")[1].strip()) == len(".43/.20/.07") for ln in p1)
    assert "h200-vllm-draft-graph (base)" in text
    # the legend has a title; the boot's ready time has one name, the engine's own ready line another
    assert lines[0].strip() == "runs compared (columns of the table below)"
    assert "boot ready s" in row and "ready line s" in row and "ready s" not in row
    assert row["ready line s"][2] == "41.2" and row["boot ready s"][2] == "42.5"  # SGLang: line, then /health


# ---------------------------------------------------------------- 5. one rule for a repeated phase

def test_import_and_compare_count_a_repeated_phase_at_its_last_occurrence(cli_env):
    """Begin/end pairs repeat in one boot: vLLM compiles the target, then the draft (`compile_begin`/`compile_end`
    twice); SGLang captures CUDA graphs per pass (`cuda_graph_begin`/`cuda_graph_end` five times). `import log`
    kept the first pair and `compare` the last; both keep the last now (the draft's `compile_end` is when
    compiling ended)."""
    from dynocell.engine.logfile import read_log

    cases = ((VLLM_DRAFT_FP16, "compile_end"), (SGL_LOG, "cuda_graph_end"))
    res = [_json(cli_env, "import", "log", str(log)) for log, _name in cases]
    for (log, name), r in zip(cases, res):
        ends = [ph["offset_s"] for ph in read_log(log).phases if ph["name"] == name]
        assert len(ends) >= 2 and ends[0] < ends[-1]
        assert r["nodes"]["0"][name] == ends[-1]
    table = _json(cli_env, "compare", res[0]["run_id"], res[1]["run_id"])["table"]
    for (_log, name), r, row in zip(cases, res, table):
        for phase in (name, "weights_end", "ready"):
            assert abs(row["phases"][phase] - r["nodes"]["0"][phase]) <= 0.05, phase


# ---------------------------------------------------------------- 3. several logs are one boot only when they agree

SGL_TP2 = DATA / "sglang-0.5.17-tp2"
NGRAM_CRASH_FIRST = H200 / "boots" / "03aaf4c72f98" / "engine.log"  # the same NGRAM config, booted 11 min earlier


def test_logs_of_different_boots_are_not_imported_as_one_multinode_boot(cli_env):
    """Two logs were joined into one multi-node boot with only a warning. T and T0 are two single-node TP2
    boots (graphs on / off); the two NGRAM crash logs are two boots of one config 11 minutes apart. Each pair
    is refused naming the disagreement, nothing is stored; --allow-mismatch still joins them, saying why."""
    t, t0 = str(SGL_TP2 / "T.server.log"), str(SGL_TP2 / "T0.server.log")
    bad = _run(cli_env, "import", "log", t, t0, ok=False)
    assert bad.returncode != 0 and bad.stderr.startswith("Error: these logs are not one multi-node boot: ")
    err = " ".join(bad.stderr.split())  # rich wraps the message at the terminal width
    assert f"their server args differ in cuda_graph.disable ({t}: False, {t0}: True)" in err
    assert f"{t} says nnodes=1, not 2" in err and f"{t} and {t0} both say node_rank=0" in err
    assert "--allow-mismatch" in err
    a, b = str(NGRAM_CRASH_FIRST), str(NGRAM_CRASH)
    far = _run(cli_env, "import", "log", a, b, "--node-rank", "0", "--node-rank", "1", ok=False)
    err = " ".join(far.stderr.split())
    assert far.returncode != 0 and "they start 11 min apart" in err and "server args differ" not in err
    assert json.loads(_run(cli_env, "ps", "--all", "--json").stdout) == []  # nothing recorded
    forced = _json(cli_env, "import", "log", t, t0, "--allow-mismatch")
    assert forced["created"] and any("cuda_graph.disable" in w for w in forced["not_one_boot"])
    said = _run(cli_env, "import", "log", t, t0, "--allow-mismatch").stdout
    assert "warning (--allow-mismatch): not one boot:" in said


# ---------------------------------------------------------------- 7. attached boots: a fresh light, and detach

def test_attached_boot_health_is_probed_when_shown_and_detach_leaves_the_engine(cli_env, model_pair, tmp_path):
    """An engine started by hand (the real reference engine, not dynocell's supervisor) is attached and judged
    healthy. `detach` ends the record without touching the process; attached again and then killed where it
    was started, `ps` and `show` said `● healthy` from the stored verdict: now they probe /health and say down."""
    from dynocell.engine.reference.launch import start_engine

    eng = start_engine(model_pair.target, [], tmp_path / "hand-started.log")
    try:
        first = _json(cli_env, "attach", eng.url)["boot_id"]
        assert _json(cli_env, "health", first)["verdict"] == "healthy"
        row = _json(cli_env, "detach", first)
        assert row["state"] == "stopped" and row["stop_how"] == "detached"
        assert eng.proc.poll() is None  # not touched
        again = _run(cli_env, "detach", first)  # as `stop` of a stopped boot: said, exit 0, nothing changed
        assert again.stdout.startswith(f"boot {first} was already stopped (detached) (") and not again.stderr
        assert again.stdout.rstrip().endswith("ago): nothing to detach")
        assert _json(cli_env, "detach", first) == row
        assert "(detached)" in next(ln for ln in _run(cli_env, "ps", "--all").stdout.splitlines() if first in ln)
        second = _json(cli_env, "attach", eng.url)["boot_id"]  # a new boot of the same engine
        assert second != first
        assert _json(cli_env, "health", second)["verdict"] == "healthy"
        assert "● healthy" in next(ln for ln in _run(cli_env, "ps").stdout.splitlines() if second in ln)
    finally:
        eng.stop()  # the engine dies where it was started
    ps = next(r for r in json.loads(_run(cli_env, "ps", "--json").stdout) if r["id"] == second)
    assert ps["health"] == "down" and ps["engine_alive"] is False and ps["last_health"] == "healthy"
    line = next(ln for ln in _run(cli_env, "ps").stdout.splitlines() if second in ln)
    assert "○ down" in line and "● healthy" not in line
    shown = _run(cli_env, "show", second).stdout
    assert "health now: down — GET /health does not answer (probed just now" in shown
    assert _json(cli_env, "show", second)["health_now"]["health"] == "down"
    # an attached engine that died is detached like a live one
    assert _json(cli_env, "detach", second)["stop_how"] == "detached"


def test_compare_names_the_engine_of_imported_runs(cli_env):
    """`compare` of an imported SGLang run and an imported vLLM run said engine `-` for both (the engine
    came only from a `dynocell run`'s config step); it is the boot's engine now (newcomer pass)."""
    res = [_json(cli_env, "import", "log", str(log)) for log in (VLLM_DRAFT_FP16, SGL_LOG)]
    table = _json(cli_env, "compare", res[0]["run_id"], res[1]["run_id"])["table"]
    assert [row["engine"] for row in table] == ["vllm", "sglang"]
    text = _run(cli_env, "compare", res[0]["run_id"], res[1]["run_id"]).stdout
    engine_row = next(ln for ln in text.splitlines() if ln.strip().startswith("engine"))
    assert "vllm" in engine_row and "sglang" in engine_row


def test_detach_of_an_imported_boot_says_it_was_imported(cli_env):
    """It said "not attached (dynocell started it)" and to `dynocell stop` it: an imported boot has no
    engine behind it, and dynocell started nothing (newcomer pass)."""
    boot_id = _json(cli_env, "import", "log", str(SGL_LOG))["boot_id"]
    proc = _run(cli_env, "detach", boot_id, ok=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"Error: boot {boot_id} was imported from a log"), proc.stderr
    assert "dynocell started it" not in proc.stderr and "dynocell stop" not in proc.stderr


def test_attach_to_an_engine_dynocell_started_here_names_that_boot(cli_env):
    """`dynocell attach` of a boot's own URL recorded the one engine a second time (an attached boot beside
    the started one; `dynocell run` then warned of "another live boot" that was itself) (newcomer pass)."""
    boot = _json(cli_env, "boot", str(REPO / "examples" / "tiny-plain.toml"), "--detach")
    try:
        for url in (f"http://127.0.0.1:{boot['port']}", f"http://localhost:{boot['port']}/"):
            proc = _run(cli_env, "attach", url, ok=False)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr
            assert f"is boot {boot['id']}, which dynocell started" in proc.stderr, proc.stderr
            assert f"dynocell run --boot {boot['id']}" in proc.stderr
        assert [b["id"] for b in json.loads(_run(cli_env, "ps", "--json").stdout)] == [boot["id"]]
    finally:
        _run(cli_env, "stop", boot["id"])
