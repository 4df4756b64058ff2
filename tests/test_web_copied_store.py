"""A boot page of a store copied from another data directory on the same machine (newcomer pass n6check).

The greedy-text store of tests/data (``tests/data/sglang-0.5.17-eagle/dynocell-h200-greedy-text/dynocell.db``)
holds CPU-oracle boots recorded on machine 3d1219c7 with their logs under ``/tmp/tg2home/boots/…``.
Copied to a fresh ``DYNOCELL_HOME`` on that machine (the README next to it says to), the panel's page
of such a boot was a 404 "log of boot … is outside the data directory": the whole page (phases,
health, runs) was refused because one file is not served. Now the page renders and says why the log is
not shown; the log API answers with no lines and that reason; downloading the file stays refused.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

STORE = Path(__file__).parent / "data" / "sglang-0.5.17-eagle" / "dynocell-h200-greedy-text" / "dynocell.db"
ORACLE_MACHINE = "3d1219c7c4c5404aaa1f6d2a48adfda4"  # the machine the CPU-oracle boots were recorded on
BOOT = "d6efb8aa2551"  # cpu-oracle-mtp-graph's boot; its log_path is /tmp/tg2home/boots/d6efb8aa2551/engine.log
LAUNCH = "dcl_test-copied-store-token"


@pytest.fixture
def client(tmp_path):
    from dynocell.runbooks.views import open_view_cell
    from dynocell.settings import load_settings
    from dynocell.web.app import create_app

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(STORE, home / "dynocell.db")
    settings = load_settings(home=home, machine_id=ORACLE_MACHINE)  # this host is the one that made the boot
    app = create_app(settings, cell=open_view_cell(settings), launch_token=LAUNCH)
    with TestClient(app) as c:
        assert c.get(f"/?token={LAUNCH}", follow_redirects=False).status_code == 303
        yield c


def test_boot_page_renders_when_its_log_is_outside_the_data_directory(client):
    page = client.get(f"/boots/{BOOT}")
    assert page.status_code == 200, page.text[:500]
    assert "weights_begin" in page.text  # the boot's phases are shown
    assert 'id="log-unavailable"' in page.text and "outside this data directory" in page.text
    assert f"/tmp/tg2home/boots/{BOOT}/engine.log" in page.text

    log = client.get(f"/api/boots/{BOOT}/log?n=5")
    assert log.status_code == 200
    body = log.json()
    assert body["lines"] == [] and "outside this data directory" in body["unavailable"]

    assert client.get(f"/boots/{BOOT}/artifacts/log").status_code == 404  # the file itself is never served
