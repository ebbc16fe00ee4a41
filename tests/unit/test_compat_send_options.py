"""pulsar-client sets a message's event time only when ``event_timestamp`` is truthy."""

from __future__ import annotations

from pulsar_txn.compat._api import _send_options


def test_an_event_timestamp_of_0_is_no_event_time_as_in_pulsar_client() -> None:
    assert _send_options({"event_timestamp": 0, "properties": None}) == {}
    assert _send_options({"event_timestamp": 5, "partition_key": "k"}) == {
        "event_timestamp": 5,
        "partition_key": "k",
    }


def test_an_empty_partition_key_is_no_key_as_in_pulsar_client() -> None:
    """pulsar-client: ``if partition_key: mb.partition_key(...)``; an empty key hashed to partition 0."""
    assert _send_options({"partition_key": ""}) == {}
