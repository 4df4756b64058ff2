"""Issue 11 on CPU: multi-node plans (render + refuse), rank discovery, and a rank dying under the oracle.

The rank engine is tests/engines/ranked_engine.py: a real subprocess on
127.0.0.1 with two children titled like SGLang 0.5.17's TP=2 schedulers.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from dynocell.engine.adapters import LaunchSpec, pick_free_port
from dynocell.engine.client import EngineClient
from dynocell.engine.config import parse_config
from dynocell.engine.health import check_health
from dynocell.engine.ranks import expected_ranks, find_ranks, rank_status
from dynocell.engine.supervisor import Supervisor, process_alive
from dynocell.errors import ConfigError
from dynocell.runbooks.plan import plan_config

HERE = Path(__file__).parent
REPO = HERE.parent
RANKED = HERE / "engines" / "ranked_engine.py"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONUNBUFFERED": "1"}
NCCL = {"NCCL_NVLS_ENABLE": "0", "NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_HCA": "mlx5_0,mlx5_1"}


def toml_for(nodes: list[tuple[str, int, int]], tp: int, pp: int = 1, addr: str | None = "10.0.0.1:5000",
             extra: str = "") -> str:
    lines = ['engine = "sglang"', 'model_path = "Qwen/Qwen3-8B"', "port = 30000"]
    if addr:
        lines.append(f'dist_init_addr = "{addr}"')
    lines.append(extra)
    lines += ["[parallel]", f"tp_size = {tp}", f"pp_size = {pp}", "[env]"]
    lines += [f'{k} = "{v}"' for k, v in NCCL.items()]
    lines.append('HF_TOKEN = "hf_secret"')
    for host, rank, gpus in nodes:
        lines += ["[[nodes]]", f'host = "{host}"', f"node_rank = {rank}", f"gpus = {gpus}"]
    return "\n".join(lines) + "\n"


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


# ---------------------------------------------------------------- rendering

@pytest.mark.parametrize("n,tp,pp", [(1, 8, 1), (2, 8, 2), (4, 16, 2)])
def test_plan_renders_every_node(n, tp, pp):
    gpus = tp * pp // n
    cfg = parse_config(toml_for([(f"gpu{i}", i, gpus) for i in reversed(range(n))], tp, pp), source="t.toml")
    rows = plan_config(cfg, python="/opt/py/bin/python")
    assert [r["node_rank"] for r in rows] == list(range(n))
    assert [r["host"] for r in rows] == [f"gpu{i}" for i in range(n)]
    for r in rows:
        argv = r["argv"]
        assert argv[:3] == ["/opt/py/bin/python", "-m", "sglang.launch_server"]
        assert flag(argv, "--tp-size") == str(tp)
        assert (flag(argv, "--pp-size") == str(pp)) if pp > 1 else "--pp-size" not in argv
        assert flag(argv, "--nnodes") == str(n) and flag(argv, "--node-rank") == str(r["node_rank"])
        assert flag(argv, "--dist-init-addr") == "10.0.0.1:5000" and flag(argv, "--port") == "30000"
        for k, v in NCCL.items():
            assert r["env"][k] == v and f"{k}={shlex.quote(v)}" in r["command"]
        assert r["env"]["HF_TOKEN"] == "***" and "hf_secret" not in r["command"]
        assert "PATH" not in r["env"] and "HOME" not in r["env"]  # nothing of this host's environment
        assert r["command"].endswith(r["argv_string"])
        # the printed command parses back to the env prefixes + the exact argv
        words = shlex.split(r["command"])
        assert words[len(r["env"]):] == argv


def test_single_node_config_without_nodes_plans_one_local_command():
    cfg = parse_config('engine = "sglang"\nmodel_path = "Qwen/Qwen3-8B"\n[parallel]\ntp_size = 2\n'
                       '[env]\nNCCL_NVLS_ENABLE = "0"\n', source="t.toml")
    (row,) = plan_config(cfg, python="py")
    assert row["node_rank"] == 0 and "--nnodes" not in row["argv"] and flag(row["argv"], "--tp-size") == "2"
    assert row["command"].startswith("NCCL_NVLS_ENABLE=0 ") and flag(row["argv"], "--port") == "30000"


@pytest.mark.parametrize("nodes,tp,addr,field,what", [
    ([("a", 0, 4), ("b", 2, 4)], 8, "x:1", "nodes", "exactly once"),          # rank 1 missing
    ([("a", 0, 4), ("b", 0, 4)], 8, "x:1", "nodes", "exactly once"),          # rank 0 twice
    ([("a", 0, 4), ("b", 1, 2)], 8, "x:1", "nodes", "tp_size × pp_size = 8"),  # 6 GPUs for tp 8
    ([("a", 0, 4), ("b", 1, 4)], 8, None, "dist_init_addr", "required"),
])
def test_inconsistent_plans_are_refused_naming_the_field(nodes, tp, addr, field, what):
    with pytest.raises(ConfigError) as ei:
        parse_config(toml_for(nodes, tp, addr=addr), source="bad.toml")
    e = ei.value
    assert field in str(e) and what in str(e) and "bad.toml" in str(e)
    assert e.hint


def test_cli_plan_prints_each_node_and_refuses_bad_configs(tmp_path, cli_env):
    good = tmp_path / "two.toml"
    good.write_text(toml_for([("gpu0", 0, 4), ("gpu1", 1, 4)], 8))
    bad = tmp_path / "bad.toml"
    bad.write_text(toml_for([("gpu0", 0, 4), ("gpu1", 1, 2)], 8))
    mod = "dynocell.cli.commands.plan"
    code = ("import sys; from dynocell.cli import app as a\n"
            f"if {mod!r} not in a.COMMAND_MODULES: a.COMMAND_MODULES += ({mod!r},)\n"
            "sys.exit(a.run(sys.argv[1:]))")

    def cli(*args):
        return subprocess.run([sys.executable, "-c", code, *args], env=cli_env, cwd=REPO, capture_output=True,
                              text=True, timeout=120, stdin=subprocess.DEVNULL)

    p = cli("plan", str(good))
    assert p.returncode == 0, p.stderr
    assert "# node 0 on gpu0" in p.stdout and "# node 1 on gpu1" in p.stdout
    assert "--node-rank 1" in p.stdout and "NCCL_NVLS_ENABLE=0" in p.stdout and "hf_secret" not in p.stdout
    p = cli("plan", str(good), "--json")
    rows = json.loads(p.stdout)
    assert [r["node_rank"] for r in rows] == [0, 1] and rows[1]["env"]["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    p = cli("plan", str(bad))
    assert p.returncode == 2 and "nodes" in p.stderr and "tp_size × pp_size" in p.stderr


def test_expected_ranks():
    def cfg(extra="", **par):
        body = "\n".join(f"{k} = {v}" for k, v in par.items())
        return parse_config(f'engine = "sglang"\nmodel_path = "Qwen/Qwen3-8B"\n{extra}\n[parallel]\n{body}\n',
                            source="t")
    assert expected_ranks(cfg(tp_size=2)) == 2
    assert expected_ranks(cfg(tp_size=4, pp_size=2)) == 8
    assert expected_ranks(cfg(tp_size=2, dp_size=2)) == 4
    assert expected_ranks(cfg('extra_args = ["--enable-dp-attention"]', tp_size=4, dp_size=2)) == 4
    two = parse_config(toml_for([("a", 0, 6), ("b", 1, 2)], 8), source="t")
    assert expected_ranks(two, node_rank=0) == 6 and expected_ranks(two, node_rank=1) == 2
    ref = parse_config('engine = "reference"\nmodel_path = "Qwen/Qwen3-8B"\n', source="t")
    assert expected_ranks(ref) == 0


# ---------------------------------------------------------------- supervised rank engine

def ranked_spec(pid_file: Path, *extra: str) -> LaunchSpec:
    port = pick_free_port("127.0.0.1")
    argv = [sys.executable, str(RANKED), "--port", str(port), "--pid-file", str(pid_file), *extra]
    return LaunchSpec(argv=argv, env=dict(ENV), port=port, host="127.0.0.1", engine="sglang")


def read_pids(pid_file: Path, want: int, timeout_s: float = 10.0) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pid_file.exists():
            lines = pid_file.read_text().split("\n")
            pairs = [ln.split() for ln in lines if ln.strip()]
            if len(pairs) >= want:
                return {name: int(pid) for name, pid in pairs}
        time.sleep(0.05)
    raise AssertionError(f"no {want} pids in {pid_file}")


def wait_for(pred, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not pred():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_dead_rank_degrades_then_stop_leaves_nothing(tmp_path):
    pid_file = tmp_path / "ranks.txt"
    sup = Supervisor("sglang")
    sup.start(ranked_spec(pid_file, "--ranks", "2", "--detokenizer"), tmp_path / "boot.log")
    try:
        assert sup.wait_ready(timeout_s=20).ok
        pids = read_pids(pid_file, 3)
        client = EngineClient(f"http://127.0.0.1:{sup.spec.port}", 5.0)
        wait_for(lambda: rank_status(sup.pid, sup.pgid, 2).alive == 2)

        st = rank_status(sup.pid, sup.pgid, 2)
        assert st.ok and [r.name for r in st.found] == ["detokenizer", "scheduler_TP0", "scheduler_TP1"]
        v = check_health(client, process_alive=True, ranks=st)
        assert v.verdict == "healthy", v.reason
        assert [c.name for c in v.checks][:3] == ["process", "ranks", "health"]

        os.kill(pids["sglang::scheduler_TP1"], signal.SIGKILL)  # one rank dies; the engine does not reap it
        wait_for(lambda: not process_alive(pids["sglang::scheduler_TP1"]))
        st = rank_status(sup.pid, sup.pgid, 2)
        assert not st.ok and st.alive == 1 and st.missing == 0 and len(st.dead) == 1
        assert st.dead[0].startswith("scheduler")  # a zombie keeps only its 15-char comm
        v = check_health(client, process_alive=sup.poll().value == "ready", ranks=st)
        assert v.verdict == "degraded" and v.failed == ["ranks"], v.reason
        assert "1/2 ranks alive (scheduler_TP0)" in v.reason and "dead" in v.reason
        assert any(c.name == "health" and c.ok for c in v.checks)  # HTTP still answers

        os.kill(pids["sglang::scheduler_TP0"], signal.SIGKILL)  # no rank left → down
        wait_for(lambda: not process_alive(pids["sglang::scheduler_TP0"]))
        v = check_health(client, process_alive=True, ranks=rank_status(sup.pid, sup.pgid, 2))
        assert v.verdict == "down" and v.failed == ["ranks"]
    finally:
        res = sup.stop(grace_s=5)
        sup.close()
    assert not res.survivors
    for pid in [sup.pid, *pids.values()]:
        assert not process_alive(pid)
    assert find_ranks(sup.pid, sup.pgid) == [] or all(not r.alive for r in find_ranks(sup.pid, sup.pgid))


def test_reaped_rank_is_missing(tmp_path):
    pid_file = tmp_path / "ranks.txt"
    sup = Supervisor("sglang")
    sup.start(ranked_spec(pid_file, "--ranks", "2", "--reap"), tmp_path / "boot.log")
    try:
        assert sup.wait_ready(timeout_s=20).ok
        pids = read_pids(pid_file, 2)
        wait_for(lambda: rank_status(sup.pid, sup.pgid, 2).alive == 2)
        os.kill(pids["sglang::scheduler_TP0"], signal.SIGKILL)
        wait_for(lambda: not psutil.pid_exists(pids["sglang::scheduler_TP0"]))
        st = rank_status(sup.pid, sup.pgid, 2)
        assert st.missing == 1 and not st.dead and [r.name for r in st.found] == ["scheduler_TP1"]
        assert "1 missing" in st.reason
    finally:
        res = sup.stop(grace_s=5)
        sup.close()
    assert not res.survivors and not any(process_alive(p) for p in pids.values())
