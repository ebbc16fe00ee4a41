"""Which segments of a large set a TB snapshot writes again, and which it takes over as they are.

A large aborted set is stored in segment records (``TbAbortedSegment``). Between two snapshots it
mostly grows at its end (new aborts) and shrinks at its start (``prune`` after retention), so most of
its segments hold what they held. The ``ended`` set of a partition whose low watermark a long-open
transaction pins (``TbStateSegment`` chunks) grows the same way. As Pulsar's segmented snapshots
(PIP-196), a snapshot writes only the segments whose content changed and points at the others: its
head lists each segment's key index and the ``snapshot_id`` it was written under. Pure: no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pulsar_txn.txnid import TxnID

# txn -> offset (aborted) or committed? (ended); never changed once in a segment
Entries = dict[TxnID, Any]
_SCAN_BEFORE_SET = 10_000  # see plan_segments


@dataclass(frozen=True)
class StoredSegment:
    """A segment as it is stored: key index, the snapshot it was written under, content."""

    index: int
    snapshot_id: str
    entries: Entries


@dataclass(frozen=True)
class NewSegment:
    """A segment to write (at a key no stored snapshot uses: the last head stays whole meanwhile)."""

    entries: Entries


Planned = StoredSegment | NewSegment


def plan_segments(previous: Sequence[StoredSegment], current: Entries, size: int) -> list[Planned]:
    """The segments of ``current`` (a set's entries now) for the next snapshot, given those stored
    for the last one.

    Every previous segment keeps the entries of it that are still in the set, with their value now
    (a late message moves an aborted entry's offset up); unchanged ones are reused, changed ones written
    anew, emptied ones dropped. What no previous segment holds tops up the last segment
    and then fills new ones. When pruning has left many part-empty segments (more than twice what a
    packed set needs, plus one), everything is packed again (and rewritten). The checks run at C
    speed (dict views): a TB service snapshots every few seconds, and 200,000 entries walked in
    Python cost a quarter of a second each time. ``previous`` must not share a txn between two
    segments (none written by this plan do; a load checks it): what is missing is counted."""
    out: list[Planned] = []
    placed = 0
    items = current.items()
    for seg in previous:
        if seg.entries.items() <= items:  # every entry still there, with the same value
            kept = seg.entries
        else:
            kept = {t: current[t] for t in seg.entries if t in current}
        if kept:
            out.append(seg if kept is seg.entries else NewSegment(kept))
            placed += len(kept)
    rest = _unplaced(current, [p.entries for p in out], len(current) - placed)
    if rest and out and len(out[-1].entries) < size:
        last = out[-1]
        keys = list(rest)
        room = size - len(last.entries)
        out[-1] = NewSegment(last.entries | {t: rest[t] for t in keys[:room]})
        rest = {t: rest[t] for t in keys[room:]}
    out += [NewSegment(chunk) for chunk in _chunks(rest, size)]
    if len(out) > 2 * math.ceil(len(current) / size) + 1:
        everything = {t: o for seg in out for t, o in seg.entries.items()}
        out = [NewSegment(chunk) for chunk in _chunks(everything, size)]
    return out


def _unplaced(current: Entries, placed: list[Entries], missing: int) -> Entries:
    """The entries of ``current`` in none of ``placed`` (``missing`` of them), in ``current``'s
    order. New aborts come last in it, so it is read from the end; only if they are not found
    there soon is a set of every placed txn built."""
    if missing <= 0:
        return {}
    found: list[TxnID] = []
    for scanned, t in enumerate(reversed(current)):
        if scanned >= missing + _SCAN_BEFORE_SET:
            taken = set().union(*placed)
            return {t: o for t, o in current.items() if t not in taken}
        if not any(t in seg for seg in placed):
            found.append(t)
            if len(found) == missing:
                break
    return {t: current[t] for t in reversed(found)}


def _chunks(entries: Entries, size: int) -> list[Entries]:
    keys = list(entries)
    return [{t: entries[t] for t in keys[i : i + size]} for i in range(0, len(keys), size)]


def free_indexes(used: set[int]) -> Iterator[int]:
    """The key indexes not in ``used``, lowest first (keys stay few and small: a snapshot's keys and
    the last one's, at most)."""
    i = 0
    while True:
        if i not in used:
            yield i
        i += 1
