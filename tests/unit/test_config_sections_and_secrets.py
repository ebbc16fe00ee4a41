"""Configuration mistakes that used to pass silently or crash (review, session 26): a misspelt
config-file section (its secrets were dropped: the coordinator served without auth), a section that
is not a table (a raw ValueError and a traceback), an empty or mistyped marker secret on the client
(every genuine marker then failed authentication), and a non-ASCII admin token (never matched)."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path

import pytest

from pulsar_txn.admin_http import AdminHttpServer
from pulsar_txn.cli import build_configs, main
from pulsar_txn.client import Client
from pulsar_txn.errors import ConfigError


def _args(path: Path) -> argparse.Namespace:
    return argparse.Namespace(config=str(path), bootstrap_servers=None)


def test_a_misspelt_section_of_the_config_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('[kafka]\nbootstrap_servers = "127.0.0.1:9092"\n[coordinater]\nauth_token = "s3cret"\n')
    with pytest.raises(ConfigError, match="coordinater"):
        build_configs(_args(path))


def test_a_section_that_is_not_a_table_is_a_config_error_and_exit_code_2(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    path.write_text(json.dumps({"kafka": "127.0.0.1:9092"}))
    with pytest.raises(ConfigError, match=r"\[kafka\]"):
        build_configs(_args(path))
    assert main(["coordinator", "--config", str(path)]) == 2


@pytest.mark.parametrize("secret", ["", b""])
def test_a_client_refuses_an_empty_marker_secret(secret: str | bytes) -> None:
    with pytest.raises(ConfigError, match="marker_secret"):
        Client("pulsar://127.0.0.1:6650", bootstrap_servers="127.0.0.1:1", marker_secret=secret)


def test_a_client_refuses_a_marker_secret_that_is_not_str_or_bytes() -> None:
    with pytest.raises(ConfigError, match="marker_secret"):
        Client("pulsar://127.0.0.1:6650", bootstrap_servers="127.0.0.1:1", marker_secret=123)  # type: ignore[arg-type]


@pytest.mark.parametrize("token", ["sécret", "s3cret-à", "Ås3cret"])
def test_the_admin_endpoint_accepts_its_token_when_it_is_not_ascii(token: str) -> None:
    """à and Å end in bytes (A0, 85) that str.strip() removed from the header as whitespace."""

    async def status() -> bytes:
        server = AdminHttpServer({"/x": lambda: {"ok": 1}}, auth_token=token)
        await server.start()
        try:
            port = int(server.url.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(f"GET /x HTTP/1.1\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
            data = await asyncio.wait_for(reader.read(), 5)
            writer.close()
            await writer.wait_closed()
            return data.split(b"\r\n", 1)[0]
        finally:
            await server.stop()

    assert asyncio.run(status()) == b"HTTP/1.1 200 OK"


@pytest.mark.parametrize(
    "overrides",
    [
        {"coordinator_group": ""},  # librdkafka aborted the process (SIGABRT) on a group ""
        {"tb_group": ""},
        {"log_topic": "bad name"},  # Kafka refused it at CreateTopics, after the server listened
        {"owners_topic": ""},
        # Clients do not know it: only the '__' prefix keeps pattern subscriptions and delete_topic
        # off it (review of session 44: a pattern consumer delivered the directory's records).
        {"owners_topic": "owners"},
        {"snapshot_topic": "a/b"},
        {"num_tcs": True},  # taken as 1: a one-TC cluster, for good
        {"port": True},
        {"static_tc_ids": [True], "ownership": "static"},
    ],
)
def test_settings_kafka_or_the_cluster_cannot_use_are_refused_when_the_config_loads(
    overrides: dict[str, object],
) -> None:
    """Found by the CLI review (session 42)."""
    from pydantic import ValidationError

    from pulsar_txn.config import CoordinatorConfig

    with pytest.raises(ValidationError, match=next(iter(overrides))):
        CoordinatorConfig(**overrides)  # type: ignore[arg-type]


def test_a_kafka_number_setting_refuses_true_and_false() -> None:
    from pydantic import ValidationError

    from kafka_store import KafkaConfig

    with pytest.raises(ValidationError, match="request_timeout_ms"):
        KafkaConfig(bootstrap_servers="k:9092", request_timeout_ms=True)
    assert KafkaConfig(bootstrap_servers="k:9092", request_timeout_ms=5).request_timeout_ms == 5


@pytest.mark.parametrize(
    "setting",
    ["log_write_timeout_ms", "tb_topic_refresh_ms", "recovery_timeout_ms", "end_retry_max_backoff_ms"],
)
def test_a_duration_longer_than_kafka_clients_take_is_refused(setting: str) -> None:
    """Found by review (session 42): log_write_timeout_ms=3e9 passed validation, wrapped into a
    negative message.timeout.ms, and the coordinator never served its TCs (claim writes failed for
    ever). Every *_ms setting is bounded by librdkafka's 32-bit milliseconds."""
    from pydantic import ValidationError

    from kafka_store import KafkaConfig
    from kafka_store.config import MAX_TIMEOUT_MS
    from pulsar_txn.config import CoordinatorConfig

    with pytest.raises(ValidationError, match=setting):
        CoordinatorConfig(**{setting: MAX_TIMEOUT_MS + 1})
    assert getattr(CoordinatorConfig(**{setting: MAX_TIMEOUT_MS}), setting) == MAX_TIMEOUT_MS
    with pytest.raises(ValidationError, match="group_session_timeout_ms"):
        CoordinatorConfig(group_session_timeout_ms=3_600_001)
    # Only compared and added (the diff review: a config of 30-day transactions loaded before).
    month = 30 * 86_400_000
    assert CoordinatorConfig(max_txn_timeout_ms=month, end_txn_retention_ms=month).max_txn_timeout_ms == month
    with pytest.raises(ValidationError, match="request_timeout_ms"):
        KafkaConfig(bootstrap_servers="k:9092", request_timeout_ms=MAX_TIMEOUT_MS + 1)


@pytest.mark.parametrize(
    "url", ["http://coord:8080", "pulsar://coord:notaport", "coord:6650", "pulsar://0.0.0.0:6650"]
)
def test_an_advertised_url_clients_cannot_use_is_refused(url: str) -> None:
    """It goes into ownership records and LOOKUP redirects: anything but pulsar://host:port with a
    reachable host was advertised as it was."""
    from pydantic import ValidationError

    from pulsar_txn.config import CoordinatorConfig

    with pytest.raises(ValidationError, match="advertised_url"):
        CoordinatorConfig(advertised_url=url)
    assert CoordinatorConfig(advertised_url="pulsar://coord-1:6650").advertised_url == "pulsar://coord-1:6650"


def test_a_server_bound_to_every_interface_advertises_the_host_name() -> None:
    """Bound to 0.0.0.0 without an advertised URL, the coordinator advertised pulsar://0.0.0.0:PORT
    (the Docker image's default command did), which no client can connect to."""
    import socket
    from typing import Any, cast

    from pulsar_txn.server import CoordinatorServer

    def started(host: str) -> CoordinatorServer:
        server = CoordinatorServer(cast(Any, None), host=host, port=6650)
        server._port = 6650  # as start() sets it once bound
        return server

    assert started("0.0.0.0").url == f"pulsar://{socket.gethostname()}:6650"
    assert started("127.0.0.1").url == "pulsar://127.0.0.1:6650"


def test_an_empty_secret_variable_is_taken_as_unset_and_said_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """docker compose passes an unset variable as empty (``${VAR:-}``), so empty means unset; but an
    empty secret file then turned authentication off without a word (session 39's docs review)."""
    path = tmp_path / "c.toml"
    path.write_text('[kafka]\nbootstrap_servers = "127.0.0.1:9092"\n')
    monkeypatch.setenv("PULSAR_TXN_AUTH_TOKEN", "")
    monkeypatch.setenv("PULSAR_TXN_MARKER_SECRET", "s3cret-mac")
    with caplog.at_level("WARNING", logger="pulsar_txn.cli"):
        _kafka, coord = build_configs(_args(path))
    assert coord.auth_token is None and coord.marker_secret is not None
    assert "PULSAR_TXN_AUTH_TOKEN is set but empty" in caplog.text
    assert "s3cret-mac" not in caplog.text and "MARKER_SECRET" not in caplog.text


def test_an_endpoint_that_cannot_listen_names_its_address() -> None:
    """Found by the CLI review (session 42): ``--host nosuchhost.invalid`` printed only "[Errno -2]
    Name or service not known"; a port in use did not say which."""
    import re
    import socket

    async def start(host: str, port: int) -> None:
        server = AdminHttpServer({"/x": lambda: {"ok": 1}}, host=host, port=port)
        await server.start()
        await server.stop()

    with pytest.raises(OSError, match=re.escape("admin endpoint cannot listen on nosuchhost.invalid:0")):
        asyncio.run(start("nosuchhost.invalid", 0))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError, match=re.escape(f"127.0.0.1:{port}")):
            asyncio.run(start("127.0.0.1", port))
