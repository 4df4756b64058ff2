"""Prose lines of `import log`, `import metrics` and `compare` fit 80 columns (newcomer pass n6check).

At ``COLUMNS=80`` `import log` of a real vLLM 0.26.0 server log printed its boot/run/config line at 93
columns and "config seen in the log: …" as one line of 500+ columns; its table title wrapped into the
narrow table ("boot timeline (seconds from the" / "first line)"); `import metrics` printed its run line
at 84 columns and the title "per-position acceptance (vllm per-position counters)" over four lines; `compare`
of runs from two machines (the greedy-text store of tests/data: H200 runs and CPU oracle runs) printed its
hardware warning at 158 columns. Now every line fits and no field is lost.

Real data: ``tests/data/vllm-0.26.0/C_draft_graph.server.log`` / ``.metrics.txt`` (vLLM 0.26.0 on an H200,
see the README there) and ``tests/data/sglang-0.5.17-eagle/dynocell-h200-greedy-text/dynocell.db``; every
command runs as the real console script against a real SQLite store in an isolated home.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

DATA = Path(__file__).parent / "data"
VLLM = DATA / "vllm-0.26.0"
GREEDY_STORE = DATA / "sglang-0.5.17-eagle" / "dynocell-h200-greedy-text" / "dynocell.db"
REPO = Path(__file__).resolve().parents[1]


def _run(env, *args):
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    proc = subprocess.run([exe, *args], env={**env, "COLUMNS": "80", "NO_COLOR": "1"}, capture_output=True,
                          text=True, timeout=180, stdin=subprocess.DEVNULL, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _fits(text: str) -> list[str]:
    lines = text.splitlines()
    assert [ln for ln in lines if len(ln) > 80] == []
    return lines


def test_import_log_and_metrics_fit_80_columns_and_keep_every_field(cli_env):
    log = VLLM / "C_draft_graph.server.log"
    res = json.loads(_run(cli_env, "import", "log", str(log), "--json"))
    text = _run(cli_env, "import", "log", str(log))  # the stored record again, printed for a person
    lines = _fits(text)
    assert f"boot {res['boot_id']} (imported, stopped)  run {res['run_id']}" in lines
    assert f"config {res['config_hash'][:19]} (observed)" in lines
    assert "boot timeline (seconds from the first line)" in lines
    start = next(i for i, ln in enumerate(lines) if ln.startswith("config seen in the log: "))
    end = next(i for i, ln in enumerate(lines) if ln == "boot timeline (seconds from the first line)")
    seen = "".join(lines[start:end])  # wrapped (and long paths folded) at 80 columns, nothing dropped
    for k, v in res["config_fields"].items():
        assert f"{k}={v}".replace(" ", "") in seen.replace(" ", "")

    metrics = _run(cli_env, "import", "metrics", str(VLLM / "C_draft_graph.metrics.txt"))
    lines = _fits(metrics)
    assert "per-position acceptance (vllm per-position counters)" in lines
    assert any(ln.startswith("run ") and "window: since the engine started" in ln for ln in lines)


def test_compare_across_hardware_warns_within_80_columns(tmp_path, cli_env):
    home = tmp_path / "greedy"
    home.mkdir()
    shutil.copy(GREEDY_STORE, home / "dynocell.db")
    env = {**cli_env, "DYNOCELL_HOME": str(home)}
    lines = _fits(_run(env, "compare", "293e", "8cc3"))
    warning = " ".join(lines[next(i for i, ln in enumerate(lines) if ln.startswith("warning: ")):])
    assert "these runs come from different hardware" in warning
    assert "not only the configs" in warning


def test_attach_detach_and_bisect_plan_fit_80_columns(tmp_path, cli_env, model_pair):
    """`attach` printed its first line at ~100 columns and "seen: …" (every observed field) as one line of ~500;
    `detach` its line at ~150; `bisect plan tiny tiny-plain` its step and group note at 153 and 192. Here on a
    reference engine started by hand (not by dynocell), as an operator's engine would be."""
    from dynocell.engine.reference.launch import start_engine

    eng = start_engine(model_pair.target, ["--enable-metrics"], tmp_path / "hand-started" / "engine.log")
    try:
        res = json.loads(_run(cli_env, "attach", eng.url, "--json"))
        _run(cli_env, "detach", res["boot_id"])
        text = _run(cli_env, "attach", eng.url)  # attached again: a new boot, printed for a person
        lines = _fits(text)
        assert lines[0].startswith(f"attached sglang at {eng.url} as boot ")
        seen = "".join(lines[1:-1])
        for k, v in res["config_fields"].items():
            assert f"{k}={v}".replace(" ", "") in seen.replace(" ", "")
        boot = lines[0].split(" as boot ")[1].split()[0]
        lines = _fits(_run(cli_env, "detach", boot))
        assert " ".join(lines).startswith(f"boot {boot} detached (recorded stopped); the engine at 127.0.0.1:")
    finally:
        eng.stop()

    lines = _fits(_run(cli_env, "bisect", "plan", "examples/tiny.toml", "examples/tiny-plain.toml"))
    text = " ".join(lines)
    assert "step 1 [" in text and "note: some knobs are only valid together and move as one group" in text
    for knob in ("speculative.algorithm", "speculative.draft_model_path", "speculative.num_steps"):
        assert text.count(knob) == 3  # the diff, the step and the note, none cut


def test_config_add_fits_80_columns_with_the_hash_whole(cli_env):
    """`config add` printed "stored sha256:<64 hex>; tiny now points at it" at 101 columns ("already stored …"
    at 107); now it wraps at a space, the hash whole on its line (to copy)."""
    said = [_fits(_run(cli_env, "config", "add", "examples/tiny-plain.toml")) for _ in range(2)]
    digest = json.loads(_run(cli_env, "config", "add", "examples/tiny-plain.toml", "--json"))["hash"]
    for lines, what in zip(said, ("stored", "already stored")):
        words = " ".join(lines).split()
        assert " ".join(words).startswith(f"{what} {digest}") and "tiny-plain" in words
        assert any(digest in ln for ln in lines)


def test_runbook_search_and_show_fit_80_columns(cli_env):
    """`runbook search acceptance collapse` (README's tour) printed hits at up to 151 columns; `runbook show
    high-acceptance-falling-throughput-accounting` (what `diagnose` says to read next) its slug/tags line at 159
    and evidence items at up to 377. Now they wrap, items indented, no word lost."""
    from dynocell.runbooks.knowledge import bundled_knowledge

    lines = _fits(_run(cli_env, "runbook", "search", "acceptance", "collapse"))
    slugs = set(bundled_knowledge().entries)
    assert lines[0].split("  ")[0] in slugs and "  [" in lines[0]  # a hit starts with its slug and [kind]
    slug = "high-acceptance-falling-throughput-accounting"
    lines = _fits(_run(cli_env, "runbook", "show", slug))
    words = " ".join(lines).split()
    entry = bundled_knowledge().get(slug)
    for item in (entry.title, *entry.evidence, *entry.fix, *entry.sources):
        assert " ".join(item.split()) in " ".join(words)
    assert all(ln.startswith("  ") for ln in lines[lines.index("evidence:") + 1:lines.index("what to try:")])


def test_trace_split_fits_80_columns(cli_env):
    """`trace split` of the real SGLang 0.5.17 H200 trace printed its headline at 161 columns."""
    trace = DATA / "sglang-0.5.17" / "A.1796009075.4916983-TP-0.trace.json.gz"
    res = json.loads(_run(cli_env, "trace", "split", str(trace), "--json"))
    said = "".join("".join(_fits(_run(cli_env, "trace", "split", str(trace)))).split())
    # Spaces dropped on both sides: a checkout path longer than 80 columns (CI's is 81) folds mid-path.
    headline = (f"{trace}: kernel time {res['device_ms']:.3f} ms over a {res['window_ms']:.3f} ms window, "
                f"busy {res['busy_pct']:.1f} %, {res['launches']} launches, "
                f"{res['graph_launches']} CUDA-graph launches")
    assert said.startswith("".join(headline.split()))


def test_show_of_an_imported_curve_claims_no_empty_histogram(cli_env):
    """A curve from vLLM 0.26.0's per-position counters has no accepted-drafts histogram; `show` printed
    "histogram []" beside its τ, as if zero drafts had been counted. Now the histogram is shown only when
    there is one (a measured run's curves keep theirs: tests/test_widths.py, tests/data/stores/real-run)."""
    res = json.loads(_run(cli_env, "import", "metrics", str(VLLM / "C_draft_graph.metrics.txt"), "--json"))
    text = _run(cli_env, "show", res["run_id"])
    head = next(ln for ln in _fits(text) if ln.startswith("metrics: τ "))
    assert "steps 1995  D 3" in head and "histogram" not in text


def test_error_and_hint_lines_fit_80_columns(tmp_path, cli_env):
    """`Error:`/`hint:` lines were printed whole (soft wrap): a long path, a long label or a long message
    ran past 80 columns. Now they wrap at 80 (words kept whole, a path longer than a line alone on its line), and
    nothing of the message is lost. Piped with COLUMNS unset, each stays one line (logs, grep)."""
    deep = tmp_path / ("d" * 90) / "missing.toml"
    cases = [
        (("config", "add", str(deep)), f"Error: {deep}: no such config file"),
        (("web", "token", "create", "--label", "x" * 300),
         "Error: --label: 300 characters; a web token label has at most 64"),
        (("import", "log", str(VLLM / "C_draft_graph.server.log"), "--engine", "sglang"),
         "Error: --engine: 'sglang', but"),
        (("show", "no-such-run-or-boot-" + "z" * 70), "Error: no run or boot matches"),
    ]
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    for args, starts in cases:
        wrapped = subprocess.run([exe, *args], env={**cli_env, "COLUMNS": "80", "NO_COLOR": "1"},
                                 capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        assert wrapped.returncode != 0 and "hint: " in wrapped.stderr, wrapped.stderr
        lines = wrapped.stderr.splitlines()
        # wrapped at 80; only a single word longer than a line (the deep path) stands alone, whole, to copy
        assert [ln for ln in lines if len(ln) > 80 and len(ln.split()) > 1] == [], args
        assert "".join(wrapped.stderr.split()).startswith("".join(starts.split())), wrapped.stderr
        env = {k: v for k, v in cli_env.items() if k != "COLUMNS"}
        whole = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=180,
                               stdin=subprocess.DEVNULL)
        assert len(whole.stderr.splitlines()) == 2 and whole.stderr.startswith(starts), whole.stderr
        assert "".join(whole.stderr.split()) == "".join(wrapped.stderr.split())  # nothing lost


def test_show_keeps_each_label_with_its_value(tmp_path, cli_env):
    """`show RUN` at 80 columns printed a class's acceptance line as "code: τ 2.144 … histogram [38,20,13,19]
    engine" / "τ 2.144": the label "engine τ" broken across lines, away from its value. Now the line wraps
    between its items only. A real store of dynocell runs (tests/data/sglang-0.5.17-eagle/dynocell-h200)."""
    home = tmp_path / "eagle"
    home.mkdir()
    shutil.copy(DATA / "sglang-0.5.17-eagle" / "dynocell-h200" / "dynocell.db", home / "dynocell.db")
    env = {**cli_env, "DYNOCELL_HOME": str(home)}
    run = json.loads(_run(env, "show", "3f4cdb426f60", "--json"))
    curves = run["curves"]
    assert len(curves) == 5 and all(c["engine_tau"] is not None for c in curves)
    for columns in ("80", "60", "44"):
        proc = subprocess.run([shutil.which("dynocell", path=str(Path(sys.executable).parent)), "show",
                               "3f4cdb426f60"], env={**env, "COLUMNS": columns, "NO_COLOR": "1"},
                              capture_output=True, text=True, timeout=180, stdin=subprocess.DEVNULL)
        lines = proc.stdout.splitlines()
        start = next(i for i, ln in enumerate(lines) if ln.startswith("acceptance per text class"))
        lines = lines[start:lines.index("", start)]  # the acceptance panel
        assert not [ln for ln in lines if ln.rstrip().endswith(("engine", "accept"))], columns
        for c in curves:
            for item in (f"engine τ {c['engine_tau']:.3f}", f"accept rate {c['accept_rate']:.3f}",
                         f"{c['text_class']}: τ {c['tau']:.3f}"):
                assert any(item in ln for ln in lines), (columns, item)
        head = [ln for ln in lines if ln.startswith(("arithmetic:", "code:", "prose:"))]
        assert len(head) == 3 and all(len(ln) <= int(columns) for ln in head), head
