"""Which pending-ack logs and consumer groups belong to a topic being deleted (pure logic)."""

from __future__ import annotations

from collections.abc import Callable

from kafka_store import GroupInfo, GroupMember
from pulsar_txn._topic_delete import pending_ack_logs, reads_topic
from pulsar_txn.subscription.options import CONSUMER_CLIENT_ID_PREFIX

LOG = "__transaction_pending_ack"


def _reads(pairs: set[tuple[str, str]]) -> Callable[[str, str], bool]:
    return lambda sub, topic: (sub, topic) in pairs


def test_a_topics_pending_ack_logs_are_found_by_name() -> None:
    topics = ["orders", f"orders-audit{LOG}", f"orders-billing{LOG}", f"other-audit{LOG}", "orders2"]
    assert pending_ack_logs("orders", topics, _reads(set())) == {
        f"orders-audit{LOG}": "audit",
        f"orders-billing{LOG}": "billing",
    }


def test_a_log_name_that_two_topics_could_own_goes_only_with_the_one_whose_group_reads_it() -> None:
    # "a-b-c__...": topic "a" with subscription "b-c", or topic "a-b" with subscription "c".
    topics = ["a", "a-b", f"a-b-c{LOG}"]
    for base in ("a", "a-b"):  # nobody known to read either: never guess, from either side
        assert pending_ack_logs(base, topics, _reads(set())) == {}
    a_reads = _reads({("b-c", "a")})
    assert pending_ack_logs("a", topics, a_reads) == {f"a-b-c{LOG}": "b-c"}
    assert pending_ack_logs("a-b", topics, a_reads) == {}  # the shorter topic's log is not taken
    ab_reads = _reads({("c", "a-b")})
    assert pending_ack_logs("a-b", topics, ab_reads) == {f"a-b-c{LOG}": "c"}
    assert pending_ack_logs("a", topics, ab_reads) == {}
    both = _reads({("b-c", "a"), ("c", "a-b")})
    assert pending_ack_logs("a", topics, both) == {} and pending_ack_logs("a-b", topics, both) == {}
    # Without a topic "a-b" the name can only be topic "a"'s.
    assert pending_ack_logs("a", ["a", f"a-b-c{LOG}"], _reads(set())) == {f"a-b-c{LOG}": "b-c"}


def test_a_group_reads_a_topic_through_offsets_or_our_consumers_assignment_only() -> None:
    ours = GroupMember("m1", f"{CONSUMER_CLIENT_ID_PREFIX}1-x", None, frozenset({"t"}))
    service = GroupMember("m2", "pulsar-txn", None, frozenset({"t"}))
    assert reads_topic(GroupInfo("sub", (ours,), frozenset()), "t")
    assert reads_topic(GroupInfo("sub", (), frozenset({"t"})), "t")
    assert not reads_topic(GroupInfo("tb-service", (service,), frozenset()), "t")
    assert not reads_topic(GroupInfo("sub", (ours,), frozenset({"u"})), "u2")
