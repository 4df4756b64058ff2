"""The reference engine started by hand with the model names of dynocell's configs (newcomer pass n6check).

`examples/tiny.toml` names its models ``dynocell:tiny`` / ``dynocell:tiny-draft``; `dynocell boot` resolves
them, but ``python -m dynocell.engine.reference --model-path dynocell:tiny`` (an engine to `dynocell attach`
to) exited 2: "cannot load the model from 'dynocell:tiny': No such file or directory". Now the engine
resolves them to the pair shipped with the package, and refuses another ``dynocell:`` name with one line.
Real parts: the engine as a subprocess on 127.0.0.1, the packaged pair.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import httpx

from dynocell.engine.reference.launch import start_engine
from dynocell.engine.reference.nets import packaged_pair


def test_hand_started_reference_engine_loads_the_builtin_names(tmp_path):
    pair = packaged_pair()
    assert pair is not None  # the package ships it (README: the first run trains nothing)
    eng = start_engine(Path("dynocell:tiny"), ["--speculative-algorithm", "STANDALONE",
                                               "--speculative-draft-model-path", "dynocell:tiny-draft",
                                               "--speculative-num-steps", "3", "--speculative-eagle-topk", "1",
                                               "--speculative-num-draft-tokens", "4"], tmp_path / "engine.log")
    try:
        info = httpx.get(eng.url + "/get_server_info", timeout=30).json()
        assert info["model_path"] == str(pair.target)
        assert info["speculative_draft_model_path"] == str(pair.draft)
        r = httpx.post(eng.url + "/generate", json={"text": "def main(", "sampling_params": {
            "max_new_tokens": 8, "temperature": 0}}, timeout=60)
        assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] == 8
    finally:
        eng.stop()


def test_another_dynocell_name_is_refused_in_one_line():
    proc = subprocess.run([sys.executable, "-m", "dynocell.engine.reference", "--model-path", "dynocell:small"],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert proc.returncode == 2
    assert "--model-path 'dynocell:small' is no built-in model: use dynocell:tiny or dynocell:tiny-draft" in proc.stderr
    assert "Traceback" not in proc.stderr
