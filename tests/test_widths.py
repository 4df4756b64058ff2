"""Reports that read in any terminal (issue 20, item 2): no number or word is ever split.

Renders with rich ``Console(width=…)`` at 80, 100, 120 and 160 columns: the run report of
a real recorded run (tests/data/stores/real-run), its profile split lines, the doctor's
findings (long runbook slugs) and an experiment's verdict tables. Every whitespace-separated
token of every table cell and header must appear whole in the output, and no line may be
wider than the console. ``COLUMNS`` is honoured when stdout is piped.

Also (item 4) on the same recorded store: boot phases say whose they are (target vs draft),
and a stopped boot never shows a healthy light.
"""

from __future__ import annotations

import importlib.util
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from rich.text import Text

from dynocell.runbooks.views import percentile_shown

from dynocell.cli.fit import FitTable
from dynocell.cli.render import SplitLines, run_report

WIDTHS = (80, 100, 120, 160)
REAL_RUN = Path(__file__).parent / "data" / "stores" / "real-run"


def render(items, width: int) -> str:
    c = Console(width=width, file=io.StringIO(), color_system=None, legacy_windows=False)
    for it in items:
        c.print(it)
    return c.file.getvalue()


def tokens_of(items) -> set[str]:
    """Every word of every FitTable header and cell among ``items``."""
    words: set[str] = set()
    for it in items:
        if isinstance(it, FitTable):
            for cell in [*it.headers, *(c for r in it.rows for c in r)]:
                words.update((cell.plain if isinstance(cell, Text) else str(cell)).split())
    return words


def assert_no_split(items, width: int) -> str:
    text = render(items, width)
    lines = text.splitlines()
    assert all(len(line) <= width for line in lines), max(lines, key=len)
    # A word that is whole in the output sits on one line (a split one is in two halves).
    missing = sorted(w for w in tokens_of(items) if not any(w in line for line in lines))
    assert not missing, f"split at {width} columns: {missing[:10]}\n{text}"
    return text


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(detail, boot) of the main run in the recorded real-run store."""
    spec = importlib.util.spec_from_file_location("store_record", REAL_RUN.parent / "record.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    home = tmp_path_factory.mktemp("widths-home")
    mod.install(REAL_RUN, home)
    mp = pytest.MonkeyPatch()
    mp.setenv("DYNOCELL_HOME", str(home))
    try:
        from dynocell.runbooks import views
        from dynocell.runbooks.cell import open_cell
        from dynocell.settings import load_settings

        cell = open_cell(load_settings())
        run = next(r for r in views.list_runs(cell, limit=20) if r["kind"] == "run" and r.get("lossless"))
        detail = views.run_detail(cell, run["id"])
        boot = views.boot_detail(cell, detail["run"]["boot_id"])
        boots = views.list_boots(cell, all=True)
        runs = views.list_runs(cell, limit=20)
    finally:
        mp.undo()
    return detail, boot, boots, runs


@pytest.mark.parametrize("width", WIDTHS)
def test_run_report_never_splits_a_number(report, width):
    detail, boot, _, _ = report
    items = run_report(detail, boot)
    assert any(isinstance(i, FitTable) and (i.title or "").startswith("throughput and latency") for i in items)
    text = assert_no_split(items, width)
    # Numbers the issue saw split: every bench level's TTFT triple and throughput are whole.
    for b in detail["bench"]:
        assert f"{b['output_tok_s']:.1f}" in text
        ttft = "/".join(f"{b['ttft_ms'][k]:.1f}" if percentile_shown(q, b["ttft_ms"].get("n")) else "–"
                        for k, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)))
        assert any(ttft in line for line in text.splitlines()), (ttft, width)


@pytest.mark.parametrize("width", WIDTHS)
def test_profile_lines_keep_launches_on_the_line(report, width):
    splits = report[0]["profile"]["splits"]
    text = render([SplitLines(splits)], width)
    lines = text.splitlines()
    assert len(lines) == len(splits), text
    for sp, line in zip(splits, lines):
        assert len(line) <= width and sp["category"] in line and line.endswith("launches"), line


@pytest.mark.parametrize("width", WIDTHS)
def test_doctor_slugs_are_whole(width):
    from dynocell.cli.render import findings_table

    findings = [{"rule": "no_net_win", "severity": "warn",
                 "message": "τ 1.76 but speculative decode is 0.50× plain (margin -50 %): a verify step "
                            "costs 3.53 plain steps, so τ must exceed 3.53 to pay.",
                 "entries": ["high-acceptance-falling-throughput-accounting", "low-precision-prefetch-hurts-decode",
                             "speculation-cannot-pay-pointwise-bound"]}]
    assert_no_split([findings_table(findings)], width)


def _experiment() -> dict:
    comp = {"metric": "output_tok_s", "level": "c=1", "direction": "higher-better", "incumbent_mean": 164.53,
            "arm_mean": 166.1, "rel_diff": 0.0095, "ci_low": -0.031, "ci_high": 0.052, "noise_floor": 0.05,
            "n_incumbent": 3, "n_arm": 3, "verdict": "inconclusive", "more_repeats": 11}
    arm = {"label": "tiny-ngram-steps4", "verdict_label": "inconclusive (+11 runs)",
           "summary": "output tok/s c=1 +1.0 % within the ±5.0 % noise floor", "comparisons": [comp] * 3}
    return {"experiment": {"name": "ngram-steps", "state": "done", "repeats": 3, "workload": None},
            "slots": [{"state": "completed"}] * 6,
            "verdicts": {"incumbent": {"label": "tiny", "runs": ["a", "b", "c"], "gates": []},
                         "method": "Welch t, 95 % CI", "min_floor": 0.05, "arms": [arm, arm]}}


@pytest.mark.parametrize("width", WIDTHS)
def test_experiment_verdicts_are_whole(width):
    from dynocell.cli.commands.experiment import verdict_tables

    items = verdict_tables(_experiment())
    text = assert_no_split(items, width)
    assert "inconclusive (+11 runs)" in text.replace("\n", " ") or "(+11" in text


def test_wide_table_splits_and_narrow_goes_vertical():
    t = FitTable("level", *[f"metric{i} p50/p90/p99 ms" for i in range(6)], title="wide")
    t.add_row("c=1", *["24.3/42.8/53.5"] * 6)
    assert len(t.layouts(80)) >= 2  # split, the level column repeated in each part
    assert all("c=1" in render([x], 80) for x in t.layouts(80))
    vertical = render(t.layouts(20), 20)
    assert "24.3/42.8/53.5" in vertical and "level: c=1" in vertical


def test_columns_is_honoured_when_piped(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DYNOCELL_")}
    env.update(DYNOCELL_HOME=str(tmp_path), COLUMNS="80")
    proc = subprocess.run([sys.executable, "-m", "dynocell", "settings"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines and max(len(line) for line in lines) <= 80, max(lines, key=len)


def test_boot_phases_say_target_or_draft(report, width=100):
    _, boot, _, _ = report
    weights = [e for e in boot["events"] if e["kind"] == "phase" and e["name"] == "weights_begin"]
    assert [e.get("model") for e in weights] == ["target", "draft"], weights
    from dynocell.cli.render import phases_table

    text = render([phases_table(boot)], width)
    assert "weights_begin (target)" in text and "weights_begin (draft)" in text
    assert [p["label"] for p in boot["phases"] if p["name"] == "weights_end"] == ["weights_end (target)",
                                                                                   "weights_end (draft)"]
    from dynocell.web.charts import phase_timeline

    assert "kv_cache_allocated (draft)" in str(phase_timeline(boot["phases"]))


def test_stopped_boot_is_never_shown_healthy(report):
    _, boot, boots, _ = report
    b = boot["boot"]
    assert b["state"] == "stopped" and b["last_health"]["verdict"] == "healthy"
    assert b["health"] is None
    for row in boots:
        if row["state"] != "ready":
            assert row.get("health") is None, row


def test_run_lists_carry_findings_and_verdict(report):
    """Issue 20, item 8: run lists (web runs page, dashboard) show the doctor's rules and the verdict."""
    detail, _, _, runs = report
    row = next(r for r in runs if r["id"] == detail["run"]["id"])
    assert row["finding_rules"] == [f["rule"] for f in detail["findings"]] and row["finding_rules"]
    assert row["verdict"] == "does NOT pay"


def test_tui_phase_lines_show_the_label_within_the_width(report):
    from dynocell.cli.tui.format import phase_lines

    _, boot, _, _ = report
    lines = [ln.plain for ln in phase_lines(boot["phases"], 30)]
    assert any(ln.startswith("weights_begin (draft)") for ln in lines), lines
    unlabelled = [ln.plain for ln in phase_lines([{**p, "label": None} for p in boot["phases"]], 30)]
    assert max(map(len, lines)) <= max(map(len, unlabelled)) + 1, (lines, unlabelled)


def test_row_names_stay_on_one_line_when_the_table_splits(report):
    detail, boot, _, _ = report
    items = run_report(detail, boot)
    bench = next(i for i in items if isinstance(i, FitTable) and (i.title or "").startswith("throughput and latency"))
    text = render([bench], 80)
    for b in detail["bench"]:
        name = f"c={b['concurrency']}" + (f" {b['text_class']}" if b.get("text_class") else "")
        assert any(line.startswith(f" {name} ") for line in text.splitlines()), (name, text)


def test_a_boot_that_never_got_ready_reads_not_ready_in_the_run_header():
    """A run killed mid-boot: the header said ``ready - s``."""
    from dynocell.cli.render import run_header

    run = {"id": "r1", "state": "interrupted", "config_hash": "sha256:ab", "labels": ["tiny"]}
    boot = {"id": "b1", "engine": "reference", "port": 1234, "ready_s": None, "state": "stopped"}
    text = run_header(run, boot).plain
    assert "not ready  [stopped]" in text and "ready - s" not in text
    assert "ready 5.6 s" in run_header(run, {**boot, "ready_s": 5.6}).plain
