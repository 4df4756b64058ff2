"""Web token labels are bounded and printable (left-over defects, item 2).

``dynocell web token create --label …`` refuses a label over 64 characters or with a control
character (an ``Error:`` naming ``--label``; nothing stored), and ``dynocell web token list``
prints a label made before this check (a row written straight through db/web) cut and
through :func:`dynocell.text.printable`: no escape sequence reaches the terminal.
"""

from __future__ import annotations

import pytest

from tests.test_bad_inputs import cli


@pytest.mark.parametrize("label, says", [("x" * 5000, "5000 characters"), ("a" * 65, "65 characters"),
                                         ("ok\x1b]0;pwned\x07", "control character 0x1b"),
                                         ("tab\there", "control character 0x09"),
                                         ("line\nbreak", "control character 0x0a")],
                         ids=["5000-chars", "65-chars", "osc-escape", "tab", "newline"])
def test_create_refuses_long_or_control_labels(isolated_home, label, says):
    code, out, err = cli("web", "token", "create", "--label", label)
    assert code == 2, (code, out, err)
    assert err.startswith("Error: --label: ") and says in err and "hint:" in err
    assert "dcl_" not in out and "x" * 100 not in err and "\x1b" not in err
    code, out, _ = cli("web", "token", "list")
    assert code == 0 and out.startswith("no web tokens"), out


def test_create_keeps_a_fair_label(isolated_home):
    code, out, _ = cli("web", "token", "create", "--label", "  alice@ci é " + "y" * 40 + "  ")
    assert code == 0 and out.strip()
    code, out, _ = cli("web", "token", "list")
    assert code == 0 and "alice@ci é " + "y" * 40 in out


def test_list_prints_an_old_hostile_label_cut_and_printable(isolated_home):
    from dynocell.db import web as dbweb
    from dynocell.runbooks.cell import open_cell
    from dynocell.settings import load_settings

    cell = open_cell(load_settings())
    dbweb.create_token(cell.store, "\x1b]0;pwned\x07\x1b[2J" + "z" * 5000)  # stored before labels were checked
    cell.store.engine.dispose()
    code, out, _ = cli("web", "token", "list")
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    assert all(len(line) <= 120 for line in out.splitlines()), out[:300]
