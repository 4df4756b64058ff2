"""Shared fixtures: every test gets a private data directory; the reference model pair is made once.

- ``isolated_home`` (autouse): ``DYNOCELL_HOME`` points at a fresh tmp dir, so no
  test can touch the real data directory; ``settings`` is built from it.
- ``model_pair`` (session): the made-locally reference pair; the default seed's
  ships with the package, other seeds are cached in ``<repo>/.cache/models``
  (git-ignored).
- The session root (``pytest_configure``): one private temporary directory per pytest
  session, exported as ``TMPDIR`` and ``DYNOCELL_TEST_SESSION`` before any test or
  pytest-xdist worker starts, so no two sessions (or helpers on one machine) share a
  ``/tmp`` name, and every process a test starts is found by the session's sweep
  (``tests/session_reaper.py``), at the session's end or, when pytest was killed, by the
  detached reaper.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).parent / "data"
MODEL_CACHE = REPO / ".cache" / "models"
REAPER = Path(__file__).with_name("session_reaper.py")


def pytest_configure(config):
    """Make this session's root (module docstring) and start its reaper; only in the session that owns
    it: an xdist worker, or a pytest a test runs, inherits its parent session's root."""
    from tests.session_reaper import SESSION_ENV

    # a test's terminal width is its own choice (isolated_home unsets these per test too): an xdist worker
    # inherits COLUMNS=80 from execnet, which module- and session-scoped fixtures' environments would keep
    for key in ("COLUMNS", "LINES"):
        os.environ.pop(key, None)
    # A suite started in the background of a non-interactive shell (`bash .ci/run &`) inherits SIGINT ignored,
    # and so would every dynocell process a test starts: the tests that send Ctrl-C (SIGINT) would see it do
    # nothing. A handler (not SIG_IGN) is reset to the default in each child at exec.
    import signal

    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    if hasattr(config, "workerinput") or os.environ.get(SESSION_ENV):
        return
    import psutil

    outer_env = dict(os.environ)
    root = tempfile.mkdtemp(prefix="dynocell-tests-")
    os.environ["TMPDIR"] = os.environ[SESSION_ENV] = root
    tempfile.tempdir = None  # tempfile's cached answer: the next gettempdir() reads TMPDIR again
    config._dynocell_session_root = root
    if not config.option.basetemp:
        # tmp_path under a short fixed base: <root>/t/<test>N, and <root>/t/gwN/<test>N under xdist (not
        # <root>/pytest-of-USER/pytest-N/popen-gwN/…), so a path in an 80-column message fits as it does
        # when the suite runs serially
        config.option.basetemp = os.path.join(root, "t")
    me = psutil.Process()
    subprocess.Popen([sys.executable, str(REAPER), str(me.pid), repr(me.create_time()), root],
                     env=outer_env, start_new_session=True, stdin=subprocess.DEVNULL,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, close_fds=True)


def pytest_unconfigure(config):
    """The owning session's sweep (after every worker is gone): stop whatever a test started, named on
    stderr; the session root is removed when the run passed, else kept (its path printed)."""
    root = getattr(config, "_dynocell_session_root", None)
    if root is None:
        return
    from tests.session_reaper import sweep

    for name in sweep(root):
        print(f"[dynocell tests] stopped pid {name}: a process a test left running", file=sys.stderr)
    if getattr(config, "_dynocell_exitstatus", 1) == 0:
        shutil.rmtree(root, ignore_errors=True)
    else:
        print(f"[dynocell tests] this run's temporary files: {root}", file=sys.stderr)


def pytest_sessionstart(session):
    """Make (or find) the reference model pair before any test runs.

    Making it costs a few CPU minutes once per machine; doing it here keeps
    that out of every test's timeout, and every later process finds it cached.
    """
    # Every Settings built in this test process (session fixtures included, which run before
    # the per-test isolated_home) and every dynocell subprocess shares the one model cache.
    os.environ["DYNOCELL_MODEL_CACHE"] = str(MODEL_CACHE)
    if getattr(session.config.option, "collectonly", False):
        return
    from dynocell.engine.reference.nets import ensure_pair

    # The default pair ships with the package (dynocell/engine/reference/pair/), so this finds it
    # without training; test_reference_training checks the training path on a shortened recipe.
    ensure_pair(MODEL_CACHE, progress=lambda msg: print(f"[dynocell tests] {msg}", flush=True))


def pytest_sessionfinish(session, exitstatus):
    """Stop any dynocell supervisor a test left running (a test that failed between ``boot --detach`` and
    ``stop``): each is a process whose ``DYNOCELL_HOME`` lies under this session's temporary directory. It
    gets SIGTERM, so its stop discipline stops its engine too; whatever is left after 15 s is killed. Named on
    stderr, so a leak is seen rather than left on the machine."""
    import psutil

    session.config._dynocell_exitstatus = int(exitstatus)
    factory = getattr(session.config, "_tmp_path_factory", None)
    if factory is None:
        return
    base = str(factory.getbasetemp())
    left = []
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if "dynocell.runbooks.supervise" not in " ".join(proc.info["cmdline"] or []):
                continue
            if proc.environ().get("DYNOCELL_HOME", "").startswith(base):
                left.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    for proc in left:
        print(f"[dynocell tests] stopping supervisor pid {proc.pid} a test left running", file=sys.stderr)
        with suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(left, timeout=15)
    for proc in alive:
        with suppress(psutil.NoSuchProcess):
            for child in proc.children(recursive=True) + [proc]:
                with suppress(psutil.NoSuchProcess):
                    child.kill()


@pytest.fixture(autouse=True)
def isolated_home(tmp_path_factory, monkeypatch):
    home = tmp_path_factory.mktemp("dynocell-home")
    monkeypatch.setenv("DYNOCELL_HOME", str(home))
    monkeypatch.setenv("DYNOCELL_MODEL_CACHE", str(MODEL_CACHE))
    monkeypatch.delenv("DYNOCELL_DATABASE_URL", raising=False)
    # a test's terminal width is its own choice: pytest-xdist's workers inherit COLUMNS/LINES from execnet
    # (80), a serial run from whoever started pytest; unset, a piped CLI prints each Error: line whole
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.delenv("LINES", raising=False)
    return home


@pytest.fixture
def settings(isolated_home):
    from dynocell.settings import load_settings

    return load_settings()


@pytest.fixture(scope="session")
def model_pair():
    """(target_dir, draft_dir) of the default made-locally pair."""
    from dynocell.engine.reference.nets import ensure_pair

    return ensure_pair(MODEL_CACHE)


@pytest.fixture
def cli_env(isolated_home):
    """Environment for running the real ``dynocell`` console script in a subprocess."""
    env = dict(os.environ)
    env["DYNOCELL_HOME"] = str(isolated_home)
    env["DYNOCELL_MODEL_CACHE"] = str(MODEL_CACHE)
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture(scope="session")
def python_exe() -> str:
    return sys.executable


# ------------------------------------------------------------ both store backends

POSTGRES_ENV = "DYNOCELL_TEST_POSTGRES_URL"


def postgres_server_url() -> str:
    """The PostgreSQL server the store suites also run against (``DYNOCELL_TEST_POSTGRES_URL``, a URL
    to a database the test user may ``CREATE DATABASE`` from, e.g.
    ``postgresql+psycopg://postgres@127.0.0.1:54318/postgres``).

    Absent: the PostgreSQL case is skipped locally with the reason, but FAILS under ``CI=true``
    (``.ci/run`` starts a throwaway cluster and exports the variable, so absence there is a bug).
    """
    url = os.environ.get(POSTGRES_ENV, "").strip()
    if not url:
        why = (f"{POSTGRES_ENV} is not set: no PostgreSQL server to run the store suites against "
               "(start one, e.g. as README's Fleet section says, and export "
               f"{POSTGRES_ENV}=postgresql+psycopg://postgres@127.0.0.1:PORT/postgres)")
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(why + " — CI must run them on both backends (.ci/run starts one)")
        pytest.skip(why)
    return url


@contextmanager
def fresh_postgres_database():
    """A new, empty PostgreSQL database ``dynocell_test_<random>`` on the server of
    :func:`postgres_server_url`; yields its URL, then drops it (connections and all)."""
    import uuid

    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    server = postgres_server_url()
    name = f"dynocell_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
        url = make_url(server).set(database=name).render_as_string(hide_password=False)
        try:
            yield url
        finally:
            from dynocell.db.session import close_store

            close_store(url)
            with admin.connect() as c:
                c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    finally:
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """A fresh, empty store URL on each backend: a new SQLite file, or a new PostgreSQL database."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'cell' / 'dynocell.db'}"
        return
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture
def pg_url():
    """A fresh, empty PostgreSQL database (for PostgreSQL-only cases)."""
    with fresh_postgres_database() as url:
        yield url


@pytest.fixture
def backend_settings(db_url, monkeypatch):
    """Settings whose store is ``db_url`` (each backend in turn), exported as ``DYNOCELL_DATABASE_URL``
    so subprocesses started from ``os.environ`` share it."""
    from dynocell.settings import load_settings

    monkeypatch.setenv("DYNOCELL_DATABASE_URL", db_url)
    return load_settings()


# ------------------------------------------------------------ llama.cpp's llama-server (issue 37)

LLAMA_ENV = "DYNOCELL_TEST_LLAMA_DIR"
#: Longest wait for the background build .ci/run starts before the venv (≈ 25 min on 2 loaded cores).
LLAMA_BUILD_WAIT_S = 3600.0


@pytest.hookimpl(trylast=True)  # after pytest-randomly's shuffle: whatever order it drew, these go last
def pytest_collection_modifyitems(config, items):
    """Tests that need the llama-server build run after every other test, so the ~20 min background build
    .ci/run starts overlaps the rest of the suite instead of holding it up at a random point."""
    items.sort(key=lambda item: "llama_build" in getattr(item, "fixturenames", ()))


@pytest.fixture(scope="session")
def llama_build() -> dict:
    """``{"binary": Path, "model": Path}``: the llama-server and SmolLM2 GGUF that ``python -m
    dynocell.engine.kinds.llamacpp_build`` made in ``$DYNOCELL_TEST_LLAMA_DIR`` (.ci/run starts it in the
    background right after apt and exports the variable). Waits for its ``done.json``; a failed build fails
    the test with the build log's tail. Variable unset: skipped with the reason, but FAILS under ``CI=true``."""
    import json
    import time

    root = os.environ.get(LLAMA_ENV, "").strip()
    if not root:
        why = (f"{LLAMA_ENV} is not set: no llama-server build to test against (run `python -m "
               f"dynocell.engine.kinds.llamacpp_build --dir DIR --model smollm2-135m --done DIR/done.json` "
               f"and export {LLAMA_ENV}=DIR)")
        if os.environ.get("CI", "").strip().lower() in ("true", "1", "yes"):
            pytest.fail(why + " — CI builds it (.ci/run's llama-server stage)")
        pytest.skip(why)
    done = Path(root) / "done.json"
    deadline = time.monotonic() + LLAMA_BUILD_WAIT_S
    while not done.is_file():
        if time.monotonic() > deadline:
            pytest.fail(f"llama-server build in {root} not finished after {LLAMA_BUILD_WAIT_S:.0f} s")
        time.sleep(2)
    info = json.loads(done.read_text())
    if info.get("rc") != 0:
        log = Path(root) / "build.log"
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.is_file() else "(no build.log)"
        pytest.fail(f"the llama-server build failed: {info.get('error')}\n{tail}")
    return {"binary": Path(info["binary"]), "model": Path(info["models"]["smollm2-135m"])}
