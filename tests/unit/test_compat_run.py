"""The runner's module swap, without a broker: inside, ``import pulsar`` is the compat module with its
Client pointed at the harness's deployment; outside, the real pulsar-client is back."""

from __future__ import annotations

import importlib

import pulsar_txn.compat as compat
from pulsar_txn.compat.run import pulsar_modules


def test_import_pulsar_gives_the_compat_module_inside_and_the_real_one_after() -> None:
    real = importlib.import_module("pulsar")
    with pulsar_modules("pulsar://127.0.0.1:1", {"bootstrap_servers": "127.0.0.1:2"}):
        import pulsar
        import pulsar.asyncio
        from pulsar.schema import AvroSchema, Record, String

        assert pulsar is not real
        assert pulsar.ConsumerType is compat.ConsumerType and pulsar.Timeout is compat.Timeout
        assert issubclass(pulsar.Client, compat.Client)
        assert issubclass(pulsar.asyncio.Client, compat.asyncio.Client)
        assert AvroSchema is compat.schema.AvroSchema
        assert Record.__module__.startswith("pulsar.schema")  # pulsar-client's own record classes

        class User(Record):
            name = String()

        assert AvroSchema(User).encode(User(name="a")) == compat.schema.AvroSchema(User).encode(
            User(name="a")
        )
    assert importlib.import_module("pulsar") is real
