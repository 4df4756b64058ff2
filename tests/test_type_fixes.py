"""The crashes mypy found when it was added to CI (tests/test_types.py), each as it would have happened."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from dynocell.engine.supervisor import BootState


def test_tui_ui_passes_keyword_arguments_to_the_ui_thread() -> None:
    # the job worker's "interrupted" notice: self._ui(self.notify, msg, severity="warning") was a TypeError
    from dynocell.cli.tui.app import DynocellApp

    calls: list[tuple[Any, tuple[Any, ...], dict[str, Any]]] = []
    fake = SimpleNamespace(call_from_thread=lambda fn, *a, **kw: calls.append((fn, a, kw)))
    notify = object()
    DynocellApp._ui(fake, notify, "run r1: interrupted", severity="warning")  # type: ignore[arg-type]
    assert calls == [(notify, ("run r1: interrupted",), {"severity": "warning"})]


def test_stop_live_of_a_crashed_boot_without_a_row_reports_the_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    # record_crash found no row: the code was read as live.supervisor.poll().exit_code (a BootState has none)
    import importlib

    stop = importlib.import_module("dynocell.runbooks.boots.stop")  # the package re-exports a stop() function
    monkeypatch.setattr(stop, "record_crash", lambda cell, live: None)
    sup = SimpleNamespace(poll=lambda: BootState.CRASHED, exit_code=-9)
    live = SimpleNamespace(supervisor=sup, boot_id="b1")
    out = stop.stop_live(SimpleNamespace(), live)  # type: ignore[arg-type]
    assert out["exit_code"] == -9 and out["how"] is None
    assert out["crashed"].startswith("engine ") and out["crashed"].endswith(" while ready")


def test_an_attached_boot_knows_its_engine_log(tmp_path: Path) -> None:
    # the vLLM and engine-kind acceptance steps read live.log_path; an AttachedBoot had none
    from dynocell.runbooks.boots.live import AttachedBoot

    log = tmp_path / "boots" / "b1" / "engine.log"
    row = {"id": "b1", "config_hash": "c" * 64, "host": "127.0.0.1", "port": 30000, "log_path": str(log),
           "argv": None}
    boot = AttachedBoot.from_row(row, cfg=SimpleNamespace())  # type: ignore[arg-type]
    assert boot.log_path == log and boot.boot_dir == log.parent


def test_a_bpe_tokenizer_without_a_corpus_is_refused_by_name() -> None:
    # build_tokenizer(bpe_vocab=N) without the corpus it trains on: AttributeError on None.decode
    from dynocell.engine.reference.nets import build_tokenizer
    from dynocell.errors import UserError

    with pytest.raises(UserError, match="trained on a corpus"):
        build_tokenizer(bpe_vocab=300)


def test_migrations_without_a_store_url_say_so(tmp_path: Path) -> None:
    # an Alembic config without sqlalchemy.url (a bare `alembic` run) reached create_engine(None)
    from alembic import command

    from dynocell.db.session import alembic_config
    from dynocell.errors import StoreUnavailable

    cfg = alembic_config(f"sqlite:///{tmp_path / 'store.db'}")
    cfg.remove_main_option("sqlalchemy.url")
    with pytest.raises(StoreUnavailable, match="sqlalchemy.url"):
        command.upgrade(cfg, "head")
