"""The model maker's training path on a shortened recipe (the full one runs on first use).

The default pair ships with the package (dynocell/engine/reference/pair/, made by
the full recipe); this test makes sure the code that made it still trains, writes the
Hugging Face layout and is deterministic for a seed.
"""

from __future__ import annotations

import hashlib

from dynocell.engine.reference import nets


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_short_recipe_trains_deterministically(tmp_path, monkeypatch):
    monkeypatch.setitem(nets.TARGET, "steps", 2)
    monkeypatch.setitem(nets.DRAFT, "steps", 2)
    monkeypatch.setattr(nets, "CORPUS_MAX_BYTES", 200_000, raising=False)
    a = nets.make_pair(tmp_path / "a", seed=3)
    b = nets.make_pair(tmp_path / "b", seed=3)
    for pair in (a, b):
        for d in (pair.target, pair.draft):
            for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"):
                assert (d / name).is_file(), (d, name)
    assert _digest(a.target / "model.safetensors") == _digest(b.target / "model.safetensors")
    assert _digest(a.draft / "model.safetensors") == _digest(b.draft / "model.safetensors")
