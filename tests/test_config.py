"""Config parsing and validation: the examples parse, every bad file gets its own message."""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from pathlib import Path

import pytest

from dynocell.engine.config import (
    config_from_canonical,
    diff_configs,
    load_config,
    parse_config,
    to_toml,
)
from dynocell.errors import ConfigError, EngineError, Interrupted, NotFound, StoreUnavailable, UserError

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


OTHER_HOST = sorted((Path(__file__).parent / "data" / "configs" / "other-host").glob("*.toml"))


@pytest.mark.parametrize("path", OTHER_HOST, ids=lambda p: p.stem)
def test_missing_model_path_loads_but_cannot_boot_here(path: Path):
    """A model path missing on this machine is a config for another host: it loads (add/plan
    warn), and :func:`require_model_paths` — called before a boot — refuses it (issue 20, item 6)."""
    from dynocell.engine.config import missing_model_paths, require_model_paths

    cfg = load_config(path)
    assert missing_model_paths(cfg)
    with pytest.raises(ConfigError) as info:
        require_model_paths(cfg, str(path))
    err = info.value
    assert err.message.startswith(str(path)) and err.hint and err.exit_code == 2
    for needle in expectations(path):
        assert needle in f"{err.message} {err.hint}", needle


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
    text = (EXAMPLES / "sglang-h200-standalone.toml").read_text().replace("/models/model-pair",
                                                                          str(tmp_path / "model-pair"))
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
        # A config for another host loads (add/plan warn); only a boot here refuses it (issue 20, item 6).
        from dynocell.engine.config import missing_model_paths, require_model_paths

        cfg = load_config(EXAMPLES / "sglang-h200-standalone.toml")
        assert [f for f, _ in missing_model_paths(cfg)] == ["model_path", "speculative.draft_model_path"]
        with pytest.raises(ConfigError, match="model_path: model path does not exist on this machine"):
            require_model_paths(cfg, "sglang-h200-standalone.toml")


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
    err = ConfigError("f.toml", "port", "must be 0..65535", "set port = 0 to pick a free one")
    assert err.exit_code == 2 and err.http_status == 400
    assert (err.source, err.field) == ("f.toml", "port")
    assert str(err) == "f.toml: port: must be 0..65535 (set port = 0 to pick a free one)"
    assert NotFound("no such run").exit_code == 2 and NotFound("no such run").http_status == 404
    assert EngineError("died").exit_code == 3 and Interrupted("stop").exit_code == 130
    assert issubclass(StoreUnavailable, UserError) and StoreUnavailable("ro").http_status == 503


def test_examples_copy_elsewhere_same_hash(tmp_path: Path):
    """A builtin-model config hashes the same wherever the file lives (no local paths in it)."""
    shutil.copy(EXAMPLES / "tiny.toml", tmp_path / "renamed.toml")
    assert load_config(tmp_path / "renamed.toml").config_hash == load_config(EXAMPLES / "tiny.toml").config_hash


# The hash of examples/tiny.toml, pinned: any change to the canonical form (key order, JSON
# separators, a new default field) changes it, and every stored hash with it. Change it only
# together with a migration that re-keys stored configs.
TINY_HASH = "sha256:50712f7ac3e5d5185b0ad04f27dfcadf1fb6eac0f8395f5085201248bc5388ce"
STORES = sorted((REPO / "tests" / "data").rglob("dynocell.db"))


def test_golden_config_hash_of_tiny_example():
    cfg = load_config(EXAMPLES / "tiny.toml")
    assert cfg.canonical_json().startswith('{"attention_backend":null,"cuda_graph":{"disable":false,')
    assert cfg.config_hash == TINY_HASH
    assert cfg.config_hash == "sha256:" + hashlib.sha256(cfg.canonical_json().encode()).hexdigest()


def test_golden_config_hash_keeps_non_ascii_text_as_utf8():
    """Non-ASCII text is hashed as UTF-8 (``ensure_ascii=False``), not as ``\\u`` escapes: pinned."""
    cfg = parse_config('engine = "reference"\nmodel_path = "dynocell:tiny"\nserved_model_name = "modèle-τ"\n')
    assert '"served_model_name":"modèle-τ"' in cfg.canonical_json()
    assert cfg.config_hash == "sha256:46ddf5d3a378fbaaf62ad5969a38b64e62a451c8bcfd831171c43a1b6c5ae244"


@pytest.mark.parametrize("store", STORES, ids=[str(p.relative_to(REPO / "tests" / "data").parent) for p in STORES])
def test_every_stored_config_hash_recomputes(store: Path):
    """Each config row of the recorded stores: hash = sha256 of its canonical JSON, and re-canonicalising
    that JSON gives the same hash; every config_hash another table holds names a stored config."""
    con = sqlite3.connect(f"file:{store}?mode=ro&immutable=1", uri=True)  # no -wal/-shm beside the data
    try:
        rows = con.execute("SELECT config_hash, canonical_json FROM configs").fetchall()
        assert rows
        for stored, canonical in rows:
            assert stored == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
            assert config_from_canonical(canonical).config_hash == stored
        known = {h for h, _ in rows}
        for table in ("boots", "runs", "config_labels"):
            used = {h for (h,) in con.execute(f"SELECT config_hash FROM {table} WHERE config_hash IS NOT NULL")}
            assert used <= known, (table, used - known)
    finally:
        con.close()
