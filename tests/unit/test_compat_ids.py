"""The compat ``MessageId`` against the real pulsar-client's: construction, sentinels, order, text."""

from __future__ import annotations

import pulsar
import pytest

import pulsar_txn.compat as compat
from pulsar_txn import AuthenticationToken, ConfigError
from pulsar_txn import message as native


def test_a_default_message_id_is_earliest_as_in_pulsar_client() -> None:
    assert (pulsar.MessageId().entry_id(), pulsar.MessageId().ledger_id()) == (
        pulsar.MessageId.earliest.entry_id(),
        pulsar.MessageId.earliest.ledger_id(),
    )
    assert compat.MessageId() == compat.MessageId.earliest
    assert compat.MessageId.earliest.entry_id() == pulsar.MessageId.earliest.entry_id()
    assert compat.MessageId.latest.entry_id() == pulsar.MessageId.latest.entry_id()


def test_ids_order_by_partition_and_offset_with_the_sentinels_at_the_ends() -> None:
    received = compat.MessageId.wrap(native.MessageId("orders", 0, 5))
    assert compat.MessageId(0, 0, 5) == received  # an id made without a topic matches any topic
    assert compat.MessageId.earliest < received < compat.MessageId.latest
    assert compat.MessageId(0, 0, 4) < received <= compat.MessageId(0, 0, 5)
    assert received != compat.MessageId.wrap(native.MessageId("other", 0, 5))
    assert len({received, compat.MessageId(0, 0, 5)}) == 1


def test_text_and_bytes_forms() -> None:
    # pulsar-client prints (ledger, entry, partition, batch index); the ledger here is always 0
    assert str(pulsar.MessageId(1, 0, 7, -1)) == "(0,7,1,-1)"
    assert str(compat.MessageId(1, 0, 7, -1)) == "(0,7,1,-1)"
    received = compat.MessageId.wrap(native.MessageId("orders", 2, 9))
    assert compat.MessageId.deserialize(received.serialize()) == received
    with pytest.raises(ConfigError):
        compat.MessageId.deserialize(b"\xff not an id")


def test_a_token_may_be_a_function_as_in_pulsar_client() -> None:
    assert AuthenticationToken(lambda: "secret").token == "secret"
    with pytest.raises(ConfigError):
        _ = AuthenticationToken(lambda: "").token
    with pytest.raises(ConfigError):
        AuthenticationToken("")
    assert "secret" not in repr(AuthenticationToken("secret"))


def test_policies_are_checked_when_made() -> None:
    with pytest.raises(ConfigError):
        compat.ConsumerDeadLetterPolicy(0)
    assert compat.ConsumerDeadLetterPolicy(3, "dlq").native().max_redeliver_count == 3


def test_a_serialized_earliest_or_latest_given_a_topic_stays_itself() -> None:
    """A sentinel has no topic: given one, deserialize made an id that was neither (session 39)."""
    for sentinel in (compat.MessageId.earliest, compat.MessageId.latest):
        again = compat.MessageId.deserialize(sentinel.serialize(), topic="persistent://public/default/t")
        assert again == sentinel


def test_deserialize_takes_the_serialized_id_as_text_too_and_refuses_garbage_text_typed() -> None:
    """Found by review (session 42): pulsar-client takes a str too; ours raised a raw TypeError for
    any str (a program storing ids as text could not read them back)."""
    import pulsar_txn.compat as compat
    from pulsar_txn.message import MessageId as NativeId

    mid = compat.MessageId.wrap(NativeId("t", 0, 5))
    assert compat.MessageId.deserialize(mid.serialize().decode()) == mid
    with pytest.raises(compat.InvalidConfiguration):
        compat.MessageId.deserialize("garbage")
    for not_bytes in (5, 2**62, 2**70, None):  # bytes(2**62): MemoryError (diff review)
        with pytest.raises(compat.InvalidConfiguration):
            compat.MessageId.deserialize(not_bytes)  # type: ignore[arg-type]


def test_ids_order_against_the_librarys_own_ids_and_refuse_other_types() -> None:
    """Found by review (session 42): ``id < 5`` raised AttributeError, and a native id compared by a
    key of another shape (offset 5 sorted below offset 1)."""
    import pulsar_txn.compat as compat
    from pulsar_txn.message import MessageId as NativeId

    later = compat.MessageId.wrap(NativeId("t", 0, 5))
    assert not later < NativeId("t", 0, 1)
    assert later > NativeId("t", 0, 1) and NativeId("t", 0, 1) < later
    assert later >= compat.MessageId.wrap(NativeId("t", 0, 5))
    assert compat.MessageId.latest > NativeId("t", 0, 1)
    with pytest.raises(TypeError):
        later < 5  # noqa: B015
