"""Issue 16 (safety), CLI side: labels never move silently, code-injecting [env] is marked and
trusted only by an operator, secrets are redacted, untrusted text cannot drive the terminal.

The real ``dynocell`` console script in subprocesses, a real store in a temporary DYNOCELL_HOME.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import pytest

from tests.test_cli_config import run

ESC, BEL = "\x1b", "\x07"
TITLE_AND_CLEAR = "\u001b]0;PWNED\u0007\u001b[2J"
OSC52 = "\u001b]52;c;cm0gLXJmIH4K\u0007"


def _write(path: Path, body: str) -> Path:
    path.write_text(body, encoding="utf-8")
    return path


def _tiny(tmp_path: Path, name: str, extra: str = "", served: str | None = None, notes: str | None = None,
          port: int = 0) -> Path:
    lines = ['engine = "reference"', 'model_path = "dynocell:tiny"', f"port = {port}"]
    if served is not None:
        lines.append(f"served_model_name = {json.dumps(served)}")
    lines.append(extra)
    lines += ["[meta]", f'name = "{name}"']
    if notes is not None:
        lines.append(f"notes = {json.dumps(notes)}")
    return _write(tmp_path / f"{name}-{port}.toml", "\n".join(lines) + "\n")


def test_config_add_says_when_it_moves_a_label(cli_env, tmp_path: Path):
    a = json.loads(run(cli_env, "config", "add", str(_tiny(tmp_path, "tiny", port=0)), "--json").stdout)
    again = run(cli_env, "config", "add", str(_tiny(tmp_path, "tiny", port=0))).stdout
    assert "label tiny:" not in again  # nothing moved
    moved = run(cli_env, "config", "add", str(_tiny(tmp_path, "tiny", port=31000))).stdout
    b = json.loads(run(cli_env, "config", "show", "tiny", "--json").stdout)["hash"]
    assert b != a["hash"]
    line = f"label tiny: sha256:{a['hash'][7:19]}… → sha256:{b[7:19]}…"
    assert line in moved, moved


@pytest.mark.parametrize("key", ["LD_PRELOAD", "PYTHONPATH", "PATH", "BASH_ENV"])
def test_injection_env_is_marked_by_add_show_plan(cli_env, tmp_path: Path, key: str):
    cfg = _tiny(tmp_path, "patched", extra=f'[env]\n{key} = "/tmp/somewhere"\nNCCL_DEBUG = "INFO"\n')
    added = run(cli_env, "config", "add", str(cfg)).stdout
    assert f"⚠ env sets {key}" in added
    assert f"⚠ env sets {key}" in run(cli_env, "config", "show", "patched").stdout
    assert json.loads(run(cli_env, "config", "show", "patched", "--json").stdout)["injection_env"] == [key]
    assert f"⚠ env sets {key}" in run(cli_env, "plan", "patched").stdout
    plain = _tiny(tmp_path, "plain", extra='[env]\nNCCL_DEBUG = "INFO"\n')
    assert "⚠" not in run(cli_env, "config", "add", str(plain)).stdout


def test_config_trust_records_who_and_when(cli_env, isolated_home: Path, tmp_path: Path):
    import pwd
    import os

    cfg = _tiny(tmp_path, "patched", extra='[env]\nLD_PRELOAD = "/opt/patch/libfix.so"\n')
    h = json.loads(run(cli_env, "config", "add", str(cfg), "--json").stdout)["hash"]
    assert json.loads(run(cli_env, "config", "show", "patched", "--json").stdout)["trusted"] is None
    # a file path is not a stored config: trust is given to what was added and read
    refused = run(cli_env, "config", "trust", str(cfg), ok=False)
    assert refused.returncode == 2 and "Error:" in refused.stderr
    rec = json.loads(run(cli_env, "config", "trust", "patched", "--json").stdout)
    me = pwd.getpwuid(os.getuid()).pw_name
    assert rec["hash"] == h and rec["trusted_by"] == me and rec["created"] is True
    with sqlite3.connect(isolated_home / "dynocell.db") as c:
        assert c.execute("SELECT config_hash, trusted_by FROM config_trust").fetchall() == [(h, me)]
    assert "already trusted" in run(cli_env, "config", "trust", h[7:20]).stdout
    shown = run(cli_env, "config", "show", "patched").stdout
    assert f"trusted  by {me}" in shown and "⚠ env sets LD_PRELOAD" in shown


def test_trust_procedures(settings, tmp_path: Path):
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config, is_trusted, trust

    cell = open_cell(settings)
    rec = add_config(cell, _tiny(tmp_path, "patched", extra='[env]\nPYTHONPATH = "/x"\n'))
    assert rec.injection_env == ("PYTHONPATH",)
    assert is_trusted(cell, rec.hash) is False
    assert trust(cell, rec.hash, "alice")["trusted_by"] == "alice"
    assert is_trusted(cell, rec.hash) is True
    assert trust(cell, rec.hash, "mallory")["trusted_by"] == "alice"  # the first mark stays


def test_injection_env_keys_is_pure_and_ordered():
    from dynocell.engine.config import INJECTION_ENV_KEYS, injection_env_keys

    env = {"PATH": "/bin", "NCCL_DEBUG": "INFO", "LD_PRELOAD": "x", "ld_preload": "y", "ENV": "/e"}
    # the known injection names first, in INJECTION_ENV_KEYS order; then every other name off the
    # allow-list (issue 32 item 3: a lower-case ld_preload is not on it either)
    assert injection_env_keys(env) == ["LD_PRELOAD", "ENV", "PATH", "ld_preload"]
    assert injection_env_keys({}) == []
    assert {"LD_PRELOAD", "LD_LIBRARY_PATH", "PYTHONPATH", "PYTHONSTARTUP", "PYTHONHOME", "BASH_ENV", "ENV",
            "PATH"} <= set(INJECTION_ENV_KEYS)


def test_config_show_redacts_secrets_in_text_json_and_toml(cli_env, isolated_home: Path, tmp_path: Path):
    secrets = {"HF_TOKEN": "hf_abcdefSECRET1", "DB_PASSWORD": "pw-SECRET2", "OPENAI_API_KEY": "sk-SECRET3",
               "AWS_SECRET": "aws\"SECRET4"}
    env = "\n".join(f"{k} = {json.dumps(v)}" for k, v in secrets.items())
    cfg = _tiny(tmp_path, "secret", extra=f'[env]\n{env}\nNCCL_DEBUG = "INFO"\n')
    h = json.loads(run(cli_env, "config", "add", str(cfg), "--json").stdout)["hash"]
    outs = [run(cli_env, "config", "show", "secret", *flag).stdout for flag in ((), ("--json",), ("--toml",))]
    for text in outs:
        for value in secrets.values():
            assert value not in text and json.dumps(value)[1:-1] not in text
        assert "***" in text and "INFO" in text
    shown = json.loads(outs[1])
    assert shown["canonical"]["env"]["HF_TOKEN"] == "***" and "***" in shown["source_toml"]
    # the hash still covers the real values: this host's 0600 secret file has them, the store keeps *** (issue 32)
    with sqlite3.connect(isolated_home / "dynocell.db") as c:
        (canonical,) = c.execute("SELECT canonical_json FROM configs WHERE config_hash = ?", (h,)).fetchone()
    assert json.loads(canonical)["env"]["HF_TOKEN"] == "***"
    real = (isolated_home / "secrets" / f"{h.removeprefix('sha256:')}.json").read_text()
    assert json.loads(real)["env"]["HF_TOKEN"] == secrets["HF_TOKEN"]
    assert "sha256:" + hashlib.sha256(real.encode()).hexdigest() == h


def test_untrusted_config_text_cannot_drive_the_terminal(cli_env, tmp_path: Path):
    cfg = _tiny(tmp_path, "evil", served=TITLE_AND_CLEAR, notes=f"see {OSC52} here \u009b2J \x08")
    added = run(cli_env, "config", "add", str(cfg))
    outputs = [added.stdout, added.stderr]
    for flags in ((), ("--json",), ("--toml",)):
        p = run(cli_env, "config", "show", "evil", *flags)
        outputs += [p.stdout, p.stderr]
    p = run(cli_env, "config", "list")
    outputs += [p.stdout, p.stderr]
    p = run(cli_env, "plan", "evil")
    outputs += [p.stdout, p.stderr]
    for text in outputs:
        assert ESC not in text and BEL not in text and "\u009b" not in text and "\x08" not in text, repr(text)
    human = run(cli_env, "config", "show", "evil").stdout
    assert "notes    see  here" in human, human  # the OSC 52 sequence is gone, the words stay
    # the stored config keeps the value as written (the JSON form escapes it instead)
    shown = json.loads(run(cli_env, "config", "show", "evil", "--json").stdout)
    assert shown["canonical"]["served_model_name"] == TITLE_AND_CLEAR


def test_printable_helper():
    from dynocell.text import printable, strip_escapes

    assert printable(TITLE_AND_CLEAR) == ""
    assert printable("a\u001b[31mred\u001b[0m b") == "ared b"
    assert printable("x\x00y\x7fz\u009b") == "x?y?z?"
    assert printable("two\nlines", keep_newlines=True) == "two\nlines"
    assert printable("two\nlines") == "two?lines"
    assert printable("unterminated \u001b]0;title") == "unterminated "
    assert strip_escapes("plain") == "plain"
    assert printable("é 中 τ") == "é 中 τ"


def _recorded_boot(settings, tmp_path: Path, log_text: str, signature: str = "unknown") -> tuple[object, str]:
    """A finished boot row with a real log file (as a boot leaves them), in a real store."""
    from dynocell.db import boots as db_boots
    from dynocell.runbooks.cell import open_cell
    from dynocell.runbooks.configs import add_config

    cell = open_cell(settings)
    h = add_config(cell, _tiny(tmp_path, "evil")).hash
    log = tmp_path / "engine.log"
    log.write_text(log_text, encoding="utf-8")
    db_boots.create_boot(cell.store, id="b16evil00001", config_hash=h, engine="reference", hostname="h",
                         host="127.0.0.1", port=1, argv="x", env={}, state="failed", log_path=str(log),
                         failure_signature=signature,
                         failure_detail={"reason": f"died {TITLE_AND_CLEAR}", "title": OSC52})
    return cell, "b16evil00001"


def test_logs_strip_escape_sequences_unless_raw(cli_env, settings, tmp_path: Path):
    _recorded_boot(settings, tmp_path, f"[2026] loading {TITLE_AND_CLEAR} weights\nnext {OSC52} line\x00\n")
    shown = run(cli_env, "logs", "b16evil00001").stdout
    assert ESC not in shown and BEL not in shown and "\x00" not in shown
    assert "loading  weights" in shown and "next  line?" in shown
    raw = run(cli_env, "logs", "b16evil00001", "--raw").stdout
    assert TITLE_AND_CLEAR in raw and OSC52 in raw


def test_tui_rows_are_made_printable(settings, tmp_path: Path):
    from dynocell.cli.tui.app import poll_snapshot

    cell, boot_id = _recorded_boot(settings, tmp_path, "x\n", signature=f"sig{TITLE_AND_CLEAR}")
    snap = poll_snapshot(cell)
    row = next(b for b in snap["boots"] if b["id"] == boot_id)
    assert row["failure_signature"] == "sig"

    def strings(v):
        if isinstance(v, str):
            yield v
        elif isinstance(v, dict):
            for k, x in v.items():
                yield from strings(k)
                yield from strings(x)
        elif isinstance(v, (list, tuple)):
            for x in v:
                yield from strings(x)

    assert not [t for t in strings(snap) if ESC in t or BEL in t]


def test_corrupt_store_file_is_a_clear_error(cli_env, isolated_home: Path):
    """Clear errors: a store file SQLite cannot read says so and how to recover (exit 2), not
    "internal error, report it"; the file is left as it was."""
    db = isolated_home / "dynocell.db"
    junk = b"this is not an SQLite database at all\n" * 200
    db.write_bytes(junk)
    for args in (("config", "list"), ("ps",), ("init",)):
        proc = run(cli_env, *args, ok=False)
        assert proc.returncode == 2, proc.stderr
        assert "Error: the store" in proc.stderr and "corrupt" in proc.stderr, proc.stderr
        assert "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert db.read_bytes() == junk


def test_store_from_a_newer_dynocell_names_both_schemas(cli_env, isolated_home: Path):
    run(cli_env, "init")
    db = isolated_home / "dynocell.db"
    with sqlite3.connect(db) as c:
        c.execute("UPDATE alembic_version SET version_num = '0099'")  # a revision no dynocell here knows
    from dynocell.db.session import head_revision

    proc = run(cli_env, "config", "list", ok=False)
    assert proc.returncode == 2, proc.stderr
    assert f"is at schema 0099; this dynocell knows up to {head_revision()}: upgrade dynocell" in proc.stderr
    assert "internal error" not in proc.stderr
    with sqlite3.connect(db) as c:  # nothing was migrated or changed
        assert c.execute("SELECT version_num FROM alembic_version").fetchall() == [("0099",)]


def test_config_diff_redacts_secret_values(cli_env, tmp_path: Path):
    a = _tiny(tmp_path, "sa", extra='[env]\nHF_TOKEN = "hf_old_SECRET"\n')
    b = _tiny(tmp_path, "sb", extra='[env]\nHF_TOKEN = "hf_new_SECRET"\n')
    run(cli_env, "config", "add", str(a))
    run(cli_env, "config", "add", str(b))
    for flags in ((), ("--json",)):
        text = run(cli_env, "config", "diff", "sa", "sb", *flags).stdout
        assert "env.HF_TOKEN" in text and "SECRET" not in text
