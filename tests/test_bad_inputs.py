"""The bad-input corpus (issue 12, reliability item 4): one test per file under ``tests/data/bad/``.

Every file goes through the entry point an operator uses — the ``dynocell``
CLI (its real Typer app and error translation, :func:`dynocell.cli.app.run`,
called in this process so ~60 cases fit the time budget; a few cases also run
as ``python -m dynocell`` subprocesses) or the engine/runbooks function a face
calls (trace split, bench client + meta checks). Each case must give a clear
message (exit code 2 and one ``Error: FILE: FIELD: …`` line plus a ``hint:``
for bad input), never a traceback, never a hang, and lose nothing already
stored: a good config, a good runbook entry, earlier rows all survive.

Large inputs are not committed; the generators below write them into
``tmp_path`` at test time (see ``tests/data/bad/README.md``).
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable

import pytest

REPO = Path(__file__).resolve().parents[1]
BAD = Path(__file__).parent / "data" / "bad"
GOOD_CONFIG = REPO / "examples" / "tiny.toml"
GOOD_ENTRY = """---
slug: bad-input-good-entry
title: A good operator entry stored before the bad ones
kind: trap
tags: [corpus]
signatures:
  log: ["(?i)wombat overflow"]
examples: ["ERROR wombat overflow in the corpus"]
evidence: ["written by tests/test_bad_inputs.py"]
fix: ["nothing to fix"]
---
The bad-input corpus must not lose this entry.
"""


# ---------------------------------------------------------------- generators (big inputs, written at test time)

def gen_ten_megabyte_config(d: Path) -> Path:
    """configs/ten-megabytes.toml: a valid config whose [meta] notes hold 10 MiB of text."""
    p = d / "ten-megabytes.toml"
    with open(p, "w", encoding="utf-8") as f:
        f.write('engine = "reference"\nmodel_path = "dynocell:tiny"\n\n[meta]\nnotes = "')
        f.write("x" * (10 << 20))
        f.write('"\n')
    return p


def gen_deeply_nested_toml(d: Path, name: str = "deeply-nested.toml") -> Path:
    """configs|workloads/deeply-nested.toml: ``x = [[[…]]]`` nested 5 000 deep (tomllib recursion)."""
    p = d / name
    p.write_text("x = " + "[" * 5000 + "]" * 5000 + "\n")
    return p


def gen_giant_event_trace(d: Path, size: int = 2 << 30, block: int = 64 << 20) -> Path:
    """traces/giant-event.trace.json.gz: one Chrome-trace event holding a ~2 GiB string.

    Written as concatenated gzip members (the format allows it and ``gzip`` reads
    them as one stream): a head, the same 64 MiB member of ``a`` repeated, a
    tail — about 2 MB on disk, made in well under a second.
    """
    p = d / "giant-event.trace.json.gz"
    head = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "giant", "ts": 0, "dur": 1, "args": {"blob": "'
    member = gzip.compress(b"a" * block, compresslevel=9, mtime=0)
    with open(p, "wb") as f:
        f.write(gzip.compress(head, mtime=0))
        for _ in range(size // block):
            f.write(member)
        f.write(gzip.compress(b'"}}]}', mtime=0))
    return p


def gen_deeply_nested_trace(d: Path) -> Path:
    """traces/deeply-nested.json: 100 000 nested arrays in traceEvents (ijson's prefixes grow as depth²)."""
    p = d / "deeply-nested.json"
    p.write_text('{"traceEvents": [' + "[" * 100_000 + "]" * 100_000 + "]}")
    return p


def gen_megabyte_lines_log(d: Path) -> Path:
    """logs/megabyte-lines.log: a phase line, 200 lines of 4 096 ``a`` (bait for quadratic regexes),
    a 1 MiB line, a 3 MiB line without a newline inside, then a real failure line."""
    p = d / "megabyte-lines.log"
    with open(p, "wb") as f:
        f.write(b"[2026-11-30 03:25:28 TP0] Load weight begin. avail mem=78.50 GB\n")
        for _ in range(200):
            f.write(b"a" * 4096 + b"!\n")
        f.write(b"x" * (1 << 20) + b"\n")
        f.write(b"/models/" + b"y" * (3 << 20) + b" does not appear to have a file named config.json\n")
        f.write(b"OSError: /models/llama does not appear to have a file named config.json\n")
    return p


GENERATED: dict[str, dict[str, Callable[[Path], Path]]] = {
    "configs": {"ten-megabytes.toml": gen_ten_megabyte_config, "deeply-nested.toml": gen_deeply_nested_toml},
    "workloads": {"deeply-nested.toml": gen_deeply_nested_toml},
    "traces": {"giant-event.trace.json.gz": gen_giant_event_trace, "deeply-nested.json": gen_deeply_nested_trace},
    "logs": {"megabyte-lines.log": gen_megabyte_lines_log},
}


def corpus(kind: str) -> list[str]:
    """File names of one kind: the committed ones, then the generated ones."""
    committed = sorted(p.name for p in (BAD / kind).iterdir() if p.is_file())
    return committed + sorted(GENERATED.get(kind, {}))


def bad_file(kind: str, name: str, tmp_path: Path) -> Path:
    """The corpus file ``kind/name``: committed, or generated into ``tmp_path``."""
    p = BAD / kind / name
    return p if p.is_file() else GENERATED[kind][name](tmp_path)


# ---------------------------------------------------------------- the CLI in this process

def cli(*args: str) -> tuple[int, str, str]:
    """Run ``dynocell ARGS`` through the real CLI (:func:`dynocell.cli.app.run`); ``(exit code, stdout, stderr)``.

    The CLI's process-wide state (settings, store) is reset first, so each call
    reads the environment like a fresh process; a SIGTERM handler a command
    installs is put back.
    """
    from dynocell.cli.app import run
    from dynocell.cli.common import state

    state.settings, state.cell, state.debug = None, None, False
    handler = signal.getsignal(signal.SIGTERM)
    out, err = io.StringIO(), io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = run(list(args))
    finally:
        signal.signal(signal.SIGTERM, handler)
        cell = state.cell
        if cell is not None and cell._store is not None:
            cell._store.engine.dispose()
        state.settings, state.cell = None, None
    return code, out.getvalue(), err.getvalue()


def assert_no_traceback(*texts: str) -> None:
    for t in texts:
        assert "Traceback" not in t, t[-3000:]


def assert_user_error(code: int, out: str, err: str, *needles: str) -> str:
    """Exit code 2, one ``Error:`` line naming every needle, a ``hint:`` line, no traceback."""
    assert_no_traceback(out, err)
    assert code == 2, (code, out[-2000:], err[-2000:])
    lines = err.splitlines()
    assert lines and lines[0].startswith("Error: "), err[-2000:]
    assert any(line.startswith("hint: ") for line in lines), err[-2000:]
    for n in needles:
        assert n in err, (n, err[-2000:])
    assert "internal error" not in err
    return err


def rows(home: Path, sql: str) -> list[tuple]:
    with contextlib.closing(sqlite3.connect(home / "dynocell.db")) as c:
        return c.execute(sql).fetchall()


def stored(home: Path) -> dict[str, set]:
    """What must survive: configs (whole rows), labels, and the ids of boots and runs."""
    return {
        "configs": set(rows(home, "SELECT * FROM configs")),
        "labels": set(rows(home, "SELECT name, config_hash FROM config_labels")),
        "boots": {r[0] for r in rows(home, "SELECT id FROM boots")},
        "runs": {r[0] for r in rows(home, "SELECT id FROM runs")},
    }


def assert_kept(home: Path, before: dict[str, set]) -> None:
    after = stored(home)
    for table, ids in before.items():
        assert ids <= after[table], (table, ids - after[table])


# ---------------------------------------------------------------- one store for the whole module

@pytest.fixture(scope="module")
def store_home(tmp_path_factory) -> Path:
    """A data directory with a good config ``tiny`` and a good operator runbook entry, made once."""
    home = tmp_path_factory.mktemp("bad-inputs-home")
    entry = tmp_path_factory.mktemp("entry") / "good-entry.md"
    entry.write_text(GOOD_ENTRY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DYNOCELL_HOME", str(home))
        code, out, err = cli("config", "add", str(GOOD_CONFIG), "--json")
        assert code == 0, err
        code, out, err = cli("runbook", "add", str(entry))
        assert code == 0, err
    return home


@pytest.fixture
def home(store_home: Path, monkeypatch) -> Path:
    """Point this test at the shared store (after conftest's per-test home)."""
    monkeypatch.setenv("DYNOCELL_HOME", str(store_home))
    return store_home


def good_config_hash(home: Path) -> str:
    return rows(home, "SELECT config_hash FROM config_labels WHERE name = 'tiny'")[-1][0]


def assert_good_config_readable(home: Path) -> None:
    code, out, err = cli("config", "show", "tiny", "--json")
    assert code == 0, err
    assert json.loads(out)["hash"] == good_config_hash(home)


# ---------------------------------------------------------------- configs

CONFIG_FIELDS = {
    "binary-junk.toml": "not UTF-8",
    "deeply-nested.toml": "nested too deeply",
    "duplicate-key.toml": "TOML syntax error",
    "empty.toml": "model_path: missing",
    "env-name-with-equals.toml": "env.'CUDA_VISIBLE_DEVICES=0': not a valid environment variable name",
    "env-name-zero-width-space.toml": r"env.'CUDA_VISIBLE_DEVICES\u200b'",  # shown escaped: visible
    "huge-context-length.toml": "memory.context_length: must be less than or equal to",
    "huge-tp-size.toml": "parallel.tp_size: must be less than or equal to 4096",
    "lookalike-builtin-model.toml": "model_path: unknown built-in model",
    "nan-mem-fraction.toml": "memory.mem_fraction_static",
    "nul-in-env-value.toml": "env.NCCL_DEBUG: contains a NUL character",
    "nul-in-extra-arg.toml": "extra_args[0]: contains a NUL character",
    "string-tp-size.toml": "parallel.tp_size: must be a whole number",
    "ten-megabytes.toml": "a config may be at most 1024 KiB",
    "unicode-meta-name.toml": "meta.name: invalid config name",
    "unknown-key-in-table.toml": "speculative.num_step: unknown key",
    "utf16-bom.toml": "not UTF-8",
}


@pytest.mark.parametrize("name", corpus("configs"), ids=str)
def test_bad_config_is_refused_and_the_store_keeps_what_it_had(name, home, tmp_path):
    path = bad_file("configs", name, tmp_path)
    before = stored(home)
    code, out, err = cli("config", "add", str(path))
    assert_user_error(code, out, err, path.name, CONFIG_FIELDS[name])
    assert stored(home) == before  # nothing written for a refused file
    assert_good_config_readable(home)


def test_every_config_case_has_an_expectation():
    assert set(corpus("configs")) == set(CONFIG_FIELDS)


# ---------------------------------------------------------------- workloads

WORKLOAD_FIELDS = {
    "binary-junk.toml": "not valid TOML",
    "deeply-nested.toml": "nested too deeply",
    "empty-prompt.toml": "classes.prose.prompts",
    "huge-concurrency.toml": "throughput.concurrency: values must be <= 4096",
    "huge-input-tokens.toml": "throughput.input_tokens",
    "huge-requests-per-class.toml": "acceptance.requests_per_class: must be less than or equal to",
    "infinite-temperature.toml": "temperature: must be less than or equal to 100, got inf",
    "no-classes.toml": "classes: Field required",
    "not-toml.toml": "not valid TOML",
    "string-concurrency.toml": "throughput.concurrency.0: must be a valid integer, got '4'",
    "unknown-class.toml": "unknown class 'poetry'",
    "unknown-key.toml": "throughput.concurency: unknown key",
}


@pytest.mark.parametrize("name", corpus("workloads"), ids=str)
def test_bad_workload_is_refused_before_any_boot(name, home, tmp_path):
    path = bad_file("workloads", name, tmp_path)
    before = stored(home)
    code, out, err = cli("run", "tiny", "--workload", str(path), "--no-profile", "--no-lossless-check")
    assert_user_error(code, out, err, path.name, WORKLOAD_FIELDS[name])
    assert stored(home) == before  # refused up front: no run row, no boot row, so no engine was booted
    assert_good_config_readable(home)


def test_every_workload_case_has_an_expectation():
    assert set(corpus("workloads")) == set(WORKLOAD_FIELDS)


# ---------------------------------------------------------------- runbook entries

RUNBOOK_FIELDS = {
    "alias-recursion.md": "YAML aliases (*name) are not allowed",
    "billion-laughs.md": "YAML aliases (*name) are not allowed",
    "binary-junk.md": "cannot read",
    "front-matter-is-a-list.md": "front matter must be a YAML mapping",
    "missing-required-fields.md": "kind: required",
    "nested-quantifier-regex.md": "signatures.log[0]: nested quantifier",
    "no-front-matter.md": "no front matter",
    # refused by the timed check: whether the child was killed at the limit ("did not finish …") or
    # finished late ("took … s …") depends on the host's load, so only the field and the test are asserted
    "overlapping-alternation-regex.md": "signatures.log[0]:",
    "python-object-tag.md": "could not determine a constructor for the tag",
    "unclosed-front-matter.md": "no front matter",
    "wrong-field-types.md": "slug: required",
    "yaml-syntax-error.md": "front matter is not valid YAML at line 3, column 6",
}


def operator_files(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "runbooks").glob("*.md"))


@pytest.mark.parametrize("name", corpus("runbooks"), ids=str)
def test_bad_runbook_entry_is_refused_and_skipped(name, home, tmp_path):
    path = bad_file("runbooks", name, tmp_path)
    files = operator_files(home)
    code, out, err = cli("runbook", "add", str(path))
    assert_user_error(code, out, err, path.name, RUNBOOK_FIELDS[name])
    assert operator_files(home) == files  # nothing copied in, nothing removed

    # Dropped straight into the operator directory (no `add`): every command still works, the file is
    # left out with its reason, and its regex never meets a log line.
    dropped = home / "runbooks" / name
    shutil.copyfile(path, dropped)
    try:
        code, out, err = cli("runbook", "search", "corpus")
        assert code == 0 and "bad-input-good-entry" in out, err
        code, out, err = cli("runbook", "show", "bad-input-good-entry", "--json")
        assert code == 0 and json.loads(out)["origin"] == "operator", err
        code, out, err = cli("runbook", "lint", str(dropped))
        assert_no_traceback(out, err)
        assert code == 1 and name in out and RUNBOOK_FIELDS[name] in out, (out, err)
        if name == "overlapping-alternation-regex.md":
            assert "on a 10 kB adversarial string" in out, out  # refused by the timing check, either wording
    finally:
        dropped.unlink()


def test_every_runbook_case_has_an_expectation():
    assert set(corpus("runbooks")) == set(RUNBOOK_FIELDS)


@pytest.mark.timeout(120)  # a regex that met this log would take hours: the bound cannot flake
def test_operator_log_regex_that_backtracks_never_meets_a_log_line(home, tmp_path):
    """A catastrophic regex that slips past the static check is timed at load and left out, so
    `dynocell diagnose` over a log built to trigger it finishes (it would take hours otherwise)."""
    from dynocell.runbooks.knowledge import load_knowledge

    d = tmp_path / "ops"
    d.mkdir()
    shutil.copyfile(BAD / "runbooks" / "overlapping-alternation-regex.md", d / "x.md")
    kn = load_knowledge(d)
    assert "overlapping-alternation-regex" not in kn.entries
    assert any(e.field == "signatures.log[0]" for e in kn.errors)
    assert kn.for_log(["ab" * 2000 + "!"] * 50) == {}


# ---------------------------------------------------------------- traces

TRACE_ERRORS = {
    "bad-utf8.json": "not valid JSON: lexical error: invalid bytes in UTF8 string",
    "empty.json": "trace file is empty",
    "no-trace-events.json": "no 'traceEvents' list",
    "not-json.trace.json.gz": "not valid JSON",
    "trace-events-not-a-list.json": "'traceEvents' is an object, not a list of events",
    "truncated.trace.json.gz": "truncated",
    "overflowing-durations.json": "event times add up to more than 1e+18 µs",
    "absurd-times.json": "event times add up to more than 1e+18 µs",
}
TRACE_WARNINGS = {
    "negative-durations.json": "2 event(s) with negative duration skipped",
    "non-finite-durations.json": "3 event(s) with a non-numeric or non-finite ts/dur skipped",
}
# Hostile sizes are parsed in a child process whose peak memory and time are measured.
TRACE_HOSTILE = {
    "giant-event.trace.json.gz": "one JSON string or number is longer than 4 MiB",
    "deeply-nested.json": "JSON nested more than 64 levels deep",
}
TRACE_CHILD = textwrap.dedent("""
    import json, resource, sys, time
    from dynocell.engine.trace import analyze_ranks
    from dynocell.errors import UserError
    t0 = time.monotonic()
    try:
        analyze_ranks([sys.argv[1]])
        result = {"error": None}
    except UserError as exc:
        result = {"error": exc.message, "hint": exc.hint}
    result["seconds"] = time.monotonic() - t0
    # VmHWM: this process image's own peak RSS. (ru_maxrss would also count the forked pytest
    # parent's RSS, which Linux carries across exec.)
    hwm = [line for line in open("/proc/self/status") if line.startswith("VmHWM:")]
    result["max_rss_mb"] = (int(hwm[0].split()[1]) if hwm else
                            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024
    print(json.dumps(result))
""")


@pytest.mark.parametrize("name", corpus("traces"), ids=str)
def test_bad_trace_gives_a_clear_message(name, tmp_path):
    from dynocell.engine.trace import TraceError, analyze_ranks

    path = bad_file("traces", name, tmp_path)
    if name in TRACE_HOSTILE:
        proc = subprocess.run([sys.executable, "-c", TRACE_CHILD, str(path)], capture_output=True, text=True,
                              timeout=120, cwd=REPO)
        assert_no_traceback(proc.stdout, proc.stderr)
        assert proc.returncode == 0, proc.stderr
        res = json.loads(proc.stdout)
        assert res["error"] and str(path) in res["error"] and TRACE_HOSTILE[name] in res["error"], res
        assert res["hint"], res
        assert res["max_rss_mb"] < 400, res  # bounded memory: the 2 GiB value is never held
        assert res["seconds"] < 30, res  # and bounded time
        return
    if name in TRACE_WARNINGS:
        split = analyze_ranks([path]).combined
        assert any(TRACE_WARNINGS[name] in w for w in split.warnings), split.warnings
        assert split.device_ms == pytest.approx(0.005)  # the one good event, nothing from the bad ones
        return
    with pytest.raises(TraceError) as info:
        analyze_ranks([path])
    assert str(path) in info.value.message and TRACE_ERRORS[name] in info.value.message, info.value.message
    assert info.value.hint and info.value.exit_code == 2


def test_every_trace_case_has_an_expectation():
    assert set(corpus("traces")) == set(TRACE_ERRORS) | set(TRACE_WARNINGS) | set(TRACE_HOSTILE)


# ---------------------------------------------------------------- engine logs

SHIM = """#!{python}
import os, sys
# Stands in for `python -m sglang.launch_server`: writes the corpus log's raw bytes, then dies.
with open(os.environ["BAD_LOG"], "rb") as f:
    sys.stdout.buffer.write(f.read())
sys.stdout.flush()
sys.exit(1)
"""
LOG_EXPECT = {  # failure signature, a fragment `dynocell logs` must show
    "ansi-colours.log": ("cuda_oom_weights", "Tried to allocate"),
    "binary-junk.log": ("unknown", "\ufffd"),
    "megabyte-lines.log": ("model_path_not_found", "does not appear to have a file named config.json"),
}


@pytest.fixture
def dumping_engine(tmp_path, monkeypatch) -> Path:
    shim = tmp_path / "dump-log-python"
    shim.write_text(SHIM.format(python=sys.executable))
    shim.chmod(0o755)
    monkeypatch.setenv("DYNOCELL_ENGINE_PYTHON", str(shim))
    monkeypatch.setenv("DYNOCELL_STOP_GRACE_S", "2")
    monkeypatch.setenv("DYNOCELL_BOOT_TIMEOUT_SGLANG_S", "30")
    return shim


@pytest.mark.timeout(300)  # classifying 1 MB lines quadratically takes hours; linear, seconds
@pytest.mark.parametrize("name", corpus("logs"), ids=str)
def test_engine_log_junk_is_recorded_classified_and_shown(name, home, tmp_path, dumping_engine):
    log = bad_file("logs", name, tmp_path)
    model = tmp_path / "model"
    model.mkdir()
    cfg = tmp_path / f"log-{Path(name).stem}.toml"
    cfg.write_text(f'engine = "sglang"\nmodel_path = "{model}"\n\n[env]\nBAD_LOG = "{log}"\n')
    before = stored(home)

    code, out, err = cli("boot", str(cfg))
    assert_no_traceback(out, err)
    error = next((line for line in err.splitlines() if line.startswith("Error: ")), "")
    assert code == 3 and error.startswith("Error: boot ") and "failed" in error, (code, err[-2000:])
    assert "\x1b" not in err  # escape codes are not replayed into the operator's terminal

    signature, fragment = LOG_EXPECT[name]
    code, out, err = cli("ps", "--all", "--json")
    assert code == 0, err
    (boot,) = [b for b in json.loads(out) if b["id"] not in before["boots"]]
    assert boot["state"] == "failed" and boot["failure_signature"] == signature, boot
    assert len(json.dumps(boot)) < 200_000  # the stored tail keeps long lines cut

    code, out, err = cli("logs", boot["id"], "--tail", "500")
    assert_no_traceback(err)  # (stdout is the engine's own log, tracebacks included)
    assert code == 0 and fragment in out, err
    code, out, err = cli("diagnose", boot["id"])
    assert_no_traceback(out, err)
    assert code == 0 and signature in out, (out, err)
    assert_kept(home, before)
    assert_good_config_readable(home)


def test_engine_python_that_does_not_exist_fails_the_boot_at_once(home, tmp_path, monkeypatch):
    """A bad ``engine_python`` setting: the boot is recorded ``failed`` (spawn_error) right away, not left
    ``starting`` until it turns ``lost``."""
    monkeypatch.setenv("DYNOCELL_ENGINE_PYTHON", str(tmp_path / "no-such-python"))
    model = tmp_path / "model"
    model.mkdir()
    cfg = tmp_path / "nowhere.toml"
    cfg.write_text(f'engine = "sglang"\nmodel_path = "{model}"\n')
    before = stored(home)
    code, out, err = cli("boot", str(cfg))  # failed at once: the row below is failed, not starting/lost
    assert_no_traceback(out, err)
    assert code == 3 and "no-such-python" in err and "hint: check engine_python" in err, err
    code, out, err = cli("ps", "--all", "--json")
    (boot,) = [b for b in json.loads(out) if b["id"] not in before["boots"]]
    assert boot["state"] == "failed" and boot["failure_signature"] == "spawn_error", boot
    assert_kept(home, before)


def test_every_log_case_has_an_expectation():
    assert set(corpus("logs")) == set(LOG_EXPECT)


def test_bundled_log_rules_stay_linear_on_long_lines():
    """Every bundled phase rule, failure signature and runbook log regex on 4 096-character lines."""
    import re

    from dynocell.engine.rules import MAX_LINE_CHARS, load_engine_rules, load_signatures
    from dynocell.runbooks.knowledge import bundled_knowledge

    patterns = [rx for s in load_signatures() for rx in (*s.regexes, *s.context)]
    patterns += [r.regex for eng in ("sglang", "reference") for r in load_engine_rules(eng).rules]
    patterns += [re.compile(p) for e in bundled_knowledge().entries.values() for p in e.signatures.get("log", [])]
    lines = [c * MAX_LINE_CHARS for c in ("a", "x", " ", "0", "/", "-", ".", "A", "_", "1.")]
    slow = []
    for rx in patterns:
        t0 = time.perf_counter()
        for line in lines:
            rx.search(line)
        if time.perf_counter() - t0 > 0.05:
            slow.append(rx.pattern)
    assert not slow, slow


# ---------------------------------------------------------------- /generate responses (meta_info)

class _Replay(BaseHTTPRequestHandler):
    """Answers every POST with the SSE body of one corpus file (what SGLang's /generate streams)."""

    protocol_version = "HTTP/1.1"
    body = b""

    def log_message(self, *_a):  # quiet
        pass

    def do_POST(self):  # noqa: N802 - http.server API
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Content-Length", str(len(self.body)))
        self.end_headers()
        self.wfile.write(self.body)


@pytest.fixture
def replay():
    servers = []

    def serve(path: Path) -> str:
        handler = type("H", (_Replay,), {"body": path.read_bytes()})
        srv = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        servers.append(srv)
        return f"http://127.0.0.1:{srv.server_address[1]}"

    yield serve
    for srv in servers:
        srv.shutdown()
        srv.server_close()


# outcome: ("failed", failure text) — the bench client records a bad_response; ("flagged", problem)
# — the generation counts but its meta_info is flagged before τ; the curve column says what τ becomes.
META_EXPECT = {
    "accept-length-lies.sse": ("flagged", "spec_accept_length 3.9 ≠ completion_tokens / spec_verify_ct", "curve"),
    "histogram-not-a-list.sse": ("flagged", "spec_correct_drafts_histogram is not a list of counts", "error"),
    "lying-histogram.sse": ("flagged", "histogram sums to 5 verify steps but spec_verify_ct is 3", "curve"),
    "meta-info-not-an-object.sse": ("failed", "meta_info is str, not a JSON object", None),
    "missing-meta-info.sse": ("flagged", "generation 0: no meta_info", "none"),
    "negative-bucket.sse": ("flagged", "negative counts", "error"),
    "not-json-chunk.sse": ("failed", "not JSON", None),
    "token-count-string.sse": ("failed", "meta_info.completion_tokens is not a token count: '8'", None),
}


@pytest.mark.parametrize("name", corpus("meta"), ids=str)
def test_generate_response_with_bad_meta_info_is_flagged(name, replay):
    """The bench client against a server replaying the file, then the checks the acceptance step runs."""
    from dynocell.engine import acceptance as acc
    from dynocell.engine.bench import run_level_sync
    from dynocell.engine.meta import check_generations
    from dynocell.engine.workloads import BenchRequest

    url = replay(BAD / "meta" / name)
    req = BenchRequest(0, "acceptance", "prose", "Continue the story:", 20, 20, 20, 8, 0.0, True)
    level = run_level_sync(url, [req], 1, timeout_s=30)  # never raises for a lying engine
    (res,) = level.results
    outcome, text, tau = META_EXPECT[name]
    if outcome == "failed":
        assert not res.ok and res.failure_kind == "bad_response" and text in res.error, (res.failure_kind, res.error)
        assert level.failures == {"bad_response": 1}
        return
    assert res.ok, res.error
    metas = [r.meta_info for r in level.results if r.ok]
    problems = check_generations(metas)
    assert any(text in p for p in problems), problems
    if tau == "error":  # the histogram cannot be summed: a clear AcceptanceError, not a number
        with pytest.raises(acc.AcceptanceError) as info:
            acc.curve_from_meta_infos(metas)
        assert "histogram" in info.value.message
    elif tau == "none":
        assert acc.curve_from_meta_infos(metas) is None
    else:
        assert acc.curve_from_meta_infos(metas) is not None  # computed, but flagged above


def test_every_meta_case_has_an_expectation():
    assert set(corpus("meta")) == set(META_EXPECT)


REPLAY_ENGINE = """#!{python}
# Stands in for `python -m sglang.launch_server`: the engine HTTP surface, and every streamed /generate
# answered with the SSE body of one corpus file (REPLAY_SSE); a greedy (non-streamed) /generate gets its
# last chunk.
import argparse, json, os, sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
ap = argparse.ArgumentParser()
for flag in ("--model-path", "--host", "--port", "--speculative-algorithm", "--speculative-draft-model-path",
             "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"):
    ap.add_argument(flag)
args, _ = ap.parse_known_args(sys.argv[3:])
body = open(os.environ["REPLAY_SSE"], "rb").read()
last = json.loads([e for e in body.split(b"\\n\\n") if e.startswith(b"data: {{")][-1][6:])
info = {{"model_path": args.model_path, "tp_size": 1, "speculative_algorithm": args.speculative_algorithm,
        "speculative_num_steps": int(args.speculative_num_steps),
        "speculative_eagle_topk": int(args.speculative_eagle_topk),
        "speculative_num_draft_tokens": int(args.speculative_num_draft_tokens), "context_length": 4096}}
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *a):
        pass
    def send(self, data, ctype="application/json", code=200):
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def do_GET(self):
        if self.path.startswith("/get_server_info"):
            return self.send(json.dumps(info).encode())
        if self.path.startswith(("/health", "/get_model_info")):
            return self.send(b"{{}}")
        return self.send(b"{{}}", code=404)
    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{{}}")
        if self.path == "/generate" and req.get("stream"):
            return self.send(body, "text/event-stream")
        if self.path == "/generate":
            return self.send(json.dumps(last).encode())
        return self.send(b"{{}}")
print("The server is fired up and ready to roll!", flush=True)
ThreadingHTTPServer((args.host, int(args.port)), H).serve_forever()
"""
TINY_WORKLOAD = """name = "one-request"
warmup = 0
[acceptance]
input_tokens = [16]
output_tokens = 8
requests_per_class = 1
[throughput]
input_tokens = [16]
output_tokens = 8
concurrency = [1]
requests_per_level = 1
[classes.prose]
material = "The river bends twice before the mill and once after it."
prompts = ["Continue the story:"]
"""


def test_lying_histogram_through_dynocell_run_is_flagged_on_the_curve(home, tmp_path, monkeypatch):
    """`dynocell run` on an engine whose meta_info histogram does not sum to spec_verify_ct: the run
    records the curve, but the curve and the run carry the warning — no silent τ."""
    shim = tmp_path / "replay-python"
    shim.write_text(REPLAY_ENGINE.format(python=sys.executable))
    shim.chmod(0o755)
    monkeypatch.setenv("DYNOCELL_ENGINE_PYTHON", str(shim))
    monkeypatch.setenv("DYNOCELL_STOP_GRACE_S", "2")
    monkeypatch.setenv("DYNOCELL_BOOT_TIMEOUT_SGLANG_S", "30")
    model = tmp_path / "model"
    model.mkdir()
    cfg = tmp_path / "liar.toml"
    sse = BAD / "meta" / "lying-histogram.sse"
    cfg.write_text(f'engine = "sglang"\nmodel_path = "{model}"\n\n[speculative]\nalgorithm = "STANDALONE"\n'
                   f'draft_model_path = "{model}"\nnum_steps = 3\neagle_topk = 1\nnum_draft_tokens = 4\n\n'
                   f'[env]\nREPLAY_SSE = "{sse}"\n')
    wl = tmp_path / "one-request.toml"
    wl.write_text(TINY_WORKLOAD)
    before = stored(home)
    code, out, err = cli("run", str(cfg), "--workload", str(wl), "--no-profile", "--no-lossless-check", "--json")
    assert_no_traceback(out, err)
    run = json.loads(out)["run"]
    assert code == 0 and run["state"] == "completed", (code, err[-2000:])
    (curve,) = rows(home, f"SELECT tau, histogram, warning FROM acceptance_curves WHERE run_id = '{run['id']}'")
    assert "histogram sums to 5 verify steps but spec_verify_ct is 3" in curve[2], curve
    assert any("contradicts itself" in w for w in run["summary"]["warnings"]), run["summary"]
    assert_kept(home, before)


# ---------------------------------------------------------------- the same through `python -m dynocell`

SUBPROCESS_CASES = [
    ("configs/nul-in-env-value.toml", ("config", "add"), "env.NCCL_DEBUG"),
    ("workloads/huge-concurrency.toml", ("run", "tiny", "--no-profile", "--workload"), "throughput.concurrency"),
    ("runbooks/nested-quantifier-regex.md", ("runbook", "add"), "signatures.log[0]"),
]


@pytest.mark.parametrize("rel,argv,field", SUBPROCESS_CASES, ids=[c[0] for c in SUBPROCESS_CASES])
def test_bad_input_through_a_real_process(rel, argv, field, home):
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    before = stored(home)
    proc = subprocess.run([sys.executable, "-m", "dynocell", *argv, str(BAD / rel)], env=env, cwd=REPO,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert_user_error(proc.returncode, proc.stdout, proc.stderr, Path(rel).name, field)
    assert stored(home) == before
    assert_good_config_readable(home)
