"""Bad values the CLI review of session 40 found ending in a traceback: each is one line and exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from kafka_store import KafkaConfig
from kafka_store._clients import make_client
from kafka_store.errors import ClientConfigError
from pulsar_txn import cli
from pulsar_txn.admin import TransactionsAdmin
from pulsar_txn.errors import ConfigError


@pytest.mark.parametrize(
    "command", ["pending-ack-stats", "transaction-in-pending-ack-stats", "position-stats-in-pending-ack"]
)
def test_an_empty_subscription_is_a_config_error(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    args = [command, "--bootstrap-servers", "127.0.0.1:1", "--topic", "orders", "--subscription", ""]
    if command == "transaction-in-pending-ack-stats":
        args += ["--txn-id", "(0,1)"]
    if command == "position-stats-in-pending-ack":
        args += ["--partition", "0", "--offset", "0"]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "subscription must not be empty" in err
    assert "Traceback" not in err


def test_the_admin_api_refuses_an_empty_subscription_before_any_read() -> None:
    with pytest.raises(ConfigError, match="must not be empty"):
        TransactionsAdmin(None).pending_ack_stats("orders", "")


@pytest.mark.parametrize("key", ["error_cb", "stats_cb", "throttle_cb", "oauth_cb", "logger"])
def test_a_python_callback_property_in_kafka_extra_is_refused_at_validation(key: str) -> None:
    with pytest.raises(ValidationError, match="Python callable"):
        KafkaConfig(bootstrap_servers="k:9092", extra={key: "x"})


def test_the_cli_reports_a_callback_property_in_kafka_extra_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "c.json"
    conf.write_text(json.dumps({"kafka": {"bootstrap_servers": "127.0.0.1:1", "extra": {"error_cb": "x"}}}))
    assert cli.main(["transaction-buffer-stats", "--config", str(conf), "--topic", "orders"]) == 2
    err = capsys.readouterr().err
    assert "error_cb" in err and "Traceback" not in err


def test_a_setting_confluent_kafka_itself_refuses_is_a_client_config_error() -> None:
    """confluent-kafka checks its Python-level settings with TypeError/ValueError, not KafkaException."""

    def factory(conf: dict[str, object]) -> None:
        raise TypeError("expected error_cb property as a callable function")

    with pytest.raises(ClientConfigError, match="callable"):
        make_client(factory, {}, "test client")
