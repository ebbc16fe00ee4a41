"""Pipeline failures that no new session can fix end the run instead of restarting sessions for good
(pipeline review, session 40)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

import pytest

import pulsar_txn.pipeline.app as pipeline_app
from pulsar_txn.errors import ConsumerBusy, MessageTooBig, TransactionHasOperationFailed
from pulsar_txn.pipeline import ExactlyOncePipeline, PipelineSettings
from tests.conftest import Cluster, run_pipeline_bounded

pytestmark = pytest.mark.integration


def test_an_input_whose_output_the_broker_refuses_as_too_large_ends_the_run(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    """The output copy carries headers the input lacked, so an input near the broker's limit makes
    an output over it: every session failed the same way (76 sessions in 45 s, nothing processed)."""
    c = cluster()
    c.client.create_topic(f"in_{uid}", 1)
    c.client.create_topic(f"out_{uid}", 1)
    c.client.create_producer(f"in_{uid}").send(b"x" * 1_003_990)
    settings = PipelineSettings(f"in_{uid}", f"out_{uid}", subscription=f"s_{uid}", instance_id=f"p-{uid}")
    pipeline = ExactlyOncePipeline(c.client, settings)
    with pytest.raises(TransactionHasOperationFailed) as failed:
        run_pipeline_bounded(pipeline, 60)
    assert isinstance(failed.value.__cause__, MessageTooBig)
    assert pipeline.progress.sessions == 1


def test_a_second_instance_id_on_the_subscription_gives_up_with_consumer_busy(
    cluster: Callable[..., Cluster], uid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The pipeline's subscription is Exclusive: another instance id on it is Pulsar's ConsumerBusy,
    retried only while a consumer that just left may still be a member."""
    monkeypatch.setattr(pipeline_app, "_BUSY_GIVE_UP_S", 2.0)
    c = cluster()
    c.client.create_topic(f"in_{uid}", 1)
    c.client.create_topic(f"out_{uid}", 1)
    holder = c.client.subscribe(f"in_{uid}", f"s_{uid}")  # Exclusive, as the pipeline's
    settings = PipelineSettings(
        f"in_{uid}", f"out_{uid}", subscription=f"s_{uid}", instance_id=f"p-{uid}", retry_backoff_s=0.5
    )
    with pytest.raises(ConsumerBusy):
        run_pipeline_bounded(ExactlyOncePipeline(c.client, settings), 60)
    holder.close()


def _client_settings_of_the_cli(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> dict[str, Any]:
    """The keyword arguments ``pulsar-txn pipeline <argv>`` makes its Client with (nothing runs)."""
    from pulsar_txn import client as client_module
    from pulsar_txn.pipeline import cli as pipeline_cli

    seen: dict[str, Any] = {}

    class Stop(Exception):
        pass

    def recording(*_args: Any, **kwargs: Any) -> None:
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(client_module, "Client", recording)
    parser = argparse.ArgumentParser()
    pipeline_cli.add_arguments(parser)
    with pytest.raises(Stop):
        pipeline_cli.run(parser.parse_args(argv))
    return seen


def test_the_pipeline_cli_passes_the_log_topic_to_its_client(monkeypatch: pytest.MonkeyPatch) -> None:
    """Outcomes of unsure batches are looked up in the coordinators' log: a cluster with another
    log topic could never be asked (the CLI had no way to name it)."""
    argv = "--service-url pulsar://127.0.0.1:1 --bootstrap-servers 127.0.0.1:1 --input i --output o"
    seen = _client_settings_of_the_cli(monkeypatch, [*argv.split(), "--log-topic", "__my_log"])
    assert seen["log_topic"] == "__my_log"


def test_the_pipeline_cli_reads_kafka_settings_from_a_config_file_with_secrets_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """Found by the CLI review (session 42): ``pulsar-txn pipeline`` had no ``--config``, so it could
    not reach a Kafka cluster that needs SASL or SSL (every other Kafka-reading command could)."""
    monkeypatch.setenv("PULSAR_TXN_SASL_PASSWORD", "s3cret")
    config = tmp_path / "pipeline.toml"
    config.write_text(
        '[kafka]\nbootstrap_servers = "kafka:9093"\nsecurity_protocol = "SASL_SSL"\n'
        'sasl_mechanism = "PLAIN"\nsasl_username = "pipe"\n'
    )
    argv = ["--service-url", "pulsar://127.0.0.1:1", "--config", str(config), "--input", "i", "--output", "o"]
    conf = _client_settings_of_the_cli(monkeypatch, argv)["kafka"].to_librdkafka()
    assert conf["bootstrap.servers"] == "kafka:9093" and conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.password"] == "s3cret"
