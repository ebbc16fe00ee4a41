"""TxnID: (most_bits = TC id, least_bits = per-TC sequence), printed as Pulsar prints it: ``(0,3)``."""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from enum import IntEnum

from pulsar_txn.errors import InvalidTxnID

_U64 = (1 << 64) - 1
_PACK = struct.Struct(">QQ")
_TEXT = re.compile(r"^\((\d{1,30}),(\d{1,30})\)$")  # bounded: int() of 4,300+ digits raises ValueError


@dataclass(frozen=True, slots=True, order=True)
class TxnID:
    """A transaction's id, Pulsar's ``TxnID(mostSigBits, leastSigBits)``: the TC id and the TC's
    sequence number. ``TxnID.parse("(0,3)")`` reads the printed form back."""

    most_bits: int
    least_bits: int
    # Computed once: TxnIDs key the hot dicts (open, aborted and pending transactions), and the
    # generated __hash__ builds a tuple at every lookup. Not compared, not shown.
    _hash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        most, least = self.most_bits, self.least_bits
        if not (isinstance(most, int) and isinstance(least, int)):
            raise InvalidTxnID(f"TxnID bits are ints, not ({most!r}, {least!r})")
        if not (0 <= most <= _U64 and 0 <= least <= _U64):
            raise InvalidTxnID(f"TxnID bits out of range: ({most},{least})")
        object.__setattr__(self, "_hash", hash((most, least)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def tc_id(self) -> int:
        """The transaction coordinator that owns this transaction (``most_bits``)."""
        return self.most_bits

    @property
    def sequence(self) -> int:
        """The per-TC sequence number (``least_bits``)."""
        return self.least_bits

    def __str__(self) -> str:
        return f"({self.most_bits},{self.least_bits})"

    def __repr__(self) -> str:
        return f"TxnID{self}"

    def to_bytes(self) -> bytes:
        """16 bytes, big-endian most then least bits: the form stored in Kafka headers and keys."""
        return _PACK.pack(self.most_bits, self.least_bits)

    @classmethod
    def from_bytes(cls, data: bytes) -> TxnID:
        """The inverse of ``to_bytes``."""
        if len(data) != _PACK.size:
            raise InvalidTxnID(f"a TxnID is {_PACK.size} bytes, got {len(data)}")
        most, least = _PACK.unpack(data)
        return cls(most, least)

    @classmethod
    def parse(cls, text: str) -> TxnID:
        """Parse the printed form ``(0,3)``."""
        if not isinstance(text, str):
            raise InvalidTxnID(f"a TxnID's printed form is a str ('(0,3)'), not {type(text).__name__}")
        match = _TEXT.match(text.strip().replace(" ", ""))
        if match is None:
            raise InvalidTxnID(f"not a TxnID: {text!r} (expected like '(0,3)')")
        return cls(int(match.group(1)), int(match.group(2)))


class TxnAction(IntEnum):
    """Pulsar protocol TxnAction."""

    COMMIT = 0
    ABORT = 1
