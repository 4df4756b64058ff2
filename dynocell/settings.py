"""The one place dynocell reads its environment.

Every other module receives a :class:`Settings` object built at the edge (the
CLI callback, ``create_app``, the TUI's constructor) and never looks at
``os.environ`` itself. Each field carries a help string; ``dynocell settings``
prints every value and where it came from (environment, or default).

Variables are named ``DYNOCELL_<FIELD>`` (e.g. ``DYNOCELL_HOME``,
``DYNOCELL_DATABASE_URL``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import platformdirs
from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

ENV_PREFIX = "DYNOCELL_"


class Settings(BaseSettings):
    """Typed settings of one dynocell process.

    Paths are absolute after construction; times are seconds.
    """

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, frozen=True, extra="ignore")

    home: Path = Field(
        default_factory=lambda: Path(platformdirs.user_data_dir("dynocell")),
        description="Data directory: the store, boot logs, traces, made models.",
    )
    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL of the store; default sqlite:///<home>/dynocell.db. "
        "Any SQLAlchemy URL is accepted (e.g. postgresql+psycopg://…).",
    )
    engine_python: str = Field(
        default=sys.executable,
        description="Python interpreter that runs engines (the reference engine, sglang.launch_server).",
    )
    boot_timeout_sglang_s: float = Field(
        default=900.0, gt=0, description="Overall boot limit for SGLang and vLLM engines, seconds."
    )
    boot_timeout_reference_s: float = Field(
        default=60.0, gt=0, description="Overall boot limit for the reference engine, seconds."
    )
    stop_grace_s: float = Field(
        default=30.0, ge=0, description="Seconds between SIGTERM and SIGKILL when stopping an engine."
    )
    http_timeout_s: float = Field(
        default=10.0, gt=0, description="Timeout of one HTTP probe to an engine, seconds."
    )
    request_timeout_s: float = Field(
        default=600.0, gt=0,
        description="Timeout of one generation request sent by dynocell (bench, lossless, canary), seconds."
    )
    health_generate_timeout_s: float = Field(
        default=30.0, gt=0, description="Time allowed for /health_generate (a real generation), seconds."
    )
    poll_interval_s: float = Field(
        default=2.0, gt=0, description="How often the TUI and web panel poll the store / engines, seconds."
    )
    runbooks_dir: Path | None = Field(
        default=None,
        description="Operator directory of runbook entries; adds to and overrides bundled entries by slug.",
    )
    web_host: str = Field(default="127.0.0.1", description="Default bind address of `dynocell web`.")
    web_port: int = Field(default=8700, ge=1, le=65535, description="Default port of `dynocell web`.")
    web_trusted_proxy: str | None = Field(
        default=None,
        description="Address(es) of a reverse proxy in front of `dynocell web` whose X-Forwarded-For is trusted "
                    "(comma-separated, as uvicorn's forwarded_allow_ips); unset: forwarding headers are ignored.",
    )
    model_seed: int = Field(default=0, ge=0, le=2**32 - 1,
                            description="Seed of the made-locally reference model pair (0 to 2^32 - 1).")
    model_cache: Path | None = Field(
        default=None,
        description="Where made-locally models are cached (default: <home>/models); share it between data directories.",
    )
    llama_server: Path | None = Field(
        default=None,
        description="llama.cpp's llama-server executable for engine = \"llamacpp\" configs (default: the newest "
        "build recorded by `dynocell engine build llamacpp`).",
    )
    debug: bool = Field(default=False, description="Show tracebacks on errors.")
    machine_id: str | None = Field(
        default=None,
        pattern=r"^[A-Za-z0-9._-]{1,64}$",
        description="This host's id in a shared store (default: /etc/machine-id, else an id generated once "
        "and kept in <home>/machine-id). Set it only to simulate several hosts on one machine.",
    )
    host_stale_s: float = Field(
        default=600.0, gt=0,
        description="A host not heard from for this long (seconds) has its live boots shown as "
        "'unknown (host … last seen …)' by other hosts.",
    )

    effect_size: float = Field(
        default=0.05, gt=0, lt=1,
        description="Smallest relative effect an operator cares about (0.05 = 5 %): a comparison whose interval "
        "does not exclude 'no effect' says how many more requests or runs would decide one of this size.",
    )
    plain_reuse_max_age_s: float = Field(
        default=3600.0, ge=0,
        description="A stored plain step is reused for break-even only while younger than this (seconds), "
        "on the same host, engine version, dtype and workload; else one is measured fresh.",
    )
    plain_reuse_load_band: float = Field(
        default=0.5, ge=0,
        description="A stored plain step is reused only when the host's load per core then and now differ by "
        "at most this much (load average / cores).",
    )

    @field_validator("home", mode="before")
    @classmethod
    def _empty_home_is_default(cls, v: Any) -> Any:
        """An empty DYNOCELL_HOME means unset (never the current directory)."""
        if v is None or (isinstance(v, str) and not v.strip()):
            return Path(platformdirs.user_data_dir("dynocell"))
        return v

    def model_post_init(self, __context: Any) -> None:  # noqa: D401 - pydantic hook
        object.__setattr__(self, "home", Path(self.home).expanduser().resolve())

    @property
    def db_url(self) -> str:
        """The effective SQLAlchemy URL (``database_url`` or the SQLite file in ``home``)."""
        return self.database_url or f"sqlite:///{self.home / 'dynocell.db'}"

    @property
    def store_kind(self) -> str:
        """``sqlite``, ``postgresql`` or another SQLAlchemy backend name (the URL's scheme before ``+``)."""
        return self.db_url.split(":", 1)[0].split("+", 1)[0]

    @property
    def boots_dir(self) -> Path:
        """Directory holding one folder per boot (log, traces)."""
        return self.home / "boots"

    @property
    def models_dir(self) -> Path:
        """Directory holding made-locally models (``model_cache`` or ``<home>/models``)."""
        return Path(self.model_cache).expanduser().resolve() if self.model_cache else self.home / "models"

    @property
    def builds_dir(self) -> Path:
        """Directory holding engine build overlays."""
        return self.home / "builds"

    @property
    def secrets_dir(self) -> Path:
        """Directory (0700, this host's own) holding the secret values stored configs carry: one 0600
        file per config, ``<hex of its hash>.json`` (its real canonical JSON). The store keeps ``***``."""
        return self.home / "secrets"

    def boot_timeout_s(self, engine: str) -> float:
        """Default overall boot limit for ``engine`` (``sglang`` | ``vllm`` | ``reference`` | other), seconds.

        vLLM shares the GPU engines' limit: its H200 boots took 37-68 s plus ~20 s of imports
        (docs/h200/VLLM.md), beyond the reference engine's.
        """
        return self.boot_timeout_sglang_s if engine in ("sglang", "vllm") else self.boot_timeout_reference_s

    def describe(self) -> list[dict[str, str]]:
        """Every setting as ``{name, env, value, source, help}``; source is ``env``, ``argument`` or ``default``."""
        rows = []
        for name, field in type(self).model_fields.items():
            env = ENV_PREFIX + name.upper()
            value = getattr(self, name)
            rows.append(
                {
                    "name": name,
                    "env": env,
                    "value": "" if value is None else (redact_url(value) if name == "database_url" else str(value)),
                    "source": "env" if env in os.environ
                    else ("argument" if name in self.model_fields_set else "default"),
                    "help": field.description or "",
                }
            )
        rows.append(
            {
                "name": "db_url (effective)",
                "env": "",
                "value": redact_url(self.db_url),
                "source": "env" if self.database_url else "derived from home",
                "help": "The URL actually used (password hidden).",
            }
        )
        rows.append(
            {
                "name": "store",
                "env": "",
                "value": self.store_kind,
                "source": "derived from db_url",
                "help": "Which database holds the store: sqlite (one host) or postgresql (a fleet).",
            }
        )
        return rows


def redact_url(url: str) -> str:
    """``url`` with the password of its ``user:password@`` part replaced by ``***``."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)
    user = netloc[0].split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{user}:***@{netloc[1]}"))


def load_settings(**overrides: Any) -> Settings:
    """Build settings from the environment, with explicit ``overrides`` winning."""
    return Settings(**overrides)


def child_base_env() -> dict[str, str]:
    """The minimal environment every engine child inherits (PATH, HOME, locale, TMPDIR).

    Engines get an explicit environment built from this plus the config's
    ``[env]`` table, never dynocell's whole environment.
    """
    keep = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "USER", "CUDA_VISIBLE_DEVICES",
            "LD_LIBRARY_PATH", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
            "NVSHMEM_DISABLE_NVLS", "PYTHONPATH", "VIRTUAL_ENV", "OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")
    return {k: os.environ[k] for k in keep if k in os.environ}


def dynocell_child_env(settings: Settings) -> dict[str, str]:
    """The environment of a dynocell process this one starts (the detached supervisor): this
    process's own, with ``DYNOCELL_HOME`` and ``DYNOCELL_MODEL_CACHE`` made absolute (the child runs in
    a directory of dynocell's choosing, so a relative one would name another place) and
    ``PYTHONSAFEPATH=1`` (nothing in a working directory is imported)."""
    env = dict(os.environ)
    env["DYNOCELL_HOME"] = str(settings.home)
    if settings.model_cache:
        env["DYNOCELL_MODEL_CACHE"] = str(settings.models_dir)
    env["PYTHONSAFEPATH"] = "1"
    return env


def terminal_columns() -> int | None:
    """The terminal width the operator asked for with ``COLUMNS`` (POSIX), or None when unset/invalid.

    Output piped to a file or pager has no terminal to measure; ``COLUMNS=100 dynocell show RUN | less``
    then still lays tables out for 100 columns.
    """
    try:
        value = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        return None
    return value if value > 0 else None
