"""Config procedures: add a TOML file to the store, resolve a reference, list, show, diff.

A *reference* (``ref``) names one stored config and is, in the order tried:
a path to a ``.toml`` file (parsed and added on the fly), a label name, a full
hash (``sha256:<64 hex>``) or a unique hash prefix of at least
:data:`dynocell.db.refs.MIN_PREFIX` hex digits, with or without ``sha256:``
(the one resolver, :mod:`dynocell.db.refs`).

Stored per config: the file's text as given (``source_toml``) and the
canonical JSON that is hashed (see :mod:`dynocell.engine.config`).
"""

from __future__ import annotations

import json
import os
import re
import stat
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynocell.clock import iso_utc, now_utc
from dynocell.db import configs as db, refs
from dynocell.engine.config import (
    REDACTED,
    EngineConfig,
    config_from_canonical,
    diff_configs as _diff,
    injection_env_keys,
    load_config,
    parse_config,
    redact_args,
    redact_config,
    redact_env,
    secret_values,
    to_toml,
    trust_concerns,
    trust_warning,
)
from dynocell.errors import ConfigError, NotFound, Refused, UserError, not_a_file
from dynocell.runbooks.cell import Cell

HASH_PREFIX = "sha256:"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,199}$")
#: A name that reads as a hash or a hash prefix (refs.MIN_PREFIX to 64 hex digits, ``sha256:`` optional).
_HASH_LIKE = re.compile(rf"^(?:{HASH_PREFIX})?[0-9a-fA-F]{{{refs.MIN_PREFIX},64}}$", re.IGNORECASE)


@dataclass(frozen=True)
class ConfigRecord:
    """Outcome of :func:`add_config`.

    ``hash``: ``"sha256:…"``; ``name``: the label now pointing at it; ``created``:
    a new config row was written; ``relabelled``: a new label row was written;
    ``previous``: the hash the label pointed at before, when this moved it (a
    label never moves silently: faces print ``label NAME: OLD → NEW``);
    ``injection_env``: the ``[env]`` names that inject code (:func:`injection_env_keys`).
    ``warnings``: what is stored but cannot boot here (:func:`model_path_warnings`).
    ``concerns``: what in it is a trust decision (:func:`~dynocell.engine.config.trust_concerns`:
    ``[env]`` off the allow-list, patch folders outside the bundled set, a non-loopback ``host``).
    """

    hash: str
    name: str
    created: bool
    relabelled: bool = False
    previous: str | None = None
    injection_env: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    concerns: tuple[str, ...] = ()

    @property
    def moved(self) -> bool:
        """True when this moved an existing label from another config to this one."""
        return self.previous is not None and self.previous != self.hash


def short_hash(config_hash: str, n: int = 12) -> str:
    """``sha256:0123456789ab`` → ``0123456789ab`` (the first ``n`` hex digits)."""
    return config_hash.removeprefix(HASH_PREFIX)[:n]


#: What a label may be, as the hints say it (:data:`_NAME`).
NAME_RULE = "1 to 200 letters, digits, '.', '_', '+' or '-', starting with a letter or digit"


def check_name(name: str, source: str = "", kind: str = "config") -> str:
    """Validate a label name (:data:`NAME_RULE`; not a hash) of a ``kind`` (config, experiment). ``source``:
    where the name came from when the user did not type it (``the file name``), named in the hint with
    ``--name``. Raises UserError.

    A name of hex digits only (:data:`~dynocell.db.refs.MIN_PREFIX` to 64, ``sha256:`` optional) is refused: the
    resolver tries labels before hashes, so such a label would silently take over every reference to the config
    whose hash starts with it (issue 32, item 5)."""
    if _HASH_LIKE.match(name):
        example = "cfg-" + name.lower().removeprefix(HASH_PREFIX)[:12]
        raise UserError(f"invalid {kind} name {name!r}" + (f" (from {source})" if source else "")
                        + ": it reads as a hash or a hash prefix, and would take over references to that hash",
                        f"use a name that is not only hex digits, e.g. {example!r}"
                        + (" (or give --name)" if source else ""))
    if not _NAME.match(name):
        raise UserError(f"invalid {kind} name {name!r}" + (f" (from {source})" if source else ""),
                        f"use {NAME_RULE}" + (" (or give --name)" if source else ""))
    return name


def add_config(cell: Cell, path: str | Path, name: str | None = None) -> ConfigRecord:
    """Parse the TOML file at ``path`` and store it (insert-or-ignore by hash), then label it.

    The label is ``name``, else ``[meta] name``, else the file stem; a label row
    is appended only when the name does not already point at this hash (so a
    re-label keeps history). Raises ConfigError (exit 2) for a bad file and
    UserError for a bad name; nothing is written on error.
    """
    p = Path(path)
    cfg = load_config(p)
    if not name and cfg.meta.name and (not _NAME.match(cfg.meta.name) or _HASH_LIKE.match(cfg.meta.name)):
        raise ConfigError(str(p), "meta.name", f"invalid config name {cfg.meta.name!r}",
                          f"use {NAME_RULE}, not only hex digits (or give --name)")
    label = check_name(name or cfg.meta.name or p.stem, "" if name or cfg.meta.name else "the file name")
    text = p.read_text(encoding="utf-8").removeprefix("\ufeff")  # a byte-order mark is not the config's text
    store = cell.store
    created = insert_private(cell, cfg, text)
    previous = db.current_target(store, label)
    relabelled = db.add_label(store, label, cfg.config_hash)
    warnings = model_path_warnings(cfg)
    if not created:
        warnings.extend(kept_source_warning(store, cfg.config_hash, stored_text(cfg, text)))
    return ConfigRecord(cfg.config_hash, label, created, relabelled,
                        previous if relabelled else None, tuple(injection_env_keys(cfg.env)),
                        tuple(warnings), tuple(trust_concerns(cfg)))


def kept_source_warning(store: Any, config_hash: str, text: str) -> list[str]:
    """One sentence when ``config_hash`` was already stored from a file whose text differs from ``text``
    (comments, ``[meta] notes``, key order): the store keeps the first file's source and notes, and the
    new label points at that record. Empty when the texts are the same."""
    stored = db.get_config(store, config_hash)
    if stored is None or stored.source_toml == text:
        return []
    notes = _meta_of(stored.source_toml).get("notes")
    kept = f" (notes: {notes!r})" if notes else ""
    return [f"this content was already stored from another file; its source and notes are kept{kept}, "
            "this file's comments and [meta] notes are not (the hash is the same: same engine settings)"]


def model_path_warnings(cfg: EngineConfig) -> list[str]:
    """One sentence per local model path of ``cfg`` missing on this machine (a config for another
    host is stored and planned; only ``boot`` refuses it), and one when the algorithm cannot serve the
    draft folder's head (:func:`dynocell.engine.config.draft_head_problem`; ``boot`` refuses that too)."""
    from dynocell.engine.config import draft_head_problem, missing_model_paths

    out = [f"{field}: {path} does not exist on this machine; fine for a config meant for another host, "
           f"but `dynocell boot` here will refuse it" for field, path in missing_model_paths(cfg)]
    head = draft_head_problem(cfg)
    if head:
        out.append(f"speculative.algorithm: {head}; `dynocell boot` will refuse it")
    return out


def _meta_of(source_toml: str) -> dict[str, Any]:
    try:
        meta = tomllib.loads(source_toml).get("meta")
    except tomllib.TOMLDecodeError:
        return {}
    return {k: v for k, v in (meta or {}).items() if k in ("name", "notes") and isinstance(v, str)}




# ---------------------------------------------------------------- secrets: out of the store, on this host

#: The first line of a stored source whose secrets could not be found in the text as written (an escape the
#: redaction does not know): the canonical rendering, redacted, is stored instead.
WITHHELD_SOURCE = "# the TOML as written held a secret in a form dynocell could not redact; canonical TOML:\n"


def _hash_of(canonical_json: str) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(canonical_json.encode()).hexdigest()


def _secret_file(cell: Cell, config_hash: str) -> Path:
    return cell.settings.secrets_dir / f"{config_hash.removeprefix(HASH_PREFIX)}.json"


def stored_text(cfg: EngineConfig, text: str) -> str:
    """``text`` (a config's TOML) as the store keeps it: every secret of ``cfg``
    (:func:`~dynocell.engine.config.secret_values`) as ``***``; when one cannot be found in the text, the
    redacted canonical TOML under :data:`WITHHELD_SOURCE`. Unchanged for a config without secrets."""
    if not secret_values(cfg):
        return text
    shown = redact_source(text, cfg)
    return shown if shown is not None else WITHHELD_SOURCE + to_toml(redact_config(cfg))


def insert_private(cell: Cell, cfg: EngineConfig, text: str) -> bool:
    """Store ``cfg`` (its TOML ``text``) keeping its secrets out of the store (issue 32): ``source_toml``
    is :func:`stored_text` and ``canonical_json`` the redacted config's, so no face, export or other host
    reading the store sees a secret; the real canonical JSON goes to this host's 0600 file
    ``<secrets_dir>/<hex>.json`` (:attr:`~dynocell.settings.Settings.secrets_dir`), which
    :func:`real_canonical` reads back to boot. The hash is the real config's, as before (a config with
    secrets stored earlier keeps its row). True when a row was written."""
    canonical = cfg.canonical_json()
    if secret_values(cfg):
        from dynocell.fsmodes import open_private, private_dir

        path = _secret_file(cell, cfg.config_hash)
        private_dir(path.parent)
        with open_private(path, "wb") as f:
            f.write(canonical.encode())
        canonical = redact_config(cfg).canonical_json()
    return db.insert_config(cell.store, cfg.config_hash, cfg.engine, cfg.model_path, canonical,
                            stored_text(cfg, text))


def real_canonical(cell: Cell, row: Any) -> str:
    """The canonical JSON of a stored config ``row`` with its real secrets: the stored text when it hashes
    to the row's hash (no secrets, or stored before secrets left the store), else this host's secret file
    when it is a regular file of this user that hashes to it, else the stored (redacted) text —
    :func:`require_secrets` then refuses to boot it."""
    if _hash_of(row.canonical_json) == row.config_hash:
        return row.canonical_json
    path = _secret_file(cell, row.config_hash)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return row.canonical_json
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid() or st.st_size > (1 << 22):
            return row.canonical_json
        text = f.read().decode("utf-8", "replace")
    return text if _hash_of(text) == row.config_hash else row.canonical_json


def require_secrets(cfg: EngineConfig, config_hash: str) -> None:
    """Refuse (UserError) to boot ``cfg`` stored as ``config_hash`` when its secrets are withheld — ``***``
    where the stored config had a secret, and no secret file of this host restores it (a fleet store's
    config added on another host): the engine would get ``***`` as its key."""
    values = [*cfg.env.values(), *cfg.extra_args]
    if cfg.config_hash != config_hash and any(v == REDACTED or v.endswith(f"={REDACTED}") or f":{REDACTED}@" in v
                                                   for v in values):
        raise UserError(f"config {short_hash(config_hash)} holds secrets that are not on this host: the store keeps "
                        "them as ***, and their values live in the secret file of the host that added it",
                        "add its TOML file here (`dynocell config add FILE`), then boot it again")


def _looks_like_path(ref: str) -> bool:
    return ref.endswith(".toml") or "/" in ref or "\\" in ref


def resolve_hash(cell: Cell, ref: str) -> str:
    """The stored hash ``ref`` names (see the module docstring); a path is added first.

    Raises NotFound when nothing matches or a prefix is ambiguous (listing the
    candidates, :mod:`dynocell.db.refs`), ConfigError for a bad file.
    """
    ref = ref.strip()
    if not ref:
        raise UserError("empty config reference", "give a config name, hash, hash prefix or .toml path")
    if _looks_like_path(ref) and Path(ref).is_file():
        return add_config(cell, ref).hash
    try:
        return refs.resolve_key(cell.store, ref, "config")
    except NotFound:
        if _looks_like_path(ref):
            raise ConfigError(ref, None, not_a_file(ref, "config file"), "give the path of a .toml config") from None
        raise


def resolve_config(cell: Cell, ref: str) -> tuple[EngineConfig, str]:
    """``(config, hash)`` for ``ref`` (name | hash | unique prefix | .toml path).

    The returned config carries ``[meta]`` from its stored TOML, with
    ``meta.name`` set to ``ref`` when ``ref`` is a label. Raises NotFound or
    ConfigError as :func:`resolve_hash`.
    """
    h = resolve_hash(cell, ref)
    row = db.get_config(cell.store, h)
    if row is None:  # pragma: no cover - a label always points at a stored row (FK)
        raise NotFound(f"config {h} is labelled but not stored", "re-add its file with `dynocell config add`")
    meta = _meta_of(row.source_toml)
    if db.current_target(cell.store, ref) == h:
        meta["name"] = ref
    return config_from_canonical(real_canonical(cell, row), meta or None), h


def list_configs(cell: Cell) -> list[dict[str, Any]]:
    """Every stored config, newest first, as ``{hash, short, names, engine, model_path,
    algorithm, created_at}`` (``names``: labels pointing at it now; ``created_at`` ISO 8601 UTC)."""
    store = cell.store
    by_hash: dict[str, list[str]] = {}
    for name, h in db.current_labels(store).items():
        by_hash.setdefault(h, []).append(name)
    out = []
    for row in db.all_configs(store):
        cfg = config_from_canonical(row.canonical_json)
        out.append({
            "hash": row.config_hash,
            "short": short_hash(row.config_hash),
            "names": sorted(by_hash.get(row.config_hash, [])),
            "engine": row.engine,
            "model_path": row.model_path,
            "algorithm": cfg.speculative.algorithm,
            "created_at": iso_utc(row.created_at),
        })
    return out


def show_config(cell: Cell, ref: str) -> dict[str, Any]:
    """One config in full: ``{hash, names, engine, model_path, created_at, canonical (dict),
    meta, toml (canonical rendering), source_toml (as given), labels, observed}``.

    For an ``observed`` config ``canonical`` holds only the fields the engine revealed.
    ``command``: the launch argv for the config's engine (SGLang's, vLLM's or the reference
    engine's names; :func:`dynocell.runbooks.plan.plan_config`, node 0; ``--port <free port at boot>``
    for ``port = 0``, :func:`~dynocell.runbooks.plan.shown_command`), None for an observed
    config or one its engine's adapter refuses (``command_error`` then says why).

    ``labels``: one entry per name that ever pointed here, ``{name, current
    (bool: points here now), history: [{config_hash, at}]}``, history oldest first.
    """
    cfg, h = resolve_config(cell, ref)
    store = cell.store
    row = db.get_config(store, h)
    assert row is not None
    labels = []
    for name in db.names_ever_pointing_at(store, h):
        hist = db.label_history(store, name)
        labels.append({
            "name": name,
            "current": hist[-1].config_hash == h,
            "history": [{"config_hash": r.config_hash, "at": iso_utc(r.created_at)} for r in hist],
        })
    shown = redact_config(cfg)
    trusted = db.get_trust(store, h)
    # An observed config (attach / import) is shown as seen: only the revealed fields, no defaults.
    observed = json.loads(row.canonical_json).get("observed") is True
    command, command_error = None, None
    if not observed:
        from dynocell.runbooks.plan import plan_config, shown_command

        try:
            command = shown_command(plan_config(cfg, python=cell.settings.engine_python)[0])
        except UserError as exc:  # ConfigError is a UserError: stored before the rule existed
            command_error = str(exc)
    return {
        "hash": h,
        "names": [lab["name"] for lab in labels if lab["current"]],
        "engine": row.engine,
        "model_path": row.model_path,
        "created_at": iso_utc(row.created_at),
        "canonical": json.loads(row.canonical_json)["fields"] if observed else shown.canonical(),
        "meta": cfg.meta.model_dump(exclude_none=True),
        "toml": redact_source(row.source_toml, cfg) if observed else to_toml(shown),
        "source_toml": redact_source(row.source_toml, cfg),
        "labels": labels,
        "observed": observed,
        "injection_env": injection_env_keys(cfg.env),
        "concerns": trust_concerns(cfg),
        "warning": trust_warning(cfg),
        "trusted": {"by": trusted[0], "at": iso_utc(trusted[1])} if trusted else None,
        "command": command,
        "command_error": command_error,
    }


def redact_source(source_toml: str, cfg: EngineConfig) -> str | None:
    """The stored TOML text with every secret of ``cfg`` (:func:`~dynocell.engine.config.secret_values`:
    secret ``[env]`` values, URL passwords, ``extra_args`` secret flag values) replaced by ``***``; None
    when a secret cannot be found to replace (then the text is withheld, not shown)."""
    secrets = secret_values(cfg)
    out = source_toml
    for value in sorted(secrets, key=len, reverse=True):
        for form in (json.dumps(value, ensure_ascii=False)[1:-1], value):
            out = out.replace(form, REDACTED)
    if any(v in out or json.dumps(v, ensure_ascii=False)[1:-1] in out for v in secrets):
        return None
    return out


def current_user() -> str:
    """The OS user running this process (from the password database, not the environment)."""
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:  # a uid with no passwd entry (containers)
        return f"uid {os.getuid()}"


def is_trusted(cell: Cell, config_hash: str) -> bool:
    """Whether ``config_hash`` was marked trusted (``dynocell config trust``): a config whose
    ``[env]`` injects code may be booted from the web panel only then."""
    return db.get_trust(cell.store, config_hash) is not None


def trust(cell: Cell, config_hash: str, who: str) -> dict[str, Any]:
    """Mark a stored config trusted by ``who`` (an OS user name), now; the first mark is kept.

    Returns ``{hash, trusted_by, trusted_at, created (bool: marked now), injection_env}``.
    Raises NotFound for a hash that is not stored.
    """
    if db.get_config(cell.store, config_hash) is None:
        raise NotFound(f"config {config_hash} is not stored", "see `dynocell config list`")
    created = db.set_trust(cell.store, config_hash, who)
    by, at = db.get_trust(cell.store, config_hash) or (who, now_utc())
    cfg = config_by_hash(cell, config_hash)
    return {"hash": config_hash, "trusted_by": by, "trusted_at": iso_utc(at), "created": created,
            "injection_env": injection_env_keys(cfg.env), "concerns": trust_concerns(cfg)}


def trust_ref(cell: Cell, ref: str, who: str | None = None) -> dict[str, Any]:
    """:func:`trust` for a stored config named by label, hash or unique prefix (not a file path:
    a config is trusted after it was added and looked at). ``who`` defaults to :func:`current_user`."""
    if _looks_like_path(ref):
        raise UserError(f"{ref!r} is a file path: trust names a stored config",
                        "add it first (`dynocell config add FILE`), read it (`dynocell config show NAME`), "
                        "then `dynocell config trust NAME`")
    return trust(cell, resolve_hash(cell, ref), who or current_user())


def diff_configs(cell: Cell, a: str, b: str) -> dict[str, Any]:
    """Field-by-field differences of two refs: ``{a: {ref, hash}, b: {ref, hash}, same (bool),
    differences: [{field, a, b}]}`` (only fields that differ; dotted field paths; secret env
    values shown as ``***`` — a changed secret still shows as a difference)."""
    ca, ha = resolve_config(cell, a)
    cb, hb = resolve_config(cell, b)
    diffs = [{"field": f, "a": _shown(f, va), "b": _shown(f, vb)} for f, va, vb in _diff(ca, cb)]
    return {"a": {"ref": a, "hash": ha}, "b": {"ref": b, "hash": hb}, "same": ha == hb, "differences": diffs}


def _shown(field: str, value: Any) -> Any:
    """A diff value as shown: a secret ``env.NAME`` (:func:`redact_env`) becomes ``***``."""
    if field.startswith("env.") and value is not None:
        return redact_env({field[4:]: value})[field[4:]]
    if field == "extra_args" and isinstance(value, (list, tuple)):
        return redact_args(list(value))
    return value


def config_by_hash(cell: Cell, config_hash: str) -> EngineConfig:
    """The stored config with exactly ``config_hash`` (with its ``[meta]``). Raises NotFound."""
    row = db.get_config(cell.store, config_hash)
    if row is None:
        raise NotFound(f"config {config_hash} is not stored", "see `dynocell config list`")
    return config_from_canonical(real_canonical(cell, row), _meta_of(row.source_toml) or None)


def store_config(cell: Cell, cfg: EngineConfig) -> str:
    """Store a config made by a procedure (e.g. the plain twin of a speculative one); returns its hash.

    Insert-or-ignore by hash; the stored TOML is :func:`~dynocell.engine.config.to_toml` of ``cfg``.
    """
    from dynocell.engine.config import to_toml

    insert_private(cell, cfg, to_toml(cfg))
    return cfg.config_hash


def read_config_file(path: str | Path) -> EngineConfig:
    """Parse a config file without storing it (for plans and dry runs). Raises ConfigError."""
    return load_config(path)


# ---------------------------------------------------------------- web-facing: stored configs only, trust, redaction

def resolve_stored(cell: Cell, ref: str) -> str:
    """The hash of the *stored* config ``ref`` names (label, full hash or unique prefix); a path is
    never read. For faces that take a reference from a request (the web panel). Raises NotFound."""
    ref = (ref or "").strip()
    if not ref:
        raise UserError("no config given", "pick a stored config by name or hash")
    try:
        return refs.resolve_key(cell.store, ref, "config")
    except NotFound as exc:
        if isinstance(exc, refs.AmbiguousRef):
            raise
        # the resolver's reason (too short, too long, unknown) as the CLI says it; a hint for the panel
        raise NotFound(exc.message, "pick one from the Configs page, or add one there by pasting its TOML "
                                    "(a file path is never read from a request)") from None


def injection_keys_of(cell: Cell, config_hash: str) -> list[str]:
    """The ``[env]`` names of a stored config that need a trust decision (off the allow-list)."""
    return injection_env_keys(config_by_hash(cell, config_hash).env)


def concerns_of(cell: Cell, config_hash: str) -> list[str]:
    """:func:`~dynocell.engine.config.trust_concerns` of a stored config."""
    return trust_concerns(config_by_hash(cell, config_hash))


def check_web_bootable(cell: Cell, config_hash: str) -> None:
    """Refuse (:class:`~dynocell.errors.Refused`, HTTP 403) a web boot or run of a config with a trust
    concern (:func:`~dynocell.engine.config.trust_concerns`: ``[env]`` off the allow-list, patch folders
    outside the bundled set, a non-loopback ``host``) unless it was trusted from the CLI."""
    concerns = concerns_of(cell, config_hash)
    if concerns and not is_trusted(cell, config_hash):
        raise Refused(f"config {short_hash(config_hash)}: {'; '.join(concerns)}; that runs code of its author's "
                      "choosing or exposes the engine, so the web panel boots it only once trusted",
                      f"review it, then on the host run `dynocell config trust {short_hash(config_hash)}` "
                      "(or boot it from the CLI)")


def preview_config_text(text: str, name: str | None = None) -> tuple[str, str]:
    """``(hash, label)`` that :func:`add_config_text` would store, writing nothing. Raises as it."""
    cfg = parse_config(text, "<uploaded config>")
    if not (name or cfg.meta.name):
        raise UserError("the config has no name", "give a name, or set [meta] name in the TOML")
    return cfg.config_hash, check_name(name or cfg.meta.name or "")


def add_config_text(cell: Cell, text: str, name: str | None = None) -> ConfigRecord:
    """Store a config from its TOML text (the web panel's "add config": pasted or uploaded) and
    label it ``name`` / ``[meta] name``. Model paths are taken as written (no base directory).
    Raises ConfigError for bad TOML or fields, UserError for a bad or missing name."""
    _, label = preview_config_text(text, name)
    cfg = parse_config(text, "<uploaded config>")
    created = insert_private(cell, cfg, text)
    relabelled = db.add_label(cell.store, label, cfg.config_hash)
    return ConfigRecord(cfg.config_hash, label, created, relabelled, injection_env=tuple(injection_env_keys(cfg.env)),
                        concerns=tuple(trust_concerns(cfg)))


def label_target(cell: Cell, name: str) -> str | None:
    """The hash label ``name`` points at now, or None."""
    return db.current_target(cell.store, name)
