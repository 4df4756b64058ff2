"""Issue 24 item 6: the H200 configs for EAGLE, EAGLE-3, the EAGLE tree and NEXTN over an MTP layer are one
command away — they
parse, point at heads shipped in the project tree, render SGLang 0.5.17's speculative flags, and their
reference twin (same file, engine = "reference": the engine-vs-oracle yardstick) is accepted too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynocell.engine.adapters import adapter_for
from dynocell.engine.config import load_config, parse_config
from dynocell.engine.reference.args import parse as reference_parse

REPO = Path(__file__).resolve().parents[1]
CONFIGS = sorted([
    *(REPO / "gpu" / "configs").glob("h200-eagle*.toml"),
    *(REPO / "gpu" / "configs").glob("h200-mtp*.toml"),
])
ARCH = {"EAGLE": "LlamaForCausalLMEagle", "EAGLE3": "LlamaForCausalLMEagle3", "NEXTN": "MiMoForCausalLM"}


def test_the_eagle_and_mtp_configs_exist():
    assert {p.stem for p in CONFIGS} == {"h200-eagle-graph", "h200-eagle-eager", "h200-eagle3-graph",
                                         "h200-eagle3-eager", "h200-eagle-tree", "h200-eagle-tree-eager",
                                         "h200-mtp-graph", "h200-mtp-eager", "h200-eagle-bisect-good",
                                         "h200-eagle-bisect-bad"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_config_points_at_a_shipped_head_and_renders_sglang_flags(path):
    cfg = load_config(path)
    s = cfg.speculative
    head = Path(s.draft_model_path)
    assert head.is_dir() and str(head).startswith(str(REPO / "dynocell" / "engine" / "reference" / "pair"))
    assert json.loads((head / "config.json").read_text())["architectures"] == [ARCH[s.algorithm]]
    assert (head / "model.safetensors").stat().st_size < 10_000_000
    argv = adapter_for("sglang").args(cfg, port=30000)
    flag = lambda f: argv[argv.index(f) + 1]  # noqa: E731
    assert flag("--speculative-algorithm") == s.algorithm
    assert flag("--speculative-draft-model-path") == str(head)
    assert (int(flag("--speculative-eagle-topk")), int(flag("--speculative-num-draft-tokens"))) == (
        s.eagle_topk, s.num_draft_tokens)
    if s.algorithm == "NEXTN":  # MiMo MTP: the draft is the target folder's own MTP layer
        assert s.draft_model_path == cfg.model_path
    if s.eagle_topk > 1:  # a tree: more draft tokens than a chain of num_steps
        assert s.num_draft_tokens > s.num_steps + 1
    assert ("--disable-cuda-graph" in argv) == path.stem.endswith("eager")
    twin = parse_config(path.read_text().replace('engine = "sglang"', 'engine = "reference"'),
                        source=str(path), base_dir=path.parent)
    ref_argv = adapter_for("reference").args(twin, port=30000)
    _, spec = reference_parse(ref_argv)
    resolved = "EAGLE" if s.algorithm == "NEXTN" else s.algorithm  # SGLang's alias, resolved as SGLang does
    assert (spec.algorithm, spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (
        resolved, s.num_steps, s.eagle_topk, s.num_draft_tokens)


@pytest.mark.parametrize("stem", ["h200-eagle3-graph", "h200-mtp-graph", "h200-eagle-tree"])
def test_reference_twin_boots_and_serves_sglang_meta_info(stem, tmp_path):
    """The oracle side of engine-vs-oracle: the twin's argv (rendered by the reference adapter) boots the
    reference engine on CPU, which drafts with the same head and reports SGLang's meta_info."""
    import httpx

    from dynocell.engine.meta import check_generations
    from dynocell.engine.reference.launch import start_engine

    path = REPO / "gpu" / "configs" / f"{stem}.toml"
    twin = parse_config(path.read_text().replace('engine = "sglang"', 'engine = "reference"'),
                        source=str(path), base_dir=path.parent)
    argv = adapter_for("reference").args(twin, port=0)
    model, extra, it = None, [], iter(argv)
    for a in it:  # start_engine renders --model-path, --host and --port itself
        if a == "--model-path":
            model = Path(next(it))
        elif a in ("--host", "--port"):
            next(it)
        else:
            extra.append(a)
    eng = start_engine(model, extra, tmp_path / "server.log")
    try:
        r = httpx.post(eng.url + "/generate", json={"text": "import os\nimport sys\n\n", "sampling_params": {
            "max_new_tokens": 16, "temperature": 0, "ignore_eos": True}}, timeout=120)
        assert r.status_code == 200, r.text
        meta = r.json()["meta_info"]
        s = twin.speculative
        assert len(meta["spec_correct_drafts_histogram"]) == s.num_steps + 1
        assert meta["spec_num_proposed_drafts"] == meta["spec_verify_ct"] * (s.num_draft_tokens - 1)
        assert check_generations([meta]) == []
    finally:
        eng.stop()


def test_nextn_is_reported_as_eagle_and_health_accepts_it():
    """SGLang 0.5.17 stores NEXTN as EAGLE (arg_groups/speculative_hook.py resolves the alias), so a
    NEXTN config's /get_server_info says EAGLE: the health oracle's key-args check must not call that
    the wrong engine; the reference engine reports it the same way."""
    from dynocell.engine.health import ExpectedServer, _server_info_mismatches

    cfg = load_config(REPO / "gpu" / "configs" / "h200-mtp-graph.toml")
    exp = ExpectedServer.from_config(cfg)
    assert exp.speculative_algorithm == "NEXTN"
    info = {"model_path": cfg.model_path, "tp_size": 1, "speculative_algorithm": "EAGLE",
            "speculative_num_steps": 3, "speculative_eagle_topk": 1, "speculative_num_draft_tokens": 4}
    assert _server_info_mismatches(info, exp) == []
    assert _server_info_mismatches({**info, "speculative_algorithm": "EAGLE3"}, exp) != []
    _, spec = reference_parse(["--model-path", "/m", "--speculative-algorithm", "NEXTN",
                               "--speculative-draft-model-path", "/m"])
    assert spec.algorithm == "EAGLE"


def test_relative_paths_in_gpu_config_comments_resolve_or_say_their_base():
    """A path in a comment of gpu/configs/*.toml or gpu/requirements-run.txt resolves from that file's folder
    (as the TOML's own model paths do), or names its base: `../../shared/gpu` from gpu/configs/ pointed into
    the checkout, where there is no shared/ — the folder lies beside the checkout (`<checkout>/../shared/gpu`)."""
    import re

    unresolved = []
    for path in [*sorted((REPO / "gpu" / "configs").glob("*.toml")), REPO / "gpu" / "requirements-run.txt"]:
        for n, line in enumerate(path.read_text().splitlines(), start=1):
            comment = line.partition("#")[2]
            for rel in re.findall(r"(?<![\w<>/.])((?:\.\./)+[\w./-]*\w)", comment):
                if not (path.parent / rel).exists():
                    unresolved.append(f"{path.relative_to(REPO)}:{n}: {rel}")
    assert not unresolved, "\n".join(unresolved)
    # and none points outside the checkout: the configs cite the repository's own docs/h200 and gpu/ files
    outside = [f"{p.relative_to(REPO)}: {line}" for p in sorted((REPO / "gpu" / "configs").glob("*.toml"))
               for line in p.read_text().splitlines() if "shared/gpu" in line.partition("#")[2]]
    assert not outside, "\n".join(outside)
