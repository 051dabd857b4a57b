"""Settings: `kpd.toml` (or the file named by KPD_CONFIG) overlaid by `KPD_*` environment variables.

Environment variables win over the file, as users of twelve-factor services expect. A bad value
stops the process with a message naming the setting, its value and the accepted range.
"""

from __future__ import annotations

import os
import re
import socket
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, SecretStr, ValidationError, field_validator, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

NAME_PATTERN = r"^[A-Za-z0-9._-]{1,64}$"
TOPIC_PATTERN = r"^[A-Za-z0-9._-]{1,249}$"
TEN_YEARS_MS = 10 * 365 * 24 * 3600 * 1000
MAX_RESOLVED_GROUPS = 10_000  # group settings kept resolved (`Settings.group`)
DEFAULT_BACKOFF_S = (
    10,
    30,
    60,
    120,
    180,
    240,
    300,
    360,
    420,
    480,
    540,
    600,
    1200,
    1800,
    3600,
    7200,
)

Topic = Annotated[str, Field(pattern=TOPIC_PATTERN)]


class SettingsError(ValueError):
    """One or more settings are invalid; the message names each one."""


class GroupSettings(BaseModel):
    """Per pop-group settings (docs/reference.md); unknown groups get the defaults. Frozen: one
    resolved copy per group is shared by every call that asks for it (`Settings.group`)."""

    model_config = {"extra": "forbid", "frozen": True}

    invisible_ms: int = Field(30_000, ge=1_000, le=43_200_000)
    max_deliveries: int = Field(16, ge=1, le=1_000)
    backoff_ms: list[Annotated[int, Field(ge=0, le=TEN_YEARS_MS)]] = Field(
        default_factory=lambda: [s * 1000 for s in DEFAULT_BACKOFF_S], min_length=1
    )
    # "memory": a pop is answered before its lease is written, which the next ack, nack, lease
    # change or expiry of its shard writes; a crash forgets it (docs/lease-modes.md).
    leases: Literal["durable", "memory"] = "durable"
    # "key": the messages of one key (in a partition) are leased one at a time, in offset order,
    # and a nacked or expired one comes again in place (docs/fifo.md).
    ordering: Literal["none", "key"] = "none"
    retry_topic: Topic | None = None  # default: <state topic prefix>retry.<group>
    dlq_topic: Topic | None = None  # default: <state topic prefix>dlq.<group>

    @model_validator(mode="after")
    def _ordered_leases_are_durable(self) -> GroupSettings:
        # A crash would hand a message out again while its key's earlier lease, forgotten
        # with it, may still be worked on.
        if self.ordering == "key" and self.leases == "memory":
            raise ValueError('ordering = "key" needs leases = "durable"')
        return self


class Settings(BaseSettings):
    """Everything `kpd run` reads. Field `x` is `KPD_X` in the environment and `x` in kpd.toml."""

    model_config = SettingsConfigDict(
        env_prefix="KPD_", env_nested_delimiter="__", extra="forbid", validate_default=True
    )

    bootstrap: str = Field("127.0.0.1:9092", min_length=1, max_length=4096)
    http_host: str = Field("127.0.0.1", min_length=1, max_length=255)
    http_port: int = Field(8080, ge=1, le=65_535)
    node_id: str = Field(
        default_factory=lambda: os.uname().nodename[:64] or "kpd", pattern=NAME_PATTERN
    )
    data_dir: Path | None = None  # default: .kpd/data/<node_id>
    # The shards' RocksDB stores, shared by the workers of a sidecar. Default: <data_dir>/shards.
    shards_dir: Path | None = None
    advertised_url: str | None = Field(None, pattern=r"^https?://[^\s/]+(:\d+)?$")
    api_token: SecretStr | None = None
    receipt_secret: SecretStr | None = Field(None, min_length=16)
    log_level: str = Field("INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR)$")
    log_format: str = Field("console", pattern=r"^(console|json)$")

    buffer_topic: Topic = "kpd.delay"
    invalid_topic: Topic = "kpd.invalid"
    delivery_log_topic: Topic = "kpd.delivery-log"
    state_topic_prefix: str = Field("kpd.", pattern=r"^[A-Za-z0-9._-]{0,64}$")
    topic_partitions: int = Field(-1, ge=-1, le=10_000)  # -1: the broker's default
    topic_replication: int = Field(-1, ge=-1, le=32)  # -1: the broker's default

    max_delay_ms: int = Field(TEN_YEARS_MS, ge=0, le=100 * 365 * 24 * 3600 * 1000)
    max_record_bytes: int = Field(1_048_576, ge=1_024, le=100 * 1_048_576)
    max_request_bytes: int = Field(16 * 1_048_576, ge=1_024, le=1_024 * 1_048_576)
    # Bounds on slow or hostile HTTP clients (docs/reference.md: HTTP API conventions).
    http_header_timeout_ms: int = Field(10_000, ge=100, le=600_000)
    http_body_timeout_ms: int = Field(30_000, ge=100, le=3_600_000)
    http_keep_alive_ms: int = Field(5_000, ge=100, le=600_000)
    http_max_header_bytes: int = Field(65_536, ge=1_024, le=16 * 1_048_576)
    kafka_timeout_ms: int = Field(10_000, ge=100, le=600_000)
    # Worker processes of one `kpd run`: one per core, each with its own GIL and shards.
    workers: int = Field(default_factory=lambda: os.cpu_count() or 1, ge=1, le=64)
    worker_port_base: int = Field(0, ge=0, le=65_535)  # workers' own ports: base + index; 0 any
    shards: int = Field(8, ge=1, le=256)  # fixed when kpd's topics are created
    # Take a silent sidecar's shards over before the group's session ends (docs/architecture.md).
    early_takeover: bool = True
    # Whose schedules a worker's standby keeps in its RocksDB: "all" shards it does not lead (a
    # shard the group moves here is current, whichever member it goes to), or only the "next"
    # ones it would take over (one copy per record, however many workers run): docs/architecture.md.
    standby_schedules: Literal["all", "next"] = "all"
    # Once a delay step carries a delivery, how much longer it ingests before its commit makes
    # the delivery visible (see delay_service.leader): lower, deliveries are seen sooner under
    # ingest load; higher, ingest runs in larger steps.
    ingest_behind_delivery_ms: int = Field(20, ge=0, le=10_000)
    # A node whose clock is further than this from the broker's leads nothing (never early).
    max_clock_offset_ms: int = Field(1_000, ge=10, le=3_600_000)
    election_session_timeout_ms: int = Field(6_000, ge=1_000, le=300_000)

    group_defaults: GroupSettings = Field(default_factory=GroupSettings)
    groups: dict[Annotated[str, Field(pattern=NAME_PATTERN)], GroupSettings] = Field(
        default_factory=dict
    )

    @field_validator("bootstrap")
    @classmethod
    def _bootstrap_is_host_ports(cls, value: str) -> str:
        for server in value.split(","):
            host, _, port = server.strip().rpartition(":")
            if not host or not port.isdigit() or not 0 < int(port) < 65_536:
                raise ValueError(f"expected host:port[,host:port...], got {server!r}")
        return value

    @model_validator(mode="after")
    def _default_data_dir(self) -> Settings:
        if self.data_dir is None:
            self.data_dir = Path(".kpd/data") / self.node_id
        if self.shards_dir is None:
            self.shards_dir = self.data_dir / "shards"
        return self

    @property
    def url(self) -> str:
        """Where other sidecars reach this one's HTTP API (to forward pop-group calls)."""
        if self.advertised_url:
            return self.advertised_url
        host = socket.gethostname() if self.http_host in ("0.0.0.0", "::") else self.http_host
        return f"http://{host}:{self.http_port}"

    @property
    def advertised_host(self) -> str:
        """The host other sidecars reach this machine's workers on."""
        if self.advertised_url:
            return self.advertised_url.split("://", 1)[1].rsplit(":", 1)[0].split("/")[0]
        return socket.gethostname() if self.http_host in ("0.0.0.0", "::") else self.http_host

    @property
    def state_dir(self) -> Path:
        assert self.data_dir is not None  # set by the validator
        return self.data_dir

    @property
    def shard_stores_dir(self) -> Path:
        assert self.shards_dir is not None  # set by the validator
        return self.shards_dir

    def for_worker(self, index: int) -> Settings:
        """A worker's own settings: one worker is the sidecar itself; several each get their
        own node id and data dir (they are sidecars of the same machine), and share the
        sidecar's shard stores (`foundation.store.ShardStores`)."""
        if self.workers == 1:
            return self
        return self.model_copy(
            update={"node_id": f"{self.node_id}-{index}", "data_dir": self.state_dir / f"w{index}"}
        )

    @cached_property
    def _resolved_groups(self) -> dict[str, GroupSettings]:
        """What `group` resolved, by group name (a plain attribute once made: a pydantic private
        attribute takes 7 us to read). Settings never change once read; `for_worker`'s copies
        share it and change nothing a group's settings are made of."""
        return {}

    def group(self, name: str) -> GroupSettings:
        """Settings of a pop group, with its retry and DLQ topic names filled in.

        The default names sit under the state topic prefix (`kpd.retry.<group>` with the default
        `kpd.`), so one prefix covers every topic kpd makes.
        """
        resolved = self._resolved_groups.get(name)
        if resolved is None:
            # Asked per request, per expiring ledger and per copy: a pydantic copy costs 9 us.
            # Group names come from URLs, so the cache is bounded (emptied when full).
            if len(self._resolved_groups) >= MAX_RESOLVED_GROUPS:
                self._resolved_groups.clear()
            base = self.groups.get(name, self.group_defaults)
            resolved = base.model_copy(
                update={
                    "retry_topic": base.retry_topic or self.state_topic(f"retry.{name}"),
                    "dlq_topic": base.dlq_topic or self.state_topic(f"dlq.{name}"),
                }
            )
            self._resolved_groups[name] = resolved
        return resolved

    def state_topic(self, name: str) -> str:
        """Internal state topics: `<prefix><name>`, e.g. `kpd.schedules`."""
        return f"{self.state_topic_prefix}{name}"

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = Path(os.environ.get("KPD_CONFIG", "kpd.toml"))
        return (init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file))


# KPD_* variables read by other parts of kpd, not by `Settings`.
OTHER_VARIABLES = {
    "KPD_CONFIG",
    "KPD_KAFKA_PORT",
    "KPD_KAFKA_DIR",
    "KPD_CACHE_DIR",
    "KPD_URL",  # the CLI verbs' sidecar
    "KPD_SPARK_KAFKA_VERSION",  # the audit's Kafka connector
    "KPD_SPARK_TOKEN_PROVIDER_VERSION",
}


def load_settings(**overrides: Any) -> Settings:
    """Read settings, turning pydantic's report into one line per bad setting."""
    config_file = os.environ.get("KPD_CONFIG")
    if config_file and not Path(config_file).is_file():
        raise SettingsError(f"KPD_CONFIG names {config_file!r}, which is not a readable file")
    _reject_unknown_variables()
    try:
        return Settings(**overrides)
    except ValidationError as error:
        raise SettingsError(_describe(error)) from None
    except ValueError as error:  # a TOML syntax error, or a nested value that is not JSON
        field = re.search(r'field "(\w+)"', str(error))
        hint = ""
        if field:
            prefix = f"KPD_{field.group(1).upper()}"
            names = sorted(n for n in os.environ if n.upper().startswith(prefix))
            hint = (
                f"; check {', '.join(names) or prefix}: lists and nested settings are JSON, "
                "e.g. KPD_GROUPS__orders__BACKOFF_MS='[1000, 5000]'"
            )
        raise SettingsError(f"cannot read settings: {error}{hint}") from None


def _reject_unknown_variables() -> None:
    """A typo in a variable name would otherwise be ignored silently."""
    known = {f"KPD_{name.upper()}" for name in Settings.model_fields} | OTHER_VARIABLES
    unknown = sorted(
        name
        for name in os.environ
        if name.upper().startswith("KPD_") and name.upper().split("__")[0] not in known
    )
    if unknown:
        raise SettingsError(
            f"unknown setting(s) {', '.join(unknown)}: Extra inputs are not permitted "
            f"(known: {', '.join(sorted(known))})"
        )


def _describe(error: ValidationError) -> str:
    lines = []
    for problem in error.errors():
        path = [str(part) for part in problem["loc"]]
        env_name = "KPD_" + "__".join(path).upper()
        lines.append(
            f"invalid setting {env_name} ({'.'.join(path)} in kpd.toml): {problem['msg']}"
            f" (got {problem.get('input')!r})"
        )
    return "\n".join(lines)
