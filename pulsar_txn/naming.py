"""Pulsar topic names and their Kafka homes.

``persistent://tenant/namespace/local[-partition-N]`` maps to the Kafka topic ``local`` when the
namespace is ``public/default`` and to ``tenant.namespace.local`` otherwise; ``-partition-N`` is Kafka
partition N; a non-partitioned Pulsar topic is partition 0. A bare ``local`` name means
``persistent://public/default/local``.

The mapping is not one-to-one: ``persistent://public/default/a.b.c`` and ``persistent://a/b/c`` share
the Kafka topic ``a.b.c`` (one topic under two names). Going back from a Kafka name, ``from_kafka``
prefers the namespaced name this process last used for that topic, else ``public/default``.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from pulsar_txn.errors import ConfigError, InvalidTopicName

_PART = re.compile(r"^(.*)-partition-(\d+)$")
_MAX_PARTITION = (1 << 31) - 1
_KAFKA_OK = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_SEGMENT_OK = re.compile(r"^[A-Za-z0-9_=:.~-]+$")
# persistent:// + tenant/namespace + a Kafka name (<= 249) + -partition-N: longer is never valid. Checked
# before the cached parse, so a client cannot park huge strings in its cache.
_MAX_NAME = 1024


@dataclass(frozen=True, slots=True)
class TopicName:
    tenant: str
    namespace: str
    local: str
    partition: int | None = None

    @classmethod
    def parse(cls, name: str) -> TopicName:
        """``persistent://tenant/ns/topic[-partition-N]`` or a short name; ``InvalidTopicName`` if bad.
        Cached: names are parsed on every send, ack and marker."""
        if not isinstance(name, str):
            raise InvalidTopicName(f"a topic name is a str, not {type(name).__name__} {name!r}")
        if len(name) > _MAX_NAME:
            raise InvalidTopicName(f"{name[:80]!r}...: {len(name)} characters, over {_MAX_NAME}")
        return _parse(name)

    @classmethod
    def _parse_uncached(cls, name: str) -> TopicName:
        text = name.strip()
        if "://" in text:
            domain, _, rest = text.partition("://")
            if domain != "persistent":
                raise InvalidTopicName(f"{name!r}: only persistent:// topics are supported")
            parts = rest.split("/")
            if len(parts) != 3 or not all(parts):
                raise InvalidTopicName(f"{name!r}: expected persistent://tenant/namespace/topic")
            tenant, namespace, local = parts
        else:
            if "/" in text or not text:
                raise InvalidTopicName(f"{name!r}: a short topic name has no '/'")
            tenant, namespace, local = "public", "default", text
        for seg in (tenant, namespace, local):
            if not _SEGMENT_OK.match(seg) or seg in (".", ".."):  # Kafka refuses "." and ".." too
                raise InvalidTopicName(f"{name!r}: {seg!r} has characters a topic name cannot have")
        partition = None
        match = _PART.match(local)
        if match:
            local, partition = match.group(1), int(match.group(2))
            if partition > _MAX_PARTITION:  # Kafka's partition ids are int32
                raise InvalidTopicName(f"{name!r}: partition {partition} is beyond Kafka's {_MAX_PARTITION}")
        topic = cls(tenant, namespace, local, partition)
        if not _KAFKA_OK.match(topic.kafka_topic):
            raise InvalidTopicName(f"{name!r}: maps to {topic.kafka_topic!r}, not a valid Kafka topic name")
        if (tenant, namespace) != ("public", "default"):
            _remember(topic.base)
        return topic

    @property
    def kafka_topic(self) -> str:
        if (self.tenant, self.namespace) == ("public", "default"):
            return self.local
        return f"{self.tenant}.{self.namespace}.{self.local}"

    @property
    def kafka_partition(self) -> int:
        return 0 if self.partition is None else self.partition

    @property
    def base(self) -> TopicName:
        return TopicName(self.tenant, self.namespace, self.local, None)

    def with_partition(self, index: int) -> TopicName:
        return TopicName(self.tenant, self.namespace, self.local, index)

    def __str__(self) -> str:
        suffix = "" if self.partition is None else f"-partition-{self.partition}"
        return f"persistent://{self.tenant}/{self.namespace}/{self.local}{suffix}"


@functools.lru_cache(maxsize=8192)
def _parse(name: str) -> TopicName:
    return TopicName._parse_uncached(name)


_NAMESPACED: dict[str, TopicName] = {}  # Kafka topic -> the namespaced name last parsed for it
_NAMESPACED_MAX = 65_536


def _remember(topic: TopicName) -> None:
    if _NAMESPACED.get(topic.kafka_topic) == topic:
        return
    if len(_NAMESPACED) >= _NAMESPACED_MAX:
        _NAMESPACED.clear()  # a process using that many namespaced topics re-learns them as it goes
    _NAMESPACED[topic.kafka_topic] = topic
    partition_name.cache_clear()  # names made before this one may have said public/default


def from_kafka(kafka_topic: str) -> TopicName:
    """The Pulsar name of a Kafka topic: the namespaced name this process used for it, if any
    (``acme.orders.t`` -> ``persistent://acme/orders/t``), else its ``public/default`` name."""
    known = _NAMESPACED.get(kafka_topic)
    return known if known is not None else TopicName.parse(kafka_topic)


def names_of_kafka_topic(kafka_topic: str) -> list[TopicName]:
    """Every Pulsar name that maps to ``kafka_topic``: its ``public/default`` name and, for a name
    with two dots or more, ``tenant.namespace.local`` read as ``persistent://tenant/namespace/local``
    (a pattern subscription matches either)."""
    names = [TopicName.parse(kafka_topic)]
    tenant, _, rest = kafka_topic.partition(".")
    namespace, _, local = rest.partition(".")
    if (
        local
        and (tenant, namespace) != ("public", "default")
        and all(map(_SEGMENT_OK.match, (tenant, namespace)))
    ):
        names.append(TopicName(tenant, namespace, local))  # not remembered: only a candidate
    return names


@functools.lru_cache(maxsize=4096)
def partition_name(kafka_topic: str, partition: int) -> str:
    """The Pulsar name of a Kafka topic's partition (``persistent://public/default/t-partition-0``;
    ``from_kafka`` says which namespace); cached: every received message carries one."""
    return str(from_kafka(kafka_topic).with_partition(partition))


DEFAULT_LOG_TOPIC = "__pulsar_txn_log"
"""The coordinators' transaction log (``CoordinatorConfig.log_topic``'s default)."""


PENDING_ACK_SUFFIX = "__transaction_pending_ack"


def is_data_topic(kafka_topic: str) -> bool:
    """Whether a Kafka topic holds an application's messages: not internal (``__`` prefix: the
    log, snapshots) and not a subscription's pending-ack log."""
    return not kafka_topic.startswith("__") and not kafka_topic.endswith(PENDING_ACK_SUFFIX)


def pending_ack_topic(topic: TopicName, subscription: str) -> str:
    """Kafka topic of a subscription's pending-ack log.

    Pulsar names it ``<topic>-<sub>__transaction_pending_ack``; so do we.
    """
    return f"{topic.base.kafka_topic}-{subscription}{PENDING_ACK_SUFFIX}"


def bad_subscription_name(subscription: str) -> bool:
    """Empty, or holding a '/' or a space: no subscription may be named so."""
    return not subscription or any(c in subscription for c in "/ ")


def check_subscription(topic: str, subscription: str) -> None:
    """``InvalidTopicName`` unless ``topic`` parses and the subscription's pending-ack log name is a
    valid Kafka topic name (it embeds the subscription name)."""
    name = pending_ack_topic(TopicName.parse(topic), subscription)
    if not subscription or not _KAFKA_OK.match(name):
        # Quoted shortened: a client's string goes back to it and into the log.
        raise InvalidTopicName(
            f"subscription {subscription!r:.100} of {topic!r:.100}: its pending-ack log {name!r:.300} is "
            "not a valid Kafka topic name"
        )


def system_topic_setting(value: object, what: str) -> str:
    """A system topic's Kafka name given as a setting (``ConfigError`` for one Kafka would refuse at
    its first use, deep inside the Kafka client)."""
    if not isinstance(value, str) or not _KAFKA_OK.match(value) or value in (".", ".."):
        raise ConfigError(
            f"{what} {value!r:.200} is not a Kafka topic name (1-249 of letters, digits, '.', '_', '-')"
        )
    return value


WILDCARD_HOSTS = frozenset({"0.0.0.0", "::", ""})
"""Bind addresses that mean every interface: no client can connect to one."""


def service_host_port(url: str) -> tuple[str, int]:
    """Host and port of a coordinator URL, ``pulsar://host[:port]`` (port 6650 by default);
    ``ConfigError`` for anything else."""
    if not isinstance(url, str):
        raise ConfigError(f"a coordinator URL is a str ('pulsar://host:6650'), not {type(url).__name__}")
    parts = urlsplit(url)
    try:
        port = parts.port  # raises on a port that is not a number in range
    except ValueError:
        port = -1
    if parts.scheme != "pulsar" or not parts.hostname or port == -1:
        raise ConfigError(f"service URL {url!r}: expected pulsar://host:port")
    return parts.hostname, port or 6650
