"""Patched vLLM builds (issue 21 item 7): the overlay mechanism on a vLLM distribution, with the bundled
``vllm-flash-attn-import`` patch, against a fake vLLM distribution tree whose
``vllm/vllm_flash_attn/__init__.py`` is the file the patch targets (reconstructed: its raise sits on
line 34, as in the real H200 logs) and a stand-in ``flash_attn_interface`` without binaries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from dynocell.engine import builds as eb
from dynocell.engine.config import parse_config
from dynocell.errors import UserError

DATA = Path(__file__).parent / "data" / "vllm-0.26.0"
REAL_INIT = (DATA / "dist" / "vllm_flash_attn__init__.py").read_text()
PATCH_ID = "vllm-flash-attn-import"
NO_BINARIES = ("FA2_AVAILABLE = FA3_AVAILABLE = False\n"
               "def compile_flash_attn_varlen_func_from_specs(*a): ...\n"
               "def fa_version_unsupported_reason(*a): ...\n"
               "def flash_attn_varlen_func(*a): ...\n"
               "def get_scheduler_metadata(*a): ...\n"
               "def is_fa_version_supported(*a): ...\n")
IMPORT = "import vllm.vllm_flash_attn as m; print('IMPORTED', m.__file__)"


def fake_vllm(root: Path, init: str = REAL_INIT, version: str = "0.26.0") -> Path:
    site = root / "site"
    fa = site / "vllm" / "vllm_flash_attn"
    fa.mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text("")
    (fa / "__init__.py").write_text(init)
    (fa / "flash_attn_interface.py").write_text(NO_BINARIES)
    di = site / f"vllm-{version}.dist-info"
    di.mkdir()
    (di / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    return site


def run_import(pythonpath: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", IMPORT], env={"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def cell(settings):
    from dynocell.runbooks.cell import open_cell

    return open_cell(settings)


def test_bundled_vllm_patch_builds_an_overlay_that_imports_without_binaries(cell, tmp_path):
    from dynocell.runbooks import builds

    site = fake_vllm(tmp_path)
    before = run_import(site)
    assert before.returncode != 0 and "vllm.vllm_flash_attn requires the CUDA flash attention" in before.stderr
    assert 'vllm_flash_attn/__init__.py", line 34' in before.stderr  # as fail1's traceback on the H200

    r = builds.build(cell, base="vllm", patches=[PATCH_ID], env={"PYTHONPATH": str(site)})
    assert (r["base_dist"], r["base_version"], r["patches"]) == ("vllm", "0.26.0", [PATCH_ID])
    after = run_import(Path(r["pythonpath"]))
    assert after.returncode == 0 and "IMPORTED " + r["pythonpath"] in after.stdout
    # The warning the real patched boots print (A_graph.server.log): same line, same source text.
    assert "vllm_flash_attn/__init__.py:34: UserWarning: vllm.vllm_flash_attn requires" in after.stderr
    assert '__import__("warnings").warn(  # patched by vllm_wheelhouse.sh' in after.stderr
    assert (site / "vllm" / "vllm_flash_attn" / "__init__.py").read_text() == REAL_INIT  # base untouched


def test_another_base_file_or_version_is_refused(tmp_path):
    other = REAL_INIT.replace("    compile_flash_attn_varlen_func_from_specs,\n", "")
    dist = eb.locate_installed(sys.executable, "vllm", env={"PYTHONPATH": str(fake_vllm(tmp_path / "a", other))})
    with pytest.raises(UserError) as exc:
        eb.plan_build(dist, eb.resolve_patches([PATCH_ID]))
    assert "vllm/vllm_flash_attn/__init__.py has sha256" in exc.value.message
    assert eb.sha256_bytes(REAL_INIT.encode()) in exc.value.message  # both hashes named
    dist = eb.locate_installed(sys.executable, "vllm", env={"PYTHONPATH": str(fake_vllm(tmp_path / "b",
                                                                                        version="0.27.0"))})
    with pytest.raises(UserError, match="targets vllm 0.26.0"):
        eb.plan_build(dist, eb.resolve_patches([PATCH_ID]))


def test_a_vllm_config_with_patches_builds_on_vllm(cell, tmp_path):
    from dynocell.runbooks import builds

    site = fake_vllm(tmp_path)
    cfg = parse_config(f'engine = "vllm"\nmodel_path = "Qwen/Qwen3-8B"\npatches = ["{PATCH_ID}"]\n'
                       f'[env]\nPYTHONPATH = "{site}"\n', "t")
    r = builds.ensure_build(cell, cfg)
    assert r["base_dist"] == "vllm" and r["patches"] == [PATCH_ID]
