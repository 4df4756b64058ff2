"""Workload files: bundled ones load, bad files name the field, lengths, caps and determinism."""

from __future__ import annotations

import tomllib

import pytest

from dynocell.engine.workloads import BUNDLED, bundled_path, default_temperature, load_workload
from dynocell.errors import UserError

CLASSES = {"code", "prose", "repetition", "arithmetic", "chinese"}


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_workloads_load_with_every_class(name):
    w = load_workload(name)
    assert set(w.classes) == CLASSES
    for tc in w.classes.values():
        assert len(tc.prompts) >= 3 and tc.material.strip()
    levels = w.levels()
    assert levels[0].name == "acceptance" and set(levels[0].classes) == CLASSES
    for lv in levels:
        assert lv.num_requests >= 5 * lv.concurrency
        reqs = w.requests(lv, 32768)
        assert len(reqs) == lv.num_requests and [r.index for r in reqs] == list(range(len(reqs)))
        assert all(r.max_new_tokens == lv.output_tokens and r.ignore_eos for r in reqs)


def test_default_is_small_and_long_has_the_ladder():
    d, long = load_workload(None), load_workload("long")
    assert d.name == "default" and load_workload(bundled_path("default")) == d
    assert [lv.concurrency for lv in d.levels() if lv.purpose == "throughput"] == [1, 4]
    total_tokens = sum(lv.num_requests * lv.output_tokens for lv in d.levels())
    assert total_tokens <= 3000  # ~2 minutes on the CPU reference engine
    assert long.acceptance.input_tokens == [128, 2048, 8192]
    assert {lv.input_tokens[0] for lv in long.levels() if lv.purpose == "throughput"} == {128, 2048, 8192}


def test_temperature_defaults_to_the_reference_pair():
    assert load_workload().temperature == default_temperature()
    try:
        from dynocell.engine.reference.nets import DEFAULT_TEMPERATURE
    except ImportError:
        DEFAULT_TEMPERATURE = 0.8
    assert default_temperature() == DEFAULT_TEMPERATURE


def test_acceptance_requests_grouped_by_class():
    w = load_workload()
    reqs = w.requests("acceptance", 1024)
    classes = [r.text_class for r in reqs]
    assert classes == sorted(classes, key=list(w.classes).index)  # contiguous, workload order
    assert {c: classes.count(c) for c in CLASSES} == {c: 3 for c in CLASSES}
    # several distinct prompts per class
    assert len({r.prompt for r in reqs if r.text_class == "prose"}) == 3


def test_lengths_follow_the_target_and_the_context_cap():
    w = load_workload("long")
    lv = w.level("in8192-c1")
    uncapped = w.requests(lv, None)
    for r in uncapped:
        assert 8192 - 64 <= r.est_prompt_tokens <= 8192
        assert r.est_prompt_tokens == len(r.prompt.encode())  # 1 token per byte by default
    capped = w.requests(lv, 4096)
    cap = 4096 - lv.output_tokens - w.context_margin
    assert all(r.input_tokens_capped == cap and r.est_prompt_tokens <= cap for r in capped)
    assert all(r.input_tokens_target == 8192 for r in capped)
    # calibrated ratio: fewer tokens per byte -> more text for the same target
    calibrated = w.requests(lv, None, tokens_per_byte={"chinese": 0.5})
    zh = [r for r in calibrated if r.text_class == "chinese"]
    assert zh and all(8192 - 64 <= r.est_prompt_tokens <= 8192 for r in zh)
    assert all(16000 <= len(r.prompt.encode()) <= 16384 for r in zh)
    # the short rung is never padded past the target
    short = w.requests(w.level("in128-c1"), 1024)
    assert all(r.est_prompt_tokens <= max(128, len(r.prompt.encode())) for r in short)
    for r in short:  # padding happens at the front, the prompt itself is sent whole and last
        assert any(r.prompt.endswith(p) for p in w.classes[r.text_class].prompts)


def test_context_too_small_is_a_user_error():
    w = load_workload()
    with pytest.raises(UserError, match="context_length=70"):
        w.requests("c1", 70)
    with pytest.raises(UserError, match="no level 'c99'"):
        w.requests("c99", 1024)


def test_deterministic_for_a_seed(tmp_path):
    w = load_workload("long")
    a = w.requests("in2048-c16", 8192)
    assert a == w.requests("in2048-c16", 8192)
    assert w.sha256 == load_workload("long").sha256
    text = bundled_path("long").read_text().replace("seed = 20261201", "seed = 7")
    (tmp_path / "w.toml").write_text(text)
    other = load_workload(tmp_path / "w.toml")
    assert other.sha256 != w.sha256
    b = other.requests("in2048-c16", 8192)
    assert [r.prompt for r in a] != [r.prompt for r in b]
    assert len(a) == len(b)


def _write(tmp_path, text: str):
    p = tmp_path / "bad.toml"
    p.write_text(text)
    return p


def test_bad_files_name_file_and_field(tmp_path):
    base = bundled_path("default").read_text()
    p = _write(tmp_path, base.replace("concurrency = [1, 4]", "concurrency = [0, 4]"))
    with pytest.raises(UserError) as e:
        load_workload(p)
    assert str(p) in e.value.message and "throughput.concurrency" in e.value.message and e.value.hint

    p = _write(tmp_path, base.replace("output_tokens = 64\nrequests_per_class",
                                      "output_tokens = 'many'\nrequests_per_class"))
    with pytest.raises(UserError, match=r"acceptance\.output_tokens"):
        load_workload(p)

    p = _write(tmp_path, base.replace("ignore_eos = true", "ignore_eos = true\nwarmpu = 2"))
    with pytest.raises(UserError, match="warmpu"):
        load_workload(p)

    p = _write(tmp_path, base.replace("\n[acceptance]\n", "\n[acceptance]\nclasses = ['poetry']\n"))
    with pytest.raises(UserError, match="poetry"):
        load_workload(p)

    p = _write(tmp_path, 'name = "x"\n[classes.code]\nmaterial = "m"\nprompts = []\n')
    with pytest.raises(UserError, match=r"classes\.code\.prompts"):
        load_workload(p)

    p = _write(tmp_path, "name = [unclosed\n")
    with pytest.raises(UserError, match="not valid TOML"):
        load_workload(p)

    with pytest.raises(UserError, match="cannot read workload file"):
        load_workload(tmp_path / "missing.toml")
    with pytest.raises(UserError, match="no bundled workload"):
        bundled_path("huge")


def test_payloads():
    w = load_workload()
    r = w.requests("c1", 1024)[0]
    g = r.payload()
    assert g == {"text": r.prompt, "stream": True,
                 "sampling_params": {"max_new_tokens": 64, "temperature": w.temperature, "ignore_eos": True}}
    o = r.payload("openai", model="m")
    assert o["prompt"] == r.prompt and o["max_tokens"] == 64 and o["stream_options"] == {"include_usage": True}
    assert o["ignore_eos"] is True and o["model"] == "m"
    # the bundled files are plain TOML an operator can copy
    assert tomllib.loads(bundled_path("default").read_text())["name"] == "default"


def test_calibration_texts_fit_the_model_context():
    """Issue 20, item 9: the token calibration never sends more than the context holds (a byte-level
    tokenizer gives one token per byte, the worst case); 1,024 characters of Chinese were 1,287
    tokens against a 1,024-token context on the H200."""
    from dynocell.engine.reference.nets import build_tokenizer
    from dynocell.engine.workloads import load_workload

    w = load_workload(None)
    byte_tok = build_tokenizer(bpe_vocab=0)
    for ctx in (None, 1024, 300):
        texts = w.calibration_texts(ctx)
        assert set(texts) == set(w.classes)
        for cls, text in texts.items():
            n_bytes = len(text.encode())
            assert 0 < n_bytes <= 1024, (cls, n_bytes)
            if ctx is not None:
                assert len(byte_tok.encode(text).ids) + 1 < ctx, (cls, ctx)


def test_extends_takes_the_base_and_overrides_what_differs(tmp_path):
    """A workload that extends another keeps the base's classes and tables, key by key."""
    base = load_workload()
    (tmp_path / "mid.toml").write_text('extends = "default"\nname = "mid"\n[throughput]\nconcurrency = [1, 8]\n')
    (tmp_path / "top.toml").write_text(
        'extends = "mid.toml"\nname = "top"\ntemperature = 0.0\n'
        '[acceptance]\noutput_tokens = 96\n[classes.extra]\nmaterial = "more text"\nprompts = ["one more class"]\n')
    w = load_workload(tmp_path / "top.toml")
    assert (w.name, w.temperature) == ("top", 0.0)
    assert w.throughput.concurrency == [1, 8]  # from the middle file
    assert w.throughput.output_tokens == base.throughput.output_tokens  # from the bundled default
    assert w.acceptance.output_tokens == 96 and w.acceptance.requests_per_class == base.acceptance.requests_per_class
    assert set(w.classes) == set(base.classes) | {"extra"}
    assert w.classes["code"] == base.classes["code"]


def test_gpu_greedy_workload_is_the_default_at_temperature_zero():
    """gpu/workloads/greedy.toml was a full copy of the default; now it extends it, same content."""
    from pathlib import Path

    greedy = load_workload(Path(__file__).parents[1] / "gpu" / "workloads" / "greedy.toml")
    base = load_workload()
    assert greedy.temperature == 0.0
    assert greedy.model_dump(exclude={"name", "description", "temperature"}) == base.model_dump(
        exclude={"name", "description", "temperature"})


@pytest.mark.parametrize("text, needle", [
    ('extends = 3\nname = "x"\n', "extends must be a workload name or a path"),
    ('extends = "self.toml"\nname = "x"\n', "loops back"),
    ('extends = "missing.toml"\nname = "x"\n', "cannot read workload file"),
])
def test_bad_extends_names_the_file(tmp_path, text, needle):
    p = tmp_path / "self.toml"
    p.write_text(text)
    with pytest.raises(UserError) as ei:
        load_workload(p)
    assert needle in str(ei.value) and "self.toml" in str(ei.value)


def test_calibrated_workload_uses_its_ratios_and_keeps_its_identity():
    """Issue 23: the bench step's calibrated workload is Workload.calibrated(), no attribute proxy —
    the same fields and sha256, requests at the measured ratios unless a call passes its own."""
    w = load_workload("long")
    lv = w.level("in8192-c1")
    cw = w.calibrated({"chinese": 0.5})
    assert type(cw) is type(w) and cw.model_dump() == w.model_dump() and cw.sha256 == w.sha256
    assert w.tokens_per_byte is None and cw.tokens_per_byte == {"chinese": 0.5}
    assert cw.requests(lv, None) == w.requests(lv, None, tokens_per_byte={"chinese": 0.5})
    assert cw.requests(lv, None) != w.requests(lv, None)
    assert cw.requests(lv, None, tokens_per_byte=1.0) == w.requests(lv, None)
    assert w.requests(lv, None) == w.requests(lv, None, tokens_per_byte=None)  # the original is untouched
