"""Config smell "draft max length shorter than the target's" (issue 22, shape 8): the windows read from the
draft's and the target's real config.json, and the doctor's finding for a boot and a run.

The folders are copies of the shipped reference pair (dynocell/engine/reference/pair/tiny-llama-bpe512-r2-s0,
``max_position_embeddings`` 1024) with the field changed where a case needs it; the rope-scaling rules are
the engines' own (vLLM ``_get_and_verify_max_len``, SGLang ``get_context_length``; see
dynocell/engine/model_window.py).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from dynocell.engine.model_window import model_window, window_of_config
from dynocell.runbooks.doctor import diagnose_inputs
from dynocell.runbooks.doctor_evidence import model_windows
from dynocell.runbooks.doctor_model import DoctorInputs

PAIR = Path(__file__).resolve().parents[1] / "dynocell" / "engine" / "reference" / "pair" / "tiny-llama-bpe512-r2-s0"
#: Qwen2.5's documented YaRN override (32k trained, factor 4): the engines disagree on what it means.
YARN = {"max_position_embeddings": 32768,
        "rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}}


def _folder(tmp_path: Path, name: str, **changes) -> Path:
    d = tmp_path / name
    d.mkdir()
    cfg = json.loads((PAIR / name.split("-")[0] / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


def test_window_of_the_shipped_pair_and_rope_scaling_per_engine():
    assert model_window(PAIR / "target") == (1024, f"{PAIR / 'target' / 'config.json'} max_position_embeddings")
    assert window_of_config(YARN, "vllm") == 131072  # original × factor
    assert window_of_config(YARN, "sglang") == 32768  # factor ignored when original_max_position_embeddings is named
    llama3 = {"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}
    assert window_of_config(llama3, "vllm") == window_of_config(llama3, "sglang") == 131072
    linear = {"max_position_embeddings": 4096, "rope_scaling": {"type": "linear", "factor": 2.0}}
    assert window_of_config(linear, "vllm") == window_of_config(linear, "sglang") == 8192
    assert window_of_config({"text_config": {"max_position_embeddings": 8192}}) == 8192
    assert window_of_config({"hidden_size": 64}) is None


def test_unreadable_windows_say_why(tmp_path):
    assert model_window("Qwen/Qwen3-8B")[0] is None and "no config.json" in model_window("Qwen/Qwen3-8B")[1]
    (tmp_path / "config.json").write_text("{not json")
    n, why = model_window(tmp_path)
    assert n is None and "cannot be read" in why


def test_short_draft_under_the_targets_context_is_a_finding(tmp_path):
    """Positive: a draft folder with max_position_embeddings 512 under a target served at its 1024."""
    target, draft = _folder(tmp_path, "target"), _folder(tmp_path, "draft", max_position_embeddings=512)
    knobs = {"engine": "sglang", "model_path": str(target), "speculative.algorithm": "STANDALONE",
             "speculative.draft_model_path": str(draft)}
    w = model_windows(knobs)
    assert w["draft_window"] == 512 and w["target_context"] == 1024 and str(target) in w["target_source"]
    fs = [f for f in diagnose_inputs(DoctorInputs(knobs=knobs, windows=w)) if f.rule == "draft_window_short"]
    assert len(fs) == 1 and fs[0].severity == "warn"
    assert fs[0].evidence["draft_window"] == 512 and fs[0].evidence["target_context"] == 1024
    assert "prompts longer than 512 tokens" in fs[0].message
    assert fs[0].entries[0] == "draft-max-length-shorter-than-target"
    # the config's own context_length (SGLang --context-length / vLLM --max-model-len) wins over the folder's
    capped = model_windows({**knobs, "memory.context_length": 512})
    assert capped["target_context"] == 512 and capped["target_source"] == "the config's memory.context_length"
    assert not [f for f in diagnose_inputs(DoctorInputs(knobs=knobs, windows=capped)) if f.rule == "draft_window_short"]


def test_matching_windows_and_no_draft_are_quiet(tmp_path):
    """Negative: the shipped pair (1024 and 1024), a served context above it on vLLM read with rope scaling,
    and configs without a draft folder (NGRAM, built-in ids) say nothing."""
    target, draft = _folder(tmp_path, "target"), _folder(tmp_path, "draft")
    knobs = {"engine": "vllm", "model_path": str(target), "speculative.algorithm": "STANDALONE",
             "speculative.draft_model_path": str(draft)}
    assert not [f for f in diagnose_inputs(DoctorInputs(knobs=knobs, windows=model_windows(knobs)))
                if f.rule == "draft_window_short"]
    shutil.rmtree(draft)
    scaled = _folder(tmp_path, "draft", rope_scaling={"rope_type": "linear", "factor": 4.0})
    w = model_windows({**knobs, "speculative.draft_model_path": str(scaled), "memory.context_length": 4096})
    assert w["draft_window"] == 4096 and not [f for f in diagnose_inputs(DoctorInputs(knobs=knobs, windows=w))
                                              if f.rule == "draft_window_short"]
    assert model_windows({"engine": "sglang", "speculative.algorithm": "NGRAM"}) == {}
    assert model_windows({"engine": "reference", "model_path": "dynocell:tiny",
                          "speculative.draft_model_path": "dynocell:tiny-draft"}) == {}


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_boot_of_such_a_config_gets_the_finding(tmp_path, engine):
    """Through the store: `config add` of a TOML naming the two folders, a boot record of it, `diagnose BOOT`."""
    from dynocell.db import boots as db_boots
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config
    from dynocell.runbooks.doctor import diagnose
    from dynocell.settings import load_settings

    target, draft = _folder(tmp_path, "target"), _folder(tmp_path, "draft", max_position_embeddings=256)
    toml = tmp_path / "c.toml"
    toml.write_text(f'engine = "{engine}"\nmodel_path = "{target}"\n[speculative]\nalgorithm = "STANDALONE"\n'
                    f'draft_model_path = "{draft}"\nnum_steps = 3\neagle_topk = 1\nnum_draft_tokens = 4\n'
                    '[memory]\ncontext_length = 1024\n')
    cell = open_cell(load_settings(home=tmp_path / "home"))
    h = add_config(cell, toml, None).hash
    db_boots.create_boot(cell.store, id="shortdraft", config_hash=h, engine=engine, hostname="h", host="127.0.0.1",
                         argv="", env={}, state="stopped", log_path="/dev/null")
    fs = {f.rule: f for f in diagnose(cell, "shortdraft")}
    assert fs["draft_window_short"].evidence == {"draft_window": 256, "target_context": 1024,
                                                 "draft_source": f"{draft / 'config.json'} max_position_embeddings",
                                                 "target_source": "the config's memory.context_length"}
