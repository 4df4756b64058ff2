"""The real ``dynocell`` console script in subprocesses, with a temporary DYNOCELL_HOME."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"
BAD = Path(__file__).parent / "data" / "configs" / "bad"


def dynocell_exe() -> str:
    exe = Path(sys.executable).parent / "dynocell"
    if exe.exists():
        return str(exe)
    found = shutil.which("dynocell")
    assert found, "the dynocell console script is not installed (pip install -e .)"
    return found


def run(env: dict[str, str], *args: str, ok: bool = True, cwd: Path = REPO) -> subprocess.CompletedProcess:
    proc = subprocess.run([dynocell_exe(), *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)
    if ok:
        assert proc.returncode == 0, f"dynocell {' '.join(args)} → {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def rows(home: Path, sql: str) -> list[tuple]:
    with sqlite3.connect(home / "dynocell.db") as c:
        return c.execute(sql).fetchall()


def test_init_add_show_list_diff(cli_env, isolated_home: Path, tmp_path: Path):
    out = run(cli_env, "init").stdout
    assert str(isolated_home) in out and "created the store" in out
    assert (isolated_home / "dynocell.db").exists()
    again = json.loads(run(cli_env, "init", "--json").stdout)
    assert again["migrated"] is False and again["revision"] == again["head"]

    added = json.loads(run(cli_env, "config", "add", "examples/tiny.toml", "--json").stdout)
    assert added["name"] == "tiny" and added["created"] is True and added["hash"].startswith("sha256:")
    assert "already stored" in run(cli_env, "config", "add", str(EXAMPLES / "tiny.toml")).stdout

    shown = json.loads(run(cli_env, "config", "show", "tiny", "--json").stdout)
    assert shown["hash"] == added["hash"] and shown["names"] == ["tiny"]
    assert shown["canonical"]["engine"] == "reference"
    assert shown["canonical"]["speculative"] == {
        "algorithm": "STANDALONE", "draft_model_path": "dynocell:tiny-draft",
        "num_steps": 3, "eagle_topk": 1, "num_draft_tokens": 4}
    human = run(cli_env, "config", "show", added["hash"][7:19]).stdout
    assert "speculative.num_draft_tokens" in human and added["hash"] in human
    toml_text = run(cli_env, "config", "show", "tiny", "--toml").stdout
    assert 'algorithm = "STANDALONE"' in toml_text and "[speculative]" in toml_text

    run(cli_env, "config", "add", "examples/tiny-plain.toml")
    listed = json.loads(run(cli_env, "config", "list", "--json").stdout)
    assert sorted(n for r in listed for n in r["names"]) == ["tiny", "tiny-plain"]
    assert "tiny-plain" in run(cli_env, "config", "list").stdout

    diff = json.loads(run(cli_env, "config", "diff", "tiny", "tiny-plain", "--json").stdout)
    assert {d["field"] for d in diff["differences"]} == {
        "speculative.algorithm", "speculative.draft_model_path", "speculative.num_steps",
        "speculative.eagle_topk", "speculative.num_draft_tokens"}
    text = run(cli_env, "config", "diff", "tiny", "tiny-plain").stdout
    assert "speculative.algorithm" in text and "STANDALONE" in text
    assert not any(line.split()[:1] == ["model_path"] for line in text.splitlines())
    assert "same config" in run(cli_env, "config", "diff", "tiny", added["hash"]).stdout

    # re-label with --name, history visible in show
    edited = tmp_path / "edited.toml"
    edited.write_text((EXAMPLES / "tiny.toml").read_text().replace("num_steps = 3", "num_steps = 2"))
    rel = json.loads(run(cli_env, "config", "add", str(edited), "--name", "tiny", "--json").stdout)
    assert rel["relabelled"] is True and rel["hash"] != added["hash"]
    old = json.loads(run(cli_env, "config", "show", added["hash"], "--json").stdout)
    assert old["names"] == [] and old["labels"][0]["history"][-1]["config_hash"] == rel["hash"]
    assert len(rows(isolated_home, "SELECT * FROM config_labels WHERE name = 'tiny'")) == 2


# Every bad file is checked in-process (tests/test_config.py, tests/test_store.py); through the
# real script a representative few, because each subprocess costs ~1.5 s of CPU.
CLI_BAD = ["syntax-error", "unknown-key-typo", "unknown-engine", "too-few-draft-tokens"]


@pytest.mark.parametrize("bad", [BAD / f"{n}.toml" for n in CLI_BAD], ids=lambda p: p.stem)
def test_bad_file_one_line_exit_2_nothing_written(cli_env, isolated_home: Path, bad: Path):
    proc = run(cli_env, "config", "add", str(bad), "--name", "x", ok=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[0].startswith(f"Error: {bad}"), proc.stderr
    assert len(lines) == 2 and lines[1].startswith("hint: "), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    db = isolated_home / "dynocell.db"
    assert not db.exists() or rows(isolated_home, "SELECT count(*) FROM configs") == [(0,)]


def test_debug_shows_traceback(cli_env):
    bad = BAD / "port-out-of-range.toml"
    plain = run(cli_env, "config", "add", str(bad), ok=False)
    assert "Traceback" not in plain.stderr
    for args in (("--debug", "config", "add", str(bad)), ("config", "add", str(bad), "--debug")):
        proc = run(cli_env, *args, ok=False)
        assert proc.returncode == 2
        assert "Traceback (most recent call last)" in proc.stderr and "ConfigError" in proc.stderr
        assert proc.stderr.strip().splitlines()[-2].startswith("Error: ")
    env = dict(cli_env, DYNOCELL_DEBUG="1")
    assert "Traceback" in run(env, "config", "show", "nothing-here", ok=False).stderr


def test_unknown_ref_and_usage_errors(cli_env):
    proc = run(cli_env, "config", "show", "nothing-here", ok=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("Error: no config named 'nothing-here'")
    assert "Traceback" not in proc.stderr
    usage = run(cli_env, "config", "show", ok=False)
    assert usage.returncode == 2 and "Missing argument" in usage.stderr


def test_settings_lists_every_value_and_source(cli_env, isolated_home: Path):
    data = json.loads(run(cli_env, "settings", "--json").stdout)
    by_name = {r["name"]: r for r in data}
    assert by_name["home"]["value"] == str(isolated_home) and by_name["home"]["source"] == "env"
    assert by_name["stop_grace_s"]["source"] == "default"
    assert by_name["db_url (effective)"]["value"] == f"sqlite:///{isolated_home / 'dynocell.db'}"
    env = dict(cli_env, DYNOCELL_STOP_GRACE_S="5")
    again = {r["name"]: r for r in json.loads(run(env, "settings", "--json").stdout)}
    assert again["stop_grace_s"] == {**again["stop_grace_s"], "value": "5.0", "source": "env"}
    text = run(cli_env, "settings").stdout
    assert "DYNOCELL_HOME" in text and str(isolated_home) in text
    bad = run(dict(cli_env, DYNOCELL_STOP_GRACE_S="soon"), "settings", ok=False)
    assert bad.returncode == 2 and bad.stderr.startswith("Error: invalid setting")


def test_help_everywhere_with_examples(cli_env):
    top = run(cli_env, "--help").stdout
    for cmd in ("init", "settings", "config"):
        assert cmd in top
    for args in (("init",), ("settings",), ("config", "add"), ("config", "list"), ("config", "show"),
                 ("config", "diff")):
        out = run(cli_env, *args, "--help").stdout
        assert "Example: dynocell" in out, args


def _help_texts(columns: int):
    """(command words, the prose of its --help above the option panels) of every command and group, rendered by
    Typer/rich at ``columns`` columns."""
    import typer
    from typer.testing import CliRunner

    from dynocell.cli.app import build_app

    app = build_app()

    def walk(cmd, path):
        yield path
        for name, sub in sorted(getattr(cmd, "commands", {}).items()):
            yield from walk(sub, [*path, name])

    runner = CliRunner()
    for path in walk(typer.main.get_command(app), []):
        res = runner.invoke(app, [*path, "--help"], env={"COLUMNS": str(columns)}, terminal_width=columns)
        assert res.exit_code == 0, (path, res.output)
        yield path, res.output.split("╭")[0]


def test_help_prose_is_not_broken_mid_sentence_at_80_columns():
    """Typer keeps a docstring's hard line breaks after its first paragraph, so `COLUMNS=80 dynocell compare
    --help` printed `… and hosts` / `(a warning says …` on a line of its own, four times; `tui` ran its
    example into the sentence. No line of any command's prose may end where the next line's first word
    would still have fitted (examples and list items excepted)."""
    broken = []
    for path, prose in _help_texts(80):
        lines = prose.splitlines()
        for a, b in zip(lines, lines[1:]):
            head, nxt = a.rstrip(), b.strip()
            if not head.strip() or not nxt or nxt.startswith(("Example", "Usage", "-", "•")):
                continue
            if len(head) + 1 + len(nxt.split()[0]) <= 78:
                broken.append(f"dynocell {' '.join(path)}: {head.strip()[-40:]!r} / {nxt[:30]!r}")
        broken += [f"dynocell {' '.join(path)}: example run into the prose: {ln.strip()[:50]!r}"
                   for ln in lines if "Example: " in ln and not ln.strip().startswith("Example: ")]
    assert not broken, "\n".join(broken)


def test_python_dash_m_and_help_does_not_import_torch(cli_env):
    proc = subprocess.run([sys.executable, "-m", "dynocell", "--help"], env=cli_env, capture_output=True,
                          text=True, timeout=60, cwd=REPO)
    assert proc.returncode == 0 and "config" in proc.stdout
    probe = ("import sys; from dynocell.cli.app import build_app; build_app(); "
             "bad = [m for m in ('torch', 'transformers', 'sqlalchemy', 'fastapi') if m in sys.modules]; "
             "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", probe], env=cli_env, capture_output=True, text=True,
                         timeout=60, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert "torch" not in out.stdout.split(","), out.stdout


@pytest.mark.parametrize("args", [("run", "{dir}"), ("plan", "{dir}"), ("config", "diff", "{dir}", "tiny")])
def test_a_directory_given_as_config_is_named_a_directory(cli_env, tmp_path, args):
    """``dynocell run ./examples`` said "no such config file" of a folder that exists."""
    proc = run(cli_env, *[a.format(dir=tmp_path) for a in args], ok=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"Error: {tmp_path}: a directory, not a config file"), proc.stderr


def test_stop_of_a_boot_already_stopped_says_so(cli_env):
    """It reprinted the first stop as if it had just happened (``stopped (graceful, 0.2 s)``)."""
    import re

    boot = run(cli_env, "boot", str(EXAMPLES / "tiny-plain.toml"), "--detach")
    boot_id = re.search(r"boot ([0-9a-f]{12}) ready", boot.stdout + boot.stderr).group(1)
    first = run(cli_env, "stop", boot_id)
    assert f"boot {boot_id} stopped (" in first.stdout, first.stdout
    again = run(cli_env, "stop", boot_id)
    assert f"boot {boot_id} was already stopped (" in again.stdout and "graceful" not in again.stdout, again.stdout


def test_port_0_is_said_to_be_picked_at_boot_not_made_up(cli_env, tmp_path: Path):
    """examples/tiny.toml has ``port = 0`` (dynocell picks a free port at boot): ``config show`` says so in
    its command instead of printing SGLang's 30000 as if configured; ``plan`` (a command run by hand) keeps a
    runnable number and says where it comes from; a config with a port shows that port and no note."""
    shown = run(cli_env, "config", "show", str(EXAMPLES / "tiny.toml"), "--json").stdout
    command = json.loads(shown)["command"]
    assert "--port <free port at boot> " in command and "30000" not in command
    assert "--port <free port at boot>" in run(cli_env, "config", "show", str(EXAMPLES / "tiny.toml")).stdout
    planned = run(cli_env, "plan", str(EXAMPLES / "tiny.toml")).stdout
    assert planned.startswith("# port = 0 in the config: dynocell picks a free port at boot; this command uses "
                              "SGLang's default 30000")
    assert "--port 30000 " in planned
    fixed = tmp_path / "fixed.toml"
    fixed.write_text((EXAMPLES / "tiny.toml").read_text().replace("port = 0 ", "port = 31234 "))
    assert "--port 31234 " in json.loads(run(cli_env, "config", "show", str(fixed), "--json").stdout)["command"]
    (row,) = json.loads(run(cli_env, "plan", str(fixed), "--json").stdout)
    assert row["port_note"] is None and "free port" not in run(cli_env, "plan", str(fixed)).stdout


def test_a_bad_label_says_the_length_and_where_the_name_came_from(cli_env, tmp_path):
    """A label of 300 letters was told to "use letters, digits, …" (it did: the limit is 200); a label taken
    from a file name with a space gave no way out but renaming the file (--name) (newcomer pass)."""
    long = run(cli_env, "config", "add", str(EXAMPLES / "tiny.toml"), "--name", "a" * 300, ok=False)
    assert long.returncode == 2 and "hint: use 1 to 200 letters, digits" in long.stderr, long.stderr
    text = (EXAMPLES / "tiny-plain.toml").read_text().split("[meta]")[0]
    spaced = tmp_path / "my tiny.toml"
    spaced.write_text(text)
    proc = run(cli_env, "config", "add", str(spaced), ok=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith("Error: invalid config name 'my tiny' (from the file name)"), proc.stderr
    assert "(or give --name)" in proc.stderr
    assert run(cli_env, "config", "add", str(spaced), "--name", "my-tiny").returncode == 0
