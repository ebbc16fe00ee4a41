"""``pending-ack-stats``: a subscription's durable state, computed from Kafka without joining it.

It is exactly what a consumer taking the partition over would recover: the cursor from the group's
committed offset and metadata, then the pending-ack log replayed from the recorded start.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kafka_store import TopicNotFoundError, describe_group, group_offsets, read_range
from pulsar_txn.buffer.reader import UNKNOWN_NUM_TCS
from pulsar_txn.errors import SubscriptionNotFound
from pulsar_txn.naming import TopicName, pending_ack_topic
from pulsar_txn.pendingack.log import PendingAckFold
from pulsar_txn.pendingack.state import PendingAckState
from pulsar_txn.subscription.cursor import Cursor

if TYPE_CHECKING:
    from pulsar_txn.client import Client


def split_metadata(metadata: str | None) -> tuple[int, str | None]:
    """Commit metadata is ``<pending-ack replay start>;<acked ranges>``."""
    if not metadata:
        return 0, None
    head, _, ranges = metadata.partition(";")
    try:
        return int(head), ranges or None
    except ValueError:
        return 0, metadata


def recover_partition(
    client: Client,
    name: TopicName,
    subscription: str,
    partition: int,
    committed: tuple[int, str | None] | None,
    default_start: int,
) -> PendingAckFold:
    """The cursor and pending-ack state of one partition as stored in Kafka."""
    pa_low = 0
    if committed is not None:
        pa_low, ranges = split_metadata(committed[1])
        try:
            cursor = Cursor.decode(committed[0], ranges)
        except ValueError:
            cursor = Cursor(committed[0])
    else:
        cursor = Cursor(default_start)
    pa_topic = pending_ack_topic(name, subscription)
    opts = client._buffer_options()
    fold = PendingAckFold(
        PendingAckState(cursor),
        pa_topic,
        partition,
        marker_secret=opts.marker_secret,
        num_tcs=opts.num_tcs if opts.num_tcs != UNKNOWN_NUM_TCS else None,
    )
    fold.next_offset = pa_low
    try:
        for rec in read_range(client.kafka, pa_topic, partition, pa_low):
            fold.apply(rec)
    except TopicNotFoundError:
        pass
    return fold


def recover_subscription(client: Client, topic: str, subscription: str) -> dict[str, PendingAckFold]:
    """Per partition of ``topic`` (or the one partition it names), keyed by full partition name: the
    subscription's recovered cursor and pending acks."""
    name = TopicName.parse(topic)
    count = client._partition_count(name)
    parts = [name.partition] if name.partition is not None else list(range(count))
    committed = group_offsets(client.kafka, subscription, [(name.kafka_topic, p) for p in parts])
    if not committed and not _exists(client, name, subscription):
        raise SubscriptionNotFound(f"{topic} has no subscription {subscription!r}")
    return {
        str(name.base.with_partition(p)): recover_partition(
            client, name.base, subscription, p, committed.get((name.kafka_topic, p)), 0
        )
        for p in parts
    }


def _exists(client: Client, name: TopicName, subscription: str) -> bool:
    """A subscription with no cursor committed yet still exists while its consumers are in the
    group, or once it has a pending-ack log (as Pulsar's subscription exists from its creation)."""
    if client._admin.topic_exists(pending_ack_topic(name.base, subscription)):
        return True
    return bool(describe_group(client.kafka, subscription))


def pending_ack_stats(client: Client, topic: str, subscription: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for partition_name, fold in recover_subscription(client, topic, subscription).items():
        out[partition_name] = {
            **fold.state.stats(),
            "acked_ranges": fold.state.cursor.acked.ranges(),
            "pending_ack_log_replay_start": fold.replay_start(),
            "recovery_state": "Ready",
        }
    return out
