"""An admin call whose answer never comes ends with BrokerUnavailableError (retriable, a StoreError the
public API translates), not with the bare TimeoutError of the admin future."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest

from kafka_store import BrokerUnavailableError, KafkaConfig, TopicAdmin, describe_group

CONFIG = KafkaConfig(bootstrap_servers="127.0.0.1:1", request_timeout_ms=100)


class _SilentAdmin:
    """An admin client whose every request stays unanswered."""

    def __getattr__(self, name: str) -> Any:
        def call(arg: Any, *args: Any, **kwargs: Any) -> dict[Any, Future[Any]]:
            keys = arg if isinstance(arg, list) else [arg]
            return {getattr(k, "topic", k): Future() for k in keys}

        return call


def test_describe_group_without_an_answer_raises_broker_unavailable() -> None:
    with pytest.raises(BrokerUnavailableError, match="describe group g: no answer") as info:
        describe_group(CONFIG, "g", admin=_SilentAdmin())
    assert info.value.retriable


@pytest.mark.parametrize("call", ["add_partitions", "delete_topics"])
def test_topic_admin_calls_without_an_answer_raise_broker_unavailable(call: str) -> None:
    admin = TopicAdmin(CONFIG)
    admin._client = _SilentAdmin()
    with pytest.raises(BrokerUnavailableError, match="no answer"):
        if call == "add_partitions":
            admin.add_partitions("t", 2)
        else:
            admin.delete_topics(["t"])
