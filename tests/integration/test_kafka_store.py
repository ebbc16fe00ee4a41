"""kafka_store against the real broker: admin checks never create topics; appends reach partitions
that were created (or added) after the producer first looked at the topic."""

from __future__ import annotations

import gc
import time
from pathlib import Path

import pytest

from kafka_store import Appender, KafkaConfig, StoreError, TopicAdmin, TopicNotFoundError, read_range
from tests.conftest import wait_until

pytestmark = pytest.mark.integration


def test_topic_exists_never_creates_the_topic(admin: TopicAdmin, uid: str) -> None:
    assert not admin.topic_exists(f"ghost_{uid}")
    assert f"ghost_{uid}" not in admin.list_topics()
    # ... so creating it later gets the partition count asked for, not the broker's default of 1.
    assert admin.ensure_topic(f"ghost_{uid}", 3) == 3


def test_append_reaches_partitions_added_after_the_producer_saw_the_topic(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"grow_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka)
    try:
        assert appender.append(topic, 0, b"a").result(30) == 0  # producer caches 1 partition
        admin.add_partitions(topic, 3)
        assert appender.append(topic, 2, b"b").result(30) == 0  # refreshed, not "unknown partition"
    finally:
        appender.close()


def test_an_append_the_client_refuses_before_sending_fails_its_delivery_not_the_caller(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """librdkafka's Python binding raises OverflowError for a partition beyond int32: the delivery
    fails with a typed StoreError (the coordinator's marker retries then see a storage error, not
    an exception from deep inside the client, and give the participant up as for a missing one)."""
    topic = f"refused_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka)
    try:
        with pytest.raises(StoreError, match="refused"):
            appender.append(topic, 2**31, b"x").result(30)
        assert appender.append(topic, 0, b"ok").result(30) == 0
    finally:
        appender.close()


def test_appender_keeps_appending_to_a_topic_deleted_and_created_again(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """The old partition's sequence numbers are out of order on the new one; on this broker that is a
    fatal producer error. The appender must not stay dead: later appends go to a new producer."""
    topic = f"again_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka, delivery_timeout_ms=10_000)
    try:
        for i in range(5):
            assert appender.append(topic, 0, f"old{i}".encode()).result(30) == i
        admin.delete_topics([topic])
        wait_until(lambda: topic not in admin.list_topics(), 15, what="topic deleted")
        admin.ensure_topic(topic, 1)
        failures: list[StoreError] = []

        def appended() -> bool:
            try:
                appender.append(topic, 0, b"new").result(30)
                return True
            except StoreError as exc:  # the records in flight when the producer went fatal
                failures.append(exc)
                return False

        wait_until(appended, 60, what="an append to the new topic")
        assert len(failures) <= 3
        assert [r.value for r in read_range(kafka, topic, 0)][-1] == b"new"
        assert appender.append(topic, 0, b"next").result(30) > 0
    finally:
        appender.close()


def test_records_in_flight_across_a_renew_are_all_delivered_and_flush_waits_for_them(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    topic = f"renew_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka)
    try:
        first = [appender.append(topic, 0, b"old %d" % i) for i in range(300)]
        appender.renew("test")
        second = [appender.append(topic, 0, b"new %d" % i) for i in range(300)]
        assert appender.flush(30) == 0
        assert all(f.done() for f in first + second)  # flush covered the producer set aside too
        assert sorted(f.result(0) for f in first + second) == list(range(600))
        wait_until(lambda: not appender._retired, 5, what="the drained producer to be let go")
    finally:
        appender.close()
    stored = sorted(r.value or b"" for r in read_range(kafka, topic, 0, 0, 600))
    assert stored == sorted([b"old %d" % i for i in range(300)] + [b"new %d" % i for i in range(300)])


def test_idle_gated_reader_loses_and_repeats_nothing_across_idle_pauses(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    import time

    from kafka_store import PartitionReader

    topic = f"gate_{uid}"
    admin.ensure_topic(topic, 2)
    appender = Appender(kafka)
    reader = PartitionReader(kafka, idle_backoff_ms=20)
    reader.assign({(topic, 0): 0, (topic, 1): 0})
    seen: list[tuple[int, int]] = []
    try:
        for burst in range(6):  # bursts with idle gaps in between: the gate pauses and reopens
            for i in range(50):
                appender.append(topic, i % 2, f"{burst}-{i}".encode())
            appender.flush(30)
            deadline = time.monotonic() + 30
            while len(seen) < (burst + 1) * 50 and time.monotonic() < deadline:
                seen.extend((r.partition, r.offset) for r in reader.poll_batch(1000, 0.05))
            time.sleep(0.1)  # idle: caught up, so the gate closes
            seen.extend((r.partition, r.offset) for r in reader.poll_batch(1000, 0.05))
        for p in (0, 1):
            assert [o for q, o in seen if q == p] == list(range(150))  # each once, in order
    finally:
        reader.close()
        appender.close()


def test_idle_gate_closes_on_a_poll_that_returned_records(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """A tail that finds a few new records at every poll (a pending-ack log under load) must still
    pause between polls: the gate closes as soon as it has consumed up to every partition's end,
    in the same call that returned the records."""
    import time

    from kafka_store import PartitionReader

    topic = f"trickle_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka)
    reader = PartitionReader(kafka, idle_backoff_ms=50)
    reader.assign({(topic, 0): 0})
    closed_with_records = 0
    offsets: list[int] = []
    try:
        for i in range(8):
            appender.append(topic, 0, f"r{i}".encode()).result(30)
            deadline = time.monotonic() + 30
            got: list[int] = []
            while not got and time.monotonic() < deadline:
                got = [r.offset for r in reader.poll_batch(1000, 0.5)]
            offsets.extend(got)
            closed_with_records += reader.idle_gate_closed
            # A trickle, not a stream: the next record comes after the fetcher has found the end.
            # (Appended within the broker's fetch wait, it would be fetched before any end was
            # reported, and a reader that always has a record waiting has no reason to pause.)
            time.sleep(0.1)
        assert offsets == list(range(8))  # nothing lost or repeated across the pauses
        # (the end-of-partition event sometimes comes one call later; before the fix: never)
        assert closed_with_records >= 2, closed_with_records
    finally:
        reader.close()
        appender.close()


def test_rearmed_partition_reports_its_end_again_without_new_records(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """librdkafka reports a partition's end once per arrival there. ``rearm_ends`` makes it report
    again (the coordinator's refresh read ends on those fresh reports) and re-reads nothing."""
    import time

    from kafka_store import PartitionReader

    topic = f"rearm_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka)
    reader = PartitionReader(kafka)
    try:
        for i in range(5):
            appender.append(topic, 0, f"r{i}".encode())
        appender.flush(30)
        reader.assign({(topic, 0): 0})
        offsets: list[int] = []

        def read_to_end() -> None:
            deadline = time.monotonic() + 30
            while not reader.at_eof(topic, 0) and time.monotonic() < deadline:
                offsets.extend(r.offset for r in reader.poll_batch(1000, 0.1))
            assert reader.at_eof(topic, 0)

        read_to_end()
        assert offsets == list(range(5))
        reader.rearm_ends([(topic, 0)])
        assert not reader.at_eof(topic, 0)  # only a fetch made after the re-arm counts
        read_to_end()  # the end is reported again though nothing new arrived
        assert reader.eof_offset(topic, 0) == 5
        assert offsets == list(range(5))  # nothing read twice
    finally:
        reader.close()
        appender.close()


def test_a_partition_removed_while_the_idle_gate_is_closed_is_read_again_once_added_back(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """librdkafka keeps a partition's pause flag across unassign and assign: one removed while the
    gate held it paused, and added back while the gate is open, must not stay paused (a Failover
    consumer whose partitions came back in a rebalance stopped receiving one of them)."""
    import time

    from kafka_store import PartitionReader

    topic = f"regate_{uid}"
    admin.ensure_topic(topic, 2)
    appender = Appender(kafka)
    reader = PartitionReader(kafka, idle_backoff_ms=20)
    try:
        for i in range(10):
            appender.append(topic, i % 2, b"%d" % i)
        appender.flush(30)
        reader.assign({(topic, 0): 0, (topic, 1): 0})
        deadline = time.monotonic() + 20
        while not reader.idle_gate_closed and time.monotonic() < deadline:
            reader.poll_batch(1000, 0.05)
        assert reader.idle_gate_closed  # caught up: both partitions paused
        reader.remove(topic, 0)
        reader._set_idle_gate(False)  # the gate opens (what the next poll does once its pause is over)
        reader.add(topic, 0, 0)
        appender.append(topic, 0, b"new").result(30)
        got: list[int] = []
        deadline = time.monotonic() + 20
        while len(got) < 6 and time.monotonic() < deadline:
            got += [r.offset for r in reader.poll_batch(1000, 0.05) if r.partition == 0]
        assert got == list(range(6))
    finally:
        reader.close()
        appender.close()


def test_a_record_held_for_a_new_partition_completes_after_the_producer_was_renewed(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """A record refused for an unknown partition waits for a retry; if the producer is renewed
    meanwhile (Client.delete_topic does), the retry goes through the new producer: the one set aside
    stops reporting once it has nothing in flight, and the record's future would never complete."""
    import time

    topic = f"heldrenew_{uid}"
    admin.ensure_topic(topic, 1)
    appender = Appender(kafka)
    try:
        assert appender.append(topic, 0, b"a").result(30) == 0
        held = appender.append(topic, 1, b"held")  # partition 1 does not exist yet
        time.sleep(0.3)
        appender.renew("test")
        time.sleep(0.5)
        admin.add_partitions(topic, 2)
        assert held.result(30) == 0
        assert appender.append(topic, 1, b"after").result(30) == 1
    finally:
        appender.close()


def test_an_append_after_close_fails_at_once() -> None:
    appender = Appender(KafkaConfig(bootstrap_servers="127.0.0.1:9"))
    appender.close()
    with pytest.raises(StoreError, match="closed"):
        appender.append("t", 0, b"x").result(5)


def test_a_group_commit_naming_a_partition_this_member_does_not_hold_fails_whole(
    kafka: KafkaConfig, admin: TopicAdmin, uid: str
) -> None:
    """All or nothing: the transaction ownership check commits the partitions it acked on to prove it
    still holds them; a partition silently left out of the commit would pass that check."""
    import time

    from kafka_store import SubscriptionGroup, group_offsets

    topic, group = f"owncommit_{uid}", f"owng_{uid}"
    admin.ensure_topic(topic, 2)
    owned: dict[str, set[tuple[str, int]]] = {"a": set(), "b": set()}

    def member(name: str) -> SubscriptionGroup:
        return SubscriptionGroup(
            kafka,
            group,
            [topic],
            on_assign=lambda ps: owned[name].update(ps),
            on_revoke=lambda ps: owned[name].difference_update(ps),
            client_id=name,
        )

    a = member("a")
    a.start()
    wait_until(lambda: len(owned["a"]) == 2, 30, what="a to hold both partitions")
    b = member("b")
    b.start()
    try:
        wait_until(lambda: bool(owned["a"]) and bool(owned["b"]), 30, what="the partitions split")
        time.sleep(0.5)
        (mine,) = owned["a"]
        (theirs,) = owned["b"]
        with pytest.raises(StoreError, match="no longer assigned") as refused:
            a.commit({mine: (5, ""), theirs: (7, "")})
        assert not refused.value.retriable
        assert group_offsets(kafka, group, [mine, theirs]) == {}
    finally:
        a.stop()
        b.stop()


def test_watermarks_of_an_existing_topic_with_its_broker_down_are_broker_unavailable(tmp_path: Path) -> None:
    """librdkafka says "unknown partition" locally when no broker answers; a dead broker is not a
    missing topic (Spark's planner reported TopicNotFound, not retriable, for a broker restart)."""
    from kafka_store import BrokerUnavailableError, LocalBroker, PartitionReader

    broker = LocalBroker(tmp_path / "broker")
    broker.start()
    config = KafkaConfig(bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=3000)
    reader = PartitionReader(config)
    try:
        admin = TopicAdmin(config)
        admin.ensure_topic("t", 2)
        del admin  # its client goes while the broker is up (it would retry a stopped one, logging)
        gc.collect()
        assert reader.watermarks("t", 0) == (0, 0)
        with pytest.raises(TopicNotFoundError):
            reader.watermarks("t", 5)  # a partition the topic does not have: still not found
        broker.stop()
        for partition in (0, 1):
            with pytest.raises(BrokerUnavailableError) as raised:
                reader.watermarks("t", partition)
            assert raised.value.retriable
    finally:
        reader.close()
        broker.stop()


def test_a_stopped_subscription_group_answers_commits_and_lookups_with_store_errors(
    kafka: KafkaConfig, uid: str
) -> None:
    """confluent-kafka's RuntimeError("Consumer closed") escaped untyped (review, session 26)."""
    from kafka_store.group import SubscriptionGroup

    topic = f"gstop_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1)
    group = SubscriptionGroup(kafka, f"grp_{uid}", [topic], lambda p: None, lambda p: None, client_id="t")
    group.start()
    group.stop()
    with pytest.raises(StoreError) as commit:
        group.commit({(topic, 0): (1, "m")})
    assert not commit.value.retriable
    with pytest.raises(StoreError):
        group.committed([(topic, 0)])


def test_a_header_without_a_value_is_stored(kafka: KafkaConfig, uid: str) -> None:
    """Kafka headers may have no value (the read side handles them); append raised a TypeError."""
    topic = f"hnone_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 1)
    app = Appender(kafka)
    try:
        assert app.append(topic, 0, b"v", headers=[("h", None)]).result(10) == 0  # type: ignore[list-item]
    finally:
        app.close()
    (rec,) = list(read_range(kafka, topic, 0))
    # Read back as no value or an empty one (noida-db keeps no difference between the two).
    assert [(k, v or b"") for k, v in rec.headers] == [("h", b"")]


def test_a_fenced_static_group_member_gives_its_assignment_up(kafka: KafkaConfig, uid: str) -> None:
    # A second member with the same group.instance.id fences the first. The broker's error reaches
    # the first as an event (code _FATAL, its fatal flag unset), not as an exception: it was ignored,
    # and the first went on believing it held its partitions.
    from kafka_store.group import GroupMembership

    topic = f"gm_{uid}"
    TopicAdmin(kafka).ensure_topic(topic, 2, {})
    events: list[tuple[str, list[int]]] = []

    def member(name: str) -> GroupMembership:
        return GroupMembership(
            kafka,
            f"g_{uid}",
            topic,
            lambda ps: events.append((f"{name}+", ps)),
            lambda ps: events.append((f"{name}-", ps)),
            instance_id="same",
        )

    a = member("a")
    a.start()
    b = member("b")
    try:
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not a.assigned:
            time.sleep(0.05)
        assert a.assigned == [0, 1]
        b.start()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and a.assigned:
            time.sleep(0.05)
        assert a.assigned == [] and ("a-", [0, 1]) in events
    finally:
        a.stop()
        b.stop()
