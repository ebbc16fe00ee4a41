"""pulsar-client sets a message's event time only when ``event_timestamp`` is truthy."""

from __future__ import annotations

from pulsar_txn.compat._api import _send_options


def test_an_event_timestamp_of_0_is_no_event_time_as_in_pulsar_client() -> None:
    assert _send_options({"event_timestamp": 0, "properties": None}) == {}
    assert _send_options({"event_timestamp": 5, "partition_key": "k"}) == {
        "event_timestamp": 5,
        "partition_key": "k",
    }
