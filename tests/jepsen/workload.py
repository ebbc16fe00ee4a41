"""The client processes of a Jepsen-style run (``python -m tests.jepsen.workload ROLE SETTINGS.json``).

Roles, each recording what it does (``tests/jepsen/history.py``) through the public API only:

* ``writer``: transactions of 1-4 writes over the data topics' partitions; most commit, some abort,
  a few are abandoned (never ended: the coordinator's timeout must abort them); and plain sends to
  the input topic, which the transfers consume.
* ``xfer``: consume-process-produce: a Failover consumer of the input topic receives a batch, sends
  one output per input to the output topic (same partition) and acknowledges the batch, all in one
  transaction; some are aborted on purpose (the inputs must come back). With ``drain`` it aborts
  nothing and exits once nothing has arrived for ``idle_exit_s``. Without an ``instance_id`` it is
  a dynamic member: SIGTERM makes it finish its batch, close (leave the group) and exit, which moves
  partitions between the consumers (a rebalance).
* ``reader``: Readers of every topic from the earliest message, recording each delivery.
* ``dirty``: a READ_UNCOMMITTED subscription of the data topics (PIP-298), recording each delivery:
  open and aborted transactions' records too, never a marker.

Every role stops at ``deadline`` (time.time()). Any of them may be SIGKILLed at any moment; a
restart is a new incarnation (``inc``), with values of its own.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pulsar_txn
from pulsar_txn import Client, ConsumerType, Producer, PulsarTxnError, Transaction
from tests.jepsen.checker import OUTPUT_SEPARATOR
from tests.jepsen.history import Observations, Read, Recorder, Write


def _client(s: dict[str, Any]) -> Client:
    return Client(
        s["service_url"],
        kafka={
            "bootstrap_servers": s["bootstrap"],
            "idle_fetch_backoff_ms": s.get("idle_fetch_backoff_ms", 0),
        },
        num_tcs=s["num_tcs"],
        snapshot_topic=s["snapshot_topic"],
        operation_timeout_seconds=s.get("operation_timeout_s", 10.0),
        # From the environment, as a deployment's (empty: unset).
        marker_secret=os.environ.get("PULSAR_TXN_MARKER_SECRET") or None,
    )


class _Producers:
    """One producer per partition (``topic-partition-N``): each write goes where the history says."""

    def __init__(self, client: Client) -> None:
        self._client = client
        self._by_tp: dict[tuple[str, int], Producer[bytes | str]] = {}

    def get(self, topic: str, partition: int) -> Producer[bytes | str]:
        producer = self._by_tp.get((topic, partition))
        if producer is None:
            producer = self._by_tp[(topic, partition)] = self._client.create_producer(
                f"{topic}-partition-{partition}"
            )
        return producer


def _begin(client: Client, rec: Recorder, n: int, timeout_s: float) -> Transaction:
    b0 = time.monotonic_ns()
    txn = client.new_transaction().with_transaction_timeout(timeout_s).build()
    rec.event(n, "begun", txn=str(txn.txn_id), b0=b0, b1=time.monotonic_ns())
    return txn


def _end(txn: Transaction, intent: str, rec: Recorder, n: int, why: str | None = None) -> None:
    """End as intended and record the outcome the client saw (``info`` when it cannot know);
    ``why``: the reason for an abort, recorded with it."""
    if intent == "abandon":
        rec.event(n, "fail", error="abandoned: left to the coordinator's timeout")
        return
    try:
        if intent == "abort":
            txn.abort()
            rec.event(n, "fail", error=why)
        else:
            txn.commit()
            rec.event(n, "ok")
    except PulsarTxnError as exc:
        rec.event(n, "info", error=f"{type(exc).__name__}: {exc}")


def writer(s: dict[str, Any], rec: Recorder, rng: random.Random) -> None:
    with _client(s) as client:
        producers = _Producers(client)
        data = [(t, p) for t, count in s["data_topics"].items() for p in range(count)]
        n = 0
        while time.time() < s["deadline"]:
            n += 1
            value = f"{rec.proc}.{rec.inc}.{n}"
            if rng.random() < s.get("plain_share", 0.25):
                target = (s["input_topic"], rng.randrange(s["input_partitions"]))
                rec.event(n, "invoke", f="send", writes=[[*target, value]])
                try:
                    producers.get(*target).send(value)
                    rec.event(n, "ok")
                except PulsarTxnError as exc:
                    rec.event(n, "info", error=f"{type(exc).__name__}: {exc}")
                continue
            writes: list[Write] = [(*rng.choice(data), f"{value}.{i}") for i in range(rng.randint(1, 4))]
            roll = rng.random()
            intent = "abandon" if roll < 0.04 else "abort" if roll < 0.2 else "commit"
            rec.event(n, "invoke", f="txn", writes=[list(w) for w in writes], intent=intent)
            try:
                txn = _begin(client, rec, n, s["txn_timeout_s"])
            except PulsarTxnError as exc:
                rec.event(n, "fail", error=f"begin: {type(exc).__name__}: {exc}")
                time.sleep(0.2)
                continue
            try:
                for topic, partition, v in writes:
                    producers.get(topic, partition).send_async(v, txn=txn)
            except PulsarTxnError:
                pass  # the commit fails then, and says so
            _end(txn, intent, rec, n)


def xfer(s: dict[str, Any], rec: Recorder, rng: random.Random) -> None:
    drain = bool(s.get("drain"))
    leave = threading.Event()
    signal.signal(signal.SIGTERM, lambda _sig, _frame: leave.set())
    with _client(s) as client:
        producers = _Producers(client)
        consumer = client.subscribe(
            s["input_topic"],
            s["subscription"],
            consumer_type=ConsumerType.Failover,
            initial_position="Earliest",
            instance_id=s.get("instance_id"),
            subscribe_timeout=60,
        )
        n = 0
        idle_since = time.monotonic()
        while time.time() < s["deadline"] and not leave.is_set():
            batch = consumer.batch_receive(20, 300)
            if not batch:
                if drain and time.monotonic() - idle_since > s.get("idle_exit_s", 4.0):
                    break
                continue
            idle_since = time.monotonic()
            n += 1
            op_key = f"{rec.proc}.{rec.inc}.{n}"
            reads: list[Read] = []
            writes: list[Write] = []
            for msg in batch:
                mid = msg.message_id
                value = msg.data().decode(
                    errors="backslashreplace"
                )  # a delivered marker is a finding, not a crash
                reads.append((s["input_topic"], mid.partition, mid.offset, value))
                writes.append((s["output_topic"], mid.partition, f"{value}{OUTPUT_SEPARATOR}{op_key}"))
            intent = "commit" if drain or rng.random() >= 0.15 else "abort"
            rec.event(
                n,
                "invoke",
                f="xfer",
                sub=s["subscription"],
                reads=[list(r) for r in reads],
                writes=[list(w) for w in writes],
                intent=intent,
            )
            try:
                txn = _begin(client, rec, n, s["txn_timeout_s"])
            except PulsarTxnError as exc:
                rec.event(n, "fail", error=f"begin: {type(exc).__name__}: {exc}")
                consumer.redeliver_unacknowledged_messages()
                time.sleep(0.2)
                continue
            try:
                for topic, partition, v in writes:
                    producers.get(topic, partition).send_async(v, txn=txn)
                consumer.acknowledge(batch, txn=txn)
            except PulsarTxnError as exc:
                # e.g. the partition moved to the other consumer: this attempt must not commit.
                try:
                    txn.abort()
                    rec.event(n, "fail", error=f"{type(exc).__name__}: {exc}")
                except PulsarTxnError as exc2:
                    rec.event(n, "info", error=f"{type(exc2).__name__}: {exc2}")
                continue
            op_n = n
            if rng.random() < 0.1:  # a second transaction acks a message the first one holds
                n += 1
                _ack_again(client, consumer, batch[0], reads[0], rec, n, s)
            _end(txn, intent, rec, op_n)
        consumer.close()


def _ack_again(
    client: Client, consumer: Any, msg: Any, read: Read, rec: Recorder, n: int, s: dict[str, Any]
) -> None:
    """Invariant 5: the message is pending in an open transaction, so another transaction's ack of it
    must fail with TransactionConflict. Recorded as a transfer of that input with no output: if it
    committed as well, the checker reports a ``double-ack``."""
    rec.event(n, "invoke", f="xfer", sub=s["subscription"], reads=[list(read)], writes=[], intent="commit")
    try:
        txn = _begin(client, rec, n, s["txn_timeout_s"])
    except PulsarTxnError as exc:
        rec.event(n, "fail", error=f"begin: {type(exc).__name__}: {exc}")
        return
    try:
        consumer.acknowledge(msg, txn=txn)
    except PulsarTxnError as exc:  # TransactionConflict; or e.g. the partition moved meanwhile
        _end(txn, "abort", rec, n, why=f"{type(exc).__name__}: {exc}")
        return
    # Legitimate if the first transaction has ended meanwhile (e.g. timed out while the coordinator
    # was down); if it commits too, the checker reports a double-ack.
    logging.warning("a second transaction acknowledged %s without a conflict", msg.message_id)
    _end(txn, "commit", rec, n)


def reader(s: dict[str, Any], obs: Observations) -> None:
    with _client(s) as client:
        topics = [*s["data_topics"], s["input_topic"], *s["output_topics"]]
        readers = [client.create_reader(t, start_message_id=pulsar_txn.EARLIEST) for t in topics]
        while time.time() < s["deadline"]:
            for topic, r in zip(topics, readers, strict=True):
                batch: list[Read] = []
                for _ in range(200):
                    try:
                        msg = r.read_next(20)
                    except pulsar_txn.Timeout:
                        break
                    except PulsarTxnError as exc:  # e.g. the broker is slow: try again
                        logging.warning("read_next: %s", exc)
                        break
                    mid = msg.message_id
                    batch.append(
                        (topic, mid.partition, mid.offset, msg.data().decode(errors="backslashreplace"))
                    )
                obs.seen(batch)


def dirty(s: dict[str, Any], obs: Observations) -> None:
    """A READ_UNCOMMITTED subscription of the data topics, never acknowledging: it must deliver every
    data record (committed, aborted or open) in offset order and never a control record."""
    # A subscription of its own per incarnation: a SIGKILLed member is never evicted on the embedded
    # broker, so an Exclusive subscription of the same name would answer ConsumerBusy.
    name = f"jepsen-dirty-{s['seed']}-{s['proc']}-{s['inc']}-{os.getpid()}"
    with _client(s) as client:
        consumer = client.subscribe(
            list(s["data_topics"]),
            name,
            initial_position="Earliest",
            subscription_isolation_level=pulsar_txn.SubscriptionIsolationLevel.READ_UNCOMMITTED,
        )
        while time.time() < s["deadline"]:
            try:
                msgs = consumer.batch_receive(200, 100)
            except PulsarTxnError as exc:  # e.g. the broker is slow: try again
                logging.warning("batch_receive: %s", exc)
                continue
            obs.seen(
                [
                    (
                        m.message_id.topic,
                        m.message_id.partition,
                        m.message_id.offset,
                        m.data().decode(errors="backslashreplace"),
                    )
                    for m in msgs
                ]
            )


def main(argv: list[str]) -> int:
    role, settings_path = argv[0], Path(argv[1])
    s = json.loads(settings_path.read_text())
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    logging.getLogger("kafka_store.group").setLevel(logging.INFO)  # assignments, for the record
    rng = random.Random(f"{s['seed']}-{s['proc']}-{s['inc']}")
    history = Path(s["history_dir"])
    try:
        if role == "reader":
            reader(s, Observations(history / f"obs-{s['proc']}.jsonl", s["proc"], s["inc"]))
        elif role == "dirty":
            dirty(s, Observations(history / f"dirty-{s['proc']}.jsonl", s["proc"], s["inc"]))
        else:
            rec = Recorder(history / f"ops-{s['proc']}.jsonl", s["proc"], s["inc"])
            {"writer": writer, "xfer": xfer}[role](s, rec, rng)
    except PulsarTxnError as exc:  # typed: the runner restarts the role; anything else is a crash (1)
        logging.error("%s stopped: %s: %s", s["proc"], type(exc).__name__, exc)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
