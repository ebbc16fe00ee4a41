import pytest

from pulsar_txn.errors import InvalidTopicName, InvalidTxnID, PulsarTxnError
from pulsar_txn.naming import TopicName, check_subscription, pending_ack_topic
from pulsar_txn.txnid import TxnID


def test_txnid_prints_like_pulsar() -> None:
    assert str(TxnID(0, 3)) == "(0,3)"
    assert TxnID.parse("(12, 345)") == TxnID(12, 345)


def test_txnid_bytes_round_trip_and_reject_wrong_length() -> None:
    tid = TxnID(2**64 - 1, 42)
    assert TxnID.from_bytes(tid.to_bytes()) == tid
    with pytest.raises(InvalidTxnID):
        TxnID.from_bytes(b"short")


def test_txnid_orders_by_tc_then_sequence() -> None:
    assert TxnID(0, 5) < TxnID(0, 6) < TxnID(1, 0)


@pytest.mark.parametrize("bad", ["(1)", "1,2", "(a,b)", "(-1,2)", "(0,99999999999999999999999)"])
def test_txnid_parse_rejects_garbage_with_a_typed_error(bad: str) -> None:
    with pytest.raises(InvalidTxnID, match="TxnID") as raised:
        TxnID.parse(bad)
    assert isinstance(raised.value, PulsarTxnError) and isinstance(raised.value, ValueError)
    assert not raised.value.retriable


def test_topic_names_map_to_kafka() -> None:
    t = TopicName.parse("persistent://public/default/orders-partition-3")
    assert (t.kafka_topic, t.kafka_partition, t.partition) == ("orders", 3, 3)
    assert str(t) == "persistent://public/default/orders-partition-3"
    t2 = TopicName.parse("persistent://acme/prod/orders")
    assert (t2.kafka_topic, t2.kafka_partition) == ("acme.prod.orders", 0)
    assert TopicName.parse("orders") == TopicName("public", "default", "orders")
    assert pending_ack_topic(t, "sub") == "orders-sub__transaction_pending_ack"
    assert TopicName.parse("orders-partition-2147483647").partition == 2**31 - 1


@pytest.mark.parametrize(
    "bad",
    [
        "non-persistent://a/b/c",
        "persistent://a/b",
        "a/b",
        "",
        "persistent://a/b/c d",
        "orders-partition-2147483648",  # beyond Kafka's int32 partition ids: no marker could reach it
    ],
)
def test_bad_topic_names_raise_invalid_topic_name(bad: str) -> None:
    with pytest.raises(InvalidTopicName):
        TopicName.parse(bad)


def test_refusals_quote_a_clients_huge_names_shortened() -> None:
    with pytest.raises(InvalidTopicName) as topic:
        TopicName.parse("t" * 100_000)
    with pytest.raises(InvalidTopicName) as subscription:
        check_subscription("orders", "s" * 100_000)
    assert len(str(topic.value)) < 500 and len(str(subscription.value)) < 1000
