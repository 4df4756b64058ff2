"""Issue 16 item 3: extra_args may not set a flag the config owns (host, port, model path,
parallel sizes, speculative flags, memory knobs …): refused with the field to use instead."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynocell.engine.adapters import SGLangAdapter, owned_flags, render
from dynocell.engine.config import EngineConfig, parse_config
from dynocell.errors import ConfigError
from tests.test_cli_config import run

BASE = 'engine = "{engine}"\nmodel_path = "dynocell:tiny"\n'


@pytest.mark.parametrize("engine", ["sglang", "reference"])
@pytest.mark.parametrize("args, field", [
    (["--host", "0.0.0.0"], "host"),
    (["--host=0.0.0.0"], "host"),
    (["--port", "8000"], "port"),
    (["--model-path", "/elsewhere"], "model_path"),
    (["--model", "/elsewhere"], "model_path"),
    (["--tokenizer-path", "/elsewhere"], "model_path"),
    (["--tp-size", "8"], "parallel.tp_size"),
    (["--tp", "8"], "parallel.tp_size"),
    (["--tensor-parallel-size=8"], "parallel.tp_size"),
    (["--dp-size", "2"], "parallel.dp_size"),
    (["--pp-size", "2"], "parallel.pp_size"),
    (["--ep", "2"], "parallel.ep_size"),
    (["--speculative-algorithm", "EAGLE"], "speculative.algorithm"),
    (["--speculative-num-steps=5"], "speculative.num_steps"),
    (["--speculative-draft-model-path", "/d"], "speculative.draft_model_path"),
    (["--mem-fraction-static", "0.9"], "memory.mem_fraction_static"),
    (["--context-length", "4096"], "memory.context_length"),
    (["--kv-cache-dtype", "fp8_e5m2"], "memory.kv_cache_dtype"),
    (["--disable-cuda-graph"], "cuda_graph.disable"),
    (["--hos", "0.0.0.0"], "host"),  # SGLang's argparse takes unique prefixes
    (["--dist-init-addr", "10.0.0.1:5000"], "dist_init_addr"),
    (["--dtype", "bfloat16"], "dtype"),  # a config field since issue 21 (SGLang and vLLM --dtype)
])
def test_owned_flag_in_extra_args_is_refused_naming_the_field(engine: str, args: list[str], field: str):
    text = BASE.format(engine=engine) + f"extra_args = {json.dumps(['--log-level', 'info', *args])}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="x.toml")
    flag = args[0].split("=")[0]
    assert err.value.field == "extra_args[2]"
    assert flag in str(err.value) and field.rpartition(".")[2] in str(err.value)


def test_flags_no_field_owns_stay_allowed():
    cfg = parse_config(BASE.format(engine="sglang") + 'extra_args = ["--enable-metrics", "--sampling-backend", '
                       '"pytorch", "--load-format=auto", "--enable-dp-attention", "--random-seed", "0", '
                       '"--tp-size-is-not-a-flag"]\n')
    assert "--enable-dp-attention" in cfg.extra_args


@pytest.mark.parametrize("args, field", [
    (["--tensor-parallel-size", "2"], "parallel.tp_size"),
    (["-tp", "2"], "parallel.tp_size"),  # vLLM's short spellings
    (["-dp", "2"], "parallel.dp_size"),
    (["--max-model-len=4096"], "memory.context_length"),
    (["--max-num-seqs", "8"], "memory.max_running_requests"),
    (["--gpu-memory-utilization", "0.5"], "memory.gpu_memory_utilization"),
    (["--enforce-eager"], "cuda_graph.disable"),
    (["--compilation-config", "{}"], "[cuda_graph]"),
    (["-O3"], "[cuda_graph]"),
    (["--speculative-config", "{}"], "[speculative]"),
    (["--profiler-config", "{}"], "dynocell gives it at boot"),
])
def test_vllm_owned_flag_in_extra_args_is_refused(args: list[str], field: str):
    text = BASE.format(engine="vllm") + f"extra_args = {json.dumps(['--seed', '0', *args])}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="x.toml")
    assert err.value.field == "extra_args[2]"
    assert field.rpartition(".")[2] in str(err.value)


def test_vllm_flags_no_field_owns_stay_allowed():
    cfg = parse_config(BASE.format(engine="vllm") + 'extra_args = ["--seed", "0", "--enable-expert-parallel", '
                       '"--kv-transfer-config", "{}", "-q", "fp8"]\n')
    assert "--enable-expert-parallel" in cfg.extra_args


def test_owned_flags_follow_the_adapter_argv():
    # every flag the SGLang adapter renders for a full config, except --enable-metrics, is owned
    cfg = EngineConfig(model_path="/m", parallel={"tp_size": 2, "pp_size": 2, "dp_size": 2, "ep_size": 2,
                                                  "dcp_size": 2},
                       speculative={"algorithm": "STANDALONE", "draft_model_path": "/d", "num_steps": 3,
                                    "eagle_topk": 1, "num_draft_tokens": 4},
                       memory={"mem_fraction_static": 0.8, "chunked_prefill_size": 8, "context_length": 9,
                               "max_running_requests": 10, "kv_cache_dtype": "fp8"},
                       cuda_graph={"max_bs": 4}, attention_backend="fa3", served_model_name="m")
    rendered = {a for a in SGLangAdapter().args(cfg, port=1) if a.startswith("--")}
    assert rendered - set(owned_flags()) == {"--enable-metrics"}


def test_stored_config_with_owned_extra_arg_is_refused_at_render():
    # a config stored before the rule (model_validate skips parse_config) still cannot boot
    cfg = EngineConfig.model_validate({"engine": "reference", "model_path": "/m", "extra_args": ["--host", "::"]})
    with pytest.raises(ConfigError, match="--host"):
        render(cfg, python="python", port=1, base_env={})


def test_cli_config_add_refuses_and_stores_nothing(cli_env, isolated_home: Path, tmp_path: Path):
    p = tmp_path / "wide.toml"
    p.write_text(BASE.format(engine="reference") + 'extra_args = ["--host", "0.0.0.0"]\n')
    proc = run(cli_env, "config", "add", str(p), ok=False)
    assert proc.returncode == 2
    assert "Error:" in proc.stderr and "extra_args[0]" in proc.stderr and "host" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert json.loads(run(cli_env, "config", "list", "--json").stdout) == []


# ---------------------------------------------------------------- issue 32 item 9 / issue 38 survivor 9

@pytest.mark.parametrize("args, field", [
    (["--tensor_parallel_size", "8"], "parallel.tp_size"),  # FlexibleArgumentParser: _ → -
    (["--gpu_memory_utilization=0.5"], "memory.gpu_memory_utilization"),
    (["--data_parallel_size", "2"], "parallel.dp_size"),
    (["--speculative-config.num_speculative_tokens=5"], "[speculative]"),  # dotted sub-keys
    (["--speculative_config.method", "ngram"], "[speculative]"),
    (["--compilation-config.cudagraph_mode=FULL"], "[cuda_graph]"),
    (["--compilation-config.cudagraph_capture_sizes+", "1,2"], "[cuda_graph]"),
    (["--profiler_config", "{}"], "dynocell gives it at boot"),
    (["--config", "x.yaml"], "config file"),
    (["--config=x.yaml"], "config file"),
    (["--no-enforce-eager"], "cuda_graph.disable"),  # BooleanOptionalAction's negative form
    (["--tensor-par", "8"], "parallel.tp_size"),  # argparse allow_abbrev
    (["--hos", "0.0.0.0"], "host"),
    (["--ho=0.0.0.0"], "host"),
])
def test_vllm_parser_spellings_of_owned_flags_are_refused(args: list[str], field: str):
    text = BASE.format(engine="vllm") + f"extra_args = {json.dumps(['--seed', '0', *args])}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="x.toml")
    assert err.value.field == "extra_args[2]"
    assert args[0].split("=")[0] in str(err.value) and field.rpartition(".")[2] in str(err.value)


@pytest.mark.parametrize("engine", ["sglang", "reference"])
@pytest.mark.parametrize("args", [["--config", "x.yaml"], ["--hos", "0.0.0.0"], ["--ho", "::"],
                                  ["--mem-frac", "0.9"], ["--speculative-num", "3"]])
def test_sglang_config_file_and_prefixes_are_refused(engine: str, args: list[str]):
    text = BASE.format(engine=engine) + f"extra_args = {json.dumps(args)}\n"
    with pytest.raises(ConfigError) as err:
        parse_config(text, source="x.toml")
    assert err.value.field == "extra_args[0]"


def test_each_engine_keeps_its_own_unowned_flags():
    # vLLM multi-node goes through extra_args (SGLang's --nnodes is a config field, vLLM's is not)
    cfg = parse_config(BASE.format(engine="vllm") + 'extra_args = ["--nnodes", "2", "--node-rank", "0", '
                       '"--enable-expert-parallel", "--kv-transfer-config.kv_role=kv_both"]\n')
    assert "--nnodes" in cfg.extra_args
    with pytest.raises(ConfigError, match="--nnodes"):
        parse_config(BASE.format(engine="sglang") + 'extra_args = ["--nnodes", "2"]\n')


def test_the_vllm_parser_reads_these_as_the_owned_flags():
    """The normalisation is vLLM 0.26's (``FlexibleArgumentParser``): checked against a stand-in that
    folds names as its ``parse_args`` documents it, then argparse with abbreviations on."""
    import argparse

    from dynocell.engine.adapters import engine_reads_flag

    parser = argparse.ArgumentParser(allow_abbrev=True)
    for flag in ("--tensor-parallel-size", "--speculative-config", "--compilation-config", "--seed",
                 "--host", "--hf-token"):
        parser.add_argument(flag)
    for arg, dest in (("--tensor_parallel_size", "tensor_parallel_size"), ("--hos", "host"),
                      ("--speculative-config.k=5", "speculative_config"),
                      ("--compilation_config.cudagraph_mode=FULL", "compilation_config")):
        flag = engine_reads_flag("vllm", arg)
        ns, _ = parser.parse_known_args([flag, "v"])
        assert getattr(ns, dest) == "v", (arg, flag)
