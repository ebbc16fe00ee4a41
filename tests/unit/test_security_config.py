"""Secrets in configuration never come back out: not in reprs, not in validation errors, not on stderr.
And a configured-but-empty secret is refused instead of silently turning its protection off."""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from kafka_store import KafkaConfig
from pulsar_txn import cli
from pulsar_txn.client import Client
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.errors import ConfigError

SECRET = "hunter2-s3cret"


@pytest.mark.parametrize(
    "settings",
    [
        {"sasl_password": SECRET},  # bootstrap_servers missing: pydantic would echo the whole input
        {"bootstrap_servers": "k:9092", "sasl_pasword": SECRET},  # a typo: extra_forbidden echoes it
        {"bootstrap_servers": "k:9092", "sasl_password": 12345678},  # wrong type echoes the value
        {"bootstrap_servers": "k:9092", "extra": {"sasl.password": 12345678}},
    ],
    ids=["missing-field", "typo", "wrong-type", "extra-wrong-type"],
)
def test_kafka_config_validation_errors_never_echo_input_values(settings: dict[str, Any]) -> None:
    with pytest.raises(ValidationError) as info:
        KafkaConfig(**settings)
    text = str(info.value)
    assert SECRET not in text and "12345678" not in text
    assert "sasl" in text or "bootstrap_servers" in text  # still says which setting is wrong


def test_coordinator_config_validation_errors_never_echo_the_secrets() -> None:
    # A model-level check fails: pydantic would print the whole input dict, secrets included.
    with pytest.raises(ValidationError) as info:
        CoordinatorConfig.model_validate(
            {
                "auth_token": "tok-" + SECRET,
                "marker_secret": "mac-" + SECRET,
                "default_txn_timeout_ms": 10,
                "max_txn_timeout_ms": 5,
            }
        )
    text = str(info.value)
    assert "default_txn_timeout_ms exceeds max_txn_timeout_ms" in text
    assert SECRET not in text
    with pytest.raises(ValidationError) as info:
        CoordinatorConfig.model_validate({"auth_tokn": SECRET})
    assert SECRET not in str(info.value) and "auth_tokn" in str(info.value)


def test_client_config_error_does_not_carry_the_password_in_its_traceback() -> None:
    with pytest.raises(ConfigError) as info:
        Client("pulsar://127.0.0.1:6650", kafka={"bootstrap_servers": "k:9092", "sasl_pasword": SECRET})
    # The ValidationError is chained (__cause__), so an uncaught ConfigError prints it too.
    printed = "".join(traceback.format_exception(info.value))
    assert "sasl_pasword" in printed
    assert SECRET not in printed


def test_cli_bad_configuration_is_reported_without_the_secrets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "coordinator.toml"
    conf.write_text('[kafka]\nclient_id = "x"\n[coordinator]\nnum_tcs = 4\n')  # no bootstrap_servers
    monkeypatch.setenv("PULSAR_TXN_SASL_PASSWORD", "sasl-" + SECRET)
    monkeypatch.setenv("PULSAR_TXN_AUTH_TOKEN", "tok-" + SECRET)
    monkeypatch.setenv("PULSAR_TXN_MARKER_SECRET", "mac-" + SECRET)
    assert cli.main(["coordinator", "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert "bad configuration" in err and "bootstrap_servers" in err
    assert SECRET not in err


@pytest.mark.parametrize(("name", "text"), [("bad.toml", "[kafka\n"), ("bad.json", "{not json")])
def test_cli_config_file_that_does_not_parse_is_an_error_naming_it_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str
) -> None:
    conf = tmp_path / name
    conf.write_text(text)
    assert cli.main(["transaction-metadata", "--config", str(conf), "--txn-id", "(0,1)"]) == 2
    err = capsys.readouterr().err
    assert str(conf) in err and "not valid" in err


def test_cli_admin_url_that_is_no_url_is_an_error_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["coordinator-stats", "--admin-url", "not-a-url"]) == 2
    assert "admin URL 'not-a-url'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "key",
    [
        "sasl.oauthbearer.assertion.private.key.passphrase",  # librdkafka >= 2.10
        "sasl.oauthbearer.assertion.private.key.pem",
        "sasl.oauthbearer.client.secret",
        "ssl.keystore.password",
        "ssl.key.pem",
    ],
)
def test_secret_looking_passthrough_keys_are_masked_in_the_repr(key: str) -> None:
    kafka = KafkaConfig(bootstrap_servers="k:9092", extra={key: SECRET, "socket.keepalive.enable": "true"})
    for text in (repr(kafka), str(kafka)):
        assert SECRET not in text
        assert key in text and "socket.keepalive.enable" in text  # only the value is hidden
    assert kafka.to_librdkafka()[key] == SECRET  # still passed through to librdkafka


@pytest.mark.parametrize("name", ["auth_token", "marker_secret"])
def test_an_empty_secret_is_refused_rather_than_switching_protection_off(name: str) -> None:
    # SecretStr("") is falsy, so start_node / the buffer service would treat it as "no auth" / "no HMAC".
    with pytest.raises(ValidationError, match=f"{name} must not be empty"):
        CoordinatorConfig.model_validate({name: ""})
    assert getattr(CoordinatorConfig.model_validate({name: "x"}), name).get_secret_value() == "x"
    assert getattr(CoordinatorConfig(), name) is None


def test_cli_configuration_errors_name_their_section_and_one_section_does_not_hide_the_other(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ "bogus: Extra inputs are not permitted" did not say which section, and a [kafka] error hid
    every [coordinator] one (KafkaConfig was validated first)."""
    conf = tmp_path / "coordinator.toml"
    conf.write_text('[kafka]\nclient_id = "x"\n[coordinator]\nnum_tcs = 4\nbogus = 1\n')
    assert cli.main(["coordinator", "--config", str(conf)]) == 2
    err = capsys.readouterr().err
    assert "[kafka] bootstrap_servers" in err and "[coordinator] bogus" in err


def test_the_ssl_key_password_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """It had no environment variable, so the only way to give it was the config file, which says
    that secrets never go in it."""
    import argparse

    monkeypatch.setenv("PULSAR_TXN_SSL_KEY_PASSWORD", "key-" + SECRET)
    kafka, _coordinator = cli.build_configs(argparse.Namespace(bootstrap_servers="k:9092"))
    assert kafka.ssl_key_password is not None
    assert kafka.ssl_key_password.get_secret_value() == "key-" + SECRET
    assert SECRET not in repr(kafka)
