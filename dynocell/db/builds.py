"""Read/write of ``engine_builds`` (plain values in, records out).

Builds are content-addressed and immutable: :func:`insert_build` is an
insert-or-ignore by ``build_hash``. ``manifest`` holds the build's identity,
patched files and local facts (path, python, link mode) — not the per-file
list of the whole package, which stays in the build folder's
``manifest.json`` (its tree hash is part of the identity, so the two cannot
silently disagree). Nothing here builds, hashes or reads files.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any


from dynocell.db.tables import EngineBuild
from dynocell.db import rows
from dynocell.db.session import Store


@dataclass(frozen=True)
class StoredBuild(rows.Record):
    """One row of ``engine_builds``: hash (``"sha256:…"``), base dist/version, patch ids (ordered),
    manifest (dict), overlay folder path, creation time (UTC)."""

    build_hash: str
    base_dist: str
    base_version: str
    patches: list[str]
    manifest: dict[str, Any]
    path: str
    created_at: datetime


def _stored(row: EngineBuild) -> StoredBuild:
    return StoredBuild(row.build_hash, row.base_dist, row.base_version, list(row.patches or []),
                       dict(row.manifest or {}), row.path, row.created_at)


def insert_build(store: Store, build_hash: str, base_dist: str, base_version: str, patches: list[str],
                 manifest: dict[str, Any], path: str) -> bool:
    """Insert a build unless its hash is stored; True when a row was written."""
    return rows.insert_once(store, EngineBuild, build_hash, build_hash=build_hash, base_dist=base_dist,
                            base_version=base_version, patches=list(patches), manifest=manifest, path=path)


def get_build(store: Store, build_hash: str) -> StoredBuild | None:
    """The build with exactly this hash, or None."""
    return rows.get_as(store, EngineBuild, build_hash, _stored)


def all_builds(store: Store) -> list[StoredBuild]:
    """Every stored build, newest first."""
    return rows.newest_first(store, EngineBuild, _stored)
