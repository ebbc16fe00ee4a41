"""Creating a topic with no Kafka answering says which cluster did not answer (a logging review of
session 43: the message was ``create topic X:  (no answer in 10 s)``, the reason left empty)."""

from __future__ import annotations

import pytest

from kafka_store import BrokerUnavailableError, KafkaConfig, TopicAdmin, free_port


def test_a_topic_create_nobody_answers_names_the_cluster() -> None:
    address = f"127.0.0.1:{free_port()}"
    admin = TopicAdmin(KafkaConfig(bootstrap_servers=address, request_timeout_ms=500))
    try:
        with pytest.raises(BrokerUnavailableError, match=f"no answer from Kafka at {address}") as caught:
            admin.ensure_topic("t", 1)
        assert ":  " not in str(caught.value)
    finally:
        admin.close()
