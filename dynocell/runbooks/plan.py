"""Multi-node plans: the exact command to run on each node of a config (issue 11).

A config that names ``[[nodes]]`` (host, node_rank, gpus) and a
``dist_init_addr`` is one SGLang engine spread over several hosts; each host
runs ``python -m sglang.launch_server … --nnodes N --node-rank R
--dist-init-addr HOST:PORT`` (rendered by
:func:`dynocell.engine.adapters.render_nodes`). The environment of every node
is the config's ``[env]`` (NCCL settings such as ``NCCL_NVLS_ENABLE=0``,
``NCCL_SOCKET_IFNAME``, ``NCCL_IB_HCA``) plus ``PYTHONUNBUFFERED=1`` and the
build's ``PYTHONPATH`` when given — never this host's PATH/HOME, which mean
nothing on another machine. Secret-looking values are redacted.

The config's consistency (ranks 0..n−1 once each, GPUs sum = tp × pp,
``dist_init_addr`` with more than one node) is checked when the config is
parsed (:func:`dynocell.engine.config.parse_config`), so an inconsistent plan
is refused with a ConfigError naming the field.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from dynocell.engine.adapters import LaunchSpec, redact_args, redact_env, render_nodes
from dynocell.engine.config import EngineConfig, trust_warning
from dynocell.runbooks.cell import Cell

SGLANG_DEFAULT_PORT = 30000  # sglang ServerArgs.port default; used when the config leaves port = 0
#: How a shown (not run) command names the port of a config with ``port = 0``: dynocell picks a free one at boot.
PORT_AT_BOOT = "<free port at boot>"


def _load(cell: Cell, config_ref: str) -> EngineConfig:
    """The config ``config_ref`` names, with built-in model names (``dynocell:tiny``, ``dynocell:tiny-draft``)
    replaced by the made-locally pair's directories — what the engine is given at boot
    (:func:`dynocell.runbooks.boots.start.resolve_models`), so a printed command runs by hand as it is."""
    from dynocell.runbooks.boots.start import resolve_models
    from dynocell.runbooks.configs import read_config_file, resolve_config

    # a .toml path is read, not stored: a plan stores nothing
    cfg = read_config_file(config_ref) if Path(config_ref).is_file() else resolve_config(cell, config_ref)[0]
    return resolve_models(cell, cfg)


def command_line(spec: LaunchSpec, env: dict[str, str]) -> str:
    """``KEY=VALUE … ARGV`` with shell quoting: copy-pasteable on the node (POSIX shell)."""
    prefix = " ".join(f"{k}={shlex.quote(v)}" for k, v in sorted(env.items()))
    return (prefix + " " if prefix else "") + spec.argv_string


def plan_config(cfg: EngineConfig, *, python: str, build_pythonpath: str | None = None,
                port: int | None = None) -> list[dict[str, Any]]:
    """Per-node launch of ``cfg``: a list ordered by node_rank of dicts

    ``node_rank`` (int; 0 for a single-node config), ``host`` (where to run it;
    ``cfg.host`` when no nodes are named), ``argv`` (list), ``argv_string``,
    ``env`` (redacted dict), ``command`` (``KEY=VALUE … argv``, redacted),
    ``port`` (HTTP port; served by node 0 only), ``warning`` (``⚠ env sets …`` when the
    config has a trust concern, see :func:`~dynocell.engine.config.trust_warning`; else None),
    ``port_note`` (None, or — for a config with ``port = 0`` and no ``port`` given — that dynocell picks a
    free port at boot and this command uses SGLang's default instead).

    ``port``: default ``cfg.port``, else SGLang's 30000 (a plan is run by hand and never picks a
    random local port; :func:`shown_command` names the port ``<free port at boot>`` instead). Raises
    ConfigError / UserError from :func:`~dynocell.engine.adapters.render_nodes`.
    """
    at_boot = not (port or cfg.port)
    port = port or cfg.port or SGLANG_DEFAULT_PORT
    note = (f"port = 0 in the config: dynocell picks a free port at boot; this command uses SGLang's default "
            f"{port} (dynocell plan --port N to choose)") if at_boot else None
    specs = render_nodes(cfg, python=python, port=port, base_env={}, build_pythonpath=build_pythonpath)
    rows = []
    for spec in specs:
        env = redact_env(spec.env)
        rows.append({
            "node_rank": spec.node_rank if spec.node_rank is not None else 0,
            "host": spec.node_host or spec.host,
            "argv": redact_args(spec.argv),  # secret flag values as *** (every face)
            "argv_string": spec.argv_string,
            "env": env,
            "command": command_line(spec, env),
            "port": spec.port,
            "warning": trust_warning(cfg),
            "port_note": note,
        })
    return rows


def shown_command(row: dict[str, Any]) -> str:
    """A :func:`plan_config` row's argv as a person reads it: ``argv_string``, except that a config with
    ``port = 0`` (``port_note`` set) shows ``--port <free port at boot>`` — the number is picked when
    dynocell boots it, so none is made up here (``dynocell config show``)."""
    if not row.get("port_note"):
        return row["argv_string"]
    return " ".join(PORT_AT_BOOT if i and row["argv"][i - 1] == "--port" else shlex.quote(a)
                    for i, a in enumerate(row["argv"]))


def plan_warnings(cell: Cell, config_ref: str) -> list[str]:
    """What the plan of ``config_ref`` cannot check from here (model paths missing on this machine)."""
    from dynocell.runbooks.configs import model_path_warnings

    return model_path_warnings(_load(cell, config_ref))


def plan(cell: Cell, config_ref: str, *, port: int | None = None) -> list[dict[str, Any]]:
    """The per-node commands of the config ``config_ref`` (a .toml path — not stored — or a
    stored name/hash/prefix), with ``settings.engine_python`` as interpreter and built-in model
    names resolved to their directories (the pair is made on first use, as a boot would).

    Returns :func:`plan_config`'s rows. Raises ConfigError for an
    inconsistent config, NotFound for an unknown reference.
    """
    return plan_config(_load(cell, config_ref), python=cell.settings.engine_python, port=port)
