"""``doctor_model.differing_knobs``: the one "which knobs differ between two runs" of the doctor.

The configs are examples/tiny.toml (the embedded default) and edits of its TOML, flattened exactly as the
doctor flattens stored configs (``doctor.flatten_config`` of the canonical JSON). Three selections are in use:
knobs only (issue 22's comparisons: default), knobs + env (the acceptance rules' siblings and reference twins:
``include_env``), knobs + build + env (``confounded_comparison``'s build/env candidates and
``tau_up_throughput_down``'s "other build": ``include_patches`` and ``include_env``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dynocell.engine.config import parse_config
from dynocell.runbooks.doctor import flatten_config
from dynocell.runbooks.doctor_model import differing_knobs

TINY = (Path(__file__).parent.parent / "examples" / "tiny.toml").read_text()


def _knobs(text: str) -> dict:
    return flatten_config(parse_config(text, "tiny.toml").canonical_json())


def _edit(old: str, new: str) -> str:
    assert old in TINY
    return TINY.replace(old, new, 1)


TOP = 'port = 0                              # 0 = pick a free port at boot\n'

#: (case, edited TOML, expected with default / include_env / include_patches + include_env)
CASES = [
    ("same config", TINY, [], [], []),
    ("meta name only", _edit('name = "tiny"', 'name = "other"'), [], [], []),
    ("place: host and port", _edit('host = "127.0.0.1"\nport = 0', 'host = "0.0.0.0"\nport = 30000'), [], [], []),
    ("place: served_model_name", _edit(TOP, TOP + 'served_model_name = "m"\n'), [], [], []),
    ("one knob", _edit("num_steps = 3", "num_steps = 2"),
     ["speculative.num_steps"], ["speculative.num_steps"], ["speculative.num_steps"]),
    ("parallel size", _edit(TOP, TOP + "[parallel]\ntp_size = 2\n"),
     ["parallel.tp_size"], ["parallel.tp_size"], ["parallel.tp_size"]),
    ("env only", _edit(TOP, TOP + '[env]\nSGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH = "1"\n'),
     [], ["env.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"], ["env.SGLANG_DISABLE_DRAFT_EXTEND_CUDA_GRAPH"]),
    ("build only", _edit(TOP, TOP + 'patches = ["fix-verify.patch"]\n'), [], [], ["patches"]),
    ("sorted, place left out", _edit('host = "127.0.0.1"', 'host = "::1"').replace("num_steps = 3", "num_steps = 2")
     .replace("eagle_topk = 1", "eagle_topk = 2").replace(TOP, TOP + 'patches = ["p.patch"]\n[env]\nA = "1"\n'),
     ["speculative.eagle_topk", "speculative.num_steps"],
     ["env.A", "speculative.eagle_topk", "speculative.num_steps"],
     ["env.A", "patches", "speculative.eagle_topk", "speculative.num_steps"]),
]


@pytest.mark.parametrize(("case", "text", "knobs_only", "with_env", "with_build_env"), CASES,
                         ids=[c[0] for c in CASES])
def test_differing_knobs_table(case, text, knobs_only, with_env, with_build_env):
    a, b = _knobs(TINY), _knobs(text)
    assert differing_knobs(a, b) == knobs_only
    assert differing_knobs(a, b, include_env=True) == with_env
    assert differing_knobs(a, b, include_patches=True, include_env=True) == with_build_env
    # symmetric: the order of the two runs never changes the answer
    assert differing_knobs(b, a, include_patches=True, include_env=True) == with_build_env
    # patches alone, without env
    assert differing_knobs(a, b, include_patches=True) == [k for k in with_build_env if not k.startswith("env.")]


def test_field_absent_on_one_side_differs_unless_none():
    a = _knobs(TINY)
    b = dict(a, **{"serving.spec_v2": True})
    assert differing_knobs(a, b) == ["serving.spec_v2"]
    assert differing_knobs(a, dict(a, **{"serving.spec_v2": None})) == []
