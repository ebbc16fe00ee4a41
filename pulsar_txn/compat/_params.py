"""What happens here to each keyword argument of the Pulsar Python client (pulsar-client 3.x).

One table per call. Every parameter of pulsar-client's signature is in exactly one of three groups
(``tests/unit/test_compat_params.py`` checks the tables against the installed pulsar-client):

* **mapped**: same meaning here; the wrapper passes it on (possibly renamed or converted);
* **ignored**: a tuning knob of Pulsar's broker protocol or C++ client with no counterpart on Kafka
  (queue sizes, batching, stats intervals, thread counts); accepted, has no effect;
* **unsupported**: a behaviour this library does not provide (encryption, chunking, delayed
  delivery, TLS to the coordinator, listeners...). Accepted only at pulsar-client's default value;
  anything else raises ``OperationNotSupported`` at once, instead of silently behaving differently.

The migration checker (``pulsar_txn.compat.check``) reads the same tables, so what it reports for a
call is what the call does at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pulsar_txn.errors import NotAllowedError


class OperationNotSupported(NotAllowedError):
    """A pulsar-client option or call with no equivalent here (Pulsar's ``OperationNotSupported``)."""


@dataclass(frozen=True)
class CallTable:
    """The parameters of one pulsar-client call. ``unsupported`` maps a name to a predicate that says
    whether a given value is still fine (pulsar-client's default, or a value meaning "off")."""

    call: str
    mapped: frozenset[str]
    ignored: frozenset[str] = frozenset()
    unsupported: Mapping[str, Any] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)
    order: tuple[str, ...] = ()
    """pulsar-client's positional order of the parameters after the leading ones every wrapper
    names itself (``topic``, ``content``...), so that positional calls mean the same here."""

    def positional(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``args`` named by pulsar-client's positional order, merged with ``kwargs``."""
        if len(args) > len(self.order):
            raise TypeError(f"{self.call}() takes at most {len(self.order)} optional positional arguments")
        given = dict(zip(self.order, args, strict=False))
        for name in kwargs:
            if name in given:
                raise TypeError(f"{self.call}() got multiple values for argument {name!r}")
        given.update(kwargs)
        return given

    def names(self) -> frozenset[str]:
        return self.mapped | self.ignored | frozenset(self.unsupported)

    def status(self, name: str) -> str:
        """``mapped``, ``ignored``, ``unsupported`` or ``unknown`` (not a parameter of the call)."""
        if name in self.mapped:
            return "mapped"
        if name in self.ignored:
            return "ignored"
        if name in self.unsupported:
            return "unsupported"
        return "unknown"

    def check(self, kwargs: Mapping[str, Any]) -> None:
        """Raise ``OperationNotSupported`` for an unsupported option set to a non-default value and
        ``TypeError`` (as Python does) for a name that is no parameter of the call."""
        for name, value in kwargs.items():
            status = self.status(name)
            if status == "unknown":
                raise TypeError(f"{self.call}() got an unexpected keyword argument {name!r}")
            if status == "unsupported" and not _is_off(self.unsupported[name], value):
                why = self.notes.get(name, "no equivalent on Kafka in this library")
                raise OperationNotSupported(f"{self.call}({name}={value!r}) is not supported: {why}")


def _off(*defaults: Any) -> tuple[Any, ...]:
    """The values of an unsupported option that mean "not used"."""
    return defaults


def _is_off(allowed: tuple[Any, ...], value: Any) -> bool:
    # Enum members of pulsar-client (or ours) are compared by name: "FAIL", "Shared", ...
    name = getattr(value, "name", None)
    return any(value is a or value == a or (name is not None and name == a) for a in allowed)


CLIENT = CallTable(
    "Client",
    order=(
        "authentication",
        "operation_timeout_seconds",
        "io_threads",
        "message_listener_threads",
        "concurrent_lookup_requests",
        "log_conf_file_path",
        "stats_interval_in_seconds",
        "use_tls",
        "tls_trust_certs_file_path",
        "tls_allow_insecure_connection",
        "tls_validate_hostname",
        "logger",
        "connection_timeout_ms",
        "listener_name",
        "tls_private_key_file_path",
        "tls_certificate_file_path",
    ),
    mapped=frozenset({"service_url", "authentication", "operation_timeout_seconds"}),
    ignored=frozenset(
        {
            "io_threads",
            "message_listener_threads",
            "concurrent_lookup_requests",
            "log_conf_file_path",
            "stats_interval_in_seconds",
            "logger",
            "connection_timeout_ms",
            "listener_name",
        }
    ),
    unsupported={
        "use_tls": _off(False),
        "tls_trust_certs_file_path": _off(None),
        "tls_allow_insecure_connection": _off(False),
        "tls_validate_hostname": _off(False),
        "tls_private_key_file_path": _off(None),
        "tls_certificate_file_path": _off(None),
    },
    notes={
        "use_tls": "the coordinator protocol has no TLS here; put the coordinator behind a TLS proxy and"
        " configure Kafka's TLS through kafka={...}",
    },
)

CREATE_PRODUCER = CallTable(
    "create_producer",
    order=(
        "producer_name",
        "schema",
        "initial_sequence_id",
        "send_timeout_millis",
        "compression_type",
        "max_pending_messages",
        "max_pending_messages_across_partitions",
        "block_if_queue_full",
        "batching_enabled",
        "batching_max_messages",
        "batching_max_allowed_size_in_bytes",
        "batching_max_publish_delay_ms",
        "chunking_enabled",
        "message_routing_mode",
        "lazy_start_partitioned_producers",
        "properties",
        "batching_type",
        "encryption_key",
        "crypto_key_reader",
        "access_mode",
        "message_router",
    ),
    mapped=frozenset({"topic", "producer_name", "schema"}),
    ignored=frozenset(
        {
            "initial_sequence_id",
            "send_timeout_millis",
            "compression_type",
            "max_pending_messages",
            "max_pending_messages_across_partitions",
            "block_if_queue_full",
            "batching_enabled",
            "batching_max_messages",
            "batching_max_allowed_size_in_bytes",
            "batching_max_publish_delay_ms",
            "message_routing_mode",
            "lazy_start_partitioned_producers",
            "properties",
            "batching_type",
        }
    ),
    unsupported={
        "chunking_enabled": _off(False),
        "encryption_key": _off(None),
        "crypto_key_reader": _off(None),
        "access_mode": _off("Shared"),
        "message_router": _off(None),
    },
    notes={
        "chunking_enabled": "messages are single Kafka records (MessageTooBig above the broker's limit)",
        "access_mode": "producers are always shared; fencing is per transaction",
        "message_router": "the partition is the key's hash, else round robin",
    },
)

SUBSCRIBE = CallTable(
    "subscribe",
    order=(
        "consumer_type",
        "schema",
        "message_listener",
        "receiver_queue_size",
        "max_total_receiver_queue_size_across_partitions",
        "consumer_name",
        "unacked_messages_timeout_ms",
        "broker_consumer_stats_cache_time_ms",
        "negative_ack_redelivery_delay_ms",
        "is_read_compacted",
        "properties",
        "pattern_auto_discovery_period",
        "initial_position",
        "crypto_key_reader",
        "replicate_subscription_state_enabled",
        "max_pending_chunked_message",
        "auto_ack_oldest_chunked_message_on_queue_full",
        "start_message_id_inclusive",
        "batch_receive_policy",
        "key_shared_policy",
        "batch_index_ack_enabled",
        "regex_subscription_mode",
        "dead_letter_policy",
        "crypto_failure_action",
    ),
    mapped=frozenset(
        {
            "topic",
            "subscription_name",
            "consumer_type",
            "schema",
            "consumer_name",
            "unacked_messages_timeout_ms",
            "negative_ack_redelivery_delay_ms",
            "initial_position",
            "batch_receive_policy",
            "dead_letter_policy",
        }
    ),
    ignored=frozenset(
        {
            "receiver_queue_size",
            "max_total_receiver_queue_size_across_partitions",
            "broker_consumer_stats_cache_time_ms",
            "properties",
            "pattern_auto_discovery_period",
            "replicate_subscription_state_enabled",
            "max_pending_chunked_message",
            "auto_ack_oldest_chunked_message_on_queue_full",
            "batch_index_ack_enabled",
            "regex_subscription_mode",
            "crypto_failure_action",
        }
    ),
    unsupported={
        "message_listener": _off(None),
        "is_read_compacted": _off(False),
        "crypto_key_reader": _off(None),
        "start_message_id_inclusive": _off(False),
        "key_shared_policy": _off(None),
    },
    notes={"message_listener": "call receive() in a thread of your own"},
)

CREATE_READER = CallTable(
    "create_reader",
    order=(
        "schema",
        "reader_listener",
        "receiver_queue_size",
        "reader_name",
        "subscription_role_prefix",
        "is_read_compacted",
        "crypto_key_reader",
        "start_message_id_inclusive",
        "crypto_failure_action",
    ),
    mapped=frozenset({"topic", "start_message_id", "schema", "start_message_id_inclusive"}),
    ignored=frozenset(
        {"receiver_queue_size", "reader_name", "subscription_role_prefix", "crypto_failure_action"}
    ),
    unsupported={
        "reader_listener": _off(None),
        "is_read_compacted": _off(False),
        "crypto_key_reader": _off(None),
    },
    notes={"reader_listener": "call read_next() in a thread of your own"},
)

SEND = CallTable(
    "send",
    order=(
        "properties",
        "partition_key",
        "ordering_key",
        "sequence_id",
        "replication_clusters",
        "disable_replication",
        "event_timestamp",
        "deliver_at",
        "deliver_after",
    ),
    mapped=frozenset({"content", "properties", "partition_key", "event_timestamp"}),
    ignored=frozenset({"ordering_key", "sequence_id", "replication_clusters", "disable_replication"}),
    unsupported={"deliver_at": _off(None), "deliver_after": _off(None)},
    notes={
        "deliver_at": "no delayed delivery (Pulsar applies it to Shared subscriptions only)",
        "deliver_after": "no delayed delivery (Pulsar applies it to Shared subscriptions only)",
    },
)
SEND_ASYNC = CallTable(
    "send_async",
    mapped=SEND.mapped | {"callback"},
    ignored=SEND.ignored,
    unsupported=SEND.unsupported,
    notes=SEND.notes,
    order=SEND.order,
)

NATIVE_CLIENT_OPTIONS = frozenset(
    {"bootstrap_servers", "kafka", "num_tcs", "marker_secret", "snapshot_topic", "log_topic"}
)
"""Keyword arguments of ``Client`` beyond pulsar-client's: this library's own (where Kafka is, ...)."""

TABLES: dict[str, CallTable] = {
    t.call: t for t in (CLIENT, CREATE_PRODUCER, SUBSCRIBE, CREATE_READER, SEND, SEND_ASYNC)
}
"""The tables by call name."""

UNSUPPORTED_CALLS: dict[str, str] = {
    "create_table_view": "no TableView: read a compacted topic with create_reader",
    "pause_message_listener": "no message listeners",
    "resume_message_listener": "no message listeners",
}
"""pulsar-client methods that exist here only to raise ``OperationNotSupported``."""
