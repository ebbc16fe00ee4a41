"""A pipeline instance that another one with its instance id replaced must not commit: the chain asks
before each commit (pure logic, fake txns), and the takeover watch reads the group's member list."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from kafka_store import GroupMember, StoreError
from pulsar_txn.errors import PulsarTxnError
from pulsar_txn.pipeline import fencing
from pulsar_txn.pipeline.app import _commit_after
from pulsar_txn.pipeline.fencing import PipelineFenced, TakeoverWatch
from pulsar_txn.transaction import Transaction
from tests.unit.test_pipeline_chain import FakeTxn


def test_a_batch_is_aborted_instead_of_committed_once_another_instance_took_over() -> None:
    fenced: list[BaseException] = []

    def refused() -> BaseException | None:
        return fenced[0] if fenced else None

    first, second = FakeTxn(), FakeTxn()
    done_first = _commit_after(cast(Transaction, cast(Any, first)), None, refused)
    done_second = _commit_after(cast(Transaction, cast(Any, second)), done_first, refused)
    assert first.asked == ["commit"]
    fenced.append(PipelineFenced("taken over"))  # noticed while the first batch commits
    first.ending.set_result(None)
    assert done_first.result(1) is None
    assert second.asked == ["abort"]  # asked when its turn came, not when it was chained
    second.ending.set_result(None)
    with pytest.raises(PipelineFenced):
        done_second.result(1)


def _watch(
    monkeypatch: pytest.MonkeyPatch, members: list[GroupMember] | Exception, ours: tuple[str, ...] = ()
) -> TakeoverWatch:
    admin = object()

    def describe(_kafka: object, group: str, *, admin: object = None) -> list[GroupMember]:
        assert group == "sub" and admin is admin_made[0]  # one admin client, reused
        if isinstance(members, Exception):
            raise members
        return members

    admin_made: list[object] = []

    def make_admin(_kafka: object) -> object:
        admin_made.append(admin)
        return admin

    monkeypatch.setattr(fencing, "group_admin", make_admin)
    monkeypatch.setattr(fencing, "describe_group", describe)
    consumer = SimpleNamespace(_client_id="me", subscription="sub")
    client = SimpleNamespace(kafka=object())
    return TakeoverWatch(cast(Any, client), cast(Any, consumer), "p-0", None, ours=ours)


def test_the_watch_sees_a_successor_with_our_instance_id(monkeypatch: pytest.MonkeyPatch) -> None:
    watch = _watch(monkeypatch, [GroupMember("m2", "them", "p-0")])
    assert watch.check() and watch.fenced.is_set()
    assert isinstance(watch.error(), PipelineFenced) and isinstance(watch.error(), PulsarTxnError)


@pytest.mark.parametrize(
    "members",
    [
        [GroupMember("m1", "me", "p-0")],  # still us
        [GroupMember("m1", "me", "p-0"), GroupMember("m3", "other", "p-1")],  # a Failover peer
        [GroupMember("m0", "earlier", "p-0")],  # our previous session's member, not replaced yet
        [],  # between members (a rejoin)
        StoreError("describe failed", retriable=True),  # no answer says nothing
    ],
)
def test_the_watch_does_not_fence_on_anything_else(monkeypatch: pytest.MonkeyPatch, members: Any) -> None:
    watch = _watch(monkeypatch, members, ours=("earlier",))
    assert not watch.check() and not watch.fenced.is_set()
