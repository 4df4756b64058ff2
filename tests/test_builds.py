"""Engine builds (issue 6): overlay, strict patches, drift, import verification, the bundled patch.

The real-package tests pip-install sglang 0.5.17 from PyPI WITHOUT dependencies
into a temporary target folder (no GPU, no torch needed to build); the wheel is
cached in ``<repo>/.cache/wheels/`` (git-ignored) so it is downloaded once.
When PyPI is unreachable and the cache is empty, those tests are skipped.
Everything else uses small real packages written into tmp folders.
"""

from __future__ import annotations

import ast
import difflib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from dynocell.engine import builds as eb
from dynocell.errors import EngineError, NotFound, UserError

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".cache" / "wheels"
DATA = Path(__file__).parent / "data"
PATCH_ID = "spec-per-position-metrics"
COLLECTOR = "sglang/srt/observability/metrics_collector.py"
PROCESSOR = "sglang/srt/managers/scheduler_components/batch_result_processor.py"
UNTOUCHED = "sglang/srt/server_args.py"


# ---------------------------------------------------------------- fixtures

def sglang_wheel() -> Path:
    """The cached sglang 0.5.17 wheel (downloaded with pip, --no-deps, when missing; skip when PyPI is not
    reachable)."""
    WHEELS.mkdir(parents=True, exist_ok=True)
    wheels = sorted(WHEELS.glob("sglang-0.5.17-*.whl"))
    if not wheels:
        proc = subprocess.run([sys.executable, "-m", "pip", "download", "sglang==0.5.17", "--no-deps",
                               "-d", str(WHEELS), "-q"], capture_output=True, text=True, timeout=600)
        wheels = sorted(WHEELS.glob("sglang-0.5.17-*.whl"))
        if proc.returncode != 0 or not wheels:
            pytest.skip("sglang 0.5.17 wheel not cached and PyPI unreachable: "
                        + (proc.stderr.strip().splitlines() or ["?"])[-1])
    return wheels[-1]


@pytest.fixture(scope="session")
def sglang_site(tmp_path_factory) -> Path:
    """A site folder with sglang 0.5.17 pip-installed (--no-deps) from the cached/downloaded wheel."""
    wheel = sglang_wheel()
    site = tmp_path_factory.mktemp("sglang-site")
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q",
                           "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:  # e.g. a wheel tag for another Python: the files are what matter, unpack it
        import zipfile

        with zipfile.ZipFile(wheel) as z:
            z.extractall(site)
    assert (site / "sglang" / "__init__.py").is_file()
    return site


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


@pytest.fixture(scope="session")
def real_build(sglang_site, tmp_path_factory):
    """(build_dir, manifest) of sglang 0.5.17 + the bundled patch, built once into a session folder."""
    dist = eb.locate_installed(sys.executable, "sglang", env={"PYTHONPATH": str(sglang_site)})
    plan = eb.plan_build(dist, eb.resolve_patches([PATCH_ID]))
    return eb.materialize(plan, tmp_path_factory.mktemp("builds"))


def make_fake_site(root: Path, version: str = "0.5.17", files: dict[str, str] | None = None,
                   init: str = "") -> Path:
    """A real, importable package ``sglang`` with distribution metadata, under ``root/site``."""
    site = root / "site"
    pkg = site / "sglang"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(init)
    for rel, text in (files or {}).items():
        p = site / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    di = site / f"sglang-{version}.dist-info"
    di.mkdir()
    (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
    return site


def make_patch(root: Path, pid: str, rel: str, old: str, new: str, versions=("0.5.17",),
               base_sha: str | None = None) -> Path:
    """A patch folder whose diff turns ``old`` into ``new`` at ``rel``."""
    folder = root / pid
    folder.mkdir(parents=True)
    diff = "".join(difflib.unified_diff(old.splitlines(True), new.splitlines(True), f"a/{rel}", f"b/{rel}"))
    (folder / "patch.diff").write_text(diff)
    (folder / "manifest.toml").write_text(textwrap.dedent(f"""\
        id = "{pid}"
        description = "test patch"
        evidence = "tests"
        dist = "sglang"
        versions = {json.dumps(list(versions))}
        [[files]]
        path = "{rel}"
        base_sha256 = "{base_sha or eb.sha256_bytes(old.encode())}"
        patched_sha256 = "{eb.sha256_bytes(new.encode())}"
        """))
    return folder


OLD = "def f():\n    return 1\n\n\ndef g():\n    return 2\n"
NEW = "def f():\n    return 10\n\n\ndef g():\n    return 2\n"


# ---------------------------------------------------------------- the real sglang 0.5.17

def test_build_from_pip_installed_sglang(cell, sglang_site):
    from dynocell.runbooks import builds

    r = builds.build(cell, patches=[PATCH_ID], env={"PYTHONPATH": str(sglang_site)})
    assert r["created"] and r["build_hash"].startswith("sha256:")
    assert (r["base_dist"], r["base_version"], r["patches"]) == ("sglang", "0.5.17", [PATCH_ID])
    build_dir = Path(r["path"])
    assert build_dir == cell.settings.builds_dir / r["build_hash"].removeprefix("sha256:")
    assert r["pythonpath"] == str(build_dir / "site")
    manifest = eb.read_manifest(build_dir)
    ident = manifest["identity"]
    assert eb.compute_build_hash(ident) == r["build_hash"]
    assert str(build_dir) not in json.dumps(ident) and str(sglang_site) not in json.dumps(ident)
    assert ident["base"] == {"dist": "sglang", "version": "0.5.17", "files": len(manifest["files"]),
                             "tree_sha256": ident["base"]["tree_sha256"]}
    assert ident["python"]["version"] == "%d.%d.%d" % sys.version_info[:3]
    patch = eb.resolve_patches([PATCH_ID])[0]
    assert [f["path"] for f in ident["patches"][0]["files"]] == [PROCESSOR, COLLECTOR]
    site = build_dir / "site"
    for f in patch.files:  # patched: real copies with the manifest's patched sha256
        assert manifest["files"][f.path] == f.patched_sha256 == eb.sha256_file(site / f.path)
        assert eb.sha256_file(sglang_site / f.path) == f.base_sha256  # the pristine file is untouched
        assert os.stat(site / f.path).st_ino != os.stat(sglang_site / f.path).st_ino
        assert os.stat(site / f.path).st_nlink == 1
    st_o, st_b = os.stat(site / UNTOUCHED), os.stat(sglang_site / UNTOUCHED)  # untouched: hard links
    assert (st_o.st_ino, st_o.st_dev) == (st_b.st_ino, st_b.st_dev) and st_o.st_nlink >= 2
    local = manifest["local"]
    assert local["copies"] == 0 and local["link_mode"] == "hardlink"
    assert local["hardlinks"] == len(manifest["files"]) - 2
    assert not list(site.rglob("__pycache__"))
    ast.parse((site / COLLECTOR).read_text())
    ast.parse((site / PROCESSOR).read_text())
    # the store row
    row = builds.show_build(cell, r["build_hash"][7:19])
    assert row["patches"] == [PATCH_ID] and row["base_version"] == "0.5.17" and row["present"]
    assert "files" not in row["manifest"] and row["patch_details"][0]["description"]
    assert [b["build_hash"] for b in builds.list_builds(cell)] == [r["build_hash"]]
    # same inputs → same hash, nothing rebuilt; verify is clean
    again = builds.build(cell, patches=[PATCH_ID], env={"PYTHONPATH": str(sglang_site)})
    assert again["build_hash"] == r["build_hash"] and not again["created"]
    v = builds.verify_build(cell, r["build_hash"])
    assert v["ok"] and v["checked"] == len(manifest["files"]) and v["drift"] == []
    # no patches is a different build of the same base
    plain = builds.build(cell, patches=[], env={"PYTHONPATH": str(sglang_site)})
    assert plain["build_hash"] != r["build_hash"]


def test_patched_collector_exports_counters_position_curve_reads(real_build):
    """Run the patch's new collector code (extracted from the built file) on real prometheus counters."""
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client import Counter as PromCounter

    from dynocell.engine.metrics import VERIFY_STEPS, parse_metrics, position_curve

    build_dir, _ = real_build
    tree = ast.parse((build_dir / "site" / COLLECTOR).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "SchedulerMetricsCollector")
    init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    method = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "increment_spec_verify_steps")
    wanted = {"spec_verify_steps_total", "spec_accepted_drafts_at_position_total"}
    stmts = [n for n in ast.walk(init) if isinstance(n, ast.Assign)
             and isinstance(n.targets[0], ast.Attribute) and n.targets[0].attr in wanted]
    assert len(stmts) == 2
    reg = CollectorRegistry()

    class Collector:
        pass

    obj = Collector()
    labels = {"model_name": "m", "tp_rank": "0"}
    obj.labels = labels
    ns = {"self": obj, "labels": labels, "List": list,
          "Counter": lambda **kw: PromCounter(registry=reg, **kw)}
    exec(compile(ast.Module(body=stmts, type_ignores=[]), "collector-init", "exec"), ns)
    exec(compile(ast.Module(body=[method], type_ignores=[]), "collector-method", "exec"), ns)
    inc = ns["increment_spec_verify_steps"].__get__(obj)
    # two batches, 3 draft positions (num_draft_tokens 4): correct drafts per request
    inc([3, 0, 1], max_drafts=3)
    inc([2, 3], max_drafts=3)
    snap = parse_metrics(generate_latest(reg).decode())
    assert snap.sum(VERIFY_STEPS) == 5
    curve = position_curve(snap)
    # p_i = #steps with >= i correct drafts / steps: [3,0,1,2,3] → p1 4/5, p2 3/5, p3 2/5
    assert curve is not None and curve.steps == 5
    assert [round(p, 6) for p in curve.p] == [0.8, 0.6, 0.4]
    # all positions exported even when none reached them
    inc([0], max_drafts=3)
    text = generate_latest(reg).decode()
    assert 'sglang:spec_accepted_drafts_at_position_total{model_name="m",position="3",tp_rank="0"} 2.0' in text


def test_patch_diff_applies_exactly_to_pristine_files(sglang_site):
    patch = eb.resolve_patches([PATCH_ID])[0]
    diffs = {fd.path: fd for fd in eb.parse_unified_diff(patch.diff)}
    for f in patch.files:
        text = (sglang_site / f.path).read_text()
        assert eb.sha256_bytes(text.encode()) == f.base_sha256
        assert eb.sha256_bytes(eb.apply_unified_diff(text, diffs[f.path]).encode()) == f.patched_sha256
        # one line more at the top: no offset search, refused
        with pytest.raises(UserError, match="does not match|lands at line"):
            eb.apply_unified_diff("# moved\n" + text, diffs[f.path])


# ---------------------------------------------------------------- refusals

def test_base_hash_mismatch_is_refused_naming_file_hashes_version(tmp_path, cell):
    from dynocell.runbooks import builds

    rel = "sglang/mod.py"
    site = make_fake_site(tmp_path, files={rel: OLD.replace("return 2", "return 3")})  # not the patch's base
    make_patch(tmp_path / "patches", "p1", rel, OLD, NEW)
    installed = eb.sha256_file(site / rel)
    with pytest.raises(UserError) as ei:
        builds.build(cell, patches=[str(tmp_path / "patches" / "p1")], env={"PYTHONPATH": str(site)})
    msg = str(ei.value)
    assert rel in msg and installed in msg and eb.sha256_bytes(OLD.encode()) in msg and "0.5.17" in msg
    assert "refusing" in msg
    assert not any(cell.settings.builds_dir.glob("[0-9a-f]*"))  # nothing built
    assert builds.list_builds(cell) == []


def test_wrong_version_and_unknown_patch_are_refused(tmp_path, cell):
    from dynocell.runbooks import builds

    rel = "sglang/mod.py"
    site = make_fake_site(tmp_path, version="0.5.16", files={rel: OLD})
    make_patch(tmp_path / "patches", "p1", rel, OLD, NEW)
    with pytest.raises(UserError, match=r"targets sglang 0\.5\.17.*sglang 0\.5\.16"):
        builds.build(cell, patches=[str(tmp_path / "patches" / "p1")], env={"PYTHONPATH": str(site)})
    with pytest.raises(NotFound, match="no patch named 'nope'"):
        builds.build(cell, patches=["nope"], env={"PYTHONPATH": str(site)})
    with pytest.raises(UserError, match="not installed"):
        eb.locate_installed(sys.executable, "sglang", env={"PYTHONPATH": str(tmp_path / "empty")})


def test_manifest_patched_hash_must_match(tmp_path):
    rel = "sglang/mod.py"
    site = make_fake_site(tmp_path, files={rel: OLD})
    folder = make_patch(tmp_path / "patches", "p1", rel, OLD, NEW)
    m = folder / "manifest.toml"
    m.write_text(m.read_text().replace(eb.sha256_bytes(NEW.encode()), "0" * 64))
    dist = eb.locate_installed(sys.executable, "sglang", env={"PYTHONPATH": str(site)})
    with pytest.raises(UserError, match="hashes to .* the manifest says 0000"):
        eb.plan_build(dist, [eb.load_patch(folder)])


def test_stacked_patches_apply_in_order(tmp_path):
    rel = "sglang/mod.py"
    mid = NEW
    last = NEW.replace("return 2", "return 20")
    site = make_fake_site(tmp_path, files={rel: OLD})
    p1 = eb.load_patch(make_patch(tmp_path / "patches", "p1", rel, OLD, mid))
    p2 = eb.load_patch(make_patch(tmp_path / "patches", "p2", rel, mid, last))
    dist = eb.locate_installed(sys.executable, "sglang", env={"PYTHONPATH": str(site)})
    plan = eb.plan_build(dist, [p1, p2])
    assert plan.patched[rel].decode() == last
    with pytest.raises(UserError, match="expects base sha256"):  # wrong order: p2's base is p1's output
        eb.plan_build(dist, [p2, p1])
    assert eb.plan_build(dist, [p1]).build_hash != plan.build_hash


# ---------------------------------------------------------------- drift

def test_tampered_overlay_reports_drift(tmp_path, cell):
    from dynocell.runbooks import builds

    rel = "sglang/mod.py"
    site = make_fake_site(tmp_path, files={rel: OLD, "sglang/other.py": "X = 1\n", "sglang/sub/deep.py": ""})
    make_patch(tmp_path / "patches", "p1", rel, OLD, NEW)
    r = builds.build(cell, patches=[str(tmp_path / "patches" / "p1")], env={"PYTHONPATH": str(site)})
    overlay = Path(r["pythonpath"])
    assert builds.verify_build(cell, r["build_hash"])["ok"]
    (overlay / rel).write_text(NEW + "# tampered\n")  # a patched (copied) file edited
    (overlay / "sglang/sub/deep.py").unlink()  # a linked file removed (the base keeps its copy)
    (overlay / "sglang/extra.py").write_text("")
    (overlay / "sglang/__pycache__").mkdir()
    (overlay / "sglang/__pycache__/mod.cpython-311.pyc").write_bytes(b"ignored")
    v = builds.verify_build(cell, r["build_hash"])
    assert not v["ok"]
    kinds = {(d["kind"], d["path"]) for d in v["drift"]}
    assert kinds == {("modified", rel), ("missing", "sglang/sub/deep.py"), ("extra", "sglang/extra.py")}
    mod = next(d for d in v["drift"] if d["kind"] == "modified")
    assert mod["expected"] == eb.sha256_bytes(NEW.encode()) and mod["actual"] == eb.sha256_file(overlay / rel)
    assert (site / "sglang/sub/deep.py").is_file()
    # an edited manifest.json (its file list) is drift too
    mpath = Path(r["path"]) / "manifest.json"
    m = json.loads(mpath.read_text())
    m["files"][rel] = eb.sha256_file(overlay / rel)
    mpath.write_text(json.dumps(m))
    assert any(d["kind"] == "manifest" for d in builds.verify_build(cell, r["build_hash"])["drift"])
    # ensure_build refuses a drifted build
    from dynocell.engine.config import EngineConfig

    cfg = EngineConfig.model_validate({"engine": "sglang", "model_path": "/m",
                                       "patches": [str(tmp_path / "patches" / "p1")],
                                       "env": {"PYTHONPATH": str(site)}})
    with pytest.raises(UserError, match="has drifted"):
        builds.ensure_build(cell, cfg)


# ---------------------------------------------------------------- import verification

def test_verify_import_passes_from_overlay_and_fails_outside(tmp_path, cell):
    from dynocell.runbooks import builds

    site = make_fake_site(tmp_path, init="MARK = 'base'\n")
    r = builds.build(cell, patches=[], env={"PYTHONPATH": str(site)})
    overlay = r["pythonpath"]
    got = eb.verify_import(sys.executable, overlay, env={"PYTHONPATH": str(site)})
    assert got == Path(overlay).resolve() / "sglang" / "__init__.py"
    # an engine whose sglang resolves outside the overlay: a sitecustomize that puts the base first
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(f"import sys\nsys.path.insert(0, {str(site)!r})\n")
    with pytest.raises(EngineError, match="outside the build overlay"):
        eb.verify_import(sys.executable, overlay, env={"PYTHONPATH": f"{hook}{os.pathsep}{site}"})
    # an overlay that lacks the package: the base wins
    with pytest.raises(EngineError, match=str(site / "sglang")):
        eb.verify_import(sys.executable, str(tmp_path / "empty"), env={"PYTHONPATH": str(site)})
    # an import that fails says why
    broken = make_fake_site(tmp_path / "b", init="raise ImportError('no torch here')\n")
    rb = builds.build(cell, patches=[], env={"PYTHONPATH": str(broken)})
    with pytest.raises(EngineError, match="no torch here"):
        eb.verify_import(sys.executable, rb["pythonpath"], env={"PYTHONPATH": str(broken)})


def test_bundled_patches_list():
    from dynocell.runbooks.builds import list_patches

    rows = {r["id"]: r for r in list_patches()}
    assert rows[PATCH_ID]["versions"] == ["0.5.17"] and rows[PATCH_ID]["files"] == [PROCESSOR, COLLECTOR]


def test_log_origin_on_real_sglang_log():
    log = (DATA / "sglang-0.5.17" / "A.server.log").read_text().splitlines()
    # the real boot ran from /opt/sglang-site (paths neutralised in the artifact)
    assert eb.log_origin(log, "/opt/sglang-site").ok
    bad = eb.log_origin(log, "/home/u/.local/share/dynocell/builds/abc/site")
    assert not bad.ok and bad.outside == ("/opt/sglang-site/sglang/launch_server.py",)
    tb = ['  File "/b/site/sglang/srt/managers/scheduler.py", line 10, in run']
    assert eb.log_origin(tb, "/b/site").ok and not eb.log_origin(["no paths"], "/b/site").seen


# ---------------------------------------------------------------- the strict applier

def test_strict_applier_refuses_fuzz_and_handles_no_newline():
    old = "a\nb\nc\nd\n"
    fd = eb.parse_unified_diff("".join(difflib.unified_diff(old.splitlines(True), "a\nB\nc\nd\n".splitlines(True),
                                                            "a/sglang/x.py", "b/sglang/x.py")))[0]
    assert eb.apply_unified_diff(old, fd) == "a\nB\nc\nd\n"
    with pytest.raises(UserError, match="does not match"):
        eb.apply_unified_diff("a\nb \nc\nd\n", fd)  # whitespace differs
    with pytest.raises(UserError, match="does not match|past the end"):
        eb.apply_unified_diff("a\nb\n", fd)
    diff = ("--- a/sglang/y.py\n+++ b/sglang/y.py\n@@ -1,2 +1,2 @@\n x\n-y\n\\ No newline at end of file\n"
            "+z\n\\ No newline at end of file\n")
    assert eb.apply_unified_diff("x\ny", eb.parse_unified_diff(diff)[0]) == "x\nz"
    with pytest.raises(UserError, match="does not match"):
        eb.apply_unified_diff("x\ny\n", eb.parse_unified_diff(diff)[0])
    with pytest.raises(UserError, match="more lines than its header"):
        eb.parse_unified_diff("--- a/s/x\n+++ b/s/x\n@@ -1 +1 @@\n-a\n+b\n+c\n")
    with pytest.raises(UserError, match="in-place"):
        eb.parse_unified_diff("--- /dev/null\n+++ b/s/x\n@@ -0,0 +1 @@\n+a\n")


lines = st.lists(st.sampled_from(["a\n", "b\n", "c\n", "\n", "x = 1\n", "\x0c\n", "d\u2028e\n"]), max_size=30)


@hsettings(max_examples=150, deadline=None)
@given(lines, lines)
def test_strict_applier_round_trips_difflib(old, new):
    diff = "".join(difflib.unified_diff(old, new, "a/sglang/m.py", "b/sglang/m.py"))
    if not diff:
        return
    fd = eb.parse_unified_diff(diff)[0]
    assert eb.apply_unified_diff("".join(old), fd) == "".join(new)


# ---------------------------------------------------------------- CLI

def _cli(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    code = ("import sys, dynocell.cli.app as a\n"
            "m = 'dynocell.cli.commands.engine'\n"
            "a.COMMAND_MODULES = a.COMMAND_MODULES + ((m,) if m not in a.COMMAND_MODULES else ())\n"
            "sys.exit(a.run(sys.argv[1:]))\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=120)


def test_cli_engine_build_list_show_verify(tmp_path, cli_env):
    rel = "sglang/mod.py"
    site = make_fake_site(tmp_path, files={rel: OLD})
    folder = make_patch(tmp_path / "patches", "p1", rel, OLD, NEW)
    env = dict(cli_env, PYTHONPATH=str(site), DYNOCELL_ENGINE_PYTHON=sys.executable)
    p = _cli(["engine", "build", "--patch", str(folder), "--json"], env)
    assert p.returncode == 0, p.stderr
    r = json.loads(p.stdout)
    assert r["patches"] == ["p1"] and r["created"]
    short = r["build_hash"][7:19]
    p = _cli(["engine", "list"], env)
    assert p.returncode == 0 and short in p.stdout and "p1" in p.stdout, p.stdout + p.stderr
    p = _cli(["engine", "show", short], env)
    assert p.returncode == 0 and eb.sha256_bytes(OLD.encode()) in p.stdout, p.stdout + p.stderr
    p = _cli(["engine", "verify", short], env)
    assert p.returncode == 0 and "intact" in p.stdout, p.stdout + p.stderr
    (Path(r["pythonpath"]) / rel).write_text("tampered\n")
    p = _cli(["engine", "verify", short, "--json"], env)
    assert p.returncode == 1 and json.loads(p.stdout)["drift"][0]["kind"] == "modified"
    # refusal: one Error line naming the file, exit code 2
    (site / rel).write_text("changed\n")
    shutil.rmtree(Path(r["path"]))
    p = _cli(["engine", "build", "--patch", str(folder)], env)
    assert p.returncode == 2 and p.stderr.startswith("Error: patch p1: sglang/mod.py has sha256"), p.stderr
    p = _cli(["engine", "show", "zzzz"], env)
    assert p.returncode == 2 and "not a build hash" in p.stderr


# ---------------------------------------------------------------- per-component graph switches (issue 24)

GRAPH_SWITCHES = ["spec-graph-switches", "planted-verify-graph-fault"]
VERIFY_RUNNER = "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py"
DRAFT_RUNNER = "sglang/srt/speculative/eagle_draft_cuda_graph_runner.py"


def test_graph_switch_patches_stack_on_the_real_wheel(cell, sglang_site):
    """The two issue-24 patches build, stacked, from the pristine 0.5.17 files: the result hashes to
    the manifests' values and still compiles; the planted fault alone (without its base) is refused."""
    from dynocell.runbooks import builds

    r = builds.build(cell, patches=GRAPH_SWITCHES, env={"PYTHONPATH": str(sglang_site)})
    site = Path(r["pythonpath"])
    verify_src = (site / VERIFY_RUNNER).read_text()
    draft_src = (site / DRAFT_RUNNER).read_text()
    compile(verify_src, VERIFY_RUNNER, "exec")
    compile(draft_src, DRAFT_RUNNER, "exec")
    assert verify_src.count('"DYNOCELL_DISABLE_TARGET_VERIFY_CUDA_GRAPH"') == 1
    assert verify_src.count('"DYNOCELL_PLANT_VERIFY_GRAPH_FAULT"') == 1
    assert draft_src.count('"DYNOCELL_DISABLE_DRAFT_DECODE_CUDA_GRAPH"') == 1
    fault = eb.resolve_patches(["planted-verify-graph-fault"])[0]
    assert eb.sha256_bytes(verify_src.encode()) == fault.files[0].patched_sha256
    with pytest.raises(UserError, match="sha256|hash"):
        builds.build(cell, patches=["planted-verify-graph-fault"], env={"PYTHONPATH": str(sglang_site)})


def _can_run_graph(src: str, cls: str):
    """The patched ``can_run_graph`` of ``cls`` from ``src``, its leading switch executed alone: the
    method up to the engine's own checks, with a stand-in forward batch (no torch, no GPU here)."""
    import ast
    import textwrap

    tree = ast.parse(src)
    klass = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    fn = next(n for n in klass.body if isinstance(n, ast.FunctionDef) and n.name == "can_run_graph")
    lines = src.splitlines()[fn.lineno - 1:fn.end_lineno]
    body = textwrap.dedent("\n".join(lines))
    mark = body.index("ragged_layout") if "ragged_layout" in body else body.index("# Uniform-width")
    cut = body.rfind("\n", 0, mark) + 1  # the start of the engine's own first check
    ns: dict = {"ForwardBatch": object}
    exec(body[:cut] + "    return True\n", ns)  # noqa: S102 - the engine's own code, read from the wheel
    return ns["can_run_graph"]


def test_graph_switches_gate_only_their_component(cell, sglang_site, monkeypatch):
    """With the switch set, the target's TARGET_VERIFY forward (not its DECODE) and the draft's decode
    refuse their captured graph; unset, "0" and "false" leave the engine as it was."""
    from types import SimpleNamespace

    from dynocell.runbooks import builds

    site = Path(builds.build(cell, patches=GRAPH_SWITCHES, env={"PYTHONPATH": str(sglang_site)})["pythonpath"])
    verify = _can_run_graph((site / VERIFY_RUNNER).read_text(), "DecodeCudaGraphRunner")
    draft = _can_run_graph((site / DRAFT_RUNNER).read_text(), "EAGLEDraftCudaGraphRunner")

    def batch(verify_mode: bool):
        return SimpleNamespace(replace_embeds=None, spec_info=None,
                               forward_mode=SimpleNamespace(is_target_verify=lambda: verify_mode))

    for off in (None, "0", "false", ""):
        for name in ("DYNOCELL_DISABLE_TARGET_VERIFY_CUDA_GRAPH", "DYNOCELL_DISABLE_DRAFT_DECODE_CUDA_GRAPH"):
            if off is None:
                monkeypatch.delenv(name, raising=False)
            else:
                monkeypatch.setenv(name, off)
        assert verify(None, batch(True)) and draft(None, batch(False))
    monkeypatch.setenv("DYNOCELL_DISABLE_TARGET_VERIFY_CUDA_GRAPH", "1")
    assert verify(None, batch(True)) is False and verify(None, batch(False)) is True
    assert draft(None, batch(False)) is True
    monkeypatch.setenv("DYNOCELL_DISABLE_DRAFT_DECODE_CUDA_GRAPH", "1")
    assert draft(None, batch(False)) is False
