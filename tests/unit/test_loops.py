"""Our loops run on uvloop when it is installed, and on asyncio's loop when asked to."""

from __future__ import annotations

import asyncio

import pytest

from pulsar_txn import _loops


def test_new_event_loop_is_uvloop_when_installed() -> None:
    pytest.importorskip("uvloop")  # a declared dependency on every platform but Windows
    loop = _loops.new_event_loop()
    try:
        assert _loops.loop_kind(loop) == "uvloop"
    finally:
        loop.close()


def test_the_environment_can_force_the_standard_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PULSAR_TXN_EVENT_LOOP", "asyncio")
    loop = _loops.new_event_loop()
    try:
        assert _loops.loop_kind(loop) == "asyncio"
        assert isinstance(loop, asyncio.BaseEventLoop)
    finally:
        loop.close()


def test_run_returns_the_coroutines_result_on_the_chosen_loop() -> None:
    async def kind() -> str:
        return _loops.loop_kind(asyncio.get_running_loop())

    expected = _loops.new_event_loop()
    expected.close()
    assert _loops.run(kind()) == _loops.loop_kind(expected)


def test_a_misspelt_loop_choice_is_a_config_error_not_a_silent_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from pulsar_txn.errors import ConfigError

    monkeypatch.setenv("PULSAR_TXN_EVENT_LOOP", "asyncoi")
    with pytest.raises(ConfigError, match="PULSAR_TXN_EVENT_LOOP"):
        _loops.new_event_loop()
    monkeypatch.setenv("PULSAR_TXN_EVENT_LOOP", "uvloop")
    _loops.new_event_loop().close()
