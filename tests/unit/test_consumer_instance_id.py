"""``instance_id`` is a Kafka group.instance.id: checked as Kafka checks it, before anything starts
(an empty one silently turned static membership off)."""

from __future__ import annotations

import pytest

from pulsar_txn import _args
from pulsar_txn.errors import ConfigError


@pytest.mark.parametrize("bad", ["", ".", "..", "a b", "a/b", "é", "x" * 250, None, 3])
def test_an_instance_id_kafka_would_refuse_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError, match="instance_id"):
        _args.group_instance_id(bad, "instance_id")


@pytest.mark.parametrize("good", ["pipeline-0", "a", "A.b_c-9", "x" * 249])
def test_kafkas_legal_instance_ids_pass(good: str) -> None:
    assert _args.group_instance_id(good, "instance_id") == good
