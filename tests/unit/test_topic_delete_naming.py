"""Which pending-ack logs and consumer groups belong to a topic being deleted (pure logic)."""

from __future__ import annotations

from kafka_store import GroupInfo, GroupMember
from pulsar_txn._topic_delete import pending_ack_logs, reads_topic
from pulsar_txn.consumer import CONSUMER_CLIENT_ID_PREFIX

LOG = "__transaction_pending_ack"


def test_a_topics_pending_ack_logs_are_found_by_name() -> None:
    topics = ["orders", f"orders-audit{LOG}", f"orders-billing{LOG}", f"other-audit{LOG}", "orders2"]
    assert pending_ack_logs("orders", topics, set()) == {
        f"orders-audit{LOG}": "audit",
        f"orders-billing{LOG}": "billing",
    }


def test_a_log_name_that_another_topic_could_own_is_left_unless_the_group_reads_this_topic() -> None:
    # "a-b-c__..." is topic "a"'s log of subscription "b-c", or topic "a-b"'s log of "c".
    topics = ["a", "a-b", f"a-b-c{LOG}"]
    assert pending_ack_logs("a", topics, set()) == {}
    assert pending_ack_logs("a", topics, {"b-c"}) == {f"a-b-c{LOG}": "b-c"}
    assert pending_ack_logs("a-b", topics, set()) == {f"a-b-c{LOG}": "c"}
    # Without a topic "a-b" the name can only be topic "a"'s.
    assert pending_ack_logs("a", ["a", f"a-b-c{LOG}"], set()) == {f"a-b-c{LOG}": "b-c"}


def test_a_group_reads_a_topic_through_offsets_or_our_consumers_assignment_only() -> None:
    ours = GroupMember("m1", f"{CONSUMER_CLIENT_ID_PREFIX}1-x", None, frozenset({"t"}))
    service = GroupMember("m2", "pulsar-txn", None, frozenset({"t"}))
    assert reads_topic(GroupInfo("sub", (ours,), frozenset()), "t")
    assert reads_topic(GroupInfo("sub", (), frozenset({"t"})), "t")
    assert not reads_topic(GroupInfo("tb-service", (service,), frozenset()), "t")
    assert not reads_topic(GroupInfo("sub", (ours,), frozenset({"u"})), "u2")
