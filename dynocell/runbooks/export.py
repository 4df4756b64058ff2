"""``dynocell export``: runs, acceptance curves, profile splits and phase splits since a time, as Parquet or CSV.

Four files land in the output directory — ``runs.<ext>``, ``curves.<ext>``,
``splits.<ext>`` (kernel time by category) and ``phases.<ext>`` (a speculative
step's time by phase, ``profile_phases``) — for notebooks that compare hosts and configs across a fleet.
Parquet is written by pyarrow (the optional ``export`` extra:
``pip install 'dynocell[export]'``); CSV by the standard library. Nested values
(histograms, summaries) are JSON text in both; times are ISO 8601 UTC strings in
CSV and timestamp columns in Parquet. Each file is written to a temporary name
and renamed, so a failed export leaves no half file.
"""

from __future__ import annotations

import csv
import json
import os
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Callable

from dynocell.clock import aware_utc
from dynocell.db import exports as db_exports
from dynocell.errors import UserError
from dynocell.runbooks import hosts
from dynocell.runbooks.cell import Cell

FORMATS = ("parquet", "csv")
TABLES: dict[str, Callable[..., list[dict[str, Any]]]] = {
    "runs": db_exports.runs_since, "curves": db_exports.curves_since, "splits": db_exports.splits_since,
    "phases": db_exports.phases_since,
}
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([mhdw])$")
_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def parse_since(value: str, now: datetime | None = None) -> datetime:
    """``--since`` as an aware UTC datetime: ISO 8601 (``2026-12-01``, ``2026-12-01T08:00``, with or
    without offset; naive means UTC) or a span back from now (``90m``, ``24h``, ``7d``, ``2w``; one
    reaching past year 1 means since the beginning). Raises UserError naming ``--since`` otherwise."""
    v = value.strip()
    m = _RELATIVE.match(v.lower())
    if m:
        try:
            return (now or datetime.now(timezone.utc)) - timedelta(**{_UNITS[m.group(2)]: float(m.group(1))})
        except OverflowError:  # a span reaching past year 1 (e.g. 99999999999d): since the beginning
            return datetime.min.replace(tzinfo=timezone.utc)
    try:
        dt = datetime.fromisoformat(v)
    except ValueError:
        raise UserError(f"--since: {value!r} is neither a date/time nor a span",
                        "give e.g. 2026-12-01, 2026-12-01T08:00Z, 24h or 7d") from None
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


def export(cell: Cell, since: datetime, fmt: str, out_dir: Path, host: str | None = None) -> dict[str, Any]:
    """Write the :data:`TABLES` for runs started since ``since`` (of the hosts matching ``host``, if given).

    Returns ``{format, since, dir, files: {table: path}, rows: {table: n}}``. Raises UserError for an
    unknown format, a missing pyarrow (Parquet), or an output directory that cannot be written.
    """
    if fmt not in FORMATS:
        raise UserError(f"--format: {fmt!r} is not one of {', '.join(FORMATS)}", "use --format parquet or --format csv")
    writer = _parquet_writer() if fmt == "parquet" else _write_csv
    host_ids = hosts.resolve(cell, host) if host else None
    if out_dir.exists() and not out_dir.is_dir():
        raise UserError(f"--out: {out_dir} is a file, not a directory",
                        "name a directory (new or existing) for runs.*, curves.*, splits.* and phases.*")
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out: cannot create {out_dir}: {exc.strerror or exc}", "pick a writable directory") from exc
    files, rows = {}, {}
    for name, fetch in TABLES.items():
        data = fetch(cell.store, since, host_ids)
        path = out_dir / f"{name}.{fmt}"
        tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
        try:
            writer(tmp, data)
            os.replace(tmp, path)
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise UserError(f"--out: cannot write {path}: {exc.strerror or exc}", "pick a writable directory") from exc
        files[name], rows[name] = str(path), len(data)
    return {"format": fmt, "since": since.isoformat(), "dir": str(out_dir), "files": files, "rows": rows}


def _flat(value: Any, keep_times: bool) -> Any:
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True)
    if isinstance(value, datetime):
        aware = aware_utc(value)
        return aware if keep_times else aware.isoformat()
    return value


def _write_csv(path: Path, data: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        if not data:
            return
        w = csv.DictWriter(f, fieldnames=list(data[0]))
        w.writeheader()
        for row in data:
            w.writerow({k: _flat(v, keep_times=False) for k, v in row.items()})


def _parquet_writer() -> Callable[[Path, list[dict[str, Any]]], None]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise UserError("--format parquet needs pyarrow, which is not installed",
                        "pip install 'dynocell[export]' (or use --format csv)") from None

    def write(path: Path, data: list[dict[str, Any]]) -> None:
        table = pa.Table.from_pylist([{k: _flat(v, keep_times=True) for k, v in r.items()} for r in data])
        pq.write_table(table, path)

    return write
