"""What a subscription is made with: its type, initial position, isolation level and dead-letter
policy (Pulsar's names; re-exported by ``pulsar_txn.consumer``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pulsar_txn import _args
from pulsar_txn.errors import InvalidTopicName
from pulsar_txn.naming import TopicName


class ConsumerType(StrEnum):
    """Subscription types (Pulsar's ``ConsumerType``). Exclusive and Failover are supported; Shared
    and Key_Shared raise ``NotAllowedError``."""

    Exclusive = "Exclusive"
    Failover = "Failover"
    Shared = "Shared"
    KeyShared = "Key_Shared"


class InitialPosition(StrEnum):
    """Where a new subscription starts (Pulsar's ``InitialPosition``)."""

    Earliest = "Earliest"
    Latest = "Latest"


class SubscriptionIsolationLevel(StrEnum):
    """What a subscription's consumers read (Pulsar's ``SubscriptionIsolationLevel``, PIP-298).
    ``READ_COMMITTED`` (default): plain and committed messages, never past ``max_read_position``.
    ``READ_UNCOMMITTED``: every message up to the partition's end, those of open and aborted
    transactions too (markers never). Give every consumer of a subscription the same level."""

    READ_COMMITTED = "READ_COMMITTED"
    READ_UNCOMMITTED = "READ_UNCOMMITTED"


@dataclass(frozen=True)
class DeadLetterPolicy:
    """After ``max_redeliver_count`` redeliveries a message moves to ``dead_letter_topic`` (default
    ``<topic>-<subscription>-DLQ``) and is acknowledged."""

    max_redeliver_count: int
    dead_letter_topic: str | None = None  # default: "<topic>-<subscription>-DLQ"

    def __post_init__(self) -> None:
        # Pulsar requires at least 1: with 0 every message would go to the DLQ unseen.
        _args.integer(self.max_redeliver_count, "max_redeliver_count", minimum=1)
        if self.dead_letter_topic is not None:
            _args.text(self.dead_letter_topic, "dead_letter_topic")
            # Checked now, not at the first move: then a bad name failed every later receive().
            if TopicName.parse(self.dead_letter_topic).partition is not None:
                raise InvalidTopicName(
                    f"dead_letter_topic {self.dead_letter_topic!r:.200} names one partition of a topic:"
                    " name the topic (it is created with one partition if missing)"
                )


# A subscription's group members are this library's consumers: their Kafka client ids start so (the
# join time after it orders racing subscribers; topic deletion tells them from other groups' members).
CONSUMER_CLIENT_ID_PREFIX = "ptxn-"


def is_subscriber(client_id: str) -> bool:
    """Whether a group member's client id is one of this library's consumers' (not another
    application's, nor the deployment's own services')."""
    return client_id.startswith(CONSUMER_CLIENT_ID_PREFIX)


# The type's code ends a consumer's Kafka client id, so that a later consumer can tell an Exclusive one.
TYPE_CODES = {ConsumerType.Exclusive: "x", ConsumerType.Failover: "f"}


def type_code(client_id: str) -> str | None:
    """The consumer type's code at the end of a member's client id (None: made by an older version)."""
    parts = client_id.split("-")
    return parts[3] if len(parts) == 4 else None


def joined(client_id: str) -> int:
    try:
        return int(client_id.split("-")[1])
    except (IndexError, ValueError):
        return 0
