"""MessageId orders as Pulsar's (earliest before and latest after every id); a Message can be put
in a set or used as a dict key (its hash is its id's)."""

from __future__ import annotations

from pulsar_txn.message import EARLIEST, LATEST, Message, MessageId, Payload


def test_latest_sorts_after_and_earliest_before_every_message_id() -> None:
    ids = [MessageId("t", 0, 5), MessageId("t", 1, 0), MessageId("a", 0, 0)]
    for mid in ids:
        assert EARLIEST < mid < LATEST
        assert LATEST > mid > EARLIEST
        assert mid <= mid and mid >= mid
    assert sorted([LATEST, *ids, EARLIEST])[0] == EARLIEST
    assert sorted([LATEST, *ids, EARLIEST])[-1] == LATEST
    assert MessageId("t", 0, 4) < MessageId("t", 0, 5) < MessageId("t", 0, 10)


def test_messages_are_hashable_by_their_id() -> None:
    def msg(offset: int, props: dict[str, str]) -> Message[bytes]:
        return Message(MessageId("t", 0, offset), Payload(b"x"), None, props, None, 0, None, None, None)

    a, again, b = msg(1, {"k": "v"}), msg(1, {"k": "v"}), msg(2, {})
    assert {a, again, b} == {a, b}
    assert {a: 1}[again] == 1
