"""Runbook knowledge: bundled entries, lint, regex safety, selectors, FTS search, override by slug, notes, CLI."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from dynocell.engine.config import load_config, parse_config
from dynocell.errors import UserError
from dynocell.runbooks.knowledge import (
    BUNDLED_DIR, DOCTOR_RULES, bundled_knowledge, knowledge_for, lint_paths, load_knowledge, parse_entry,
    regex_problem, regex_timing_problems, search, selector_matches, version_in_range,
)

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]
SIGNATURE_IDS = ("eagle3_unsupported", "cuda_graph_no_valid_sizes", "oom_graph_capture", "kv_cache_too_small",
                 "port_in_use", "nccl_watchdog_timeout", "model_path_not_found", "unrecognized_argument",
                 "import_error")

GOOD_ENTRY = """---
slug: {slug}
title: {title}
kind: trap
tags: [test]
evidence: ["a number: 42"]
fix: ["try this"]
---
Body text about {body}.
"""


def test_bundled_entries_lint_clean_and_cover_the_topics():
    entries, errors = lint_paths([BUNDLED_DIR])  # timed regex check included
    assert errors == []
    assert len(entries) >= 20
    kn = bundled_knowledge()
    assert len(kn.entries) == len(entries)
    for e in kn.entries.values():
        assert e.evidence and e.fix and e.body.strip()
        assert Path(e.path).name == f"{e.slug}.md"
    for sig in SIGNATURE_IDS:
        assert kn.for_signature(sig), f"no entry for failure signature {sig}"
    import tomllib

    rules_toml = REPO / "dynocell" / "engine" / "rules" / "signatures.toml"
    if rules_toml.is_file():  # every failure signature the engine layer can report resolves to an entry
        for sig in tomllib.loads(rules_toml.read_text())["signature"]:
            assert kn.for_signature(sig["id"]), f"no entry for failure signature {sig['id']}"
    for rule in DOCTOR_RULES:
        assert kn.for_rule(rule), f"no entry for doctor rule {rule}"
    text = " ".join(e.body + " ".join(e.evidence) for e in kn.entries.values())
    for number in ("3.6", "1.05", "1.95", "1.89", "2.78", "4.00", "30 s", "defunct", "3.22", "3.62"):
        assert number in text


def test_lint_broken_entry_names_file_and_fields(tmp_path):
    bad = tmp_path / "broken.md"
    bad.write_text("""---
slug: Bad Slug
title: ""
kind: bogus
tags: [x]
colour: blue
engines: {sglang: "about 0.5"}
signatures:
  log: ["(a+)+$", "([unclosed"]
  rules: [not_a_rule]
applies_to:
  parallel.dcpsize: {gt: 1}
  speculative.algorithm: {within: [EAGLE]}
fix: []
---
body
""")
    entries, errors = lint_paths([bad], timed=False)
    assert entries == []
    fields = {e.field for e in errors}
    assert all(e.path == str(bad) for e in errors)
    for f in ("slug", "title", "kind", "colour", "engines.sglang", "signatures.log[0]", "signatures.log[1]",
              "signatures.rules", "applies_to.parallel.dcpsize", "applies_to.speculative.algorithm.within",
              "evidence", "fix"):
        assert f in fields, f"no error for {f}: {errors}"
    dcp = next(e for e in errors if e.field == "applies_to.parallel.dcpsize")
    assert "parallel.dcp_size" in dcp.message  # did-you-mean
    assert str(dcp).startswith(f"{bad}: applies_to.parallel.dcpsize: ")
    no_fm, errs = parse_entry("just markdown", "x.md")
    assert no_fm is None and errs[0].field is None and "front matter" in errs[0].message


def test_regex_safety():
    assert regex_problem("(?i)address already in use") is None
    assert "nested quantifier" in regex_problem("(a+)+")
    assert "nested quantifier" in regex_problem(r"(\w+\s?)*$")
    assert "compile" in regex_problem("(")
    slow = regex_timing_problems(["(?i)watchdog", "(a|aa)*b"], limit_s=0.2)
    assert list(slow) == ["(a|aa)*b"]


def test_selector_language():
    sel = {"speculative.algorithm": {"in": ["EAGLE", "NEXTN"]}, "parallel.dcp_size": {"gt": 1}}
    good = load_config(DATA / "configs/bisect-good.toml")
    bad = load_config(DATA / "configs/bisect-bad.toml")
    assert not selector_matches(sel, good) and selector_matches(sel, bad)
    assert selector_matches({"any": [{"parallel.pp_size": {"gt": 1}}, {"cuda_graph.disable": False}]}, bad)
    assert selector_matches({"not": {"engine": "reference"}}, bad)
    assert selector_matches({"env.PYTORCH_CUDA_ALLOC_CONF": {"exists": True}}, bad)
    assert not selector_matches({"env.PYTORCH_CUDA_ALLOC_CONF": {"exists": True}}, good)
    assert selector_matches({"speculative.num_drafts": 3}, bad)
    assert not selector_matches({}, bad)  # no applies_to: not a known trap of any config
    assert version_in_range("0.5.17", ">=0.5.10,<0.6") and not version_in_range("0.6.1", ">=0.5.10,<0.6")


def test_known_traps_for_a_config():
    kn = bundled_knowledge()
    bad_cfg = load_config(DATA / "configs/bisect-bad.toml")
    bad = {e.slug for e in kn.for_config(bad_cfg)}
    # vLLM's rules (draft parallel config, capture sizes in tokens) are not SGLang traps (issue 25).
    assert not {"draft-parallel-config-copies-every-size", "cuda-graph-capture-sizes-exceed-spec-width",
                "draft-parallelism-limits"} & bad
    assert "zero-acceptance-past-length" in bad
    pp2 = bad_cfg.model_copy(update={"parallel": bad_cfg.parallel.model_copy(update={"pp_size": 2})})
    assert "captured-graph-static-buffers-refresh" in {e.slug for e in kn.for_config(pp2)}
    deepep = bad_cfg.model_copy(update={"extra_args": ("--moe-a2a-backend", "deepep")})
    assert "deepep-dispatch-cap-covers-verify-width" in {e.slug for e in kn.for_config(deepep)}
    good = {e.slug for e in kn.for_config(load_config(DATA / "configs/bisect-good.toml"), engine_version="0.5.17")}
    assert "captured-graph-static-buffers-refresh" not in good  # graphs disabled there
    plain = {e.slug for e in kn.for_config(parse_config('engine = "reference"\nmodel_path = "dynocell:tiny"\n'))}
    assert not any("speculat" in s or "draft" in s for s in plain)


def test_search_ranks_the_obvious_entry_first(backend_settings):
    """Same ranking on both stores: SQLite FTS5 bm25 and PostgreSQL tsvector ts_rank_cd."""
    from dynocell.runbooks.cell import open_cell

    settings = backend_settings
    cell = open_cell(settings)
    kn = knowledge_for(settings)
    cases = {
        "cuda graph capture sizes speculative width": "cuda-graph-capture-sizes-exceed-spec-width",
        "draft parallel config context parallel dcp": "draft-parallel-config-copies-every-size",
        "zombie defunct detokenizer": "zombie-children-after-kill",
        "tool call parser 400": "tool-choice-needs-parser-flags",
        "expandable segments fragmentation": "expandable-segments-graph-capture",
    }
    for query, slug in cases.items():
        hits = search(cell.store, kn, query)
        assert hits and hits[0].slug == slug, (query, [h.slug for h in hits[:3]])
    # All words by default: words that never occur together find nothing (no silent OR fallback, issue 39);
    # any-word search finds them; FTS syntax is inert.
    assert search(cell.store, kn, 'watchdog AND "unbalanced NEAR(') == []
    assert search(cell.store, kn, 'watchdog AND "unbalanced NEAR(', any_word=True)
    with pytest.raises(UserError, match="empty search query"):
        search(cell.store, kn, "  ")


def test_search_snippets_show_evidence_facts_not_their_python_repr(backend_settings):
    """Evidence items are ``{fact, source}`` maps: the index holds the fact, so a snippet
    never reads ``{'fact': "vLLM [accepts] …``."""
    from dynocell.runbooks.cell import open_cell

    cell = open_cell(backend_settings)
    kn = knowledge_for(backend_settings)
    hits = search(cell.store, kn, "draft tensor parallel size accepts")
    assert hits
    for h in hits:
        assert "{'fact'" not in h.snippet and "'source'" not in h.snippet, h


def test_operator_entry_overrides_bundled_by_slug(backend_settings, tmp_path):
    from dynocell.runbooks.cell import open_cell

    settings = backend_settings
    from dynocell.runbooks.knowledge import add_entry_file, operator_dir

    src = tmp_path / "mine.md"
    src.write_text(GOOD_ENTRY.format(slug="port-in-use", title="Port clash on shared hosts",
                                     body="the fleet's quokka allocator"))
    entry, dest, overrides = add_entry_file(settings, src)
    assert overrides and dest == operator_dir(settings) / "port-in-use.md"
    kn = knowledge_for(settings)
    assert kn.get("port-in-use").origin == "operator" and kn.get("port-in-use").title == "Port clash on shared hosts"
    assert kn.overridden == ["port-in-use"]
    assert len(kn.entries) == len(bundled_knowledge().entries)
    cell = open_cell(settings)
    hits = search(cell.store, kn, "quokka")
    assert [h.slug for h in hits] == ["port-in-use"]
    # A new operator slug adds an entry; the index follows removals.
    (operator_dir(settings) / "extra.md").write_text(GOOD_ENTRY.format(slug="extra-trap", title="Extra", body="wombat"))
    assert search(cell.store, knowledge_for(settings), "wombat")[0].slug == "extra-trap"
    (operator_dir(settings) / "extra.md").unlink()
    assert search(cell.store, knowledge_for(settings), "wombat") == []


def test_load_reports_duplicate_slug(tmp_path):
    for name in ("a.md", "b.md"):
        (tmp_path / name).write_text(GOOD_ENTRY.format(slug="same-slug", title=name, body="x"))
    kn = load_knowledge(tmp_path, bundled=tmp_path / "none")
    assert list(kn.entries) == ["same-slug"]
    assert kn.errors and kn.errors[0].field == "slug" and "duplicate" in kn.errors[0].message


def _app() -> typer.Typer:
    from dynocell.cli.commands.runbook import register

    app = typer.Typer()

    @app.callback()
    def _root() -> None:
        pass

    register(app)
    return app


def test_cli_lint_search_show_note(settings, tmp_path):
    from dynocell.cli.common import state

    state.settings, state.cell = settings, None
    try:
        runner = CliRunner()
        app = _app()
        broken = tmp_path / "broken.md"
        broken.write_text("---\nslug: x-y\nkind: law\n---\nbody\n")
        r = runner.invoke(app, ["runbook", "lint", str(broken)])
        assert r.exit_code == 1 and f"{broken}: title:" in r.output and f"{broken}: evidence:" in r.output
        r = runner.invoke(app, ["runbook", "search", "pipeline", "stage", "graph", "eager"])
        assert r.exit_code == 0 and "bisect-graph-vs-eager-per-stage" in r.output.splitlines()[0]
        r = runner.invoke(app, ["runbook", "show", "zombie-children"])
        assert r.exit_code == 0 and "defunct" in r.output
        r = runner.invoke(app, ["note", "entry:zombie-children-after-kill", "also seen after TP=2 runs"])
        assert r.exit_code == 0, r.output
        r = runner.invoke(app, ["note", "zombie-children-after-kill", "--json"])
        assert r.exit_code == 0 and "also seen after TP=2 runs" in r.output
        r = runner.invoke(app, ["runbook", "show", "zombie-children-after-kill"])
        assert "also seen after TP=2 runs" in r.output
        r = runner.invoke(app, ["note", "nothing-like-this", "x"])
        assert r.exit_code != 0
    finally:
        state.settings, state.cell = None, None


def test_cli_console_script_runbook_lint(cli_env):
    """Through the real console script: the root app registers the runbook commands."""
    import subprocess
    import sys

    from dynocell.cli import app as root

    assert "dynocell.cli.commands.runbook" in root.COMMAND_MODULES
    r = subprocess.run([sys.executable, "-m", "dynocell", "runbook", "lint"], env=cli_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
