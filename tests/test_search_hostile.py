"""Hostile runbook searches: huge and repetitive queries, FTS syntax, on a real SQLite store and through
the CLI as a subprocess. Found by the n7check attacker pass: `dynocell runbook search "$(python -c
'print("ab OR " * 15000)')"` ran for more than 4 CPU minutes (FTS5's cost grows with the square of the
number of phrases it is given, and every repeated word was sent again).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from dynocell.db import fulltext


def test_a_query_is_searched_as_its_distinct_words_at_most_max_terms():
    assert fulltext.terms("ab OR " * 15_000) == ["ab", "or"]
    assert fulltext.terms('Acceptance "collapse" acceptance NEAR(collapse') == ["acceptance", "collapse", "near"]
    many = " ".join(f"w{i}" for i in range(10_000))
    assert fulltext.terms(many) == [f"w{i}" for i in range(fulltext.MAX_TERMS)]


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


def test_a_repeated_query_finds_what_the_words_once_find(cell):
    from dynocell.runbooks.knowledge import bundled_knowledge, search

    k = bundled_knowledge()
    once = [h.slug for h in search(cell.store, k, "acceptance collapse")]
    assert once
    assert [h.slug for h in search(cell.store, k, "acceptance collapse " * 3_000)] == once
    assert [h.slug for h in search(cell.store, k, "Acceptance (collapse)* " * 3_000)] == once


def test_the_cli_answers_a_huge_hostile_query(cli_env):
    for query in ("ab OR " * 15_000, '"' * 50_000 + "acceptance", "NEAR(" * 10_000):
        r = subprocess.run([sys.executable, "-m", "dynocell", "runbook", "search", query], env=cli_env,
                           capture_output=True, text=True, timeout=600)
        out = r.stdout + r.stderr
        assert r.returncode in (0, 2) and "Traceback" not in out and "internal error" not in out, out[-2000:]
