"""The migration harness's runner: a program written for pulsar-client runs unchanged on Kafka
(``pulsar-txn migrate-run``), against an embedded broker and coordinator started for it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kafka_store import KafkaConfig, TopicAdmin

pytestmark = pytest.mark.integration

PROGRAM = """\
import sys

import pulsar
from pulsar.schema import AvroSchema, Integer, Record, String


class Order(Record):
    sku = String()
    qty = Integer()


client = pulsar.Client("pulsar://pulsar.example:6650", operation_timeout_seconds=30)
producer = client.create_producer("orders", schema=AvroSchema(Order), batching_enabled=True)
for i in range(3):
    producer.send(Order(sku=f"s{i}", qty=i), properties={"n": str(i)})
consumer = client.subscribe("orders", "billing", initial_position=pulsar.InitialPosition.Earliest,
                            schema=AvroSchema(Order))
total = 0
for _ in range(3):
    msg = consumer.receive(timeout_millis=10000)
    total += msg.value().qty
    consumer.acknowledge(msg)
try:
    consumer.receive(timeout_millis=200)
except pulsar.Timeout:
    print("no more messages")
print(f"total qty {total}, argv {sys.argv[1:]}")
client.close()
sys.exit(int(sys.argv[1]))
"""


def _run(
    tmp_path: Path, source: str, *args: str, options: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    program = tmp_path / "app.py"
    program.write_text(source)
    return subprocess.run(
        [sys.executable, "-m", "pulsar_txn.cli", "migrate-run", *options, str(program), *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_an_unchanged_pulsar_client_program_runs_and_its_exit_status_is_kept(tmp_path: Path) -> None:
    done = _run(tmp_path, PROGRAM, "7")
    assert done.returncode == 7, done.stderr[-3000:]
    assert "no more messages\ntotal qty 3, argv ['7']" in done.stdout
    # the checker's findings come first: the record classes are a note, batching is ignored
    assert "note: pulsar.schema.Record" in done.stderr
    assert "ignored: create_producer(batching_enabled=...)" in done.stderr


def test_a_program_that_raises_exits_1_with_its_traceback(tmp_path: Path) -> None:
    source = (
        "import pulsar\n"
        "client = pulsar.Client('pulsar://x:6650')\n"
        "client.subscribe('t', 's', pulsar.ConsumerType.Shared)\n"
    )
    done = _run(tmp_path, source)
    assert done.returncode == 1
    assert "NotAllowedError" in done.stderr and "Shared subscriptions are not supported" in done.stderr
    assert "migrate-check: the program will probably fail here" in done.stderr


TXN_PROGRAM = """\
import pulsar

client = pulsar.Client("pulsar://pulsar.example:6650")
producer = client.create_producer("TOPIC")
txn = client.new_transaction().build()
producer.send(b"in a transaction", txn=txn)
txn.commit()
reader = client.create_reader("TOPIC", pulsar.MessageId.earliest)
print(reader.read_next(10000).data())
client.close()
"""


def test_a_run_against_a_given_kafka_keeps_off_the_deployments_transaction_log(
    tmp_path: Path, kafka: KafkaConfig, uid: str
) -> None:
    """``migrate-run --bootstrap-servers B`` starts a coordinator for the run. With the default
    names it claimed TCs 0-3 of the deployment's own transaction log, fencing its coordinators
    for as long as the program ran; it now uses topics and groups of its own."""
    admin = TopicAdmin(kafka)
    had_log = admin.topic_exists("__pulsar_txn_log")
    before = set(admin.list_topics())
    program = TXN_PROGRAM.replace("TOPIC", f"mrun_{uid}")
    done = _run(tmp_path, program, options=("--bootstrap-servers", kafka.bootstrap_servers))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "b'in a transaction'" in done.stdout
    assert admin.topic_exists("__pulsar_txn_log") == had_log
    made = set(admin.list_topics()) - before
    assert any(t.startswith("__pulsar_txn_log_migrate_") for t in made), made


def test_a_run_against_a_kafka_that_holds_a_deployment_needs_its_coordinator(tmp_path: Path) -> None:
    """A coordinator of the run's own next to a deployment's hands out the same TxnIDs: its commit
    of (0,0) made the deployment's open (0,0) readable in a shared topic. So a Kafka holding a
    deployment's transaction log is refused without --service-url."""
    from kafka_store import LocalBroker

    broker = LocalBroker(tmp_path / "broker")
    kafka = KafkaConfig(bootstrap_servers=broker.start())
    try:
        TopicAdmin(kafka).ensure_topic("__pulsar_txn_log", 4)
        done = _run(
            tmp_path,
            TXN_PROGRAM.replace("TOPIC", "t"),
            options=("--bootstrap-servers", kafka.bootstrap_servers),
        )
        assert done.returncode == 2
        assert "holds a pulsar-txn deployment" in done.stderr and "--service-url" in done.stderr
        assert "Traceback" not in done.stderr
    finally:
        broker.stop()
