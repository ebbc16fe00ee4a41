"""The coordinator refuses to start on a transaction log or owner directory that retention may
delete records of (review of session 44): a log made before with cleanup.policy=delete (Kafka's
auto-creation, an operator) lost its records to retention, and the restarted TC handed TxnIDs out
again from (0,0); readers then dropped the new transactions' messages as late ones of the old."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from kafka_store import KafkaConfig, TopicAdmin
from pulsar_txn import ConfigError
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("policy", ["delete", "compact,delete"])
@pytest.mark.parametrize("which", ["log_topic", "owners_topic"])
def test_a_system_topic_retention_may_empty_is_refused_at_start(
    kafka: KafkaConfig,
    admin: TopicAdmin,
    coord_config: Callable[..., CoordinatorConfig],
    policy: str,
    which: str,
) -> None:
    config = coord_config(num_tcs=1, static_tc_ids=(0,))
    topic = getattr(config, which)
    admin.ensure_topic(topic, 1, {"cleanup.policy": policy})
    with pytest.raises(ConfigError, match=f"{topic} has cleanup.policy={policy}"):
        EmbeddedCoordinator(kafka, config).start()
