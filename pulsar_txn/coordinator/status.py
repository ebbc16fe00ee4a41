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


def reachable(current: TxnStatus, target: TxnStatus) -> bool:
    """Whether a log may hold ``target`` after ``current`` for one transaction: the same status
    again (an ADD_* rewrites OPEN; a new owner rewrites what it recovers) or a later one on the same
    path. Not only the next one: compaction keeps one record per key (the log holds a key per owner
    epoch), so OPEN may be followed by COMMITTED."""
    if target is current:
        return True
    if current is TxnStatus.OPEN:
        return True
    return current in ALLOWED_PREVIOUS[target]


def check_transition(txn: object, current: TxnStatus, target: TxnStatus) -> None:
    """Raise ``InvalidTxnStatusError`` naming the txn, the expected and the actual status."""
    allowed = ALLOWED_PREVIOUS[target]
    if current not in allowed:
        expected = "/".join(sorted(s.value for s in allowed)) or "(none: initial status only)"
        raise InvalidTxnStatusError(
            f"transaction {txn} cannot become {target.value}: expected status {expected}, "
            f"actual {current.value}"
        )
