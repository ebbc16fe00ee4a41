"""``LocalBroker.kafka_config``: the embedded broker's client settings (its idle gate), overridable."""

from __future__ import annotations

from pathlib import Path

from kafka_store import LocalBroker


def test_the_embedded_brokers_client_settings_carry_its_idle_gate_and_take_overrides(tmp_path: Path) -> None:
    broker = LocalBroker(tmp_path, port=19092)  # not started: only its address is used
    default = broker.kafka_config()
    assert default.bootstrap_servers == "127.0.0.1:19092"
    assert default.idle_fetch_backoff_ms == LocalBroker.IDLE_FETCH_BACKOFF_MS > 0
    assert broker.kafka_config(idle_fetch_backoff_ms=0).idle_fetch_backoff_ms == 0
    other = broker.kafka_config(bootstrap_servers="elsewhere:9092", request_timeout_ms=5000)
    assert (other.bootstrap_servers, other.request_timeout_ms) == ("elsewhere:9092", 5000)
