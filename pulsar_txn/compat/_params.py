"""What happens here to each keyword argument of the Pulsar Python client (pulsar-client 3.x).

One table per call. Every parameter of pulsar-client's signature is in exactly one of three groups
(``tests/unit/test_compat_params.py`` checks the tables against the installed pulsar-client):

* **mapped**: same meaning here; the wrapper passes it on (possibly renamed or converted);
* **ignored**: a tuning knob of Pulsar's broker protocol or C++ client with no counterpart on Kafka
  (queue sizes, batching, stats intervals, thread counts); accepted, has no effect;
* **unsupported**: a behaviour this library does not provide (encryption, chunking, delayed
  delivery, TLS to the coordinator...). Accepted only at pulsar-client's default value;
  anything else raises ``OperationNotSupported`` at once, instead of silently behaving differently.

The migration checker (``pulsar_txn.compat.check``) reads the same tables, so what it reports for a
call is what the call does at run time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pulsar_txn.errors import NotAllowedError, Result


class OperationNotSupported(NotAllowedError):
    """A pulsar-client option or call with no equivalent here (Pulsar's ``OperationNotSupported``)."""

    result = Result.OperationNotSupported


_TOKEN_ONLY = "only AuthenticationToken is supported"
UNSUPPORTED_CLASSES = {
    "AuthenticationTLS": _TOKEN_ONLY,
    "AuthenticationAthenz": _TOKEN_ONLY,
    "AuthenticationOauth2": _TOKEN_ONLY,
    "AuthenticationBasic": _TOKEN_ONLY,
}
"""pulsar-client classes defined here only to raise ``OperationNotSupported`` when made (and named
so by ``migrate-check``)."""
PROTOBUF_UNSUPPORTED = "no Protobuf schema (bytes, string, JSON and Avro are supported)"


def unsupported_class(name: str, why: str) -> type:
    """A stand-in for pulsar-client's ``name`` that raises ``OperationNotSupported`` when made: a
    program that uses it fails with the documented error, not an ``AttributeError`` (or, after a
    star import, a ``NameError``)."""

    def refuse(self: object, *args: object, **kwargs: object) -> None:
        raise OperationNotSupported(f"pulsar.{name}: {why}")

    return type(name, (), {"__init__": refuse, "__doc__": f"pulsar-client's {name}: {why}."})


@dataclass(frozen=True)
class CallTable:
    """The parameters of one pulsar-client call. ``unsupported`` maps a name to a predicate that says
    whether a given value is still fine (pulsar-client's default, or a value meaning "off")."""

    call: str
    mapped: frozenset[str]
    ignored: frozenset[str] = frozenset()
    unsupported: Mapping[str, Any] = field(default_factory=dict)
    notes: Mapping[str, str] = field(default_factory=dict)
    leading: tuple[str, ...] = ()
    """The parameters before ``order`` that every wrapper names itself (``topic``, ``content``...)."""
    order: tuple[str, ...] = ()
    """pulsar-client's positional order of the parameters after the leading ones every wrapper
    names itself (``topic``, ``content``...), so that positional calls mean the same here."""

    def positional(
        self, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, without: frozenset[str] = frozenset()
    ) -> dict[str, Any]:
        """``args`` named by pulsar-client's positional order, merged with ``kwargs``. ``without``:
        parameters the caller's variant of the call lacks (``pulsar.asyncio`` has no listeners)."""
        order = tuple(name for name in self.order if name not in without) if without else self.order
        if len(args) > len(order):
            raise TypeError(f"{self.call}() takes at most {len(order)} optional positional arguments")
        given = dict(zip(order, args, strict=False))
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


MAPPED: Literal["mapped"] = "mapped"
IGNORED: Literal["ignored"] = "ignored"


def _off(*defaults: Any) -> tuple[Any, ...]:
    """An unsupported option, with the values of it that mean "not used"."""
    return defaults


def _table(
    call: str,
    leading: tuple[str, ...],
    params: list[tuple[str, str | tuple[Any, ...]]],
    notes: Mapping[str, str] | None = None,
) -> CallTable:
    """A table from pulsar-client's parameters in its order: each ``MAPPED``, ``IGNORED`` or
    ``_off(...)`` (unsupported); ``leading`` are the ones every wrapper names itself."""
    return CallTable(
        call,
        mapped=frozenset(leading) | {n for n, kind in params if kind == MAPPED},
        ignored=frozenset(n for n, kind in params if kind == IGNORED),
        unsupported={n: kind for n, kind in params if isinstance(kind, tuple)},
        notes=notes or {},
        leading=leading,
        order=tuple(n for n, _ in params),
    )


def _is_off(allowed: tuple[Any, ...], value: Any) -> bool:
    # Enum members of pulsar-client (or ours) are compared by name: "FAIL", "Shared", ...
    name = getattr(value, "name", None)
    return any(value is a or value == a or (name is not None and name == a) for a in allowed)


CLIENT = _table(
    "Client",
    ("service_url",),
    [
        ("authentication", MAPPED),
        ("operation_timeout_seconds", MAPPED),
        ("io_threads", IGNORED),
        ("message_listener_threads", MAPPED),
        ("concurrent_lookup_requests", IGNORED),
        ("log_conf_file_path", IGNORED),
        ("stats_interval_in_seconds", IGNORED),
        ("use_tls", _off(False)),
        ("tls_trust_certs_file_path", _off(None)),
        ("tls_allow_insecure_connection", _off(False)),
        ("tls_validate_hostname", _off(False)),
        ("logger", IGNORED),
        ("connection_timeout_ms", IGNORED),
        ("listener_name", IGNORED),
        ("tls_private_key_file_path", _off(None)),
        ("tls_certificate_file_path", _off(None)),
    ],
    notes={
        "use_tls": "the coordinator protocol has no TLS here; put the coordinator behind a TLS proxy and"
        " configure Kafka's TLS through kafka={...}",
    },
)

CREATE_PRODUCER = _table(
    "create_producer",
    ("topic",),
    [
        ("producer_name", MAPPED),
        ("schema", MAPPED),
        ("initial_sequence_id", IGNORED),
        ("send_timeout_millis", IGNORED),
        ("compression_type", IGNORED),
        ("max_pending_messages", IGNORED),
        ("max_pending_messages_across_partitions", IGNORED),
        ("block_if_queue_full", IGNORED),
        ("batching_enabled", IGNORED),
        ("batching_max_messages", IGNORED),
        ("batching_max_allowed_size_in_bytes", IGNORED),
        ("batching_max_publish_delay_ms", IGNORED),
        ("chunking_enabled", _off(False)),
        ("message_routing_mode", IGNORED),
        ("lazy_start_partitioned_producers", IGNORED),
        ("properties", IGNORED),
        ("batching_type", IGNORED),
        ("encryption_key", _off(None)),
        ("crypto_key_reader", _off(None)),
        ("access_mode", _off("Shared")),
        ("message_router", _off(None)),
    ],
    notes={
        "chunking_enabled": "messages are single Kafka records (MessageTooBig above the broker's limit)",
        "access_mode": "producers are always shared; fencing is per transaction",
        "message_router": "the partition is the key's hash, else round robin",
    },
)

SUBSCRIBE = _table(
    "subscribe",
    ("topic", "subscription_name"),
    [
        ("consumer_type", MAPPED),
        ("schema", MAPPED),
        ("message_listener", MAPPED),
        ("receiver_queue_size", IGNORED),
        ("max_total_receiver_queue_size_across_partitions", IGNORED),
        ("consumer_name", MAPPED),
        ("unacked_messages_timeout_ms", MAPPED),
        ("broker_consumer_stats_cache_time_ms", IGNORED),
        ("negative_ack_redelivery_delay_ms", MAPPED),
        ("is_read_compacted", _off(False)),
        ("properties", IGNORED),
        ("pattern_auto_discovery_period", MAPPED),
        ("initial_position", MAPPED),
        ("crypto_key_reader", _off(None)),
        ("replicate_subscription_state_enabled", IGNORED),
        ("max_pending_chunked_message", IGNORED),
        ("auto_ack_oldest_chunked_message_on_queue_full", IGNORED),
        ("start_message_id_inclusive", _off(False)),
        ("batch_receive_policy", MAPPED),
        ("key_shared_policy", _off(None)),
        ("batch_index_ack_enabled", IGNORED),
        ("regex_subscription_mode", IGNORED),
        ("dead_letter_policy", MAPPED),
        ("crypto_failure_action", IGNORED),
    ],
    notes={
        "message_listener": "called on a listener thread of the consumer; receive() is then refused",
        "pattern_auto_discovery_period": (
            "seconds between looks for new (and deleted) matching topics; a change rebalances the "
            "subscription's Kafka group"
        ),
    },
)

CREATE_READER = _table(
    "create_reader",
    ("topic", "start_message_id"),
    [
        ("schema", MAPPED),
        ("reader_listener", MAPPED),
        ("receiver_queue_size", IGNORED),
        ("reader_name", IGNORED),
        ("subscription_role_prefix", IGNORED),
        ("is_read_compacted", _off(False)),
        ("crypto_key_reader", _off(None)),
        ("start_message_id_inclusive", MAPPED),
        ("crypto_failure_action", IGNORED),
    ],
    notes={"reader_listener": "called on a listener thread of the reader; read_next() is then refused"},
)

_SEND_PARAMS: list[tuple[str, str | tuple[Any, ...]]] = [
    ("properties", MAPPED),
    ("partition_key", MAPPED),
    ("ordering_key", IGNORED),
    ("sequence_id", IGNORED),
    ("replication_clusters", IGNORED),
    ("disable_replication", IGNORED),
    ("event_timestamp", MAPPED),
    ("deliver_at", _off(None)),
    ("deliver_after", _off(None)),
]
_NO_DELAY = "no delayed delivery (Pulsar applies it to Shared subscriptions only)"
SEND = _table("send", ("content",), _SEND_PARAMS, {"deliver_at": _NO_DELAY, "deliver_after": _NO_DELAY})
SEND_ASYNC = _table(
    "send_async", ("content", "callback"), _SEND_PARAMS, {"deliver_at": _NO_DELAY, "deliver_after": _NO_DELAY}
)

NATIVE_CLIENT_OPTIONS = frozenset(
    {"bootstrap_servers", "kafka", "num_tcs", "marker_secret", "snapshot_topic", "log_topic"}
)
"""Keyword arguments of ``Client`` beyond pulsar-client's: this library's own (where Kafka is, ...)."""

TABLES: dict[str, CallTable] = {
    t.call: t for t in (CLIENT, CREATE_PRODUCER, SUBSCRIBE, CREATE_READER, SEND, SEND_ASYNC)
}
"""The tables by call name."""

UNSUPPORTED_CALLS: dict[str, str] = {}
"""pulsar-client methods that exist here only to raise ``OperationNotSupported``."""
