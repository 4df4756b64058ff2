"""The mutation run's bookkeeping (benchmarks/mutation.py, issue 26): survivors are explained by what they change,
so an entry of the equivalence table keeps naming the same mutant when other code moves; the table parses, names
only modules of the run, and never lists a mutant twice. mutmut itself is not needed here."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def mutation():
    spec = importlib.util.spec_from_file_location("dynocell_bench_mutation", BENCH / "mutation.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    try:
        spec.loader.exec_module(mod)
        yield mod
    finally:
        sys.modules.pop(spec.name, None)


def test_function_of_mutmut_names(mutation):
    f = mutation.function_of
    assert f("dynocell.engine.trace.xǁ_Splitǁfeed__mutmut_32", "dynocell/engine/trace.py") == "_Split.feed"
    assert f("dynocell.engine.verdicts.x__betacf__mutmut_19", "dynocell/engine/verdicts.py") == "_betacf"
    assert f("dynocell.engine.rules.x_compile_safe__mutmut_16", "dynocell/engine/rules/__init__.py") == "compile_safe"
    assert f("dynocell.runbooks.run.breakeven_step.x__breakeven__mutmut_7",
             "dynocell/runbooks/run/breakeven_step.py") == "_breakeven"
    assert f("dynocell.engine.config.xǁEngineConfigǁcanonical_json__mutmut_4",
             "dynocell/engine/config.py") == "EngineConfig.canonical_json"


def test_key_is_the_change_not_the_number(mutation):
    # the same change under two mutmut numbers (the function gained a mutable spot above it) has one key
    change = "if a < b: ⇒ if a <= b:"
    k1 = mutation.mutant_key("dynocell.engine.verdicts.x_compare__mutmut_106", "dynocell/engine/verdicts.py", change)
    k2 = mutation.mutant_key("dynocell.engine.verdicts.x_compare__mutmut_131", "dynocell/engine/verdicts.py", change)
    assert k1 == k2 == "compare: if a < b: ⇒ if a <= b:"


def test_equivalence_table_names_run_modules_and_well_formed_keys(mutation):
    targets = {t.name for t in mutation.TARGETS}
    assert mutation.EQUIVALENT, "the table is empty: every explained survivor would count as a survivor"
    for (module, key), reason in mutation.EQUIVALENT.items():
        assert module in targets, (module, key)
        function, sep, change = key.partition(": ")
        assert sep and function and " ⇒ " in change, key
        assert reason.strip() and "\n" not in reason, key


def test_equivalence_table_errors_name_the_group(mutation, tmp_path):
    bad = tmp_path / "eq.toml"
    bad.write_text('[[equivalent]]\nmodule = "verdicts"\nmutants = ["f: a ⇒ b"]\n', encoding="utf-8")
    with pytest.raises(ValueError, match="group 1 needs module, reason and mutants"):
        mutation.load_equivalent(bad)
    bad.write_text('[[equivalent]]\nmodule = "verdicts"\nreason = "r"\nmutants = ["f: a ⇒ b"]\n'
                   '[[equivalent]]\nmodule = "verdicts"\nreason = "s"\nmutants = ["f:  a ⇒ b"]\n', encoding="utf-8")
    with pytest.raises(ValueError, match="group 2 repeats 'f: a ⇒ b'"):
        mutation.load_equivalent(bad)


def test_explain_and_stale_entries(mutation):
    t = next(t for t in mutation.TARGETS if t.name == "verdicts")
    (module, key), reason = next((k, r) for k, r in mutation.EQUIVALENT.items() if k[0] == "verdicts")
    function, _, change = key.partition(": ")
    name = "dynocell.engine.verdicts.x_" + function + "__mutmut_9999"
    sc = mutation.Score(t, status={name: "survived", "dynocell.engine.verdicts.x_compare__mutmut_1": "killed",
                                   "dynocell.engine.verdicts.x_compare__mutmut_2": "survived"},
                        changes={name: change, "dynocell.engine.verdicts.x_compare__mutmut_2": "x ⇒ y"})
    mutation._explain(sc)
    assert sc.equivalent == {name: reason}
    assert sc.unexplained == ["dynocell.engine.verdicts.x_compare__mutmut_2"]
    assert sc.score == 0.5  # 1 killed of the 2 mutants left once the equivalent one is set aside
    assert key not in mutation.stale_entries(sc)
    assert len(mutation.stale_entries(sc)) == sum(1 for m, _ in mutation.EQUIVALENT if m == "verdicts") - 1
