"""Avro schema evolution through the schema registry, as pulsar-client's AvroSchema does it by
fetching each message's writer schema from the broker: a producer registers its schema, and a
reader with another version of the record reads its messages by Avro resolution (new fields take
their defaults, removed ones are dropped), natively and through the compat layer. Before, every
message of the other version raised IncompatibleSchema, and the compat layer had no way around it.
A registry record whose content does not have the fingerprint it is filed under is ignored, and
cannot push the real one out (its key differs)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import Decimal

import pytest
from confluent_kafka import Producer as KafkaProducer
from pulsar.schema import Long, Record, String

import pulsar_txn.compat as pulsar
from pulsar_txn import AvroSchema, Client
from pulsar_txn._schema_registry import DEFAULT_SCHEMA_TOPIC
from pulsar_txn.asyncio import AsyncClient
from pulsar_txn.errors import IncompatibleSchema
from pulsar_txn.schema import avro_fingerprint
from tests.conftest import Cluster, compat_options, read_all, receive_all

pytestmark = pytest.mark.integration


@dataclass
class V1:
    a: int


@dataclass
class V2:
    a: int
    b: str = "dflt"


V1.__name__ = V2.__name__ = "Event"  # one record, two versions (Avro resolution matches names)
V1.__qualname__ = V2.__qualname__ = "Event"


def test_each_version_reads_the_other_through_the_registry(cluster: Callable[..., Cluster], uid: str) -> None:
    c = cluster()
    topic = f"evolve_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic, schema=AvroSchema(V1)).send(V1(1))
    c.client.create_producer(topic, schema=AvroSchema(V2)).send(V2(2, "x"))

    reader = c.other_client()  # another client: it knows the schemas only from the registry
    try:
        newer = [m.value() for m in read_all(reader.create_reader(topic, schema=AvroSchema(V2)))]
        older = [m.value() for m in read_all(reader.create_reader(topic, schema=AvroSchema(V1)))]
    finally:
        reader.close()
    assert newer == [V2(1, "dflt"), V2(2, "x")]
    assert older == [V1(1), V1(2)]


def test_compat_records_of_two_versions_read_each_other(cluster: Callable[..., Cluster], uid: str) -> None:
    class Ev(Record):
        a = Long()

    old = Ev

    class Ev(Record):  # type: ignore[no-redef]
        a = Long()
        b = String(default="dflt", required_default=True)

    new = Ev
    c = cluster()
    topic = f"cevolve_{uid}"
    c.client.create_topic(topic, 1)
    client = pulsar.Client(c.coordinator.url, **compat_options(c))
    try:
        client.create_producer(topic, schema=pulsar.schema.AvroSchema(old)).send(old(a=1))
        client.create_producer(topic, schema=pulsar.schema.AvroSchema(new)).send(new(a=2, b="x"))
        for cls, want in ((new, [(1, "dflt"), (2, "x")]), (old, [(1,), (2,)])):
            reader = client.create_reader(
                topic, pulsar.MessageId.earliest, schema=pulsar.schema.AvroSchema(cls)
            )
            got = [reader.read_next(10_000).value() for _ in range(2)]
            assert [tuple(getattr(v, f) for f in type(v)._fields) for v in got] == want
    finally:
        client.close()


def test_a_forged_registry_record_is_ignored(cluster: Callable[..., Cluster], uid: str) -> None:
    c = cluster()
    topic = f"forged_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic, schema=AvroSchema(V2)).send(V2(2, "x"))
    v2_fp = avro_fingerprint(AvroSchema(V2).avro_schema or {})
    # Someone files another schema under V2's fingerprint, later than the real one, and one under a
    # fingerprint no producer has: both ignored, and the real one is still found.
    forged = b'{"type":"record","name":"Event","fields":[{"name":"b","type":"long"}]}'
    digest = hashlib.sha256(forged).hexdigest()[:16]
    kafka = KafkaProducer({"bootstrap.servers": c.kafka.bootstrap_servers})
    for fp in (v2_fp, "0123456789abcdef"):
        kafka.produce(DEFAULT_SCHEMA_TOPIC, key=f"avro/{fp}/{digest}".encode(), value=forged, partition=0)
    assert kafka.flush(30) == 0

    reader = c.other_client()
    try:
        (msg,) = read_all(reader.create_reader(topic, schema=AvroSchema(V1)))
        assert msg.value() == V1(2)
        with pytest.raises(IncompatibleSchema):  # the forged record is all there is for this one
            dataclasses.replace(msg, schema_header=b"AVRO:0123456789abcdef").value()
    finally:
        reader.close()


def test_concurrent_first_lookups_all_find_the_schema(cluster: Callable[..., Cluster], uid: str) -> None:
    # All but the first caller were answered "no such schema" while the first read the topic.
    c = cluster()
    topic = f"race_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic, schema=AvroSchema(V2))
    fp = avro_fingerprint(AvroSchema(V2).avro_schema or {})
    other = c.other_client()
    try:
        registry = other._schema_registry()
        barrier = threading.Barrier(12)

        def lookup() -> object:
            barrier.wait()
            return registry.lookup(fp)

        with ThreadPoolExecutor(12) as pool:
            found = list(pool.map(lambda _i: lookup(), range(12)))
    finally:
        other.close()
    assert all(f == AvroSchema(V2).avro_schema for f in found)


def test_two_schemas_of_one_fingerprint_that_decode_differently_are_both_refused(
    cluster: Callable[..., Cluster], uid: str, caplog: pytest.LogCaptureFixture
) -> None:
    # The fingerprint ignores logical types: a forged copy with another decimal scale under the same
    # fingerprint turned 12.34 into 1234 without a word. Neither is trusted now.
    c = cluster()
    topic = f"scale_{uid}"
    c.client.create_topic(topic, 1)
    name = f"Price{uid}"
    amount = {
        "name": "amount",
        "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
    }
    w1 = {"type": "record", "name": name, "fields": [amount]}
    w2 = {
        "type": "record",
        "name": name,
        "fields": [amount, {"name": "note", "type": "string", "default": ""}],
    }
    c.client.create_producer(topic, schema=AvroSchema(dict, schema=w1)).send({"amount": Decimal("12.34")})
    forged = json.loads(json.dumps(w1))
    forged["fields"][0]["type"]["scale"] = 0
    fp = avro_fingerprint(w1)
    assert avro_fingerprint(forged) == fp
    value = json.dumps(forged, sort_keys=True).encode()
    kafka = KafkaProducer({"bootstrap.servers": c.kafka.bootstrap_servers})
    kafka.produce(
        DEFAULT_SCHEMA_TOPIC, key=f"avro/{fp}/{hashlib.sha256(value).hexdigest()[:16]}".encode(), value=value
    )
    assert kafka.flush(30) == 0
    other = c.other_client()
    try:
        (msg,) = read_all(other.create_reader(topic, schema=AvroSchema(dict, schema=w2)))
        with pytest.raises(IncompatibleSchema):
            msg.value()
    finally:
        other.close()
    assert "different schemas for" in caplog.text


def test_a_pattern_subscription_never_takes_the_clients_schema_topic(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    c = cluster()
    client = Client(
        c.coordinator.url, kafka=c.kafka, schema_topic=f"schemas_{uid}", operation_timeout_seconds=30
    )
    try:
        data = f"data_{uid}"
        client.create_topic(data, 1)
        client.create_producer(data, schema=AvroSchema(V2)).send(V2(1, "x"))  # registers in schemas_<uid>
        consumer = client.subscribe(None, f"s_{uid}", pattern=f".*_{uid}", initial_position="Earliest")
        got = receive_all(consumer)
        assert [m.topic_name.split("/")[-1].split("-partition-")[0] for m in got] == [data]
    finally:
        client.close()


def test_an_async_reader_fetches_writer_schemas_off_the_event_loop(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    # value() looked the writer schema up in the registry on the event loop's thread: Kafka I/O there.
    c = cluster()
    topic = f"async_{uid}"
    c.client.create_topic(topic, 1)
    c.client.create_producer(topic, schema=AvroSchema(V2)).send(V2(2, "x"))
    other = c.other_client()
    lookups: list[str] = []
    registry = other._schema_registry()
    real = registry.lookup

    def recorded(fp: str) -> dict[str, object] | None:
        lookups.append(threading.current_thread().name)
        return real(fp)

    registry.lookup = recorded  # type: ignore[method-assign]

    async def main() -> object:
        async with AsyncClient(other) as client:
            reader = await client.create_reader(topic, schema=AvroSchema(V1))
            msg = await reader.read_next(10_000)
            loop_thread = threading.current_thread().name
            value = msg.value()
            return value, loop_thread

    try:
        value, loop_thread = asyncio.run(main())  # type: ignore[misc]
    finally:
        other.close()
    assert value == V1(2)
    assert lookups and loop_thread not in lookups
