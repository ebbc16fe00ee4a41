"""Compat-layer fixes from the session-36 review: nested pulsar-client records round-trip, the
checker flags what fails at run time (send(None), a dead-letter policy's initial subscription,
service URLs the compat client refuses), and ``Client.get_service_info()`` exists."""

from __future__ import annotations

import pytest
from pulsar.schema import Array, Record, String

from pulsar_txn.compat import check
from pulsar_txn.compat import schema as cschema


class Inner(Record):
    a = String()


class Outer(Record):
    name = String()
    inner = Inner()
    more = Array(Inner())


@pytest.mark.parametrize("make", [cschema.AvroSchema, cschema.JsonSchema])
def test_a_record_with_nested_records_round_trips(make: object) -> None:
    schema = make(Outer)  # type: ignore[operator]
    back = schema.decode(schema.encode(Outer(name="x", inner=Inner(a="y"), more=[Inner(a="z")])))
    assert back.name == "x"
    assert isinstance(back.inner, Inner) and back.inner.a == "y"
    assert [m.a for m in back.more] == ["z"]


def _kinds(source: str) -> dict[int, set[str]]:
    out: dict[int, set[str]] = {}
    for f in check.check_source(source, "p.py"):
        out.setdefault(f.line, set()).add(f.kind)
    return out


def test_the_checker_asks_about_a_null_value_send_without_failing_the_program() -> None:
    kinds = _kinds(
        "import pulsar\n"
        "c = pulsar.Client('pulsar://h:6650', bootstrap_servers='k:9092')\n"
        "p = c.create_producer('t')\n"
        "p.send(None)\n"
        "p.send_async(None, None)\n"
        "p.send(b'x')\n"
    )
    # "check", not a failing kind: matched by name, it may be a generator's send(None).
    assert "check" in kinds[4] and "check" in kinds[5]
    assert not (kinds[4] | kinds[5]) & check.FAILING
    assert "check" not in kinds.get(6, set())


def test_the_checker_flags_a_dead_letter_initial_subscription() -> None:
    kinds = _kinds(
        "import pulsar\n"
        "a = pulsar.ConsumerDeadLetterPolicy(3, 'dlq', 'init')\n"
        "b = pulsar.ConsumerDeadLetterPolicy(3, initial_subscription_name='init')\n"
        "c = pulsar.ConsumerDeadLetterPolicy(3, 'dlq')\n"
        "d = pulsar.ConsumerDeadLetterPolicy(3, initial_subscription_name=name)\n"
    )
    assert "unsupported" in kinds[2] and "unsupported" in kinds[3]
    assert not kinds.get(4, set()) & check.FAILING
    assert "check" in kinds[5]


@pytest.mark.parametrize("url", ["pulsar://b1:6650,b2:6650", "pulsar+ssl://b1:6651"])
def test_the_checker_flags_service_urls_the_compat_client_refuses(url: str) -> None:
    kinds = _kinds(f"import pulsar\nc = pulsar.Client({url!r}, bootstrap_servers='k:9092')\n")
    assert "unsupported" in kinds[2]
    assert "unsupported" not in _kinds(
        "import pulsar\nc = pulsar.Client('pulsar://b1:6650', bootstrap_servers='k:9092')\n"
    ).get(2, set())


@pytest.mark.parametrize("url", ["pulsar://b1:6650,b2:6650", "pulsar+ssl://b1:6651"])
def test_the_compat_client_refuses_them_as_not_supported(url: str) -> None:
    import pulsar_txn.compat as pulsar

    with pytest.raises(pulsar.OperationNotSupported):
        pulsar.Client(url, bootstrap_servers="127.0.0.1:1")


def test_get_service_info_says_where_the_client_connects() -> None:
    import pulsar_txn.compat as pulsar

    client = pulsar.Client("pulsar://127.0.0.1:6650", bootstrap_servers="127.0.0.1:1")
    try:
        info = client.get_service_info()
        assert info.service_url == "pulsar://127.0.0.1:6650"
        assert info.use_tls is False and info.tls_trust_certs_file_path is None
    finally:
        client.close()


def test_an_id_made_for_a_non_partitioned_topic_means_kafka_partition_0() -> None:
    """pulsar-client gives partition -1 for a non-partitioned topic; programs rebuild ids with it."""
    import pulsar_txn.compat as pulsar

    assert pulsar.MessageId(-1, 0, 5).native.partition == 0
    assert pulsar.MessageId(2, 0, 5).native.partition == 2
