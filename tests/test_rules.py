"""Phase rules and failure signatures against synthetic logs and the real SGLang 0.5.17 logs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynocell.engine.rules import (
    UNKNOWN,
    classify,
    classify_log,
    compile_safe,
    load_phase_rules,
    load_signatures,
    match_phase,
    phase_timeline,
)
from dynocell.errors import ConfigError

DATA = Path(__file__).parent / "data"
LOGS = sorted((DATA / "logs").glob("*.log"))
REAL = DATA / "sglang-0.5.17"  # real SGLang 0.5.17 artifacts (see its README.md)


@pytest.fixture(autouse=True)
def _fresh_rule_caches():
    """Rules are compiled once per process (cached); each test here loads them itself, so a cache filled
    elsewhere (an earlier test, a forked parent) never stands in for the loading code under test."""
    from dynocell.engine import rules

    for cached in (rules.load_engine_rules, rules._matcher, rules._load_cached):
        cached.cache_clear()
    yield


def real(rel: str) -> Path:
    return REAL / rel


def expected_id(path: Path) -> str:
    return path.stem.split("--")[0]


def test_rules_files_load_and_are_safe():
    names = [r.name for r in load_phase_rules("sglang")]
    assert names == ["weights_begin", "weights_end", "kv_cache_allocated", "memory_pool_end",
                     "cuda_graph_begin", "cuda_graph_end", "http_listening", "ready"]
    assert [r.name for r in load_phase_rules("reference")] == names
    ids = {s.id for s in load_signatures()}
    for required in ("eagle3_not_supported", "cuda_graph_no_valid_sizes", "cuda_oom_graph_capture",
                     "cuda_oom_weights", "kv_cache_too_small", "port_in_use", "nccl_timeout_startup",
                     "nccl_timeout_serving", "model_path_not_found", "unrecognized_engine_argument",
                     "python_import_error"):
        assert required in ids


@pytest.mark.parametrize("log", LOGS, ids=[p.name for p in LOGS])
def test_synthetic_log_classified(log: Path):
    match, _, _ = classify_log(log.read_text().splitlines())
    assert match.id == expected_id(log)
    if match.id != "unknown":
        assert match.title and match.hint and match.line


def test_captured_groups():
    def groups(name):
        return classify_log((DATA / "logs" / name).read_text().splitlines())[0].groups

    assert groups("kv_cache_too_small.log") == {"needed_gib": "9.5", "available_gib": "6.91"}
    assert groups("kv_cache_too_small--sglang.log") == {"mem_fraction_static": "0.05"}
    assert groups("port_in_use.log") == {"host": "127.0.0.1", "port": "30003"}
    assert groups("eagle3_not_supported.log")["model_class"] == "MiniMaxM3SparseForConditionalGeneration"
    assert groups("cuda_oom_graph_capture.log")["tried_to_allocate"] == "1.50 GiB"
    assert groups("nccl_timeout_serving.log")["ran_ms"] == "600123"
    assert groups("unrecognized_engine_argument.log") == {"args": "--speculative-num-drafts 4"}
    assert groups("python_import_error.log") == {"module": "flashinfer.norm"}


def test_oom_is_told_apart_by_last_phase_and_nccl_by_readiness():
    oom = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."]

    def at(phase, ready=False):
        return classify(oom, last_phase=phase, was_ready=ready).id

    assert at(None) == "cuda_oom_weights"
    assert at("weights_begin") == "cuda_oom_weights"
    assert at("weights_end") == "cuda_oom_memory_pool"
    assert at("kv_cache_allocated") == "cuda_oom_memory_pool"
    assert at("memory_pool_end") == "cuda_oom_memory_pool"
    assert at("cuda_graph_begin") == "cuda_oom_graph_capture"
    assert at("ready", True) == "cuda_oom_serving"
    nccl = ["[E] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, "
            "Timeout(ms)=600000) ran for 600001 milliseconds before timing out."]
    assert classify(nccl, last_phase=None, was_ready=False).id == "nccl_timeout_startup"
    assert classify(nccl, last_phase="ready", was_ready=True).id == "nccl_timeout_serving"


def test_groups_come_from_the_last_matching_line():
    """Two OOMs in the tail: the signature's groups describe the last one (the one that killed the engine)."""
    tail = ["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.00 GiB.",
            "retrying with a smaller batch",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.50 GiB."]
    m = classify(tail, last_phase="cuda_graph_begin", was_ready=False)
    assert m.id == "cuda_oom_graph_capture"
    assert m.groups == {"tried_to_allocate": "2.50 GiB"}
    assert m.line == tail[-1]


def test_unknown_is_never_a_guess():
    assert classify([], last_phase=None, was_ready=False) == UNKNOWN
    # SGLang prints these on every healthy boot: they must not read as import errors
    harmless = ["[2026-11-30 03:25:27] Ignore import error when loading sglang.srt.models.inkling: "
                "No module named 'helion'",
                "[2026-11-30 03:25:41] OpenAI Responses API (/v1/responses) disabled: OpenAIServingResponses "
                "init failed (ModuleNotFoundError: No module named 'openai_harmony')"]
    assert classify(harmless, last_phase="ready", was_ready=True).id == "unknown"


@pytest.mark.parametrize("name,graphs", [("A", 0), ("B", 2), ("C", 5), ("D", 2), ("E", 5)])
def test_real_sglang_logs_phases_and_ready_time(name, graphs):
    log = real(f"{name}.server.log")
    result = json.loads(real(f"{name}.result.json").read_text())
    lines = log.read_text(errors="replace").splitlines()
    tl = phase_timeline(lines)
    names = [e.name for e in tl]
    first = {n: names.index(n) for n in set(names)}
    assert first["weights_begin"] < first["weights_end"] < first["kv_cache_allocated"] < first["memory_pool_end"]
    assert first["memory_pool_end"] < first["http_listening"] < first["ready"]
    assert names.count("cuda_graph_begin") == graphs == names.count("cuda_graph_end")
    spec = names.count("weights_begin")
    assert spec == (2 if name in ("C", "E") else 1)  # STANDALONE loads a draft too
    kv = next(e for e in tl if e.name == "kv_cache_allocated")
    assert int(kv.detail["tokens"]) > 1_000_000 and kv.detail["dtype"] == "torch.bfloat16"
    ready = next(e for e in tl if e.name == "ready")
    # The log starts after interpreter start-up, so its ready offset is below the measured boot time.
    assert 20 < ready.offset_s < result["boot_s"]
    match, last, was_ready = classify_log(lines)
    assert was_ready and match.id == "unknown"  # a healthy boot names no failure


def test_real_trained_pair_log_r():
    lines = real("trained-pair/R.server.log").read_text(errors="replace").splitlines()
    tl = phase_timeline(lines)
    # target and draft each load weights and a KV pool, then five CUDA graphs, then HTTP and ready
    assert [e.name for e in tl] == (["weights_begin", "weights_end"] * 2 + ["kv_cache_allocated", "memory_pool_end"] * 2
                                    + ["cuda_graph_begin", "cuda_graph_end"] * 5 + ["http_listening", "ready"])
    graphs = [e.detail["graph"] for e in tl if e.name == "cuda_graph_end"]
    assert graphs == ["target prefill", "target verify", "draft prefill", "draft decode", "draft extend"]
    kv = [e.detail for e in tl if e.name == "kv_cache_allocated"]
    assert kv == [{"dtype": "torch.float16", "tokens": "9705083"}] * 2
    assert [e.occurrence for e in tl if e.name == "memory_pool_end"] == [1, 2]
    assert next(e for e in tl if e.name == "cuda_graph_end").detail["elapsed_s"] == "33.40"
    assert next(e for e in tl if e.name == "http_listening").detail["url"] == "http://127.0.0.1:30010"
    assert tl[-1].name == "ready" and tl[-1].offset_s == 82.0  # s after the first timestamped line
    match, last, was_ready = classify_log(lines)
    assert (match.id, last, was_ready) == ("unknown", "ready", True)


def test_tp_rank_tagged_lines_match():
    hit = match_phase("[2026-11-30 03:47:17 TP1] KV Cache is allocated. dtype: torch.bfloat16, #tokens: 28981312, "
                      "K size: 13.82 GB, V size: 13.82 GB")
    assert hit and hit.name == "kv_cache_allocated" and hit.detail["tokens"] == "28981312"
    hit = match_phase("2026-11-30T03:25:29.001Z | [2026-11-30 03:25:29] Capture draft extend CUDA graph end. "
                      "elapsed=1.24 s, mem usage=0.04 GB, avail mem=110.45 GB.")
    assert hit and hit.name == "cuda_graph_end" and hit.detail == {"graph": "draft extend", "elapsed_s": "1.24"}
    assert match_phase("Load weight begin.", "reference").name == "weights_begin"


def test_catastrophic_and_broken_patterns_refused(tmp_path):
    for bad in ["(a+)+", "(a*)*b", "(?:x|y+)+", "((ab)*c)+"]:
        with pytest.raises(ConfigError, match="catastrophic"):
            compile_safe(bad, "f.toml", "regex")
    with pytest.raises(ConfigError, match="bad regex"):
        compile_safe("(unclosed", "f.toml", "regex")
    compile_safe(r"a{1,3}(?:bc)?d+", "f.toml", "regex")
    f = tmp_path / "ops.toml"
    f.write_text('[[signature]]\nid = "x"\ntitle = "t"\nhint = "h"\nregex = "(a+)+"\n')
    with pytest.raises(ConfigError, match="signature\\[0\\].regex"):
        load_signatures([f])


def test_extra_signatures_win_over_bundled(tmp_path):
    f = tmp_path / "ops.toml"
    f.write_text('[[signature]]\nid = "our_flashinfer_stub"\ntitle = "Stand-in flashinfer lacks norm"\n'
                 'hint = "rebuild the stubs"\n'
                 'regex = "^ModuleNotFoundError: No module named \'flashinfer\\\\.norm\'"\n')
    sigs = load_signatures([f])
    lines = (DATA / "logs" / "python_import_error.log").read_text().splitlines()
    assert classify_log(lines, signatures=sigs)[0].id == "our_flashinfer_stub"
    assert classify_log(lines)[0].id == "python_import_error"


@pytest.mark.parametrize("name", ["T", "T0"])
def test_real_tp2_logs_count_each_rank(name):
    """tp_size 2: every rank prints its own phase lines ("[… TP0] …", "[… TP1] …")."""
    lines = (DATA / "sglang-0.5.17-tp2" / f"{name}.server.log").read_text(errors="replace").splitlines()
    tl = phase_timeline(lines)
    names = [e.name for e in tl]
    assert names.count("weights_begin") == 2 and names.count("kv_cache_allocated") == 2
    assert {e.detail["tokens"] for e in tl if e.name == "kv_cache_allocated"} == {"28981312"}
    assert "ready" in names
    # T ends with the harness killing the scheduler (exit code -15): no rule claims to know why.
    assert classify_log(lines)[0].id == "unknown"


BAD_RULES = {
    "syntax": ('[[signature]\nid = "x"\n', "TOML syntax error: "),
    "not-a-table": ("signature = [1]\n", "signature[0]: must be a table (write [[signature]] entries)"),
    "missing-hint": ('[[signature]]\nid = "x"\ntitle = "t"\nregex = "a"\n',
                     "signature[0].hint: missing (each signature needs id, title, regex, hint)"),
    "unknown-key": ('[[signature]]\nid = "x"\ntitle = "t"\nregex = "a"\nhint = "h"\ncolour = "red"\n',
                    "signature[0].colour: unknown key "
                    "(keys: id, title, regex, hint, last_phase, ready, context, phase)"),
    "bad-regex": ('[[signature]]\nid = "x"\ntitle = "t"\nregex = ["a", "(unclosed"]\nhint = "h"\n',
                  "signature[0].regex: bad regex '(unclosed': missing ), unterminated subpattern at position 0 "
                  "(fix the pattern)"),
    "nested-context": ('[[signature]]\nid = "x"\ntitle = "t"\nregex = "a"\nhint = "h"\ncontext = "(a+)+"\n',
                       "signature[0].context: regex '(a+)+' nests unbounded repetition (catastrophic backtracking) "
                       "(remove the outer or inner + / * (e.g. write (ab)+ instead of (a+b)+))"),
}


@pytest.mark.parametrize("case", sorted(BAD_RULES))
def test_bad_signature_file_names_the_file_field_and_fix(case, tmp_path):
    text, tail = BAD_RULES[case]
    f = tmp_path / f"{case}.toml"
    f.write_text(text, encoding="utf-8")
    with pytest.raises(ConfigError) as err:
        load_signatures([f])
    msg = str(err.value)
    assert err.value.source == str(f)
    if case == "syntax":
        assert msg.startswith(f"{f}: TOML syntax error: ") and msg.endswith("(fix the line and column shown)")
        assert err.value.field is None
    else:
        assert msg == f"{f}: {tail}"
        assert err.value.field == tail.split(":")[0]


def test_signature_file_without_signatures_adds_none(tmp_path):
    f = tmp_path / "empty.toml"
    f.write_text("# nothing yet\n", encoding="utf-8")
    assert load_signatures([f]) == load_signatures()


def test_missing_signature_file_is_not_found(tmp_path):
    from dynocell.errors import NotFound

    with pytest.raises(NotFound) as err:
        load_signatures([tmp_path / "nope.toml"])
    assert str(err.value) == f"rules file not found: {tmp_path / 'nope.toml'} (check the path)"


def test_signature_fields_as_written(tmp_path):
    """Scalars become one-element tuples; ``ready``/``context``/``last_phase`` kept; source is the file; UTF-8."""
    f = tmp_path / "ops.toml"
    f.write_text('[[signature]]\nid = "x"\ntitle = "Tötet"\nregex = "boom (?P<n>\\\\d+)"\nhint = "h"\n'
                 'last_phase = "ready"\nready = true\ncontext = "ctx"\n', encoding="utf-8")
    sig = load_signatures([f])[0]
    assert (sig.id, sig.title, sig.hint, sig.source) == ("x", "Tötet", "h", str(f))
    assert sig.last_phase == ("ready",) and sig.ready is True
    assert [r.pattern for r in sig.regexes] == ["boom (?P<n>\\d+)"] and [c.pattern for c in sig.context] == ["ctx"]
    m = classify(["ctx", "boom 7", "boom 42 later"], last_phase="ready", was_ready=True, signatures=[sig])
    assert (m.id, m.groups, m.line, m.source) == ("x", {"n": "42"}, "boom 42 later", str(f))
    assert classify(["boom 1"], last_phase="ready", was_ready=True, signatures=[sig]).id == "unknown"  # no context
    assert classify(["ctx", "boom 1"], last_phase="ready", was_ready=False, signatures=[sig]).id == "unknown"
    assert classify(["ctx", "boom 1"], last_phase="cuda_graph_end", was_ready=True, signatures=[sig]).id == "unknown"


def test_what_rules_see_of_a_line():
    from dynocell.engine.rules import match_text, strip_prefix

    assert strip_prefix("2026-11-30T03:25:27.123Z | Load weight begin.\r\n") == "Load weight begin."
    assert strip_prefix("\n  indented text  \n") == "\n  indented text  "  # only the line end goes
    assert strip_prefix("2026-11-30 03:25:27 | not our prefix") == "2026-11-30 03:25:27 | not our prefix"
    assert strip_prefix("ends in XX\n") == "ends in XX"
    assert match_text("2026-11-30T03:25:27Z | \x1b[31mCUDA out of memory\x1b[0m") == "CUDA out of memory"
    assert match_text("x" * 5000) == "x" * 4096


def test_progress_bar_segments_and_phase_offsets():
    bar = "Loading safetensors 50%|#####     |\r[2026-11-30 03:25:30] Load weight begin. avail mem=139.13 GB"
    hit = match_phase(bar)
    assert hit.name == "weights_begin" and hit.line == "[2026-11-30 03:25:30] Load weight begin. avail mem=139.13 GB"
    # a phase line before any timestamp sits at offset 0; later ones count from the first stamp
    tl = phase_timeline(["Load weight begin. avail mem=1.00 GB",
                         "[2026-11-30 03:25:30] Load weight end. elapsed=1.00 s, type=X, avail mem=1.00 GB, "
                         "mem usage=0.1 GB.",
                         "[2026-11-30 03:25:42] The server is fired up and ready to roll!"])
    assert [(e.name, e.offset_s) for e in tl] == [("weights_begin", 0.0), ("weights_end", 0.0), ("ready", 12.0)]
    assert match_phase("The server is fired up and ready to roll!", "reference").name == "ready"
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\rretrying"
    assert classify([oom], last_phase="cuda_graph_begin", was_ready=False).line == oom.split("\r")[0]


def test_classify_log_reads_the_last_200_lines():
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    assert classify_log([oom] + ["filler"] * 199)[0].id == "cuda_oom_weights"
    assert classify_log([oom] + ["filler"] * 200)[0].id == "unknown"
    assert classify_log([oom] + ["filler"] * 200, tail=201)[0].id == "cuda_oom_weights"
    assert classify_log([])[1:] == (None, False)


def test_bounded_repeats_and_lookarounds_in_the_nesting_check():
    compile_safe("(?:a{1,100})+", "f.toml", "regex")  # up to 100 repeats counts as bounded
    for bad in ["(?:a{1,101})+", "(?:(?=a+)x)+", "(?:(?!b*)x)*"]:
        with pytest.raises(ConfigError, match="catastrophic"):
            compile_safe(bad, "f.toml", "regex")


def test_signature_match_as_dict():
    m = classify(["torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."],
                 last_phase="ready", was_ready=True)
    d = m.as_dict()
    assert d == {"id": "cuda_oom_serving", "title": "CUDA out of memory while serving", "hint": m.hint,
                 "groups": {"tried_to_allocate": "2.00 GiB"},
                 "line": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
                 "source": m.source, "phase": "serving"}
    assert m.hint.startswith("activation memory outgrew") and m.source.endswith("signatures.toml")
    d["groups"]["x"] = "y"
    assert "x" not in m.groups  # a copy


def test_phase_marks_count_a_repeated_phase_at_its_last_occurrence():
    """One rule for `import log` and `compare` (issue 22's noticed defect): the target's and then the
    draft's `weights_end` — the phase counts when the boot has done it for everything it loads; an offset
    of None (a line before any timestamp) is skipped, not counted."""
    from dynocell.engine.rules import phase_marks

    pairs = [("weights_begin", 1.0), ("weights_end", 2.5), ("weights_begin", 2.6), ("weights_end", 3.25),
             ("ready", None), ("cuda_graph_end", 9.0), ("cuda_graph_end", 11.5)]
    assert phase_marks(pairs) == {"weights_begin": 2.6, "weights_end": 3.25, "cuda_graph_end": 11.5}
    assert phase_marks([]) == {}
