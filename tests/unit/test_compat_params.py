"""The migration layer's parameter tables against the real Pulsar Python client (pulsar-client, a dev
dependency): every parameter of its calls is classified, nothing we list is made up, and its own
default values of the options we do not support pass as "off"."""

from __future__ import annotations

import inspect
from typing import Any

import pulsar
import pytest

import pulsar_txn.compat as compat
from pulsar_txn.compat import _params

# (our table, pulsar-client's function, its leading parameters the wrappers name explicitly)
CALLS: list[tuple[_params.CallTable, Any, set[str]]] = [
    (_params.CLIENT, pulsar.Client.__init__, {"self"}),
    (_params.CREATE_PRODUCER, pulsar.Client.create_producer, {"self"}),
    (_params.SUBSCRIBE, pulsar.Client.subscribe, {"self"}),
    (_params.CREATE_READER, pulsar.Client.create_reader, {"self"}),
    (_params.SEND, pulsar.Producer.send, {"self"}),
    (_params.SEND_ASYNC, pulsar.Producer.send_async, {"self"}),
]


def _parameters(fn: Any, skip: set[str]) -> dict[str, inspect.Parameter]:
    return {n: p for n, p in inspect.signature(fn).parameters.items() if n not in skip}


@pytest.mark.parametrize("table,fn,skip", CALLS, ids=[t.call for t, _, _ in CALLS])
def test_every_pulsar_client_parameter_is_mapped_ignored_or_unsupported(
    table: _params.CallTable, fn: Any, skip: set[str]
) -> None:
    theirs = set(_parameters(fn, skip))
    assert theirs - table.names() == set(), f"{table.call}: unclassified pulsar-client parameters"
    assert table.names() - theirs == set(), f"{table.call}: parameters pulsar-client does not have"


@pytest.mark.parametrize("table,fn,skip", CALLS, ids=[t.call for t, _, _ in CALLS])
def test_pulsar_client_defaults_of_unsupported_options_are_accepted(
    table: _params.CallTable, fn: Any, skip: set[str]
) -> None:
    params = _parameters(fn, skip)
    defaults = {n: params[n].default for n in table.unsupported}
    table.check(defaults)  # pulsar-client's own defaults mean "not used": no error


@pytest.mark.parametrize("table,fn,skip", CALLS, ids=[t.call for t, _, _ in CALLS])
def test_positional_arguments_follow_pulsar_clients_parameter_order(
    table: _params.CallTable, fn: Any, skip: set[str]
) -> None:
    assert tuple(_parameters(fn, skip)) == table.leading + table.order
    assert set(table.leading) <= table.mapped  # the wrappers name these themselves


def test_an_unsupported_option_set_raises_operation_not_supported_and_an_unknown_name_type_error() -> None:
    with pytest.raises(_params.OperationNotSupported, match="chunking_enabled"):
        _params.CREATE_PRODUCER.check({"chunking_enabled": True})
    with pytest.raises(_params.OperationNotSupported, match="access_mode"):
        _params.CREATE_PRODUCER.check({"access_mode": pulsar.ProducerAccessMode.Exclusive})
    with pytest.raises(TypeError, match="no_such_option"):
        _params.SUBSCRIBE.check({"no_such_option": 1})
    _params.CREATE_PRODUCER.check({"batching_enabled": True, "compression_type": pulsar.CompressionType.LZ4})
    assert issubclass(_params.OperationNotSupported, compat.NotAllowedError)
    assert not _params.OperationNotSupported("x").retriable


def test_every_exception_of_pulsar_client_has_a_name_in_the_compat_module() -> None:
    names = [n for n in dir(pulsar.exceptions) if not n.startswith("_")]
    missing = [n for n in names if not hasattr(compat, n)]
    assert missing == []
    for name in names:
        assert issubclass(getattr(compat, name), compat.PulsarException), name


def test_the_enums_that_code_passes_have_pulsar_client_member_names() -> None:
    for enum_name in (
        "ConsumerType",
        "InitialPosition",
        "CompressionType",
        "PartitionsRoutingMode",
        "BatchingType",
        "ProducerAccessMode",
        "RegexSubscriptionMode",
        "ConsumerCryptoFailureAction",
    ):
        theirs = set(getattr(pulsar, enum_name).__members__)
        ours = set(getattr(compat, enum_name).__members__)
        assert theirs <= ours, f"{enum_name}: {theirs - ours}"


ASYNC_CALLS = [
    (_params.CREATE_PRODUCER, "create_producer", {"self", "topic"}),
    (_params.SUBSCRIBE, "subscribe", {"self", "topic", "subscription_name", "is_pattern_topic"}),
    (_params.CREATE_READER, "create_reader", {"self", "topic", "start_message_id"}),
]


@pytest.mark.parametrize("table,name,skip", ASYNC_CALLS, ids=[n for _, n, _ in ASYNC_CALLS])
def test_every_parameter_of_pulsar_asyncio_calls_is_classified_by_the_tables(
    table: _params.CallTable, name: str, skip: set[str]
) -> None:
    import pulsar.asyncio

    theirs = set(_parameters(getattr(pulsar.asyncio.Client, name), skip))
    assert theirs - table.names() == set()  # is_pattern_topic: handled by compat.asyncio itself
    assert set(_parameters(pulsar.asyncio.Producer.send, {"self"})) == _params.SEND.names()


def test_create_table_view_takes_pulsar_clients_parameters_in_its_order() -> None:
    assert list(_parameters(pulsar.Client.create_table_view, {"self"})) == list(
        _parameters(compat.Client.create_table_view, {"self"})
    )
    assert {n for n in dir(pulsar.TableView) if not n.startswith("_")} <= set(dir(compat.TableView))


def test_pulsar_clients_own_authentication_token_gets_advice_not_operation_not_supported() -> None:
    """Its token lives in C++ where we cannot read it; say what to use instead."""
    import pulsar as real_pulsar

    from pulsar_txn.compat._api import _token_of
    from pulsar_txn.errors import ConfigError

    with pytest.raises(ConfigError, match=r"pulsar_txn\.compat\.AuthenticationToken"):
        _token_of(real_pulsar.AuthenticationToken("secret-token"))


def test_pulsar_clients_avro_schema_with_only_a_definition_reads_and_writes_dicts() -> None:
    """migration doc: pulsar-client's schema objects are accepted where ours are; its
    ``AvroSchema(None, schema_definition=...)`` was refused."""
    import pulsar.schema as real_schema

    from pulsar_txn.compat.schema import to_native

    definition = {
        "type": "record",
        "name": "Order",
        "fields": [{"name": "sku", "type": "string"}, {"name": "qty", "type": "int"}],
    }
    native = to_native(real_schema.AvroSchema(None, schema_definition=definition))
    assert native is not None
    assert native.decode(native.encode({"sku": "a", "qty": 1})) == {"sku": "a", "qty": 1}


def test_asyncio_positional_arguments_follow_pulsar_asyncios_order() -> None:
    """pulsar.asyncio's calls have no listener (nor pattern_auto_discovery_period): a positional
    argument there means the next parameter (before: ``ConfigError: message_listener must be
    callable`` for a receiver_queue_size)."""
    import inspect

    import pulsar.asyncio as real_asyncio

    from pulsar_txn.compat import _params
    from pulsar_txn.compat.asyncio import _NOT_IN_ASYNC_CREATE_READER, _NOT_IN_ASYNC_SUBSCRIBE

    real = list(inspect.signature(real_asyncio.Client.subscribe).parameters)[3:]
    mine = _params.SUBSCRIBE.positional(tuple(range(len(real) - 1)), {}, without=_NOT_IN_ASYNC_SUBSCRIBE)
    assert list(mine) == real[:-1]  # the last real one, is_pattern_topic, is a keyword there
    given = _params.SUBSCRIBE.positional(("Exclusive", None, 500), {}, without=_NOT_IN_ASYNC_SUBSCRIBE)
    assert given["receiver_queue_size"] == 500
    real_reader = list(inspect.signature(real_asyncio.Client.create_reader).parameters)[3:]
    mine_reader = _params.CREATE_READER.positional(
        tuple(range(len(real_reader))), {}, without=_NOT_IN_ASYNC_CREATE_READER
    )
    assert list(mine_reader) == real_reader
