"""The pipeline and records without a value (tombstones, review of session 41): a null input makes a
null output with the default transform (it became an empty, non-null record, and the verifier did
not notice), a transform may return None for a tombstone, and an output the producer cannot take
ends the run (it restarted sessions for ever, nothing processed)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Producer as KafkaProducer

from pulsar_txn.errors import SchemaSerializationError
from pulsar_txn.message import Message
from pulsar_txn.pipeline import ExactlyOncePipeline, PipelineSettings
from pulsar_txn.pipeline.app import upper
from pulsar_txn.pipeline.verify import verify_exactly_once
from tests.conftest import Cluster, read_all, run_pipeline_bounded

pytestmark = pytest.mark.integration


def _setup(c: Cluster, uid: str, values: list[bytes | None]) -> PipelineSettings:
    c.client.create_topic(f"in_{uid}", 1)
    c.client.create_topic(f"out_{uid}", 1)
    kafka = KafkaProducer({"bootstrap.servers": c.kafka.bootstrap_servers})
    for v in values:
        kafka.produce(f"in_{uid}", value=v, partition=0)
    assert kafka.flush(30) == 0
    return PipelineSettings(
        f"in_{uid}", f"out_{uid}", subscription=f"s_{uid}", instance_id=f"p-{uid}", idle_exit_s=2
    )


def test_a_null_input_makes_a_null_output_and_the_verifier_checks_it(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    settings = _setup(c, uid, [b"x", None, b""])
    run_pipeline_bounded(ExactlyOncePipeline(c.client, settings))
    out = read_all(c.client.create_reader(f"out_{uid}"))
    assert [(m.has_null_value, m.data) for m in out] == [(False, b"X"), (True, b""), (False, b"")]
    assert verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper).ok

    def empties(msg: Message[bytes]) -> bytes:  # what the default transform did before
        return msg.data.upper()

    verdict = verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", empties)
    assert len(verdict.wrong_value) == 1  # the tombstone is no empty payload


def test_an_output_the_producer_cannot_take_ends_the_run(cluster: Callable[..., Cluster], uid: str) -> None:
    c = cluster()
    settings = _setup(c, uid, [b"x"])

    def bad(msg: Message[bytes]) -> Any:
        return 42  # no bytes, no str, no None

    pipeline = ExactlyOncePipeline(c.client, settings, bad)
    with pytest.raises(SchemaSerializationError):
        run_pipeline_bounded(pipeline)
    assert pipeline.progress.sessions == 1
