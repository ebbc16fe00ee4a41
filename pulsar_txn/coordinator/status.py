"""TxnStatus and its transition table (Kafka's coordinator style: allowed previous states)."""

from __future__ import annotations

from enum import StrEnum

from pulsar_txn.errors import InvalidTxnStatusError


class TxnStatus(StrEnum):
    OPEN = "OPEN"
    COMMITTING = "COMMITTING"
    COMMITTED = "COMMITTED"
    ABORTING = "ABORTING"
    ABORTED = "ABORTED"

    @property
    def is_terminal(self) -> bool:
        return self in (TxnStatus.COMMITTED, TxnStatus.ABORTED)

    @property
    def is_ending(self) -> bool:
        return self in (TxnStatus.COMMITTING, TxnStatus.ABORTING)


ALLOWED_PREVIOUS: dict[TxnStatus, frozenset[TxnStatus]] = {
    TxnStatus.OPEN: frozenset(),  # only ever the initial status
    TxnStatus.COMMITTING: frozenset({TxnStatus.OPEN}),
    TxnStatus.COMMITTED: frozenset({TxnStatus.COMMITTING}),
    TxnStatus.ABORTING: frozenset({TxnStatus.OPEN}),
    TxnStatus.ABORTED: frozenset({TxnStatus.ABORTING}),
}


def check_transition(txn: object, current: TxnStatus, target: TxnStatus) -> None:
    """Raise ``InvalidTxnStatusError`` naming the txn, the expected and the actual status."""
    allowed = ALLOWED_PREVIOUS[target]
    if current not in allowed:
        expected = "/".join(sorted(s.value for s in allowed)) or "(none: initial status only)"
        raise InvalidTxnStatusError(
            f"transaction {txn} cannot become {target.value}: expected status {expected}, "
            f"actual {current.value}"
        )
