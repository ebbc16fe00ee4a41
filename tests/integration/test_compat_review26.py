"""pulsar-client compatibility found in review (session 26): closed objects raise AlreadyClosed,
record classes with enum and bytes fields encode as pulsar-client's do, ``pulsar.exceptions``
exists, and ``migrate-run`` runs a program as ``python program.py`` would (its own directory on the
path) and reports a dead broker without a traceback."""

from __future__ import annotations

import subprocess
import sys
from enum import Enum
from pathlib import Path
from typing import Any

import pulsar as real
import pytest
from pulsar.schema import Bytes, CustomEnum, Record, String

import pulsar_txn.compat as pulsar
import pulsar_txn.compat.schema as cschema
from pulsar_txn.compat import check
from tests.conftest import compat_options

PTXN = str(Path(sys.executable).with_name("pulsar-txn"))


@pytest.mark.integration
def test_closed_clients_producers_and_consumers_raise_already_closed(cluster: Any, uid: str) -> None:
    c = cluster()
    client = pulsar.Client(c.coordinator.url, **compat_options(c))
    topic = f"closed_{uid}"
    producer = client.create_producer(topic)
    consumer = client.subscribe(topic, f"s-{uid}")
    producer.close()
    consumer.close()
    # They raised NotAllowedError, which `except pulsar.AlreadyClosed:` of migrated code missed.
    with pytest.raises(pulsar.AlreadyClosed):
        producer.send(b"x")
    with pytest.raises(pulsar.AlreadyClosed):
        producer.flush()  # returned quietly
    results: list[Any] = []
    producer.send_async(b"x", lambda result, mid: results.append((result, mid)))
    assert results == [(pulsar.Result.AlreadyClosed, None)]  # as pulsar-client's callback
    with pytest.raises(pulsar.AlreadyClosed):
        consumer.receive(100)
    client.close()
    with pytest.raises(pulsar.AlreadyClosed):
        client.create_producer(topic)
    assert issubclass(pulsar.AlreadyClosed, pulsar.NotAllowedError)  # what it was before


class Color(Enum):
    red = 1
    blue = 2


class WithEnum(Record):
    name = String()
    color = CustomEnum(Color)


class WithBytes(Record):
    name = String()
    raw = Bytes()


@pytest.mark.parametrize("kind", ["JsonSchema", "AvroSchema"])
def test_records_with_enum_fields_encode_as_pulsar_clients_do(kind: str) -> None:
    value = WithEnum(name="x", color=Color.red)
    ours = getattr(cschema, kind)(WithEnum)
    theirs = getattr(real.schema, kind)(WithEnum)
    assert ours.decode(ours.encode(value)) == value  # raised "Color is not JSON serializable"
    assert theirs.decode(ours.encode(value)) == value
    assert ours.decode(theirs.encode(value)) == value


def test_a_json_record_with_a_bytes_field_round_trips() -> None:
    value = WithBytes(name="x", raw=b"ab")
    ours = cschema.JsonSchema(WithBytes)
    assert ours.decode(ours.encode(value)) == value
    assert real.schema.JsonSchema(WithBytes).decode(ours.encode(value)) == value


def test_pulsar_exceptions_exists_and_the_checker_knows_it() -> None:
    from pulsar_txn.compat.exceptions import AlreadyClosed, Timeout

    assert pulsar.exceptions.Timeout is Timeout is pulsar.Timeout
    assert AlreadyClosed is pulsar.AlreadyClosed
    assert set(real.exceptions.__dict__) >= set(pulsar.exceptions.__all__)
    assert {n for n in dir(real.exceptions) if not n.startswith("_")} <= set(pulsar.exceptions.__all__)
    source = (
        "import pulsar\nfrom pulsar.exceptions import Timeout\nimport pulsar.exceptions as pe\n"
        "try:\n    pass\nexcept pulsar.exceptions.AlreadyClosed:\n    pass\n"
        "except pe.TopicNotFound:\n    pass\nexcept pulsar.exceptions.NoSuchError:\n    pass\n"
    )
    missing = [f.message for f in check.check_source(source) if f.kind == "missing"]
    assert missing == ["pulsar.exceptions.NoSuchError has no equivalent in pulsar_txn.compat"]


def test_migrate_run_puts_the_programs_directory_on_the_path(tmp_path: Path) -> None:
    (tmp_path / "helper.py").write_text("X = 42\n")
    (tmp_path / "main.py").write_text("import helper\nimport pulsar\nprint('ok', helper.X)\n")
    run = subprocess.run(
        [
            *(PTXN, "migrate-run", "--no-check", "--service-url", "pulsar://127.0.0.1:1"),
            *("--bootstrap-servers", "127.0.0.1:1", str(tmp_path / "main.py")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    assert run.returncode == 0, run.stderr  # ModuleNotFoundError: No module named 'helper'
    assert "ok 42" in run.stdout


def test_migrate_run_takes_its_own_options_after_the_verbose_flag(tmp_path: Path) -> None:
    """Found by the CLI review (session 42): ``pulsar-txn -v migrate-run --no-check ...`` went through
    argparse's REMAINDER, which refused the command's own options."""
    (tmp_path / "main.py").write_text("import pulsar\nprint('ran')\n")
    run = subprocess.run(
        [
            *(PTXN, "-v", "migrate-run", "--no-check", "--service-url", "pulsar://127.0.0.1:1"),
            *("--bootstrap-servers", "127.0.0.1:1", str(tmp_path / "main.py")),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert "ran" in run.stdout


def test_migrate_run_reports_a_dead_broker_without_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "p.py").write_text("import pulsar\n")
    run = subprocess.run(
        [PTXN, "migrate-run", "--no-check", "--bootstrap-servers", "127.0.0.1:1", str(tmp_path / "p.py")],
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert run.returncode == 2
    assert "Traceback" not in run.stderr, run.stderr[-600:]
    assert "migrate-run: error:" in run.stderr
