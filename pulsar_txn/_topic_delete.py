"""Deleting a topic with what belongs to it, as ``pulsar-admin topics delete`` does in Pulsar: its
subscriptions (Kafka consumer groups), their pending-ack logs and its transaction-buffer snapshots."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from kafka_store import (
    GroupInfo,
    GroupNotEmptyError,
    KafkaConfig,
    StoreError,
    TopicAdmin,
    delete_group,
    group_admin,
    list_groups,
)
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.errors import NotAllowedError, TopicNotFound, from_store_error
from pulsar_txn.naming import PENDING_ACK_SUFFIX, TopicName
from pulsar_txn.subscription.options import is_subscriber

log = logging.getLogger(__name__)


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


def pending_ack_logs(base: str, topics: Iterable[str], reads: Callable[[str, str], bool]) -> dict[str, str]:
    """The pending-ack logs of topic ``base`` among ``topics``: {log topic: subscription}.
    ``reads(subscription, topic)`` says whether a group is known to read a topic. A log name
    ``<base>-<sub>__transaction_pending_ack`` is also ``<t>-<rest>__...`` for any other topic ``t``
    that is a prefix of it (``a-b-c__...``: topic ``a``, subscription ``b-c``, or topic ``a-b``,
    subscription ``c``). If such a topic exists, the log counts only if its subscription reads
    ``base`` and none of the other readings' subscriptions reads its topic: never guess."""
    names = set(topics)
    out: dict[str, str] = {}
    for name in sorted(names):
        sub = _sub_of(name, base)
        if sub is None:
            continue
        rivals = [(t, s) for t in names if t != base and (s := _sub_of(name, t)) is not None]
        if rivals and not (reads(sub, base) and not any(reads(s, t) for t, s in rivals)):
            log.info("%s: could also be the pending-ack log of %s; left in place", name, rivals)
            continue
        out[name] = sub
    return out


def _sub_of(log_topic: str, topic: str) -> str | None:
    """The subscription if ``log_topic`` is named as a pending-ack log of ``topic``."""
    prefix = f"{topic}-"
    if not (log_topic.startswith(prefix) and log_topic.endswith(PENDING_ACK_SUFFIX)):
        return None
    return log_topic[len(prefix) : -len(PENDING_ACK_SUFFIX)] or None


def reads_topic(group: GroupInfo, topic: str) -> bool:
    """Whether a group is a subscription of ``topic``: it committed offsets there, or one of our
    consumers in it is assigned the topic. Other members assigned it (the transaction-buffer
    service's group, which never commits) do not make it one."""
    return topic in group.committed_topics or any(
        is_subscriber(m.client_id) and topic in m.topics for m in group.members
    )


def _other_topics(group: GroupInfo, topic: str) -> bool:
    return any(t != topic for t in group.committed_topics) or any(
        t != topic for m in group.members for t in m.topics
    )


def _connected(group: GroupInfo | None, topic: str) -> bool:
    """A member reads ``topic``, or has no assignment yet (joining: it may be about to)."""
    return group is not None and any(topic in m.topics or not m.topics for m in group.members)


def delete_topic(
    kafka: KafkaConfig,
    admin: TopicAdmin,
    snapshots: SnapshotStore,
    topic: str,
    *,
    force: bool,
    system_topics: Iterable[str] = (),
) -> TopicDeleted:
    """``system_topics``: the deployment's own topics by their configured names (transaction log,
    snapshots), refused like every ``__``-prefixed topic and every pending-ack log."""
    name = TopicName.parse(topic)
    if name.partition is not None:
        raise NotAllowedError(f"{topic}: delete the topic {name.base}, not one of its partitions")
    base = name.kafka_topic
    if base.startswith("__") or base.endswith(PENDING_ACK_SUFFIX) or base in set(system_topics):
        # As Pulsar refuses system topics: deleting the transaction log loses every outcome (a
        # coordinator then makes a new, empty one and hands TxnIDs out again from (0,0)).
        raise NotAllowedError(
            f"{topic} is a system topic (transaction log, owners, snapshots, pending acks or Kafka's "
            "own): not deleted"
        )
    try:
        topics = admin.list_topics()
        if base not in topics:
            raise TopicNotFound(f"topic {name} (Kafka topic {base}) does not exist")
        partitions = admin.partition_count(base)
        group_admin_client = group_admin(kafka)
        groups = {g.group_id: g for g in list_groups(kafka, admin=group_admin_client)}

        def reads(sub: str, t: str) -> bool:
            return sub in groups and reads_topic(groups[sub], t)

        logs = pending_ack_logs(base, topics, reads)
        subs = sorted({g for g in groups if reads(g, base)} | set(logs.values()))
        active = [s for s in subs if _connected(groups.get(s), base)]
        if active and not force:
            raise NotAllowedError(_busy(name, active))
        deleted: list[str] = []
        kept: list[str] = []
        # Groups first: if this stops half-way, the topic is still there to delete again.
        for sub in subs:
            info = groups.get(sub)
            if info is not None and (info.members or _other_topics(info, base)):
                kept.append(sub)
                continue
            try:
                delete_group(kafka, sub, admin=group_admin_client)  # one already gone is no error
            except GroupNotEmptyError:  # a consumer joined since the look-up
                if not force:
                    raise NotAllowedError(_busy(name, [sub])) from None
                kept.append(sub)
                continue
            deleted.append(sub)
        admin.delete_topics([base, *logs])
        tombstones = snapshots.forget(base, range(partitions))
    except StoreError as exc:
        raise from_store_error(exc, f"delete topic {name}") from exc
    if kept:
        log.warning(
            "deleted topic %s; subscriptions kept (other topics or connected consumers): %s", name, kept
        )
    return TopicDeleted(str(name), tuple(deleted), tuple(logs), tuple(kept), tombstones)


def _busy(name: TopicName, subs: list[str]) -> str:
    return (
        f"topic {name} has subscriptions with connected consumers: {subs}; close them first, or"
        " delete with force=True"
    )
