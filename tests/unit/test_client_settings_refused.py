"""A Kafka setting librdkafka refuses (a typo in ``KafkaConfig.extra``) passes KafkaConfig's validation
(it cannot know every librdkafka property) and then raises ``ClientConfigError`` from whichever call
makes a client, never a raw ``KafkaException``. librdkafka refuses the setting while making the
client, before any connection is opened, so no broker is needed."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from kafka_store import (
    Appender,
    ClientConfigError,
    GroupReader,
    KafkaConfig,
    PartitionReader,
    SubscriptionGroup,
    TopicAdmin,
)
from kafka_store.group_admin import group_admin

BAD = KafkaConfig(bootstrap_servers="127.0.0.1:9", extra={"fetch.wait.max.ms.typo": "5"})

CALLS: dict[str, Callable[[], Any]] = {
    "TopicAdmin.ensure_topic": lambda: TopicAdmin(BAD).ensure_topic("t", 1),
    "Appender.append": lambda: Appender(BAD).append("t", 0, b"x"),
    "PartitionReader.assign": lambda: PartitionReader(BAD).assign({("t", 0): 0}),
    "GroupReader": lambda: GroupReader(BAD, "g", lambda _tps: {}, lambda _tps: None),
    "SubscriptionGroup": lambda: SubscriptionGroup(
        BAD, "g", ["t"], lambda _ps: None, lambda _ps: None, client_id="c"
    ),
    "group_admin": lambda: group_admin(BAD),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_refused_setting_is_a_client_config_error(call: str) -> None:
    with pytest.raises(ClientConfigError, match=re.escape("fetch.wait.max.ms.typo")):
        CALLS[call]()
