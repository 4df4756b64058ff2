"""Engine adapters: argv with SGLang's names, explicit env, free ports, redaction, multi-node."""

from __future__ import annotations

import json
import shlex
import socket
from pathlib import Path

import pytest

from dynocell.engine.adapters import (
    LaunchSpec,
    adapter_for,
    argv_string,
    pick_free_port,
    redact_env,
    render,
    render_nodes,
)
from dynocell.engine.config import EngineConfig
from dynocell.errors import ConfigError, UserError

DATA = Path(__file__).parent / "data"
BASE_ENV = {"PATH": "/usr/bin:/bin", "HOME": "/tmp/home"}


def _result_json(name: str) -> dict:
    return json.loads((DATA / "sglang-0.5.17" / f"{name}.result.json").read_text())


def cfg(**data) -> EngineConfig:
    data.setdefault("model_path", "/models/tiny-llama")
    return EngineConfig.model_validate(data)


def pairs(argv: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            if nxt is not None and not nxt.startswith("--"):
                out[a] = nxt
                i += 2
                continue
            out[a] = None
        i += 1
    return out


def test_sglang_argv_reproduces_the_real_h200_command_of_run_c():
    real = _result_json("C")["cmd"].split()
    c = cfg(
        engine="sglang", model_path="/models/tiny-llama", host="127.0.0.1", port=30003,
        attention_backend="triton",
        speculative={"algorithm": "STANDALONE", "draft_model_path": "/models/tiny-llama", "num_steps": 3,
                     "eagle_topk": 1, "num_draft_tokens": 4},
        memory={"mem_fraction_static": 0.2, "max_running_requests": 16},
        cuda_graph={"max_bs": 4},
        extra_args=["--load-format", "dummy", "--sampling-backend", "pytorch", "--log-level", "info",
                    "--decode-log-interval", "1"],
    )
    spec = render(c, python="/opt/venv/bin/python3", base_env=BASE_ENV)
    assert spec.argv[:3] == ["/opt/venv/bin/python3", "-m", "sglang.launch_server"]
    assert pairs(spec.argv[3:]) == pairs(real[3:])
    assert spec.port == 30003 and spec.host == "127.0.0.1"
    assert spec.argv[-8:] == list(c.extra_args)  # verbatim, last


def test_sglang_parallel_flags_only_when_above_one_and_dcp():
    one = render(cfg(), python="py", port=1234, base_env={}).argv
    assert not any(a in one for a in ("--tp-size", "--pp-size", "--dp-size", "--ep-size", "--dcp-size"))
    assert "--enable-metrics" in one
    many = render(cfg(parallel={"tp_size": 8, "ep_size": 8, "dcp_size": 2}), python="py", port=1, base_env={}).argv
    p = pairs(many)
    assert p["--tp-size"] == "8" and p["--ep-size"] == "8" and p["--dcp-size"] == "2"
    assert "--pp-size" not in p and "--dp-size" not in p


def test_sglang_memory_graph_and_backend_flags():
    c = cfg(memory={"chunked_prefill_size": 8192, "context_length": 4096, "kv_cache_dtype": "fp8_e4m3"},
            cuda_graph={"disable": True, "max_bs": 8}, attention_backend="triton", served_model_name="m")
    p = pairs(render(c, python="py", port=5, base_env={}).argv)
    assert p["--chunked-prefill-size"] == "8192" and p["--context-length"] == "4096"
    assert p["--kv-cache-dtype"] == "fp8_e4m3" and p["--attention-backend"] == "triton"
    assert "--disable-cuda-graph" in p and "--cuda-graph-max-bs" not in p
    assert p["--served-model-name"] == "m"


def test_reference_adapter_renders_its_subset():
    c = cfg(engine="reference", model_path="/m/target", memory={"context_length": 512, "mem_fraction_static": 0.5},
            speculative={"algorithm": "STANDALONE", "draft_model_path": "/m/draft", "num_steps": 3,
                         "num_draft_tokens": 4}, extra_args=["--seed", "1"])
    spec = render(c, python="py", port=4321, base_env={})
    assert spec.argv[:3] == ["py", "-m", "dynocell.engine.reference"]
    p = pairs(spec.argv)
    assert p["--model-path"] == "/m/target" and p["--port"] == "4321" and p["--context-length"] == "512"
    assert p["--speculative-algorithm"] == "STANDALONE" and p["--speculative-draft-model-path"] == "/m/draft"
    assert "--enable-metrics" in p and "--mem-fraction-static" not in p
    assert spec.argv[-2:] == ["--seed", "1"]
    with pytest.raises(ConfigError, match="one device"):
        render(cfg(engine="reference", parallel={"tp_size": 2}), python="py", port=1, base_env={})


def test_env_is_explicit_build_first_on_pythonpath(monkeypatch):
    monkeypatch.setenv("DYNOCELL_LEAK_CHECK", "must-not-appear")
    c = cfg(env={"NCCL_DEBUG": "INFO", "PYTHONPATH": "/cfg/path", "HF_TOKEN": "hf_secret"})
    spec = render(c, python="py", port=1, base_env=BASE_ENV, build_pythonpath="/builds/abc")
    assert "DYNOCELL_LEAK_CHECK" not in spec.env
    assert spec.env["PATH"] == BASE_ENV["PATH"] and spec.env["NCCL_DEBUG"] == "INFO"
    assert spec.env["PYTHONPATH"] == "/builds/abc:/cfg/path"
    red = spec.redacted_env
    assert red["HF_TOKEN"] == "***" and red["NCCL_DEBUG"] == "INFO"
    assert spec.env["HF_TOKEN"] == "hf_secret"  # the child still gets it


def test_redact_env_patterns():
    env = {"HF_TOKEN": "a", "api_key": "b", "AWS_SECRET_ACCESS_KEY": "c", "DB_PASSWORD": "d", "PATH": "/bin",
           "KEYBOARD": "x"}
    red = redact_env(env)
    assert red == {"HF_TOKEN": "***", "api_key": "***", "AWS_SECRET_ACCESS_KEY": "***", "DB_PASSWORD": "***",
                   "PATH": "/bin", "KEYBOARD": "***"}  # KEY matches anywhere: redact when in doubt


def test_port_zero_picks_a_free_port_and_argv_string_round_trips():
    spec = render(cfg(port=0), python="/usr/bin/python3", base_env={})
    assert spec.port > 0 and pairs(spec.argv)["--port"] == str(spec.port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", spec.port))  # it was free
    assert shlex.split(argv_string(spec.argv)) == spec.argv
    assert spec.argv_string == argv_string(spec.argv)
    assert pick_free_port("127.0.0.1") > 0
    assert LaunchSpec(["x"], {}, 80, "0.0.0.0").base_url == "http://127.0.0.1:80"


def test_render_nodes_one_spec_per_node():
    c = cfg(parallel={"tp_size": 16}, dist_init_addr="10.0.0.1:5000",
            nodes=[{"host": "h1", "node_rank": 1, "gpus": 8}, {"host": "h0", "node_rank": 0, "gpus": 8}],
            extra_args=["--trust-remote-code"])
    specs = render_nodes(c, python="py", port=30000, base_env=BASE_ENV)
    assert [s.node_rank for s in specs] == [0, 1] and [s.node_host for s in specs] == ["h0", "h1"]
    for s in specs:
        p = pairs(s.argv)
        assert p["--nnodes"] == "2" and p["--node-rank"] == str(s.node_rank)
        assert p["--dist-init-addr"] == "10.0.0.1:5000" and p["--tp-size"] == "16"
        assert s.argv[-1] == "--trust-remote-code"
    with pytest.raises(UserError, match="render_nodes"):
        render(c, python="py", port=1, base_env={})
    assert len(render_nodes(cfg(), python="py", port=9, base_env={})) == 1


def test_unknown_engine():
    with pytest.raises(UserError, match="unknown engine"):
        adapter_for("tgi")
