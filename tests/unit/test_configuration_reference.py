"""docs/configuration.md names every setting, command and command-line flag there is (a docs review
of session 43 found settings and flags documented nowhere)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kafka_store.config import KafkaConfig
from pulsar_txn.cli import parser
from pulsar_txn.config import CoordinatorConfig

REFERENCE = (Path(__file__).parents[2] / "docs" / "configuration.md").read_text()


def test_every_setting_is_in_the_configuration_reference() -> None:
    fields = [*KafkaConfig.model_fields, *CoordinatorConfig.model_fields]
    assert [name for name in fields if f"`{name}`" not in REFERENCE] == []


def test_every_command_and_flag_is_in_the_configuration_reference() -> None:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    missing = [name for name in sub.choices if f"`{name}`" not in REFERENCE]
    for name, command in sub.choices.items():
        for action in command._actions:
            flags = [f for f in action.option_strings if f.startswith("--") and f != "--help"]
            missing += [f"{name} {flag}" for flag in flags if f"`{flag}" not in REFERENCE]
    assert missing == []
