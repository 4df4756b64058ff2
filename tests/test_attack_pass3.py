"""Issue 32, the second pass's fresh attack pass (a neighbour on the host, a panel user on loopback, a hostile
engine): each attack that broke, as the regression test written before its fix.

1. An engine's answers carry its secrets: SGLang 0.5.17's ``/server_info`` (``/get_server_info``) returns
   ``dataclasses.asdict(server_args)`` — ``admin_api_key``, ``api_key``, ``ssl_keyfile_password`` as set —
   and ``dynocell attach`` kept them whole in the boot's ``attach.json``, which ``dynocell logs`` and the
   panel's boot page show. They are ``***`` there now, and the file is 0600.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

from tests.test_attach_hostile_port import _server
from tests.test_bad_inputs import cli

ADMIN, KEY, PW = "sk-ADMIN-LEAK-01", "sk-API-LEAK-02", "pw-SSL-LEAK-03"


def test_attach_keeps_no_secret_an_engine_reveals(isolated_home: Path):
    server = _server(30000, admin_api_key=ADMIN, api_key=KEY, ssl_keyfile_password=PW,
                     hf_token="hf_LEAK04", nested={"dsn": "postgresql://u:url-LEAK05@db/x"})
    try:
        code, out, err = cli("attach", f"http://127.0.0.1:{server.server_address[1]}", "--json")
        assert code == 0, (out, err)
    finally:
        server.shutdown()
        server.server_close()
    boot_id = json.loads(out)["boot_id"]
    answers = isolated_home / "boots" / boot_id / "attach.json"
    text = answers.read_text()
    code, logs, err = cli("logs", boot_id)
    assert code == 0, err
    for shown, where in ((text, "attach.json"), (logs, "dynocell logs")):
        for secret in (ADMIN, KEY, PW, "hf_LEAK04", "url-LEAK05"):
            assert secret not in shown, (where, secret)
    assert json.loads(text)["get_server_info"]["admin_api_key"] == "***"
    assert stat.S_IMODE(answers.stat().st_mode) == 0o600
    assert stat.S_IMODE(answers.parent.stat().st_mode) == 0o700
