"""A compat TableView keeps following its topic past a message its schema cannot decode."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pulsar.schema import Integer, Record, String

import pulsar_txn.compat as pulsar
from pulsar_txn.schema import JsonSchema
from tests.conftest import Cluster, compat_options, wait_until

pytestmark = pytest.mark.integration


class Order(Record):  # type: ignore[misc]
    sku = String()
    qty = Integer()


def test_a_table_view_goes_on_past_a_message_its_record_class_refuses(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    """A JSON object the Record class refuses (a number for a String field) raised a raw TypeError
    on the view's thread, which ended it: later updates never reached the table or its listeners."""
    c = cluster()
    topic = f"tv_bad_{uid}"
    c.client.create_topic(topic, 1)
    client = pulsar.Client(c.coordinator.url or "", **compat_options(c))
    try:
        view = client.create_table_view(topic, schema=pulsar.schema.JsonSchema(Order))
        seen: list[tuple[str, Any]] = []
        view.for_each_and_listen(lambda key, value: seen.append((key, value.sku)))
        producer = client.create_producer(topic, schema=pulsar.schema.JsonSchema(Order))
        producer.send(Order(sku="a", qty=1), partition_key="k1")
        raw = c.client.create_producer(topic, schema=JsonSchema(dict))
        raw.send({"sku": 5, "qty": 1}, partition_key="k2")
        producer.send(Order(sku="c", qty=3), partition_key="k3")
        wait_until(lambda: ("k3", "c") in seen, timeout=20, what="the update after the bad message")
        assert seen == [("k1", "a"), ("k3", "c")]
        assert len(view) == 3  # the bad message is in the table; reading its value raises
    finally:
        client.close()
