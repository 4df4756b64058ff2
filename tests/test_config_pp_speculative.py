"""Issue 24 item 1: SGLang 0.5.17 asserts that pipeline parallelism and speculative decoding do not
go together (``sglang/srt/server_args.py`` @ v0.5.17, ``check_server_args``); dynocell refuses such a
config at parse time, and reads the engine's own assertion in a log as a failure signature."""

from __future__ import annotations

import pytest

from dynocell.engine.config import SGLANG_PP_SPEC_RULE, parse_config
from dynocell.engine.rules import classify_log
from dynocell.errors import ConfigError

SPEC = ('[speculative]\nalgorithm = "EAGLE"\ndraft_model_path = "org/eagle"\nnum_steps = 3\n'
        'eagle_topk = 1\nnum_draft_tokens = 4\n')


def toml(engine: str = "sglang", pp: int = 2, spec: str = SPEC, version: str | None = None) -> str:
    text = f'engine = "{engine}"\nmodel_path = "org/model"\n[parallel]\ntp_size = 4\npp_size = {pp}\n' + spec
    return text + (f'[serving]\nengine_version = "{version}"\n' if version else "")


@pytest.mark.parametrize("version", [None, "sglang 0.5.17", "0.5.17"])
def test_pp_with_speculation_on_sglang_0_5_17_is_refused_naming_the_field_and_the_rule(version):
    with pytest.raises(ConfigError) as err:
        parse_config(toml(version=version), source="pp2-eagle.toml")
    e = err.value
    assert e.field == "parallel.pp_size"
    msg = str(e)
    assert "pp2-eagle.toml: parallel.pp_size" in msg and "'EAGLE'" in msg
    assert SGLANG_PP_SPEC_RULE in msg  # the engine's own words
    assert "patched" in msg  # the field report ran patched code
    assert "pp_size = 1" in e.hint and "engine_version" in e.hint


@pytest.mark.parametrize("text", [
    toml(pp=1),                                   # speculation over TP only
    toml(spec=""),                                # PP without speculation
    toml(version="sglang 0.5.17+pp-spec"),        # a patched build that says so
    toml(engine="vllm", spec=SPEC.replace('algorithm = "EAGLE"', 'algorithm = "eagle"')
         .replace("eagle_topk = 1\n", "")),       # another engine's rules are its own
])
def test_what_stays_allowed(text):
    assert parse_config(text).parallel.pp_size in (1, 2)


def test_the_engine_assertion_in_a_log_is_a_failure_signature():
    log = [
        "[2026-12-01 12:30:00] WARNING overrides.py:2492: Pipeline parallelism is incompatible with overlap schedule.",
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/dist-packages/sglang/srt/server_args.py", line 8722, in check_server_args',
        "    assert (",
        "AssertionError: Pipeline parallelism is not compatible with overlap schedule, speculative decoding",
    ]
    assert classify_log(log)[0].id == "sglang_pp_speculative_unsupported"
    assert classify_log(log[:1])[0].id == "unknown"  # the benign PP warning is not the failure
