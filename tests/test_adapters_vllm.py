"""vLLM adapter (issue 21 item 1): `vllm serve` argv with vLLM's names, per method and parallel field,
fields one engine lacks refused by name, boot-time refusals caught before boot, hashes unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynocell.engine.adapters import render, vllm_speculative_config
from dynocell.engine.config import EngineConfig, parse_config
from dynocell.errors import ConfigError

DATA = Path(__file__).parent / "data" / "vllm-0.26.0"
BASE_ENV = {"PATH": "/usr/bin:/bin"}


def cfg(**data) -> EngineConfig:
    data.setdefault("model_path", "/m/target")
    data.setdefault("engine", "vllm")
    return EngineConfig.model_validate(data)


def argv(c: EngineConfig, **kw) -> list[str]:
    return render(c, python="py", port=8300, base_env=BASE_ENV, **kw).argv


def flag(av: list[str], name: str) -> str:
    return av[av.index(name) + 1]


def test_reproduces_the_real_h200_command_of_run_c():
    real = json.loads((DATA / "C_draft_graph.result.json").read_text())["cmd"]
    c = cfg(model_path=real[4], served_model_name="m", attention_backend="TRITON_ATTN",
            memory={"gpu_memory_utilization": 0.15, "context_length": 1024, "max_running_requests": 16},
            speculative={"algorithm": "draft_model", "num_steps": 3, "draft_model_path": "/d",
                         "draft_attention_backend": "TRITON_ATTN"},
            extra_args=("--seed", "0"))
    av = argv(c)
    assert av[:5] == ["py", "-m", "vllm.entrypoints.cli.main", "serve", real[4]]
    for name in ("--host", "--gpu-memory-utilization", "--max-model-len", "--max-num-seqs",
                 "--attention-backend", "--served-model-name", "--seed", "--port"):
        assert flag(av, name) == real[real.index(name) + 1], name
    got = json.loads(flag(av, "--speculative-config"))
    want = json.loads(real[real.index("--speculative-config") + 1])
    assert {k: v for k, v in got.items() if k != "model"} == {k: v for k, v in want.items() if k != "model"}
    assert "--mem-fraction-static" not in av and "--enable-metrics" not in av


@pytest.mark.parametrize("algorithm,method", [("draft_model", "draft_model"), ("STANDALONE", "draft_model"),
                                              ("ngram", "ngram"), ("eagle", "eagle"), ("EAGLE3", "eagle3"),
                                              ("mtp", "mtp"), ("NEXTN", "mtp")])
def test_each_speculative_method(algorithm, method):
    spec = {"algorithm": algorithm, "num_steps": 3}
    if method in ("draft_model", "eagle", "eagle3"):
        spec["draft_model_path"] = "/d"
    c = cfg(speculative=spec)
    got = json.loads(flag(argv(c), "--speculative-config"))
    assert got["method"] == method and got["num_speculative_tokens"] == 3
    assert vllm_speculative_config(c) == got


def test_ngram_window_draft_parallel_and_sampling_keys():
    c = cfg(speculative={"algorithm": "ngram", "num_draft_tokens": 4, "prompt_lookup_min": 2,
                         "prompt_lookup_max": 5, "draft_tp_size": 2, "draft_sample_method": "probabilistic"})
    assert json.loads(flag(argv(c), "--speculative-config")) == {
        "method": "ngram", "num_speculative_tokens": 3, "draft_tensor_parallel_size": 2,
        "prompt_lookup_min": 2, "prompt_lookup_max": 5, "draft_sample_method": "probabilistic"}


@pytest.mark.parametrize("field,flag_name", [("tp_size", "--tensor-parallel-size"),
                                             ("pp_size", "--pipeline-parallel-size"),
                                             ("dp_size", "--data-parallel-size"),
                                             ("dcp_size", "--decode-context-parallel-size")])
def test_each_parallel_field(field, flag_name):
    assert flag(argv(cfg(parallel={field: 4})), flag_name) == "4"
    assert flag_name not in argv(cfg())


def test_graphs_eager_dtype_kv_and_profiler():
    av = argv(cfg(dtype="float16", memory={"kv_cache_dtype": "fp8"},
                  cuda_graph={"mode": "full_and_piecewise", "capture_sizes": [8, 1, 4, 4], "max_bs": 8}),
              profile_dir="/tmp/prof")
    assert flag(av, "--dtype") == "float16" and flag(av, "--kv-cache-dtype") == "fp8"
    assert json.loads(flag(av, "--compilation-config")) == {
        "cudagraph_mode": "FULL_AND_PIECEWISE", "cudagraph_capture_sizes": [1, 4, 8],
        "max_cudagraph_capture_size": 8}
    assert json.loads(flag(av, "--profiler-config"))["torch_profiler_dir"] == "/tmp/prof"
    eager = argv(cfg(cuda_graph={"disable": True}))
    assert "--enforce-eager" in eager and "--compilation-config" not in eager
    assert "--profiler-config" not in eager


@pytest.mark.parametrize("text,field", [
    ('engine = "vllm"\n[memory]\nmem_fraction_static = 0.8', "memory.mem_fraction_static"),
    ('engine = "vllm"\n[memory]\nchunked_prefill_size = 512', "memory.chunked_prefill_size"),
    ('engine = "vllm"\n[serving]\nspec_v2 = true', "serving.spec_v2"),
    ('engine = "vllm"\n[parallel]\nep_size = 2', "parallel.ep_size"),
    ('engine = "sglang"\n[serving]\nsurface = "vllm"', "serving.surface"),
    ('engine = "vllm"\n[serving]\nsurface = "sglang"', "serving.surface"),
    ('engine = "sglang"\n[memory]\ngpu_memory_utilization = 0.5', "memory.gpu_memory_utilization"),
    ('engine = "sglang"\n[cuda_graph]\ncapture_sizes = [1, 2]', "cuda_graph.capture_sizes"),
    ('engine = "sglang"\n[speculative]\nalgorithm = "NGRAM"\nprompt_lookup_max = 4', "speculative.prompt_lookup_max"),
    ('engine = "vllm"\n[speculative]\nalgorithm = "eagle"\nnum_steps = 3\neagle_topk = 4\nnum_draft_tokens = 8\n'
     'draft_model_path = "dynocell:tiny-draft"', "speculative.eagle_topk"),
])
def test_a_field_the_engine_lacks_is_refused_by_name(text, field):
    with pytest.raises(ConfigError) as exc:
        parse_config('model_path = "dynocell:tiny"\n' + text)
    assert exc.value.field == field
    assert "Error" in str(exc.value) or field in str(exc.value)


def test_the_other_fraction_is_named_in_the_fix():
    with pytest.raises(ConfigError) as exc:
        parse_config('model_path = "dynocell:tiny"\nengine = "vllm"\n[memory]\nmem_fraction_static = 0.8')
    assert "memory.gpu_memory_utilization" in str(exc.value)


@pytest.mark.parametrize("graph", ['capture_sizes = [1, 2, 3]', 'max_bs = 2'])
def test_capture_sizes_below_k_plus_1_refused_before_boot(graph):
    text = ('model_path = "dynocell:tiny"\nengine = "vllm"\n[speculative]\nalgorithm = "ngram"\nnum_steps = 3\n'
            f'[cuda_graph]\n{graph}\n')
    with pytest.raises(ConfigError) as exc:
        parse_config(text)
    assert "No valid cudagraph sizes" in str(exc.value) and exc.value.field.startswith("cuda_graph.")
    parse_config(text.replace("3]", "4]").replace("max_bs = 2", "max_bs = 4"))  # k + 1 = 4 is enough
    parse_config(text + "disable = true\n")  # eager: nothing is captured


def test_new_fields_left_out_of_the_hash_when_unstated():
    c = cfg(engine="sglang")
    canon = c.canonical()
    for key in ("dtype",):
        assert key not in canon
    assert "gpu_memory_utilization" not in canon["memory"] and "capture_sizes" not in canon["cuda_graph"]
    assert "draft_attention_backend" not in canon["speculative"]
    assert cfg(dtype="bfloat16").config_hash != cfg().config_hash


@pytest.mark.parametrize("name,method", [("vllm-h200-draft", "draft_model"), ("vllm-h200-ngram", "ngram")])
def test_h200_examples_render_the_recipe(tmp_path: Path, name, method):
    """The GPU examples follow VLLM.md: dtype pinned, TRITON_ATTN outside (and inside for the draft),
    the flashinfer sampler off."""
    (tmp_path / "model-pair" / "target").mkdir(parents=True)
    (tmp_path / "model-pair" / "draft").mkdir()
    text = (Path(__file__).parents[1] / "examples" / f"{name}.toml").read_text()
    c = parse_config(text.replace("/models/model-pair", str(tmp_path / "model-pair")), name)
    av = argv(c)
    spec = json.loads(flag(av, "--speculative-config"))
    assert spec["method"] == method and spec["num_speculative_tokens"] == 3
    assert flag(av, "--attention-backend") == "TRITON_ATTN" and flag(av, "--dtype") == "float16"
    if method == "draft_model":
        assert spec["attention_backend"] == "TRITON_ATTN"
    assert c.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0"


def test_config_show_prints_the_argv_of_its_engine(cli_env, tmp_path: Path):
    from tests.test_cli_config import run

    (tmp_path / "model-pair" / "target").mkdir(parents=True)
    (tmp_path / "model-pair" / "draft").mkdir()
    text = (Path(__file__).parents[1] / "examples" / "vllm-h200-draft.toml").read_text()
    f = tmp_path / "v.toml"
    f.write_text(text.replace("/models/model-pair", str(tmp_path / "model-pair")))
    run(cli_env, "config", "add", str(f))
    shown = json.loads(run(cli_env, "config", "show", "vllm-h200-draft", "--json").stdout)
    assert "-m vllm.entrypoints.cli.main serve" in shown["command"]
    assert "--gpu-memory-utilization 0.15" in shown["command"]
    assert "  command  " in run(cli_env, "config", "show", "vllm-h200-draft").stdout


def test_vllm_boots_get_the_gpu_engines_time_limit(settings):
    assert settings.boot_timeout_s("vllm") == settings.boot_timeout_s("sglang") > settings.boot_timeout_s("reference")
