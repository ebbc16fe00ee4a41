"""Storage layer on Kafka: the only package that imports ``confluent_kafka``."""

from kafka_store._clients import poll_ready
from kafka_store._threads import in_callback_thread, mark_callback_thread
from kafka_store.admin import TopicAdmin
from kafka_store.broker import LocalBroker, free_port
from kafka_store.codec import REGISTRY, CodecRegistry, RecordKind
from kafka_store.config import KafkaConfig
from kafka_store.errors import (
    BrokerStartError,
    BrokerUnavailableError,
    ClientConfigError,
    CodecError,
    CorruptRecordError,
    GroupNotEmptyError,
    ProduceError,
    RecordTooLargeError,
    StoreError,
    TopicNotFoundError,
    UnknownRecordKindError,
    UnsupportedRecordVersionError,
)
from kafka_store.group import GroupMembership, GroupReader, SubscriptionGroup
from kafka_store.group_admin import (
    GroupInfo,
    GroupMember,
    delete_group,
    describe_group,
    group_admin,
    group_offsets,
    group_topics,
    list_groups,
)
from kafka_store.producer import Appender, Delivery
from kafka_store.reader import (
    BEGINNING,
    PartitionReader,
    StoredRecord,
    end_offsets,
    offsets_for_time,
    read_range,
    replay_compacted,
    watermark_offsets,
)

__all__ = [
    "BEGINNING",
    "REGISTRY",
    "Appender",
    "BrokerStartError",
    "BrokerUnavailableError",
    "ClientConfigError",
    "CodecError",
    "CodecRegistry",
    "CorruptRecordError",
    "Delivery",
    "GroupInfo",
    "GroupMember",
    "GroupMembership",
    "GroupNotEmptyError",
    "GroupReader",
    "KafkaConfig",
    "LocalBroker",
    "PartitionReader",
    "ProduceError",
    "RecordKind",
    "RecordTooLargeError",
    "StoreError",
    "StoredRecord",
    "SubscriptionGroup",
    "TopicAdmin",
    "TopicNotFoundError",
    "UnknownRecordKindError",
    "UnsupportedRecordVersionError",
    "delete_group",
    "describe_group",
    "end_offsets",
    "free_port",
    "group_admin",
    "group_offsets",
    "group_topics",
    "in_callback_thread",
    "list_groups",
    "mark_callback_thread",
    "offsets_for_time",
    "poll_ready",
    "read_range",
    "replay_compacted",
    "watermark_offsets",
]
