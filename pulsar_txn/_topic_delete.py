"""Deleting a topic with what belongs to it, as ``pulsar-admin topics delete`` does in Pulsar: its
subscriptions (Kafka consumer groups), their pending-ack logs and its transaction-buffer snapshots."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass

from kafka_store import GroupInfo, KafkaConfig, StoreError, TopicAdmin, delete_group, list_groups
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.consumer import CONSUMER_CLIENT_ID_PREFIX
from pulsar_txn.errors import NotAllowedError, TopicNotFound, from_store_error
from pulsar_txn.naming import TopicName

log = logging.getLogger(__name__)

_PENDING_ACK_SUFFIX = "__transaction_pending_ack"


@dataclass(frozen=True)
class TopicDeleted:
    """What ``Client.delete_topic`` removed, and what it had to leave."""

    topic: str
    subscriptions: tuple[str, ...]
    """Subscriptions deleted with the topic (their consumer groups and cursors)."""
    pending_ack_topics: tuple[str, ...]
    kept_subscriptions: tuple[str, ...]
    """Groups left in place: they read other topics too (a multi-topic or pattern subscription; its
    committed offsets of the deleted topic stay, there is no offset-delete call in the client), or
    they still had consumers (``force=True``)."""
    snapshot_records: int
    """Transaction-buffer snapshot records tombstoned."""


def pending_ack_logs(base: str, topics: Iterable[str], subscriptions: set[str]) -> dict[str, str]:
    """The pending-ack logs of topic ``base`` among ``topics``: {log topic: subscription}.
    ``<base>-<sub>__transaction_pending_ack`` can also be the log of topic ``<base>-<x>`` for a
    subscription named by the rest: such a name counts only if ``subscriptions`` (the groups known to
    read ``base``) has its subscription, or no topic ``<base>-<x>`` exists."""
    names = set(topics)
    prefix = f"{base}-"
    out: dict[str, str] = {}
    for name in sorted(names):
        if not (name.startswith(prefix) and name.endswith(_PENDING_ACK_SUFFIX)):
            continue
        sub = name[len(prefix) : -len(_PENDING_ACK_SUFFIX)]
        if not sub:
            continue
        if sub not in subscriptions:
            rivals = [t for t in names if t != base and t.startswith(prefix) and name.startswith(f"{t}-")]
            if rivals:
                log.info("%s: could also be a pending-ack log of %s; left in place", name, rivals)
                continue
        out[name] = sub
    return out


def reads_topic(group: GroupInfo, topic: str) -> bool:
    """Whether a group is a subscription of ``topic``: it committed offsets there, or one of our
    consumers in it is assigned the topic. Other members assigned it (the transaction-buffer
    service's group, which never commits) do not make it one."""
    return topic in group.committed_topics or any(
        m.client_id.startswith(CONSUMER_CLIENT_ID_PREFIX) and topic in m.topics for m in group.members
    )


def _other_topics(group: GroupInfo, topic: str) -> bool:
    return any(t != topic for t in group.committed_topics) or any(
        t != topic for m in group.members for t in m.topics
    )


def delete_topic(
    kafka: KafkaConfig, admin: TopicAdmin, snapshots: SnapshotStore, topic: str, *, force: bool
) -> TopicDeleted:
    name = TopicName.parse(topic)
    if name.partition is not None:
        raise NotAllowedError(f"{topic}: delete the topic {name.base}, not one of its partitions")
    base = name.kafka_topic
    try:
        topics = admin.list_topics()
        if base not in topics:
            raise TopicNotFound(f"topic {name} (Kafka topic {base}) does not exist")
        partitions = admin.partition_count(base)
        groups = {g.group_id: g for g in list_groups(kafka)}
        reading = {g for g, info in groups.items() if reads_topic(info, base)}
        logs = pending_ack_logs(base, topics, reading)
        subs = sorted(reading | set(logs.values()))
        active = [s for s in subs if s in groups and groups[s].members]
        if active and not force:
            raise NotAllowedError(
                f"topic {name} has subscriptions with connected consumers: {active}; close them first,"
                " or delete with force=True"
            )
        deleted: list[str] = []
        kept: list[str] = []
        # Groups first: if this stops half-way, the topic is still there to delete again.
        for sub in subs:
            info = groups.get(sub)
            if info is None:  # a pending-ack log whose group is gone already
                deleted.append(sub)
            elif info.members or _other_topics(info, base):
                kept.append(sub)
            else:
                delete_group(kafka, sub)
                deleted.append(sub)
        admin.delete_topics([base, *logs])
        tombstones = snapshots.forget(base, partitions)
    except StoreError as exc:
        raise from_store_error(exc, f"delete topic {name}") from exc
    if kept:
        log.warning(
            "deleted topic %s; subscriptions kept (other topics or connected consumers): %s", name, kept
        )
    return TopicDeleted(str(name), tuple(deleted), tuple(logs), tuple(kept), tombstones)
