"""A TB service that could not load a partition's snapshot replays the partition from its start; it
must not write snapshots behind the stored one meanwhile (TB service review, session 40: the latest
stored snapshot went back from offset 12,000 to 10,000 while the new owner replayed)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kafka_store import Appender, KafkaConfig, StoreError, TopicAdmin
from pulsar_txn.buffer.marker import TXN_HEADER, TxnMarker, marker_record
from pulsar_txn.buffer.service import TransactionBufferService
from pulsar_txn.buffer.snapshot import SnapshotStore
from pulsar_txn.txnid import TxnAction, TxnID
from tests.conftest import wait_until

pytestmark = pytest.mark.integration

TXNS = 6000  # each a message and its ABORT marker: a replay long enough for several snapshot rounds


def test_a_replay_after_a_failed_snapshot_load_never_sets_the_stored_snapshot_back(
    kafka: KafkaConfig, coord_config: Any, uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = coord_config(
        tb_topic_refresh_ms=300,
        tb_snapshot_interval_ms=200,
        tb_snapshot_max_changes=5,
        tb_topic_pattern=f"tbreplay_{uid}",
    )
    topic = f"tbreplay_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1)
    appender = Appender(kafka)
    written = []
    for i in range(TXNS):
        txn = TxnID(2, 1000 + i)
        written.append(appender.append(topic, 0, b"x" * 200, headers=[(TXN_HEADER, txn.to_bytes())]))
        value, headers = marker_record(TxnMarker(txn, TxnAction.ABORT, -1, 0), topic, 0, cfg.marker_key)
        written.append(appender.append(topic, 0, value, headers=headers))
    for future in written:
        future.result(30)
    appender.close()
    end = 2 * TXNS
    store = SnapshotStore(kafka, topic=cfg.snapshot_topic)

    def stored() -> int | None:
        loaded = store.load_many([(topic, 0)], num_tcs=cfg.num_tcs)[(topic, 0)]
        return loaded[0].scanned_to if loaded else None

    first = TransactionBufferService(kafka, cfg)
    first.start()
    try:
        wait_until(lambda: stored() == end, 60, interval=0.5, what="the first owner's snapshot at the end")
    finally:
        first.stop()

    real_load = SnapshotStore.load_many

    def unavailable(self: SnapshotStore, partitions: Any, **kw: Any) -> Any:
        raise StoreError("injected: snapshot topic unavailable", retriable=True)

    monkeypatch.setattr(SnapshotStore, "load_many", unavailable)
    second = TransactionBufferService(kafka, cfg)
    second.start()
    seen: list[int | None] = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            loaded = real_load(store, [(topic, 0)], num_tcs=cfg.num_tcs)[(topic, 0)]
            seen.append(loaded[0].scanned_to if loaded else None)
            state = second.stats()["partitions"].get(f"{topic}-partition-0", {})
            if state.get("recovery_state") == "Ready" and state.get("max_read_position") == end:
                break
            time.sleep(0.05)
    finally:
        second.stop()
        store.close()
    assert second.stats()["partitions"][f"{topic}-partition-0"]["recovery_state"] == "Ready"
    assert seen and set(seen) == {end}, sorted(set(seen), key=lambda x: -1 if x is None else x)
