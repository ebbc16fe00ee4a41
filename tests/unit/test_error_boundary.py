"""The public API raises ``PulsarTxnError`` subclasses only: storage-layer errors are translated at the
boundary (``pulsar_txn._boundary``), and bad client settings fail at construction as ``ConfigError``."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator

import pytest

import pulsar_txn
from kafka_store.errors import (
    BrokerUnavailableError,
    CorruptRecordError,
    ProduceError,
    RecordTooLargeError,
    StoreError,
    TopicNotFoundError,
)
from pulsar_txn._boundary import public_errors
from pulsar_txn.errors import ConnectError, MessageTooBig, PersistenceError, PulsarTxnError, TopicNotFound

CASES = [
    (BrokerUnavailableError("down"), ConnectError, True),
    (TopicNotFoundError("gone"), TopicNotFound, False),
    (RecordTooLargeError("big"), MessageTooBig, False),
    (ProduceError("refused", retriable=True), PersistenceError, True),
    (ProduceError("refused", retriable=False), PersistenceError, False),
    (CorruptRecordError("bad"), PersistenceError, False),
]


@public_errors
class _Api:
    def __init__(self, exc: StoreError) -> None:
        self.exc = exc

    def call(self) -> None:
        raise self.exc

    async def call_async(self) -> None:
        raise self.exc

    def items(self) -> Iterator[int]:
        yield 1
        raise self.exc

    @classmethod
    def make(cls, exc: StoreError) -> _Api:
        raise exc

    @staticmethod
    def helper(exc: StoreError) -> None:
        raise exc

    def _private(self) -> None:
        raise self.exc


def _raised(fn: object) -> BaseException:
    with pytest.raises(BaseException) as info:
        if inspect.iscoroutine(fn):
            asyncio.run(fn)
        elif isinstance(fn, Iterator):
            list(fn)
        else:
            raise AssertionError("unused")
    return info.value


@pytest.mark.parametrize(("store_error", "expected", "retriable"), CASES)
def test_a_storage_error_leaves_every_kind_of_public_method_as_the_matching_pulsar_txn_error(
    store_error: StoreError, expected: type[PulsarTxnError], retriable: bool
) -> None:
    api = _Api(store_error)
    raised: list[BaseException] = []
    for call in (api.call, lambda: _Api.make(store_error), lambda: _Api.helper(store_error)):
        with pytest.raises(PulsarTxnError) as info:
            call()
        raised.append(info.value)
    raised.append(_raised(api.call_async()))
    raised.append(_raised(api.items()))
    for err in raised:
        assert type(err) is expected
        assert err.retriable is retriable
        assert err.__cause__ is store_error  # the storage detail stays reachable
        assert str(store_error) in str(err)


def test_private_helpers_are_left_alone() -> None:
    with pytest.raises(BrokerUnavailableError):
        _Api(BrokerUnavailableError("down"))._private()


@pytest.mark.parametrize(
    "cls",
    [
        pulsar_txn.Client,
        pulsar_txn.Producer,
        pulsar_txn.Consumer,
        pulsar_txn.Reader,
        pulsar_txn.TransactionsAdmin,
    ],
)
def test_every_public_method_of_the_kafka_facing_classes_is_behind_the_boundary(cls: type) -> None:
    for name, attr in vars(cls).items():
        if name.startswith("_"):
            continue
        fn = attr.__func__ if isinstance(attr, classmethod | staticmethod) else attr
        if inspect.isfunction(fn):
            assert hasattr(fn, "__wrapped__"), f"{cls.__name__}.{name}"


def test_the_new_error_names_are_exported_with_pulsars_retriable_flags() -> None:
    assert pulsar_txn.ConnectError.retriable is True
    assert pulsar_txn.MessageTooBig.retriable is False
    assert {"ConnectError", "MessageTooBig"} <= set(pulsar_txn.__all__)


@pytest.mark.parametrize(
    "url",
    [
        "http://coordinator:8080",
        "coordinator:6650",
        "pulsar://",
        "pulsar://host:notaport",
        "pulsar://h:99999",
    ],
)
def test_a_bad_service_url_is_a_config_error_at_construction(url: str) -> None:
    with pytest.raises(pulsar_txn.ConfigError, match="service URL"):
        pulsar_txn.Client(url, bootstrap_servers="127.0.0.1:9092")


def test_a_bad_kafka_setting_is_a_config_error_naming_the_setting_not_its_value() -> None:
    with pytest.raises(pulsar_txn.ConfigError) as info:
        pulsar_txn.Client(
            "pulsar://127.0.0.1:6650",
            kafka={
                "bootstrap_servers": "127.0.0.1:9092",
                "sasl_password": "s3cret",
                "request_timeout_ms": -5,
            },
        )
    assert "request_timeout_ms" in str(info.value)
    assert "s3cret" not in str(info.value)
