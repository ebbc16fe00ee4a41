"""What the broker knows about consumer groups: which topics each one reads (committed offsets and
current members' assignments) and who is in it. For admin operations, not hot paths."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from confluent_kafka import ConsumerGroupTopicPartitions, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_store._clients import kafka_error_of, make_client, wait_future
from kafka_store.config import KafkaConfig, admin_conf
from kafka_store.errors import BrokerUnavailableError, GroupNotEmptyError, StoreError


class GroupMember(NamedTuple):
    member_id: str
    client_id: str
    instance_id: str | None  # group.instance.id of a static member (KIP-345), else None
    topics: frozenset[str] = frozenset()  # of its current assignment (filled by ``list_groups``)


@dataclass(frozen=True)
class GroupInfo:
    group_id: str
    members: tuple[GroupMember, ...]
    committed_topics: frozenset[str]  # topics with an offset committed by the group


def _result(future: Any, what: str, timeout: float, *, retriable: bool = True) -> Any:
    try:
        return wait_future(future, timeout)
    except KafkaException as exc:
        raise StoreError(f"{what}: {exc}", retriable=retriable) from None
    except TimeoutError:  # the admin future's own timeout: not a KafkaException
        raise BrokerUnavailableError.no_answer(what, timeout) from None


def list_groups(config: KafkaConfig, *, admin: Any = None) -> list[GroupInfo]:
    """Every consumer group with its members and topics (one describe and one offsets request per
    group: an admin look-up, not for hot paths). ``admin``: a client from ``group_admin`` to reuse."""
    if admin is None:
        admin = group_admin(config)
    timeout = config.request_timeout_ms / 1000
    listing = _result(admin.list_consumer_groups(request_timeout=timeout), "list groups", timeout)
    ids = sorted({g.group_id for g in listing.valid})
    if not ids:
        return []
    described = {
        g: _result(f, f"describe group {g}", timeout)
        for g, f in admin.describe_consumer_groups(ids, request_timeout=timeout).items()
    }
    out: list[GroupInfo] = []
    for group_id in ids:
        committed = _committed_topics(admin, group_id, timeout)
        out.append(GroupInfo(group_id, tuple(_members(described[group_id])), committed))
    return out


def _committed_topics(admin: Any, group_id: str, timeout: float) -> frozenset[str]:
    """The topics a group has an offset committed for."""
    request = admin.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group_id)], request_timeout=timeout
    )
    offsets = _result(request[group_id], f"offsets of group {group_id}", timeout)
    return frozenset(tp.topic for tp in offsets.topic_partitions or () if tp.offset >= 0)


def group_topics(config: KafkaConfig, group_id: str) -> frozenset[str]:
    """The topics a group reads: with an offset committed, or assigned to a current member."""
    admin = group_admin(config)
    committed = _committed_topics(admin, group_id, config.request_timeout_ms / 1000)
    return committed | frozenset(t for m in describe_group(config, group_id, admin=admin) for t in m.topics)


def group_admin(config: KafkaConfig) -> Any:
    """An admin client for repeated ``describe_group`` calls (opaque outside ``kafka_store``)."""
    return make_client(AdminClient, admin_conf(config), "Kafka admin client")


def describe_group(config: KafkaConfig, group_id: str, *, admin: Any = None) -> list[GroupMember]:
    """A group's current members (empty if the group has none). ``admin``: an admin client from
    ``group_admin`` to reuse (for repeated look-ups); else one is made for this call."""
    if admin is None:
        admin = group_admin(config)
    desc = _result(
        admin.describe_consumer_groups([group_id])[group_id],
        f"describe group {group_id}",
        config.request_timeout_ms / 1000,
    )
    return _members(desc)


def _members(desc: Any) -> list[GroupMember]:
    """The members of a group description, with the topics of their assignments."""
    return [
        GroupMember(
            m.member_id,
            m.client_id,
            m.group_instance_id,
            frozenset(tp.topic for tp in (m.assignment.topic_partitions if m.assignment else [])),
        )
        for m in desc.members
    ]


def delete_group(config: KafkaConfig, group_id: str, *, admin: Any = None) -> None:
    """Delete a group (its committed offsets too); a group that is gone already is no error.
    ``GroupNotEmptyError`` while it has members."""
    if admin is None:
        admin = group_admin(config)  # kept referenced: a destroyed client never completes its futures
    future = admin.delete_consumer_groups([group_id])[group_id]
    what, timeout = f"delete group {group_id}", config.request_timeout_ms / 1000
    try:
        wait_future(future, timeout)
    except KafkaException as exc:
        err = kafka_error_of(exc)
        code = err.code() if err is not None else None
        if code == KafkaError.GROUP_ID_NOT_FOUND:
            return
        if code == KafkaError.NON_EMPTY_GROUP:
            raise GroupNotEmptyError(f"{what}: it has members") from None
        raise StoreError(f"{what}: {exc}") from None
    except TimeoutError:
        raise BrokerUnavailableError.no_answer(what, timeout) from None


def group_offsets(
    config: KafkaConfig, group_id: str, partitions: list[tuple[str, int]]
) -> dict[tuple[str, int], tuple[int, str | None]]:
    """A group's committed (offset, metadata) per partition, read without joining the group."""
    if not partitions:
        return {}  # the admin client refuses an empty list with a ValueError
    request = ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p) for t, p in partitions])
    admin = group_admin(config)
    result = _result(
        admin.list_consumer_group_offsets([request])[group_id],
        f"offsets of group {group_id}",
        config.request_timeout_ms / 1000,
    )
    return {
        (tp.topic, tp.partition): (tp.offset, tp.metadata) for tp in result.topic_partitions if tp.offset >= 0
    }
