"""Two real ``/metrics`` scrapes of one engine → counter deltas → the per-position curve (issue 17 item 2).

Each pair is imported with the real CLI (``dynocell import metrics before.txt after.txt --json``) and
checked two independent ways:

* against the counter deltas computed here directly from the two scrapes with ``prometheus_client``'s own
  text parser (not dynocell's): N = Δ``vllm:spec_decode_num_drafts``, τ = 1 + Δaccepted / N,
  p_i = Δ``…accepted_tokens_per_pos{position=i−1}`` / N (vLLM's unconditional per-position rate,
  ``vllm/v1/spec_decode/metrics.py``);
* against the engine's own ``SpecDecoding metrics`` log lines printed over the window: τ_log = 1 + ΣAccepted /
  ΣN_line with N_line = Drafted / k (k = the number of positions printed), and p_i = Σ rate_i·N_line / ΣN_line
  (the rates are printed to 3 decimals, so p_i agrees to 0.0005 per line's rounding).

The pair always present comes from the reference engine's vLLM surface (``--surface vllm``, as
``examples/tiny-vllm.toml``), started by hand as a real subprocess: scrape, a workload of completions,
wait for the interval line the engine prints when it goes idle, scrape again. Real engine pairs go in
``tests/data/metrics_pairs/<name>/`` (see the README there) and are checked the same way.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from dynocell.engine.acceptance import parse_vllm_spec_lines
from dynocell.engine.reference.launch import start_engine

REPO = Path(__file__).resolve().parents[1]
PAIRS = Path(__file__).parent / "data" / "metrics_pairs"
STORED = sorted(p.name for p in PAIRS.iterdir() if p.is_dir() and (p / "before.txt").is_file()) \
    if PAIRS.is_dir() else []
PROMPTS = ["The harbour master kept a book of every ferry that left at dawn, and one morning",
           "Repeat the line exactly.\nLine: the green lamp stays on until the last train has left the yard.\nCopy:",
           "Count: one, two, three, four, five, six,", "A short note on lighthouses:"]


def _counters(text: str) -> dict[str, float]:
    """``{"name{position=i}": value}`` of the spec-decode counters, by prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if not s.name.startswith("vllm:spec_decode_") or not s.name.endswith("_total"):
                continue
            key = s.name + (f"{{position={s.labels['position']}}}" if "position" in s.labels else "")
            out[key] = out.get(key, 0.0) + s.value  # summed over engines/models
    return out


def _direct(before: str, after: str) -> tuple[float, list[float], int]:
    a, b = _counters(before), _counters(after)
    d = {k: b[k] - a.get(k, 0.0) for k in b}
    n = d["vllm:spec_decode_num_drafts_total"]
    acc = d["vllm:spec_decode_num_accepted_tokens_total"]
    pos = sorted((int(k.split("position=")[1].rstrip("}")), v) for k, v in d.items() if "position=" in k)
    return 1 + acc / n, [v / n for _, v in pos], int(n)


def _from_log(lines: list[str]) -> tuple[float, list[float], int]:
    samples = parse_vllm_spec_lines(lines)
    assert samples, "no SpecDecoding metrics line in the window"
    k = len(samples[0].curve.p)
    ns = [s.drafted / k for s in samples]
    total = sum(ns)
    tau = 1 + sum(s.accepted for s in samples) / total
    p = [sum(s.curve.p[i] * n for s, n in zip(samples, ns)) / total for i in range(k)]
    return tau, p, round(total)


def _workload(c: httpx.Client, prompts: list[str]) -> None:
    for prompt in prompts:
        r = c.post("/v1/completions", json={"model": "m", "prompt": prompt, "max_tokens": 40, "temperature": 0,
                                            "ignore_eos": True})
        assert r.status_code == 200, r.text


def _settle(log: Path, offset: int) -> None:
    """Wait until the engine has printed the interval line it prints once idle (the log stops growing
    and its last line since ``offset`` is a ``SpecDecoding metrics`` line)."""
    last, deadline = b"", time.monotonic() + 120
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = log.read_bytes()[offset:]
        tail = now.rstrip(b"\n").rsplit(b"\n", 1)[-1]
        if now == last and b"SpecDecoding metrics" in tail:
            return
        last = now
    raise AssertionError(f"the engine's log did not settle: {last[-2000:]!r}")


@pytest.fixture(scope="module")
def reference_pair(model_pair, tmp_path_factory):
    """``(before.txt, after.txt, window log lines)`` of a hand-started reference engine on vLLM's surface."""
    d = tmp_path_factory.mktemp("reference-vllm-pair")
    log = d / "server.log"
    eng = start_engine(model_pair.target, [
        "--surface", "vllm", "--served-model-name", "m", "--decode-log-interval", "5",
        "--speculative-algorithm", "STANDALONE", "--speculative-draft-model-path", str(model_pair.draft),
        "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4"], log)
    try:
        with httpx.Client(base_url=eng.url, timeout=120, trust_env=False) as c:
            _workload(c, PROMPTS[:2])  # counters not at zero before the window: the delta is tested
            _settle(log, 0)
            (d / "before.txt").write_text(c.get("/metrics").text)
            offset = len(log.read_bytes())
            _workload(c, PROMPTS)
            _settle(log, offset)
            (d / "after.txt").write_text(c.get("/metrics").text)
        window = log.read_bytes()[offset:].decode().splitlines()
        assert eng.proc.poll() is None
    finally:
        eng.stop()
    return d / "before.txt", d / "after.txt", window


def _import(cli_env: dict[str, str], before: Path, after: Path) -> dict:
    exe = shutil.which("dynocell", path=str(Path(sys.executable).parent))
    p = subprocess.run([exe, "import", "metrics", str(before), str(after), "--json"], env=cli_env, cwd=REPO,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _check(res: dict, before: Path, after: Path, window: list[str] | None) -> None:
    acc = res["acceptance"]
    assert res["scrapes"] == 2 and res["window"].startswith("delta") and acc["source"] == "vllm per-position counters"
    tau, p, n = _direct(before.read_text(), after.read_text())
    assert n > 0 and acc["drafts"] == n
    assert acc["tau"] == pytest.approx(tau, abs=1e-4)
    assert acc["p"] == pytest.approx(p, abs=1e-4) and len(acc["p"]) == len(p)
    assert all(a >= b for a, b in zip(p, p[1:]))  # unconditional: p_1 ≥ p_2 ≥ …
    if window is None:
        return
    log_tau, log_p, log_n = _from_log(window)
    assert log_n == n  # the log's intervals cover exactly the window of the scrapes
    assert log_tau == pytest.approx(tau, abs=1e-9)
    lines = len(parse_vllm_spec_lines(window))
    assert log_p == pytest.approx(p, abs=0.0005 * lines + 1e-9)


@pytest.mark.parametrize("name", ["reference-vllm-surface", *STORED])
def test_two_scrapes_give_the_window_curve(cli_env, request, name):
    """Every pair: the import equals the direct counter deltas and the engine's own log lines."""
    if name == "reference-vllm-surface":
        before, after, window = request.getfixturevalue("reference_pair")
        assert len(parse_vllm_spec_lines(window)) >= 2  # several interval lines: the sum over lines is tested
        assert _counters(before.read_text())["vllm:spec_decode_num_drafts_total"] > 0  # a delta, not since start
    else:
        d = PAIRS / name
        before, after = d / "before.txt", d / "after.txt"
        window = (d / "window.log").read_text().splitlines() if (d / "window.log").is_file() else None
    res = _import(cli_env, before, after)
    _check(res, before, after, window)
    assert 1.0 < res["acceptance"]["tau"] <= 1 + len(res["acceptance"]["p"])
    again = _import(cli_env, before, after)  # the same files twice are one record
    assert again["import_id"] == res["import_id"] and again["created"] is False
