import pytest

from pulsar_txn.coordinator.status import ALLOWED_PREVIOUS, TxnStatus, check_transition
from pulsar_txn.errors import InvalidTxnStatusError
from pulsar_txn.txnid import TxnID


@pytest.mark.parametrize(
    ("current", "target"),
    [
        (TxnStatus.OPEN, TxnStatus.COMMITTING),
        (TxnStatus.COMMITTING, TxnStatus.COMMITTED),
        (TxnStatus.OPEN, TxnStatus.ABORTING),
        (TxnStatus.ABORTING, TxnStatus.ABORTED),
    ],
)
def test_allowed_transitions_pass(current: TxnStatus, target: TxnStatus) -> None:
    check_transition(TxnID(0, 1), current, target)


def test_every_other_transition_raises_invalid_txn_status_naming_txn_expected_and_actual() -> None:
    allowed = {(prev, target) for target, prevs in ALLOWED_PREVIOUS.items() for prev in prevs}
    for current in TxnStatus:
        for target in TxnStatus:
            if (current, target) in allowed:
                continue
            with pytest.raises(InvalidTxnStatusError) as info:
                check_transition(TxnID(2, 7), current, target)
            text = str(info.value)
            assert "(2,7)" in text
            assert f"actual {current.value}" in text
            assert "expected" in text


def test_terminal_and_ending_flags() -> None:
    assert {s for s in TxnStatus if s.is_terminal} == {TxnStatus.COMMITTED, TxnStatus.ABORTED}
    assert {s for s in TxnStatus if s.is_ending} == {TxnStatus.COMMITTING, TxnStatus.ABORTING}
