"""PartitionReader.poll_batch converts what one poll of the client returned, nothing more: a read
error after some records were taken must not lose them (found by a review of session 33, against a
version that polled again in chunks)."""

from __future__ import annotations

from typing import Any

import pytest

from kafka_store import KafkaConfig, PartitionReader
from kafka_store.errors import TopicNotFoundError


class _Msg:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def offset(self) -> int:
        return self._offset

    def key(self) -> None:
        return None

    def value(self) -> bytes:
        return b"v"

    def headers(self) -> list[tuple[str, bytes]] | None:
        return [("h", b"1")] if self._offset % 2 else None

    def timestamp(self) -> tuple[int, int]:
        return (1, 1000 + self._offset)


def test_each_poll_returns_everything_the_client_handed_over_and_errors_come_on_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reader = PartitionReader(KafkaConfig(bootstrap_servers="127.0.0.1:1"))
    calls: list[int] = []

    def fake_poll(max_records: int, timeout: float) -> list[Any]:
        calls.append(max_records)
        if len(calls) == 1:
            return [_Msg(o) for o in range(700)]
        raise TopicNotFoundError("t[0] deleted")

    monkeypatch.setattr(reader, "_poll_messages", fake_poll)
    first = reader.poll_batch(5000, 0.1)
    assert [r.offset for r in first] == list(range(700))
    assert first[1].headers == (("h", b"1"),) and first[0].headers == ()
    assert first[3].timestamp_ms == 1003
    with pytest.raises(TopicNotFoundError):
        reader.poll_batch(5000, 0.1)
    assert calls == [5000, 5000]
