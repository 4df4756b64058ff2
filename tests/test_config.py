"""Config parsing and validation: the examples parse, every bad file gets its own message."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from dynocell.engine.config import (
    EngineConfig,
    config_from_canonical,
    diff_configs,
    load_config,
    parse_config,
    to_toml,
)
from dynocell.errors import ConfigError, NotFound, UserError

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
BAD = Path(__file__).parent / "data" / "configs" / "bad"
BAD_FILES = sorted(BAD.glob("*.toml"))


def expectations(path: Path) -> list[str]:
    return [line.split(":", 1)[1].strip() for line in path.read_text().splitlines()
            if line.startswith("# expect:")]


def test_bad_corpus_is_large_enough():
    assert len(BAD_FILES) >= 12
    for f in BAD_FILES:
        assert expectations(f), f"{f.name} has no '# expect:' line"


@pytest.mark.parametrize("path", BAD_FILES, ids=lambda p: p.stem)
def test_bad_config_message(path: Path):
    with pytest.raises(ConfigError) as info:
        load_config(path)
    err = info.value
    text = f"{err.message} {err.hint or ''}"
    assert err.message.startswith(str(path)), err.message
    assert err.hint, "every config error says what to do"
    assert err.exit_code == 2
    for needle in expectations(path):
        assert needle in text, f"{needle!r} not in {text!r}"


def test_examples_parse():
    tiny = load_config(EXAMPLES / "tiny.toml")
    assert tiny.engine == "reference"
    assert tiny.model_path == "dynocell:tiny"
    assert tiny.name == "tiny"
    sp = tiny.speculative
    assert (sp.algorithm, sp.draft_model_path, sp.num_steps, sp.eagle_topk, sp.num_draft_tokens) == (
        "STANDALONE", "dynocell:tiny-draft", 3, 1, 4)
    assert sp.num_drafts == 3
    assert not load_config(EXAMPLES / "tiny-plain.toml").speculative_enabled
    assert load_config(EXAMPLES / "tiny-ngram.toml").speculative.algorithm == "NGRAM"
    assert load_config(EXAMPLES / "tiny-vllm.toml").api == "vllm"
    hashes = {load_config(p).config_hash for p in EXAMPLES.glob("tiny*.toml")}
    assert len(hashes) == 4


def test_sglang_example_parses_with_its_model_dirs(tmp_path: Path):
    """The GPU example names host paths; with those directories present it is valid."""
    (tmp_path / "model-pair" / "target").mkdir(parents=True)
    (tmp_path / "model-pair" / "draft").mkdir()
    text = (EXAMPLES / "sglang-h200-standalone.toml").read_text().replace("/models/model-pair", str(tmp_path / "model-pair"))
    cfg = parse_config(text, "sglang-h200-standalone.toml")
    assert cfg.engine == "sglang"
    assert cfg.attention_backend == "triton"
    assert cfg.speculative.algorithm == "STANDALONE"
    assert (cfg.speculative.num_steps, cfg.speculative.eagle_topk, cfg.speculative.num_draft_tokens) == (3, 1, 4)
    assert cfg.memory.mem_fraction_static == 0.2
    assert cfg.cuda_graph.max_bs == 4
    assert "--enable-metrics" in cfg.extra_args
    assert cfg.env["NCCL_NVLS_ENABLE"] == "0"
    if not Path("/models/model-pair/target").exists():  # as shipped it names GPU-host paths
        with pytest.raises(ConfigError, match="model_path: model path does not exist"):
            load_config(EXAMPLES / "sglang-h200-standalone.toml")


def test_relative_model_path_resolves_against_the_file(tmp_path: Path):
    (tmp_path / "weights").mkdir()
    f = tmp_path / "c.toml"
    f.write_text('model_path = "weights"\n')
    assert load_config(f).model_path == str((tmp_path / "weights").resolve())


def test_missing_file_and_non_utf8(tmp_path: Path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(tmp_path / "nope.toml")
    f = tmp_path / "latin1.toml"
    f.write_bytes(b'model_path = "caf\xe9"\n')
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(f)


def test_algorithm_case_and_none():
    a = parse_config('model_path = "x/y"\n[speculative]\nalgorithm = "ngram"\n')
    assert a.speculative.algorithm == "NGRAM"
    b = parse_config('model_path = "x/y"\n[speculative]\nalgorithm = "none"\n')
    assert b.speculative.algorithm is None
    assert b.config_hash == parse_config('model_path = "x/y"\n').config_hash


def test_canonical_roundtrip_and_toml_roundtrip():
    cfg = load_config(EXAMPLES / "tiny.toml")
    again = config_from_canonical(cfg.canonical_json(), cfg.meta.model_dump())
    assert again == cfg
    assert parse_config(to_toml(cfg)).config_hash == cfg.config_hash
    assert parse_config(to_toml(cfg)).name == "tiny"
    assert cfg.config_hash.startswith("sha256:") and len(cfg.config_hash) == 7 + 64
    assert "meta" not in cfg.canonical()


def test_diff_lists_only_differences():
    a = load_config(EXAMPLES / "tiny.toml")
    b = a.with_changes(**{"parallel.tp_size": 2, "env": {"A": "1"}})
    assert diff_configs(a, b) == [("env.A", None, "1"), ("parallel.tp_size", 1, 2)]
    assert diff_configs(a, a) == []


def test_error_hierarchy_exit_codes():
    assert issubclass(ConfigError, UserError) and issubclass(NotFound, UserError)
    assert ConfigError("f.toml", "port", "bad").exit_code == 2
    assert isinstance(EngineConfig.model_fields, dict)


def test_examples_copy_elsewhere_same_hash(tmp_path: Path):
    """A builtin-model config hashes the same wherever the file lives (no local paths in it)."""
    shutil.copy(EXAMPLES / "tiny.toml", tmp_path / "renamed.toml")
    assert load_config(tmp_path / "renamed.toml").config_hash == load_config(EXAMPLES / "tiny.toml").config_hash
