"""The migration checker on programs written for pulsar-client (pure: source text in, findings out)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pulsar_txn.compat.check import check_source, main

PROGRAM = """\
import pulsar
from pulsar.schema import AvroSchema, ProtobufNativeSchema

client = pulsar.Client("pulsar://localhost:6650", io_threads=4, use_tls=False)
producer = client.create_producer(
    "orders", batching_enabled=True, chunking_enabled=True, access_mode=pulsar.ProducerAccessMode.Shared
)
producer.send(b"x", properties={"a": "b"}, deliver_after=timedelta(seconds=5))
consumer = client.subscribe("orders", "sub", consumer_type=pulsar.ConsumerType.Shared,
                            receiver_queue_size=10, message_listener=on_message)
consumer.pause_message_listener()
consumer.seek(1700000000000)
k = pulsar.KeySharedPolicy()
"""


def _kinds(source: str) -> list[tuple[int, str, str]]:
    return [(f.line, f.kind, f.message) for f in check_source(source, "app.py")]


def test_the_checker_reports_each_call_by_line_with_what_it_does_here() -> None:
    found = _kinds(PROGRAM)
    by_line: dict[int, list[str]] = {}
    for line, kind, message in found:
        by_line.setdefault(line, []).append(f"{kind}: {message}")
    assert any("import pulsar_txn.compat as pulsar" in m for m in by_line[1])
    assert any(m.startswith("unsupported: pulsar.schema.ProtobufNativeSchema") for m in by_line[2])
    assert by_line[4] == [  # use_tls=False is the default: fine
        "change: Client(...) needs where Kafka is: bootstrap_servers=... or kafka={...}",
        "ignored: Client(io_threads=...) has no effect here",
    ]
    assert by_line[6] == [
        "ignored: create_producer(batching_enabled=...) has no effect here",
        "unsupported: create_producer(chunking_enabled=...) raises OperationNotSupported unless at its"
        " default: messages are single Kafka records (MessageTooBig above the broker's limit)",
    ]  # access_mode=ProducerAccessMode.Shared is the default: not reported
    assert any("deliver_after" in m and m.startswith("unsupported") for m in by_line[8])
    assert any("ConsumerType.Shared" in m and m.startswith("unsupported") for m in by_line[9])
    assert [m.split(":")[0] for m in by_line[10]] == ["ignored"]  # message_listener works here
    assert 11 not in by_line  # pause_message_listener() too
    assert 12 not in by_line  # seek(<publish time>) works here
    assert by_line[13] == ["missing: pulsar.KeySharedPolicy has no equivalent in pulsar_txn.compat"]


def test_a_program_using_only_supported_calls_has_no_failing_findings() -> None:
    source = """\
import pulsar as p
c = p.Client("pulsar://h:6650", operation_timeout_seconds=10)
prod = c.create_producer("t", producer_name="a", send_timeout_millis=1000)
prod.send(b"x", partition_key="k", event_timestamp=1)
cons = c.subscribe("t", "s", consumer_type=p.ConsumerType.Failover,
                   initial_position=p.InitialPosition.Earliest)
msg = cons.receive(timeout_millis=100)
cons.acknowledge(msg)
r = c.create_reader("t", p.MessageId.earliest)
"""
    kinds = [kind for _, kind, _ in _kinds(source)]
    assert "unsupported" not in kinds and "missing" not in kinds
    assert kinds.count("import") == 1 and kinds.count("ignored") == 1 and kinds.count("change") == 1


def test_files_without_pulsar_imports_are_not_reported() -> None:
    assert check_source("sock.send(b'x', deliver_after=3)\nq.subscribe('a', 'b', message_listener=f)\n") == []


def test_a_syntax_error_is_one_error_finding() -> None:
    (finding,) = check_source("import pulsar\ndef (:\n", "bad.py")
    assert finding.kind == "error" and finding.line == 2


def test_main_exits_1_when_something_would_fail_and_0_otherwise(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad, good = tmp_path / "bad.py", tmp_path / "good.py"
    bad.write_text(PROGRAM)
    good.write_text("import pulsar\nc = pulsar.Client('pulsar://h:6650')\n")
    assert main([str(bad)]) == 1
    assert "FAILS" in capsys.readouterr().out
    assert main([str(good)]) == 0
    assert "runs on pulsar_txn.compat" in capsys.readouterr().out
    assert main([str(tmp_path), "--json"]) == 1


def test_pulsar_asyncio_programs_are_checked_like_pulsar_ones() -> None:
    source = """\
import pulsar.asyncio
from pulsar.asyncio import Client as AsyncClient
c = pulsar.asyncio.Client("pulsar://h:6650", io_threads=2)
d = AsyncClient("pulsar://h:6650", use_tls=True)
"""
    found = _kinds(source)
    assert [(line, kind) for line, kind, _ in found] == [
        (1, "import"),
        (2, "import"),
        (3, "change"),
        (3, "ignored"),
        (4, "change"),
        (4, "unsupported"),
    ]
    assert "pulsar_txn.compat.asyncio" in found[0][2] and "pulsar_txn.compat.asyncio" in found[1][2]


def test_positional_arguments_are_checked_by_pulsar_clients_parameter_order() -> None:
    source = """\
import pulsar
c = pulsar.Client("pulsar://h:6650", None, 30, 4, bootstrap_servers="k:9092")
c.subscribe("t", "s", pulsar.ConsumerType.Exclusive, None, on_message, 10, 100, "n", 0, 30000, 60000, keep)
c.create_producer("t", "name", None, None, 30000)
p.send(b"x", {"a": "b"}, "key", "ordering")
p.send(b"x", 1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
"""
    found = _kinds(source)
    assert (2, "ignored", "Client(io_threads=...) has no effect here") in found
    assert any(line == 3 and kind == "ignored" and "receiver_queue_size" in m for line, kind, m in found)
    assert any(line == 3 and kind == "check" and "is_read_compacted" in m for line, kind, m in found)
    assert any(line == 4 and kind == "ignored" and "send_timeout_millis" in m for line, kind, m in found)
    assert any(line == 5 and kind == "ignored" and "ordering_key" in m for line, kind, m in found)
    assert any(line == 6 and kind == "missing" and "positional" in m for line, kind, m in found)


def test_values_the_checker_cannot_see_are_a_check_not_a_failure_and_record_classes_a_note() -> None:
    source = """\
import pulsar
from pulsar.schema import Record, String, AvroSchema
c = pulsar.Client("pulsar://h:6650", use_tls=tls_wanted, **settings)
class User(Record):
    name = String()
"""
    found = _kinds(source)
    kinds = {kind for _, kind, _ in found}
    assert kinds == {"import", "check", "note"}
    assert [m for line, kind, m in found if kind == "note" and "Record" in m]
    assert [m for line, kind, m in found if kind == "note" and "String" in m]


def test_unsupported_pulsar_client_classes_raise_operation_not_supported_when_made() -> None:
    """As the migration guide says (and migrate-check reports): not an AttributeError, or after a
    star import a NameError (compat review, session 40)."""
    import pytest

    import pulsar_txn.compat as pulsar
    from pulsar_txn.compat.schema import ProtobufNativeSchema

    for make in (
        lambda: pulsar.AuthenticationTLS("cert", "key"),
        lambda: pulsar.AuthenticationOauth2("{}"),
        lambda: pulsar.AuthenticationBasic("u", "p"),
        lambda: pulsar.AuthenticationAthenz("{}"),
        lambda: ProtobufNativeSchema(object),
    ):
        with pytest.raises(pulsar.OperationNotSupported):
            make()
    assert pulsar.FileLogger(pulsar.LoggerLevel.Info, "/tmp/x").log_file == "/tmp/x"  # accepted, ignored
    assert pulsar.ConsoleLogger().log_level is pulsar.LoggerLevel.Info


def test_star_imports_do_not_hide_unsupported_names_from_the_checker() -> None:
    source = """\
from pulsar import *
from pulsar.schema import *
c = Client("pulsar://h:6650", authentication=AuthenticationTLS("c", "k"), logger=ConsoleLogger())
s = ProtobufNativeSchema(object)
"""
    found = [(line, kind) for line, kind, _ in _kinds(source)]
    assert (3, "unsupported") in found and (4, "unsupported") in found
    assert not any(kind == "missing" for _, kind in found)


def test_a_star_imported_name_the_program_rebinds_is_its_own() -> None:
    """A shim (``AuthenticationOauth2 = AuthenticationToken``), a parameter or a class of that name
    runs on compat: no unsupported finding (review of this session's change)."""
    source = """\
from pulsar import *
AuthenticationOauth2 = AuthenticationToken
def make(AuthenticationBasic):
    return AuthenticationBasic("u", "p")
class AuthenticationTLS:
    pass
c = Client("pulsar://h:6650", authentication=AuthenticationOauth2("tok"))
t = AuthenticationTLS()
"""
    assert not [f for f in _kinds(source) if f[1] in ("unsupported", "missing")]
