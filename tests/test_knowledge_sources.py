"""Runbook knowledge carries its sources (issue 25): format, lint refusals, and numbers checked against the reports.

Every bundled entry names ``sources`` and ``engines`` with version ranges and marks
its claims as facts with a source; ``dynocell runbook lint`` refuses a fact without a
source and signatures that match none of the entry's ``examples``; a number quoted
in a fact sourced only by field reports appears in those reports (copied unchanged
into ``tests/data/field_reports/`` from the project's shared seeds).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dynocell.runbooks.knowledge import (
    BUNDLED_DIR, SOURCE_RE, bundled_knowledge, lint_paths, load_knowledge, parse_entry,
)

REPORTS = Path(__file__).parent / "data" / "field_reports"
NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])|(?<![\w.,])\d{1,3}(?:,\d{3})+(?![\w,])")

ENTRY = """---
slug: sourced-trap
title: A trap with a sourced fact
kind: trap
engines: {{vllm: ">=0.10"}}
{signatures}sources: ["vllm vllm/config/speculative.py @ f19b16d"]
evidence:
{evidence}
fix: ["try this"]
---
body
"""


def _report(num: str) -> str:
    return next(REPORTS.glob(f"{num}_*.txt")).read_text(encoding="utf-8")


def test_every_bundled_entry_has_sources_engine_ranges_and_sourced_facts():
    kn = bundled_knowledge()
    assert len(kn.entries) >= 41
    for e in kn.entries.values():
        assert e.sources, f"{e.slug}: no sources"
        assert all(SOURCE_RE.match(s) for s in e.sources), e.slug
        assert e.engines, f"{e.slug}: no engines"
        for name, spec in e.engines.items():
            if name != "reference":
                assert spec.strip() not in ("", "*"), f"{e.slug}: engines.{name} needs a version range"
        assert e.facts, f"{e.slug}: no claim marked as fact"
        assert all(1 <= i <= len(e.sources) for _, refs in e.facts for i in refs), e.slug
        cited = {i for _, refs in e.facts for i in refs}
        assert cited == set(range(1, len(e.sources) + 1)), f"{e.slug}: a source no fact cites"


def test_numbers_in_report_sourced_facts_come_from_the_reports():
    checked = 0
    for e in bundled_knowledge().entries.values():
        for text, refs in e.facts:
            srcs = [e.sources[i - 1] for i in refs]
            m = [re.match(r"field report (\d{3})", s) for s in srcs]
            if not all(m):
                continue
            corpus = " ".join(_report(x.group(1)) for x in m).replace("\\", "")
            for num in NUMBER.findall(text):
                assert num in corpus, f"{e.slug}: {num} is not in {srcs}: {text[:100]}…"
                checked += 1
    assert checked >= 40


def test_lint_refuses_a_fact_without_a_source(tmp_path):
    text = ENTRY.format(signatures="", evidence='  - {fact: "MTP1 ~0.75 survived"}\n'
                                               '  - {fact: "decode 22-23 tok/s", source: 3}\n'
                                               '  - "reasoning needs no source"\n')
    entry, errs = parse_entry(text, "x.md", "operator")
    assert entry is None
    fields = [e.field for e in errs]
    assert "evidence[0].source" in fields and "evidence[1].source" in fields
    assert "evidence[2]" not in " ".join(str(f) for f in fields)
    ok = ENTRY.format(signatures="", evidence='  - {fact: "draft TP 1 or the target TP", source: 1}\n')
    entry, errs = parse_entry(ok, "x.md", "operator")
    assert errs == [] and entry.facts == (("draft TP 1 or the target TP", (1,)),)
    assert entry.evidence == ("draft TP 1 or the target TP [1]",)


def test_lint_refuses_a_source_of_no_known_form(tmp_path):
    bad = ENTRY.format(signatures="", evidence='  - {fact: "x", source: 1}\n').replace(
        '"vllm vllm/config/speculative.py @ f19b16d"', '"somebody on a forum"')
    _, errs = parse_entry(bad, "x.md", "operator")
    assert [e.field for e in errs] == ["sources[0]"]


def test_lint_refuses_signatures_that_match_none_of_the_examples(tmp_path):
    sig = ('signatures:\n  log: ["(?i)no valid cuda graph sizes"]\n'
           'examples: ["ValueError: No valid cudagraph sizes after rounding to multiple of 6 (…)"]\n')
    p = tmp_path / "e.md"
    p.write_text(ENTRY.format(signatures=sig, evidence='  - {fact: "x", source: 1}\n'))
    entries, errs = lint_paths([p])
    assert entries == [] and [e.field for e in errs] == ["signatures.log[0]"]
    p.write_text(ENTRY.format(signatures=sig.replace("cuda graph", "cuda ?graph"),
                              evidence='  - {fact: "x", source: 1}\n'))
    assert lint_paths([p]) == ([lint_paths([p])[0][0]], [])
    # Failure-signature ids: some example must be matched by one of the named rules.
    ids = 'signatures:\n  ids: [port_in_use]\nexamples: ["Port 26050 is already in use, trying port 26051"]\n'
    p.write_text(ENTRY.format(signatures=ids, evidence='  - {fact: "x", source: 1}\n'))
    entries, errs = lint_paths([p])
    assert entries == [] and [e.field for e in errs] == ["signatures.ids"]
    # Signatures without examples are refused too; the operator directory leaves such a file out.
    p.write_text(ENTRY.format(signatures='signatures:\n  log: ["wombat"]\n', evidence='  - {fact: "x", source: 1}\n'))
    assert [e.field for e in lint_paths([p])[1]] == ["examples"]
    kn = load_knowledge(tmp_path, bundled=tmp_path / "none")
    assert kn.entries == {} and kn.errors and kn.errors[0].field == "examples"


def test_bundled_directory_lints_clean_through_the_cli_path():
    entries, errors = lint_paths([BUNDLED_DIR])
    assert errors == [] and len(entries) == len(bundled_knowledge().entries)


@pytest.mark.parametrize("slug,engine", [
    ("draft-parallel-config-copies-every-size", "vllm"),
    ("cuda-graph-capture-sizes-exceed-spec-width", "vllm"),
    ("deepep-dispatch-cap-covers-verify-width", "sglang"),
    ("kv-cache-too-small", "sglang"),
])
def test_engine_scoping_of_the_rewritten_entries(slug, engine):
    e = bundled_knowledge().get(slug)
    assert engine in e.engines
    if slug in ("draft-parallel-config-copies-every-size", "cuda-graph-capture-sizes-exceed-spec-width"):
        assert "sglang" not in e.engines  # vLLM behaviour, not SGLang's (issue 25)


def test_faces_show_an_entrys_sources(tmp_path):
    """The web entry page and `dynocell runbook show` list the sources (plain text, escaped)."""

    from dynocell.runbooks.views import open_view_cell
    from dynocell.settings import load_settings
    from dynocell.web.app import create_app
    from tests.weblogin import LAUNCH, logged_in

    settings = load_settings(home=tmp_path / "home", poll_interval_s=1.0)
    app = create_app(settings, cell=open_view_cell(settings), launch_token=LAUNCH)
    with logged_in(app) as c:
        page = c.get("/runbooks/draft-parallel-config-copies-every-size")
    assert page.status_code == 200
    assert ("vllm vllm/config/speculative.py @ 0.26.0 (&gt;=0.26,&lt;0.27): &#34;def create_draft_parallel_config(&#34;"
            in page.text and "field report 001" in page.text)
    assert "0.90 / 0.79 / 0.67" in page.text  # a fact, with its source numbers
