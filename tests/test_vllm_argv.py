"""vLLM's short flags map like the long ones (issue 17 small fix).

vLLM's argparse (``vllm/engine/arg_utils.py``, ``EngineArgs.add_cli_args``) defines ``-tp``, ``-pp``,
``-dp``, ``-dcp`` (and ``-dpn`` … ``-dpb``, ``-O``) as second spellings of the long flags; a command
line or args dict with either spelling is the same engine, so the observed config — fields and hash —
must be the same. The command lines here are written for dynocell (the inputs under test); the log
lines around them are the real vLLM 0.26.0 H200 log (tests/data/vllm-0.26.0/C_draft_graph.server.log).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dynocell.engine.logfile import read_log
from dynocell.engine.observed import from_vllm_args
from dynocell.engine.vllm_argv import parse_vllm_command, vllm_command_args

VLLM = Path(__file__).parent / "data" / "vllm-0.26.0"
LONG = ("vllm serve /models/t --tensor-parallel-size 4 --pipeline-parallel-size 2 --data-parallel-size 2 "
        "--decode-context-parallel-size 2 --port 8000")
SHORT = "vllm serve /models/t -tp 4 -pp 2 -dp 2 -dcp 2 --port 8000"
FIELDS = {"parallel.tp_size": 4, "parallel.pp_size": 2, "parallel.dp_size": 2, "parallel.dcp_size": 2,
          "model_path": "/models/t", "port": 8000}


@pytest.mark.parametrize("line", [
    SHORT,
    "vllm serve /models/t -tp=4 -pp=2 -dp=2 -dcp=2 --port=8000",
    "$ vllm serve /models/t -pp 2 -tp 4 -dcp 2 -dp 2 --port 8000",
    "+ CUDA_VISIBLE_DEVICES=0,1,2,3 vllm serve /models/t --tensor-parallel-size=4 -pp 2 -dp 2 -dcp 2 --port 8000",
])
def test_short_and_long_flags_give_one_observed_config(line):
    long_cfg = from_vllm_args(parse_vllm_command(LONG))
    cfg = from_vllm_args(parse_vllm_command(line))
    assert {k: cfg.fields[k] for k in FIELDS} == FIELDS
    assert cfg.fields == long_cfg.fields and cfg.config_hash == long_cfg.config_hash


def test_an_args_dict_keyed_by_flag_spelling_maps_as_vllm_names():
    by_name = from_vllm_args({"model": "/m", "tensor_parallel_size": 2, "decode_context_parallel_size": 2})
    by_flag = from_vllm_args({"model": "/m", "-tp": 2, "--decode-context-parallel-size": 2})
    assert by_flag.fields == by_name.fields == {"model_path": "/m", "parallel.tp_size": 2, "parallel.dcp_size": 2}


def test_other_words_are_not_guessed_at():
    assert vllm_command_args(["/m", "-x", "3", "--enforce-eager", "-O3"]) == {
        "model_tag": "/m", "model": "/m", "enforce_eager": True, "compilation_config": 3}
    for not_a_launch in ("usage: vllm serve [-h] [-tp TENSOR_PARALLEL_SIZE]",
                         "(APIServer pid=1) WARNING use `vllm serve -tp 2` instead",
                         "vllm serve 'unbalanced"):
        assert parse_vllm_command(not_a_launch) is None


def test_a_log_whose_only_config_is_its_command_line(tmp_path):
    """A real vLLM log without its non-default args line, under the command that launched it: the
    config comes from the command (short flags mapped); with the args line present, that line wins."""
    real = (VLLM / "C_draft_graph.server.log").read_text().splitlines(keepends=True)
    args_line = next(i for i, ln in enumerate(real) if "non-default args: {" in ln)
    log = tmp_path / "short.log"
    log.write_text(f"$ {SHORT}\n" + "".join(real[:args_line] + real[args_line + 1:]))
    rep = read_log(log)
    assert rep.engine == "vllm" and rep.config_line == 1
    assert {k: rep.config.fields[k] for k in FIELDS} == FIELDS
    assert rep.config.fields["serving.engine_version"] == "vllm 0.26.0"  # the rest of the log still read
    both = tmp_path / "both.log"
    both.write_text(f"$ {SHORT}\n" + "".join(real))
    rep2 = read_log(both)
    assert rep2.config_line == args_line + 2 and rep2.config.fields["speculative.algorithm"] == "STANDALONE"
    assert "parallel.tp_size" not in rep2.config.fields  # the engine's own line, not the command
