"""Typed connection settings that dump to librdkafka configuration dicts."""

from __future__ import annotations

import logging
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from kafka_store.lograte import LogThrottle

_LIBRDKAFKA_LOG = logging.getLogger("librdkafka")


class _Repeats(logging.Filter):
    """librdkafka logs a dead broker's connection failures once a second per client, for as long as
    it stays down (~1,400 lines a minute from one coordinator process): lines alike but for their
    numbers (ports, ms, client names) pass once a minute, with how many were left out. Warnings and
    errors only."""

    _NUMBERS = re.compile(r"\d+")

    def __init__(self) -> None:
        super().__init__()
        self._throttle = LogThrottle()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:  # debug output asked for (kafka.extra "debug") is kept whole
            return True
        text = record.getMessage()
        left_out = self._throttle.admit((record.levelno, self._NUMBERS.sub("#", text)))
        if left_out is None:
            return False
        if left_out:
            record.msg, record.args = f"{text} (and {left_out} more like it since the last such line)", ()
        return True


_LIBRDKAFKA_LOG.addFilter(_Repeats())


def refuse_bool_numbers(cls: type[BaseModel], data: Any) -> Any:
    """A model's "before" validator: pydantic takes true for 1 in a number field (lax mode), so
    ``num_tcs = true`` in a config file set up a one-TC cluster for good. True/false only where a
    field is a bool."""
    if isinstance(data, dict):
        for name, value in data.items():
            field = cls.model_fields.get(name)
            if field is None or field.annotation is bool:
                continue
            items = value if isinstance(value, list | tuple) else (value,)
            if any(isinstance(v, bool) for v in items):
                raise ValueError(f"{name} is not a true/false setting")
    return data


MAX_TIMEOUT_MS = 2**31 - 1
"""librdkafka's timeouts are 32-bit milliseconds (about 24.8 days): a longer one is capped to it."""
# "passphrase" / "private.key": librdkafka 2.10+ sasl.oauthbearer.assertion.private.key.{passphrase,pem}.
_SECRET_WORDS = (
    "password",
    "passphrase",
    "secret",
    "token",
    "credential",
    "key.pem",
    "private.key",
    "sasl.oauthbearer.config",
    "jaas",
)


def _is_secret_key(key: str) -> bool:
    low = key.lower()
    return any(word in low for word in _SECRET_WORDS)


# confluent-kafka's own properties whose values are Python callables (not librdkafka's).
_PYTHON_CALLBACK_KEYS = frozenset(
    {"error_cb", "throttle_cb", "stats_cb", "oauth_cb", "logger", "on_delivery", "on_commit"}
)


class KafkaConfig(BaseModel):
    """How to reach a Kafka cluster (any Kafka 3.x+ or the embedded broker).

    Secrets are ``SecretStr`` and passthrough keys that look secret are masked in ``repr``,
    so logging a config never logs a password. Validation errors name the bad setting but never echo
    input values (``hide_input_in_errors``): the input may hold a password.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", hide_input_in_errors=True)

    bootstrap_servers: str = Field(min_length=1)
    client_id: str = "pulsar-txn"
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] | None = None
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"] | None = None
    sasl_username: str | None = None
    sasl_password: SecretStr | None = None
    ssl_ca_location: str | None = None
    ssl_certificate_location: str | None = None
    ssl_key_location: str | None = None
    ssl_key_password: SecretStr | None = None
    request_timeout_ms: int = Field(default=10_000, gt=0, le=MAX_TIMEOUT_MS)
    # > 0: caught-up subscription and Reader tails pause their partitions for this long between
    # fetch rounds. For brokers that answer empty fetches at once (ignoring fetch.wait.max.ms), where
    # idle readers would spin; Apache Kafka holds empty fetches itself. Off by default.
    idle_fetch_backoff_ms: int = Field(default=0, ge=0, le=10_000)
    # Replication factor for the topics we create; -1 takes the cluster's default.replication.factor.
    replication_factor: int = Field(default=-1, ge=-1)
    # Any other librdkafka property, passed through unchanged (e.g. {"socket.keepalive.enable": "true"}).
    extra: dict[str, str] = Field(default_factory=dict)

    _no_bool_numbers = model_validator(mode="before")(refuse_bool_numbers)

    @field_validator("extra")
    @classmethod
    def _check_extra(cls, value: dict[str, str]) -> dict[str, str]:
        taken = sorted(set(value) & _PYTHON_CALLBACK_KEYS)
        if taken:
            raise ValueError(
                f"{', '.join(taken)}: confluent-kafka takes a Python callable there, which a setting "
                "cannot hold (the client sets its own)"
            )
        return value

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_servers(cls, value: str) -> str:
        for server in value.split(","):
            host, sep, port = server.strip().rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(f"bootstrap server {server.strip()!r} is not host:port")
        return value

    def client_conf(self) -> dict[str, Any]:
        """``to_librdkafka`` plus a Python logger, so librdkafka's own log lines go through ``logging``."""
        conf: dict[str, Any] = dict(self.to_librdkafka())
        conf["logger"] = _LIBRDKAFKA_LOG
        return conf

    def to_librdkafka(self) -> dict[str, str | int]:
        """The librdkafka properties for this connection (secrets revealed: never log the result)."""
        out: dict[str, str | int] = {"bootstrap.servers": self.bootstrap_servers, "client.id": self.client_id}
        pairs: list[tuple[str, str | None]] = [
            ("security.protocol", self.security_protocol),
            ("sasl.mechanism", self.sasl_mechanism),
            ("sasl.username", self.sasl_username),
            ("sasl.password", self.sasl_password.get_secret_value() if self.sasl_password else None),
            ("ssl.ca.location", self.ssl_ca_location),
            ("ssl.certificate.location", self.ssl_certificate_location),
            ("ssl.key.location", self.ssl_key_location),
            ("ssl.key.password", self.ssl_key_password.get_secret_value() if self.ssl_key_password else None),
        ]
        out.update({k: v for k, v in pairs if v is not None})
        out.update(self.extra)
        return out

    def __repr_args__(self):  # type: ignore[no-untyped-def]
        for name, value in super().__repr_args__():
            if name == "extra" and isinstance(value, dict):
                value = {k: ("**********" if _is_secret_key(k) else v) for k, v in value.items()}
            yield name, value


def admin_conf(config: KafkaConfig) -> dict[str, Any]:
    """Admin-client settings. Auto-creation is off: asking whether a topic exists must never create it
    (with one partition) on a broker where ``auto.create.topics.enable`` is on, Kafka's default."""
    conf = config.client_conf()
    conf["allow.auto.create.topics"] = False
    return conf
