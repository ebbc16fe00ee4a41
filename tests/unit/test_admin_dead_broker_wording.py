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


def test_a_timeout_the_client_reports_itself_names_the_cluster_too() -> None:
    """Under load the create's future failed with librdkafka's "Failed while waiting for controller:
    Local: Timed out" before our own wait ran out, and that message named no cluster (CI, session 44)."""
    from confluent_kafka import KafkaError, KafkaException

    address = f"127.0.0.1:{free_port()}"
    admin = TopicAdmin(KafkaConfig(bootstrap_servers=address, request_timeout_ms=500))
    try:
        timed_out = KafkaException(KafkaError(KafkaError._TIMED_OUT, "Failed while waiting for controller"))
        error = admin._translate(timed_out, "create topic t")
        assert isinstance(error, BrokerUnavailableError)
        assert f"no answer from Kafka at {address}" in str(error)
    finally:
        admin.close()
