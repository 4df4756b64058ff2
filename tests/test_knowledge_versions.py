"""Runbook knowledge exact at the engine versions dynocell runs (issue 36).

Version-exact citations in an entry's ``sources`` (``{package, file, versions, at, quote}``) and their lint;
the doctor advice the corrected claims feed: SGLang's post-load barrier (a fixed 480 s, not
``--dist-timeout``), SGLang's engine τ counting the prefill's token (≈ 1/L), id 0 in byte-level BPE
vocabularies. The quotes themselves are checked against the released wheels by
``benchmarks/knowledge_sources.py`` (not in CI: the vLLM wheel is large).
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from dynocell.engine import breakeven as be
from dynocell.runbooks.doctor import diagnose_inputs, inputs_from_dict, load_thresholds
from dynocell.runbooks.doctor_runtime import rule_nccl_startup_skew
from dynocell.runbooks.knowledge import BUNDLED_DIR, bundled_knowledge, parse_entry
from dynocell.runbooks.knowledge.entry import REPO_SOURCE_RE
from dynocell.runbooks.knowledge.sweep import load_corpus, sweep, unlisted_logs

ENTRY = """---
slug: cited-law
title: A law with a version-exact citation
kind: law
engines: {{sglang: ">=0.5.14,<0.6"}}
sources:
  - {source}
evidence:
  - {{fact: "x", source: 1}}
fix: ["try this"]
---
body
"""
GOOD = ('{package: sglang, file: sglang/srt/arg_groups/speculative_hook.py, versions: ">=0.5.14,<0.6", '
        'at: ["0.5.14", "0.5.17"], quote: "always runs the V2 worker."}')


def test_a_citation_is_parsed_into_its_fields_and_shown_as_one_line():
    entry, errs = parse_entry(ENTRY.format(source=GOOD), "x.md", "operator")
    assert errs == []
    (c,) = entry.citations
    assert (c.package, c.file, c.versions, c.at, c.quotes) == (
        "sglang", "sglang/srt/arg_groups/speculative_hook.py", ">=0.5.14,<0.6", ("0.5.14", "0.5.17"),
        ("always runs the V2 worker.",))
    assert entry.sources == ('sglang sglang/srt/arg_groups/speculative_hook.py @ 0.5.14, 0.5.17 (>=0.5.14,<0.6): '
                             '"always runs the V2 worker."',)


def test_lint_refuses_a_citation_outside_its_range_or_without_a_quote():
    cases = {
        "sources[0].at": GOOD.replace('"0.5.14", "0.5.17"', '"0.5.10"'),   # read outside the stated range
        "sources[0].versions": GOOD.replace('">=0.5.14,<0.6"', '"*"'),     # no range stated
        "sources[0].quote": GOOD.replace('"always runs the V2 worker."', '""'),
        "sources[0].file": GOOD.replace("sglang/srt/arg_groups/speculative_hook.py", "../etc/passwd.py"),
        "sources[0].package": GOOD.replace("package: sglang", "package: torch"),
        "sources[0].commit": GOOD.replace("}", ", commit: abc}"),
    }
    for field, src in cases.items():
        entry, errs = parse_entry(ENTRY.format(source=src), "x.md", "operator")
        assert entry is None and field in [e.field for e in errs], (field, [str(e) for e in errs])


def test_bundled_citations_are_split_where_behaviour_changed():
    """spec v2: the 0.5.10 server_args behaviour and the ≥ 0.5.14 speculative_hook one are cited apart, and the
    entry (a trap only before 0.5.14) no longer applies to the versions dynocell runs."""
    kn = bundled_knowledge()
    e = kn.get("spec-v2-overlap-topk-one")
    assert {(c.file, c.versions) for c in e.citations} == {
        ("sglang/srt/server_args.py", ">=0.5.10,<0.5.14"),
        ("sglang/srt/arg_groups/speculative_hook.py", ">=0.5.14,<0.6")}
    assert e.engines == {"sglang": ">=0.5.10,<0.5.14"}
    cited = [c for x in kn.entries.values() for c in x.citations]
    assert len(cited) >= 20 and all(set(c.at) for c in cited)


def test_no_entry_recommends_a_key_vllm_refuses():
    """vLLM ≥ 0.26 forbids extra fields in --speculative-config: `disable_by_batch_size` fails the boot."""
    for e in bundled_knowledge().entries.values():
        assert all("disable_by_batch_size" not in f or "refuses" in f for f in e.fix), e.slug


def test_sglang_load_barrier_advice_is_prestaging_not_dist_timeout():
    th = load_thresholds()
    wait = inputs_from_dict({"curves": [], "log": {"rank_load_wait": {"line": 41, "rank": 0},
                                                   "shard_load_s": 1950.0}})
    (f,) = rule_nccl_startup_skew(wait, th)
    assert "480 s" in f.message and "does not change" in f.message and "Pre-stage" in f.message
    assert "raise" not in f.message
    # An NCCL watchdog timeout before ready with skewed loading: the process-group timeout is a real knob.
    nccl = inputs_from_dict({"curves": [], "log": {
        "nccl": [{"seqnum": 1, "op": "ALLREDUCE", "rank": 1, "timeout_ms": 600000, "ran_ms": 600100}],
        "weight_load_s": {"node0": 60.0, "node1": 900.0}}})
    (g,) = rule_nccl_startup_skew(nccl, th)
    assert "--dist-timeout" in g.message and "480" not in g.message


def test_engine_tau_from_meta_info_leaves_the_prefill_token_out():
    """SGLang: completion_tokens = 1 (sampled by the prefill) + the tokens of every verify step; the histogram
    counts only the latter. 3 requests of 32 tokens, 10 verify steps each, 2.1 tokens per step."""
    metas = [{"completion_tokens": 32, "spec_verify_ct": 10}] * 3
    tau, source = be.engine_tau(None, None, None, metas)
    assert source == be.META_TAU_SOURCE and tau == pytest.approx(3.1)
    # SGLang's own ratio is higher by requests / verify steps = 0.1: 1/L = 1/32 relative
    assert 96 / 30 - tau == pytest.approx(0.1) and (96 / 30 - tau) / (96 / 30) == pytest.approx(1 / 32)


def _mismatch_inputs(engine_tau: float, requests: int | None) -> dict:
    curve = {"text_class": "prose", "histogram": [10, 70, 20], "engine_tau": engine_tau,
             "engine_source": be.META_TAU_SOURCE_WITH_PREFILL}
    if requests:
        curve["requests"] = [{"index": i} for i in range(requests)]
    return {"curves": [curve]}


def test_definitions_mismatch_compares_like_with_like():
    """Stored before issue 36: engine τ = histogram τ (2.1 over 100 steps) + 5 requests' prefill tokens / 100 —
    2.4 % apart, which the 2 % threshold used to report as a definitions mismatch."""
    stored = 2.1 + 5 / 100
    # with the class's request records the prefill tokens are taken off: nothing to report
    assert [f for f in diagnose_inputs(inputs_from_dict(_mismatch_inputs(stored, 5)))
            if f.rule == "definitions_mismatch"] == []
    # without them: the convention is named, at info, and the counters are not made suspect
    fs = [f for f in diagnose_inputs(inputs_from_dict(_mismatch_inputs(stored, None)))
          if f.rule == "definitions_mismatch"]
    assert [f.severity for f in fs] == ["info"] and "prefill" in fs[0].message
    # a real disagreement (+0.4, more than one token per 8 verify steps) is still a warning
    fs = [f for f in diagnose_inputs(inputs_from_dict(_mismatch_inputs(2.5, None)))
          if f.rule == "definitions_mismatch"]
    assert [f.severity for f in fs] == ["warn"]


def test_corrupt_output_names_id_0_as_a_printable_byte_in_bpe_vocabularies():
    ids = [[5, 9, 14, *[0] * 12, 7]]
    fs = diagnose_inputs(inputs_from_dict({"curves": [{"text_class": "all", "histogram": [5, 10, 20, 60]}],
                                           "output_ids": ids}))
    f = next(f for f in fs if f.rule == "corrupt_output")
    assert "byte-level BPE" in f.evidence["why"] and "padding" not in f.evidence["why"]


# ------------------------------------------------------------------ the sweep over real engine logs

DATA = Path(__file__).parent / "data"
MANIFEST = DATA / "engine_logs.toml"


def test_lint_sweep_over_every_real_engine_log_is_clean():
    """runbook lint's two-way sweep over tests/data: no bundled entry's log regex matches a healthy boot's
    log, and each matches a real line of the versions it names (or is exempted with a source)."""
    corpus = load_corpus(MANIFEST)
    assert len(corpus.logs) >= 100 and unlisted_logs(corpus) == []
    assert sweep(bundled_knowledge().entries.values(), corpus) == []


def test_sweep_refuses_a_regex_that_matches_a_benign_line_and_one_that_matches_nothing(tmp_path):
    """The old import-error regex matched SGLang 0.5.17's benign openai_harmony WARNING on every boot."""
    corpus = load_corpus(MANIFEST)
    e = bundled_knowledge().get("import-error-in-engine-build")
    old = replace(e, signatures={**e.signatures, "log": ["(?:ModuleNotFoundError|ImportError): "]})
    (err,) = sweep([old], corpus)
    assert err.field == "signatures.log[0]" and "healthy sglang 0.5.17 boot" in err.message
    assert "openai_harmony" in err.message
    never = replace(e, signatures={**e.signatures, "log": ["wombat fell over"]})
    (err,) = sweep([never], corpus)
    assert "matches no line of the real logs" in err.message


def test_cli_lint_with_logs_reports_a_log_the_manifest_does_not_list(settings, tmp_path):
    """`dynocell runbook lint --logs` fails on an unlisted log file under the manifest's folder."""
    import shutil

    from typer.testing import CliRunner

    from dynocell.cli.common import state
    from tests.test_knowledge import _app

    (tmp_path / "sglang-0.5.17").mkdir()
    shutil.copy(DATA / "sglang-0.5.17" / "A.server.log", tmp_path / "sglang-0.5.17" / "A.server.log")
    (tmp_path / "stray.log").write_text("hello\n")
    manifest = tmp_path / "engine_logs.toml"
    manifest.write_text(
        '[[logs]]\nglob = "sglang-0.5.17/*.server.log"\nengine = "sglang"\nversion = "0.5.17"\nhealthy = true\n')
    entry = str(BUNDLED_DIR / "import-error-in-engine-build.md")
    state.settings, state.cell = settings, None
    try:
        r = CliRunner().invoke(_app(), ["runbook", "lint", entry, "--logs", str(manifest)])
        assert r.exit_code == 1 and "stray.log" in r.output, r.output
        (tmp_path / "stray.log").unlink()
        r = CliRunner().invoke(_app(), ["runbook", "lint", entry, "--logs", str(manifest)])
        # the entry's regexes match no line of these logs: the sweep's other half speaks
        assert r.exit_code == 1 and "matches no line of the real logs" in r.output, r.output
    finally:
        state.settings, state.cell = None, None


# ------------------------------------------------------------------ every citation inside the repository

ROOT = Path(__file__).resolve().parent.parent
#: A path outside the checkout: the shared steering folder, an absolute /work path, or ../ out of the tree.
OUTSIDE = re.compile(r"(?<![\w-])(?:\.\./)+\w|(?<![\w/-])(?:/work/|shared/(?:gpu|seeds|DESIGN))")
BARE_DESIGN = re.compile(r"(?<![\w/.-])DESIGN\.md")
SECTION = re.compile(r'docs/DESIGN\.md,? "([^"]+)"')


def _product_files() -> list[Path]:
    """The product's text files: the package, docs (docs/h200 holds copies of the H200 host's notes, quoted
    as they were written there) and the README."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    files += [p for p in sorted((ROOT / "dynocell").rglob("*")) if p.suffix in (".py", ".md", ".toml", ".html")]
    return [p for p in files if "h200" not in p.relative_to(ROOT).parts and "__pycache__" not in p.parts]


def test_no_citation_points_outside_the_repository():
    bad = []
    for p in _product_files():
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            if OUTSIDE.search(line) or BARE_DESIGN.search(line):
                bad.append(f"{p.relative_to(ROOT)}:{n}: {line.strip()[:120]}")
    assert bad == []


def test_repository_sources_and_design_sections_exist():
    """An entry's repository source names an existing file or folder; a docs/DESIGN.md "section" a heading."""
    for e in bundled_knowledge().entries.values():
        for s in e.sources:
            m = REPO_SOURCE_RE.match(s)
            if m:
                assert (ROOT / m.group(1)).exists(), f"{e.slug}: {s}"
    headings = {line.lstrip("#").strip() for line in (ROOT / "docs" / "DESIGN.md").read_text().splitlines()
                if line.startswith("## ")}
    named = {m.group(1) for p in _product_files() for m in SECTION.finditer(p.read_text(encoding="utf-8"))}
    assert named and named <= headings, named - headings


# ------------------------------------------------------------------ benchmarks/knowledge_sources.py's check


def test_knowledge_sources_check_finds_and_misses_quotes_in_a_wheel(tmp_path):
    """The wheel check reads the cited file from inside the wheel (a zip) of each version in ``at``; a quote
    that is not in it, or a file the wheel lacks, is reported (no download: the wheel is in --wheels)."""
    import zipfile

    from benchmarks.knowledge_sources import check

    wheels = tmp_path / "wheels"
    wheels.mkdir()
    for v, text in (("0.5.14", "x = 1\nalways runs the V2 worker.\n"), ("0.5.17", "x = 1\n")):
        with zipfile.ZipFile(wheels / f"sglang-{v}-py3-none-any.whl", "w") as z:
            z.writestr("sglang/srt/arg_groups/speculative_hook.py", text)
    entries = tmp_path / "entries"
    entries.mkdir()
    (entries / "cited-law.md").write_text(ENTRY.format(source=GOOD))
    rows = check([entries], tmp_path / "cache", [wheels])
    assert [(r[1], r[4]) for r in rows] == [("sglang==0.5.14", "found"), ("sglang==0.5.17", "missing")]
    (entries / "cited-law.md").write_text(ENTRY.format(source=GOOD.replace("speculative_hook.py", "gone.py")))
    assert {r[4] for r in check([entries], tmp_path / "cache", [wheels])} == {"no-file"}
