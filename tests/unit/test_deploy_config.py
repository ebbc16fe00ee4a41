"""The shipped deployment config must stay valid against the typed configuration."""

import re
import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from kafka_store import KafkaConfig
from pulsar_txn.config import CoordinatorConfig

DOCKER = Path(__file__).resolve().parents[2] / "docker"


def test_docker_coordinator_toml_validates_against_the_config_models() -> None:
    data = tomllib.loads((DOCKER / "config" / "coordinator.toml").read_text())
    kafka = KafkaConfig(**data["kafka"])
    coordinator = CoordinatorConfig(**data["coordinator"])
    assert kafka.bootstrap_servers
    assert coordinator.num_tcs >= 1


def test_secrets_never_appear_in_config_reprs() -> None:
    kafka = KafkaConfig(
        bootstrap_servers="k:9092", sasl_password="hunter2", extra={"sasl.oauthbearer.config": "x=sekret"}
    )
    coordinator = CoordinatorConfig(auth_token="tok-123", marker_secret="mac-key")
    for text in (repr(kafka), str(kafka), repr(coordinator), str(coordinator)):
        for secret in ("hunter2", "sekret", "tok-123", "mac-key"):
            assert secret not in text


def test_prometheus_scrapes_the_admin_port_of_every_compose_coordinator() -> None:
    compose = (DOCKER / "docker-compose.yml").read_text()
    scrape = (DOCKER / "config" / "prometheus.yml").read_text()
    coordinators = sorted(set(re.findall(r"^  (coordinator-\d+):$", compose, re.MULTILINE)))
    assert coordinators == ["coordinator-1", "coordinator-2"]
    targets = re.search(r"targets: \[(.*)\]", scrape)
    assert targets is not None
    assert sorted(t.strip(' "') for t in targets.group(1).split(",")) == [f"{c}:8080" for c in coordinators]
    admin_port = re.search(
        r"^admin_port\s*=\s*(\d+)", (DOCKER / "config" / "coordinator.toml").read_text(), re.M
    )
    assert admin_port is not None and admin_port.group(1) == "8080"


def test_tb_topic_pattern_that_is_no_regular_expression_is_refused() -> None:
    with pytest.raises(ValidationError, match="tb_topic_pattern is not a regular expression"):
        CoordinatorConfig(tb_topic_pattern="orders-(")


def test_every_secret_the_coordinator_reads_from_the_environment_reaches_its_containers() -> None:
    from pulsar_txn import cli

    compose = (DOCKER / "docker-compose.yml").read_text()
    example = (DOCKER / ".env.example").read_text()
    for name in [*cli._SECRET_ENV.values(), *cli._KAFKA_SECRET_ENV.values()]:
        # Compose reads docker/.env only to fill ${...}: a variable not in `environment:` is lost.
        assert f"    {name}: ${{{name}:-}}" in compose, name
        assert re.search(rf"^{name}=", example, re.MULTILINE), name
