"""The JSON API's request and answer models (pydantic), shared by the families that use them."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class JobOut(BaseModel):
    """A background job's status."""

    id: str
    kind: str
    key: str | None
    label: str
    state: str
    messages: list[dict[str, Any]]
    links: dict[str, str]
    result: Any = None
    error: str | None = None


class StartRequest(BaseModel):
    """Start a run or a boot of a stored config (label, hash or hash prefix; never a file path)."""

    config: str


class ConfigAddRequest(BaseModel):
    """Store a config from its TOML text, labelled ``name`` (default: its ``[meta] name``).

    When the label already points at another config, nothing is stored unless ``confirm`` is
    the new config's hash (the answer then is 409 with the move to confirm)."""

    toml: str
    name: str | None = None
    confirm: str | None = None


class ConfigAddedOut(BaseModel):
    """A stored config: ``hash``, ``name`` (its label now), ``moved_from`` (the label's old hash)."""

    hash: str
    name: str
    moved_from: str | None = None


class NoteRequest(BaseModel):
    """A note on a target (``kind``: config, boot, run, entry, experiment)."""

    kind: str
    target: str
    text: str


class StartedOut(BaseModel):
    """A started (or reused, when identical) job."""

    job_id: str
    job_url: str
