"""kafka_store against the real broker: admin checks never create topics; appends reach partitions
that were created (or added) after the producer first looked at the topic."""

from __future__ import annotations

import pytest

from kafka_store import Appender, KafkaConfig, TopicAdmin

pytestmark = pytest.mark.integration


def test_topic_exists_never_creates_the_topic(admin: TopicAdmin, uid: str) -> None:
    assert not admin.topic_exists(f"ghost_{uid}")
    assert f"ghost_{uid}" not in admin.list_topics()
    # ... so creating it later gets the partition count asked for, not the broker's default of 1.
    assert admin.ensure_topic(f"ghost_{uid}", 3) == 3


def test_append_reaches_partitions_added_after_the_producer_saw_the_topic(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"grow_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka)
    try:
        assert appender.append(topic, 0, b"a").result(30) == 0  # producer caches 1 partition
        admin.add_partitions(topic, 3)
        assert appender.append(topic, 2, b"b").result(30) == 0  # refreshed, not "unknown partition"
    finally:
        appender.close()
