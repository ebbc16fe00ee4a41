"""Typed configuration of the coordinator service (every tunable in one place)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, model_validator

from kafka_store import KafkaConfig
from kafka_store.config import MAX_TIMEOUT_MS, refuse_bool_numbers
from pulsar_txn._args import token_problem
from pulsar_txn.errors import ConfigError
from pulsar_txn.naming import DEFAULT_LOG_TOPIC, WILDCARD_HOSTS, service_host_port, system_topic_setting

# Millisecond settings only compared with times and added to them, never waited on as such.
_UNBOUNDED_MS = frozenset({"default_txn_timeout_ms", "max_txn_timeout_ms", "end_txn_retention_ms"})


class CoordinatorConfig(BaseModel):
    """Tunables of the transaction coordinator. Defaults follow Pulsar where Pulsar has one."""

    # hide_input_in_errors: a validation error must not echo the input, which holds the secrets.
    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    # -- storage ---------------------------------------------------------------------------------
    log_topic: str = DEFAULT_LOG_TOPIC
    owners_topic: str = "__pulsar_txn_tc_owners"
    num_tcs: int = Field(default=16, ge=1, le=4096, description="TCs = log partitions; fixed at cluster init")

    # -- ownership -------------------------------------------------------------------------------
    ownership: Literal["group", "static"] = "group"
    static_tc_ids: tuple[int, ...] = ()
    # Non-empty: librdkafka aborts the process (an assertion) making a consumer of group "".
    coordinator_group: str = Field(default="pulsar-txn-coordinators", min_length=1)
    group_session_timeout_ms: int = Field(default=6_000, ge=1_000, le=3_600_000)  # librdkafka's range
    group_instance_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9._-]+$",
        description="Kafka static membership (KIP-345) of this instance in the coordinator group and the"
        " TB service's group: restarted with the same id, it gets its partitions back at once instead"
        " of after the dead member's session timeout. A static member does not leave the group when"
        " it stops, so its partitions move to other instances only after the session timeout. Unique"
        " per instance; unset = dynamic members",
    )

    # -- transactions ----------------------------------------------------------------------------
    default_txn_timeout_ms: int = Field(default=60_000, gt=0)
    max_txn_timeout_ms: int = Field(default=3 * 3600 * 1000, gt=0)
    # Partitions plus subscriptions one transaction may hold: each is in every record of it (the whole
    # state per record) and gets a marker; a request beyond it is refused before any work.
    max_txn_participants: int = Field(default=10_000, ge=1)
    end_txn_retention_ms: int = Field(
        default=300_000, ge=0, description="how long a finished txn's outcome is kept for idempotent end"
    )

    # -- batched log writes (PIP-160 equivalent) -------------------------------------------------
    log_batch_enabled: bool = True
    log_batch_max_records: int = Field(default=512, ge=1)
    log_batch_max_delay_ms: float = Field(default=0.0, ge=0)

    log_write_timeout_ms: int = Field(default=10_000, ge=100, description="per Kafka write, then retried")

    # -- ending transactions ---------------------------------------------------------------------
    end_retry_initial_backoff_ms: int = Field(default=50, ge=1)
    end_retry_max_backoff_ms: int = Field(default=5_000, ge=1)
    end_missing_topic_grace_ms: int = Field(
        default=60_000,
        ge=0,
        description=(
            "a marker for a topic that has been missing from the topic list this long is not needed "
            "(the topic was deleted, and the transaction's records with it): ending goes on without "
            "it instead of retrying forever and pinning the low watermark. Until then the write is "
            "retried, so a topic deleted and created again at once still gets its marker"
        ),
    )
    marker_secret: SecretStr | None = None
    end_txn_reply: Literal["after_markers", "after_decision"] = Field(
        default="after_markers",
        description=(
            "when END_TXN is answered. after_markers (Pulsar): once every marker is written and the "
            "outcome logged, so the data is readable when commit() returns. after_decision (Kafka's "
            "EndTxn): once COMMITTING/ABORTING is durable in the log; the markers follow (the TC, or "
            "its successor after a crash, writes them), so readers see the data moments later"
        ),
    )

    # -- transaction buffer service (snapshots, hanging transactions) ---------------------------
    tb_service_enabled: bool = True
    tb_group: str = Field(default="pulsar-txn-transaction-buffer", min_length=1)
    snapshot_topic: str = "__transaction_buffer_snapshot"
    snapshot_partitions: int = Field(default=8, ge=1)
    tb_snapshot_max_changes: int = Field(default=1000, ge=1, description="Pulsar: 1000")
    tb_snapshot_interval_ms: int = Field(default=5000, ge=10, description="Pulsar: 5000 ms")
    # At most ~30 bytes per entry: 25,000 keep a segment well under the 1,000,000-byte record limit.
    tb_snapshot_segment_size: int = Field(default=10_000, ge=1, le=25_000)
    tb_hanging_check_after_ms: int = Field(default=60_000, ge=100)
    tb_topic_refresh_ms: int = Field(default=5000, ge=100)
    tb_topic_pattern: str = Field(
        default=".*",
        min_length=1,
        description=(
            "a regular expression (whole name) of the data topics this TB service keeps snapshots "
            "and resolves hanging transactions for; others are not read at all. It must match every "
            "topic that transactions write to: elsewhere a transaction left hanging (open in a "
            "partition its TC never registered) is never resolved and holds that partition's readers "
            "back. Readers are correct without snapshots, only slower to recover"
        ),
    )

    # -- service ---------------------------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = Field(default=6650, ge=0, le=65535)
    advertised_url: str | None = None
    auth_token: SecretStr | None = None
    admin_port: int | None = Field(default=None, ge=0, le=65535)
    # Pulsar's brokerMaxConnections / maxConnectionsPerIp (0 = no limit, Pulsar's default for both):
    # a connection over a limit is closed at once, so a flood of clients cannot exhaust the file
    # descriptors or memory the coordinator's own clients need.
    max_connections: int = Field(default=10_000, ge=0)
    max_connections_per_ip: int = Field(default=0, ge=0)
    # A read-only credential for GET /metrics (a scraper's), accepted there besides auth_token, which
    # also ends transactions. Unset: /metrics takes auth_token (or nothing, without one).
    metrics_token: SecretStr | None = None
    # A TC's recovery fails when its log replay makes no progress for this long (a long replay that
    # progresses goes on: a busy TC's uncompacted log can take longer than any fixed total).
    recovery_timeout_ms: int = Field(default=60_000, gt=0)

    @property
    def marker_key(self) -> bytes | None:
        """The marker secret as the HMAC key (None: no authentication)."""
        return self.marker_secret.get_secret_value().encode() if self.marker_secret else None

    _no_bool_numbers = model_validator(mode="before")(refuse_bool_numbers)

    @model_validator(mode="after")
    def _check(self) -> CoordinatorConfig:
        for name in ("log_topic", "owners_topic", "snapshot_topic"):  # as the admin commands check
            system_topic_setting(getattr(self, name), name)
        if not self.owners_topic.startswith("__"):
            # Clients are not told this name (they look owners up through the coordinators), so only
            # the '__' prefix keeps pattern subscriptions and delete_topic off it.
            raise ValueError("owners_topic must begin with '__' (a system topic)")
        # An empty secret would silently turn token auth / marker authentication off: refuse it.
        for name in ("auth_token", "marker_secret", "metrics_token"):
            secret = getattr(self, name)
            if secret is not None and not secret.get_secret_value():
                raise ValueError(f"{name} must not be empty (leave it unset to turn it off)")
        for name in ("auth_token", "metrics_token"):  # sent as HTTP bearer tokens too
            secret = getattr(self, name)
            problem = None if secret is None else token_problem(secret.get_secret_value())
            if problem is not None:
                raise ValueError(f"{name} {problem}")
        for name in type(self).model_fields:
            # Durations that end up in librdkafka's 32-bit timeouts or in waits: a longer one
            # failed every Kafka write (a wrapped, negative message.timeout.ms) or a wait
            # (OverflowError). Transaction timeouts and retention are only compared and added.
            if name.endswith("_ms") and name not in _UNBOUNDED_MS and getattr(self, name) > MAX_TIMEOUT_MS:
                raise ValueError(f"{name} exceeds {MAX_TIMEOUT_MS} ms (about 24.8 days)")
        if self.default_txn_timeout_ms > self.max_txn_timeout_ms:
            raise ValueError("default_txn_timeout_ms exceeds max_txn_timeout_ms")
        if self.ownership == "static":
            bad = [t for t in self.static_tc_ids if not 0 <= t < self.num_tcs]
            if bad or not self.static_tc_ids:
                raise ValueError(f"static_tc_ids must be non-empty TC ids in [0, {self.num_tcs}); got {bad}")
        try:
            re.compile(self.tb_topic_pattern)
        except re.error as exc:
            raise ValueError(f"tb_topic_pattern is not a regular expression: {exc}") from None
        if self.end_retry_initial_backoff_ms > self.end_retry_max_backoff_ms:
            raise ValueError("end_retry_initial_backoff_ms exceeds end_retry_max_backoff_ms")
        if self.advertised_url is not None:
            try:  # it goes into ownership records and LOOKUP answers: clients must be able to use it
                host, _port = service_host_port(self.advertised_url)
            except ConfigError:
                raise ValueError("advertised_url must be pulsar://host:port") from None
            if host in WILDCARD_HOSTS:
                raise ValueError("advertised_url must name a host clients can reach, not a wildcard")
        return self


__all__ = ["CoordinatorConfig", "KafkaConfig"]


def validation_problems(exc: ValidationError) -> str:
    """Which setting is wrong and why, in one line, without echoing values (a value may be a secret)."""
    problems = [f"{'.'.join(str(p) for p in e['loc']) or 'settings'}: {e['msg']}" for e in exc.errors()]
    return "; ".join(problems[:3]) + ("; ..." if len(problems) > 3 else "")


def system_groups(config: CoordinatorConfig) -> dict[str, str]:
    """The consumer groups a coordinator deployment joins itself, each with what joins it."""
    return {config.tb_group: "transaction-buffer service", config.coordinator_group: "coordinators"}
