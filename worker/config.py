"""Configuration of the worker service, read once at start-up.

Sources, strongest first: ``MEMLEDGER_*`` environment variables, then the TOML file
named by ``MEMLEDGER_CONFIG_FILE`` (top-level keys are the field names below, e.g.
``database_url = "sqlite:///./memledger.db"``; prices go in a ``[model_prices]``
table), then the defaults. :func:`load_config` validates everything and raises one
:class:`ConfigError` that lists every bad value, so an operator fixes them all in one go.

This module is the only code of ``ledger/``, ``consolidation/`` and ``worker/`` that reads
or writes the environment (a test holds it so), with :mod:`worker.ledger_access`: the database,
account and ``sqlite_synchronous`` of the ledger commands, which open a ledger without the rest of
the configuration (and without pydantic-settings). Besides :class:`WorkerConfig` it reads the
variables named by others, in :class:`OuterEnvironment`: the model keys and servers
(``ANTHROPIC_API_KEY``, ``ANTHROPIC_BASE_URL``, ``OPENAI_API_KEY``, ``OPENAI_BASE_URL``),
handed to the consolidation service, and ``PROMETHEUS_MULTIPROC_DIR``; :func:`child_environment`
is the environment a worker process is started with.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from worker.errors import ConfigError
from worker.ledger_access import ENV_PREFIX, check_sqlite_synchronous

if TYPE_CHECKING:  # the price table loads with the commands that charge runs, not with every read
    from consolidation import PriceTable

CONFIG_FILE_ENV = "MEMLEDGER_CONFIG_FILE"
FAULT_POINTS = ("after_claim", "after_answer_stored", "mid_apply", "after_apply")
_ACCOUNT_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@/+-]{0,199}$")
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_SECRET_SETTINGS = ("operator_token",)  # never shown, in a log or in an error
_URL_SETTINGS = ("database_url", "redis_url")  # shown with their password masked


class WorkerConfig(BaseSettings):
    """Every setting of ``memledger serve`` / ``memledger worker`` (docs/operations.md)."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        extra="forbid",
        frozen=True,
        case_sensitive=False,
        env_ignore_empty=True,
    )

    database_url: str = Field("sqlite:///./memledger.db", description="SQLite file or PostgreSQL URL")
    sqlite_synchronous: str = Field(
        "normal", description="SQLite only: full = a committed write survives a power loss too (docs/operations.md)"
    )
    redis_url: str | None = Field(None, description="Redis broker URL; unset = embedded in-process queue")
    port: int = Field(8080, ge=0, le=65535, description="TCP port of `memledger serve` (its --port wins)")
    account: str = Field("local", description="the bound account: the protocol's scope is account:<account>")
    log_format: Literal["json", "console"] = "json"
    log_level: str = "INFO"
    metrics_port: int | None = Field(None, ge=1, le=65535, description="Prometheus port of `memledger worker`")
    metrics_port_offset: int = Field(
        0, ge=0, le=65534, description="added to metrics_port (systemd: the instance number of memledger-worker@N)"
    )
    ops_metrics_max_scopes: int = Field(
        50, ge=0, le=1000, description="scopes with their own label in the per-scope gauges; the rest sum as _other"
    )
    operator_token: str | None = Field(
        None, min_length=16, description="bearer token for /ops and /metrics from other hosts; unset = loopback only"
    )
    janitor_interval_s: float = Field(10.0, gt=0, le=3600)
    janitor_resend_after_s: float = Field(5.0, ge=0, le=3600, description="re-send a due run this long past due_at")
    janitor_grace_s: float = Field(30.0, ge=0, le=3600, description="a running run is stuck past cap + grace")
    janitor_batch: int = Field(500, ge=1, le=100_000)
    worker_threads: int = Field(8, ge=1, le=256)
    worker_processes: int = Field(1, ge=1, le=64)
    worker_poll_ms: int = Field(20, ge=5, le=5000, description="idle poll interval: bounds due_at -> start delay")
    shutdown_timeout_s: float = Field(60.0, ge=0, le=3600, description="how long SIGTERM waits for in-flight runs")
    sweep_interval_s: float = Field(3600.0, ge=0, description="embedded sweep schedule; 0 = off (use cron)")
    redis_namespace: str = Field("memledger", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    model_prices: dict[str, dict[str, str | float | int]] = Field(default_factory=dict)
    fault_point: str | None = Field(None, description="fault tests only: os._exit at this step of a run")
    # Serving safely (docs/operations.md).
    auth: Literal["none", "tokens"] = Field("none", description="tokens: every HTTP request needs a Bearer token")
    allowed_origins: str = Field("", description="comma-separated Origins allowed to call /rpc (CORS for them)")
    allowed_hosts: str = Field("", description="comma-separated Host names accepted besides the loopback ones")
    max_request_bytes: int = Field(1_000_000, ge=1024, le=64_000_000, description="largest POST /rpc body")
    header_timeout_s: float = Field(10.0, gt=0, le=600, description="a request's headers must arrive within this")
    body_timeout_s: float = Field(30.0, gt=0, le=3600, description="a request's body must arrive within this")
    tenant_max_records: int = Field(
        1_000,
        ge=0,
        le=1_000_000,
        description="with tokens, the largest record budget (maxRecords) an account may set for itself; "
        "the operator sets any with `memledger budget SCOPE --set N`",
    )
    max_requests_in_flight: int = Field(
        1000, ge=1, le=100_000, description="requests answered at once; more get 503 (idle connections never count)"
    )
    max_requests_per_account: int = Field(
        100, ge=1, le=100_000, description="with tokens: requests one account may have open at once; more get 429"
    )

    @field_validator("database_url")
    @classmethod
    def _database_url(cls, value: str) -> str:
        scheme = value.split("://", 1)[0].split("+", 1)[0].lower() if "://" in value else ""
        if scheme not in ("sqlite", "postgresql"):
            raise ValueError("must be a sqlite:///path or postgresql+psycopg://user@host/db URL")
        return value

    @field_validator("sqlite_synchronous")
    @classmethod
    def _synchronous(cls, value: str) -> str:
        return check_sqlite_synchronous(value)

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None or not value.strip():
            return None
        if not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                "must be a redis://host:port/db (or rediss://, unix://) URL; unset it for the embedded queue"
            )
        return value

    @field_validator("account")
    @classmethod
    def _account(cls, value: str) -> str:
        if not _ACCOUNT_RE.match(value):
            raise ValueError("must be letters, digits and . _ @ / + - (the scope becomes account:<account>)")
        return value

    @field_validator("allowed_origins", "allowed_hosts")
    @classmethod
    def _comma_list(cls, value: str) -> str:
        for item in (part.strip() for part in value.split(",")):
            if item and not re.fullmatch(r"(?:https?://)?[A-Za-z0-9.\[\]:*-]+", item):
                raise ValueError(f"{item[:80]!r} is not a host or an origin such as https://chat.example.com")
        return value

    def origin_list(self) -> list[str]:
        """``allowed_origins`` as a list (lower case, no trailing slash)."""
        return [o.strip().rstrip("/").lower() for o in self.allowed_origins.split(",") if o.strip()]

    def host_list(self) -> list[str]:
        """``allowed_hosts`` as a list of lower-case host names (no port)."""
        return [h.strip().lower() for h in self.allowed_hosts.split(",") if h.strip()]

    @field_validator("log_level")
    @classmethod
    def _log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in _LOG_LEVELS:
            raise ValueError(f"must be one of {', '.join(_LOG_LEVELS)}")
        return level

    @field_validator("model_prices")
    @classmethod
    def _model_prices(cls, value: dict[str, dict[str, str | float | int]]) -> dict[str, dict[str, str | float | int]]:
        if not value:  # nothing to check: the price table (consolidation's) loads only for overrides
            return value
        from consolidation import default_price_table

        default_price_table().with_overrides(value)  # raises ValueError naming the bad model or field
        return value

    @field_validator("fault_point")
    @classmethod
    def _fault_point(cls, value: str | None) -> str | None:
        if value is not None and value not in FAULT_POINTS:
            raise ValueError(f"must be one of {', '.join(FAULT_POINTS)}")
        return value

    @model_validator(mode="after")
    def _metrics_port_in_range(self) -> WorkerConfig:
        if self.metrics_port is not None and self.metrics_port + self.metrics_port_offset > 65535:
            raise ValueError(
                f"metrics_port {self.metrics_port} + metrics_port_offset {self.metrics_port_offset} is past 65535: "
                "use a lower base port (MEMLEDGER_METRICS_PORT) or a smaller instance number"
            )
        return self

    @property
    def metrics_listen_port(self) -> int | None:
        """The port ``memledger worker`` serves metrics on: ``metrics_port + metrics_port_offset``, or None."""
        return None if self.metrics_port is None else self.metrics_port + self.metrics_port_offset

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The environment beats the TOML file, which :func:`load_config` passes as init values.
        return (env_settings, init_settings)

    def price_table(self) -> PriceTable:
        """The built-in price table with the configured ``model_prices`` applied."""
        from consolidation import default_price_table

        return default_price_table().with_overrides(self.model_prices)

    @property
    def embedded(self) -> bool:
        """True when no Redis URL is set: the queue lives inside ``memledger serve``."""
        return self.redis_url is None

    def redacted(self) -> dict[str, Any]:
        """The settings as a dict with secrets in URLs masked (safe to log)."""
        data = self.model_dump()
        for key in (*_SECRET_SETTINGS, *_URL_SETTINGS):
            if data.get(key):
                data[key] = masked(key, data[key])
        return data


class ModelAccess(TypedDict):
    """The model keys and servers, as the consolidation service's keyword arguments."""

    api_key: str | None
    base_url: str | None
    openai_api_key: str | None
    openai_base_url: str | None


class OuterEnvironment(BaseSettings):
    """Variables named by others than memledger, read like the settings (an empty one counts as unset).

    The model SDKs read their own variables too; these are the ones our code passes on.
    """

    model_config = SettingsConfigDict(extra="ignore", frozen=True, case_sensitive=False, env_ignore_empty=True)

    anthropic_api_key: str | None = None
    anthropic_base_url: str | None = None
    openai_api_key: str | None = None
    openai_base_url: str | None = None
    prometheus_multiproc_dir: str | None = Field(None, description="set by the supervisor for its worker processes")

    def model_access(self) -> ModelAccess:
        """The keys and servers as the consolidation service's keyword arguments."""
        return {
            "api_key": self.anthropic_api_key,
            "base_url": self.anthropic_base_url,
            "openai_api_key": self.openai_api_key,
            "openai_base_url": self.openai_base_url,
        }


def child_environment(**overrides: str) -> dict[str, str]:
    """This process's environment with ``overrides`` set: what a worker process is started with."""
    return {**os.environ, **overrides}


def _read_toml(path_text: str) -> dict[str, Any]:
    path = Path(path_text).expanduser()
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError([f"{CONFIG_FILE_ENV}={path_text!r}: the file does not exist"]) from None
    except OSError as exc:
        raise ConfigError([f"{CONFIG_FILE_ENV}={path_text!r}: cannot read it ({exc.strerror})"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{CONFIG_FILE_ENV}={path_text!r}: not valid TOML ({exc})"]) from None
    return data


def masked(field: str, value: str) -> str:
    """A setting's value as safe to show: a secret as ``***``, a password in a URL as ``***``."""
    if field in _SECRET_SETTINGS:
        return "***"
    return _url_masked(value) if field in _URL_SETTINGS else value


def _url_masked(url: str) -> str:
    """``url`` with everything from its user's ``:`` to its last ``@`` as ``***``.

    Up to the last ``@``, so a password holding one (``p@ss``) is masked whole; and a URL that fails its
    check for a typo in ``://`` (``postgresql:/app:pw@db``) is masked from its scheme's ``:`` on, never shown
    whole. Masking a little more than the password (a query's ``@``) is the safe side.
    """
    at = url.rfind("@")
    if at < 0:
        return url
    slashes = url.find("//", 0, at)
    colon = url.find(":", slashes + 2 if slashes >= 0 else 0, at)
    return url if colon < 0 else f"{url[: colon + 1]}***{url[at:]}"


def _describe(loc: tuple[int | str, ...], environ: Mapping[str, str], config_file: str | None) -> tuple[str, object]:
    """Name a bad value as the operator wrote it: the environment variable or the file key."""
    if not loc:  # a check across several settings: its message names them
        return "settings", None
    field = str(loc[0])
    env_name = ENV_PREFIX + field.upper()
    for key, value in environ.items():
        if key.upper() == env_name:
            return env_name, value
    where = f"{'.'.join(str(part) for part in loc)} in {config_file}" if config_file else env_name
    return where, None


def load_config() -> WorkerConfig:
    """Read and validate the configuration once (environment + optional TOML file).

    Raises:
        ConfigError: one message naming every bad value and what is expected.
    """
    config_file = os.environ.get(CONFIG_FILE_ENV) or None
    file_values = _read_toml(config_file) if config_file else {}
    try:
        return WorkerConfig(**file_values)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where, value = _describe(tuple(err["loc"]), os.environ, config_file)
            field = str(err["loc"][0]) if err["loc"] else ""
            shown = f"={masked(field, str(value))!r}" if value is not None else ""
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "unknown setting (check the spelling)"
            problems.append(f"{where}{shown}: {message}")
        raise ConfigError(problems) from None
