"""Pulsar's ManagedCursor for one (subscription, topic, partition), over Kafka offsets.

* ``mark_delete``: the first offset not known to be acked (the Kafka committed offset, "next to
  consume"); every offset below it is acked. Pulsar's markDeletePosition is ``mark_delete - 1``.
* ``acked``: offsets at or above ``mark_delete`` acked individually (Pulsar's individualDeletedMessages).
  ``mark_delete`` itself is never in it: acking it moves ``mark_delete`` past the contiguous prefix.

The individually acked ranges travel in Kafka commit metadata (``encode_ranges`` / ``decode``):

* ``r1:<ranges>``  comma-separated ranges relative to ``mark_delete``: ``3-5,9,12-40``.
* ``z1:<base64>``  zlib of unsigned LEB128 varint pairs ``(gap, length)`` per range, where
  ``lo = previous hi + 1 + gap`` (previous hi starts at -1, relative) and ``hi = lo + length``.
* ``""``           no individually acked offsets.
"""

from __future__ import annotations

import base64
import re
import zlib
from bisect import bisect_left, bisect_right

_TAG_RANGES = "r1:"
_TAG_ZLIB = "z1:"
_Z_MIN_CHARS = 128  # below this the plain form is kept without trying compression
_MAX_OFFSET = (1 << 63) - 1  # Kafka offsets are signed 64-bit
_MAX_INFLATED = 64 << 20  # refuse z1 payloads that inflate beyond this
_TOKEN = re.compile(r"(\d{1,19})(?:-(\d{1,19}))?", re.ASCII)


class RangeSet:
    """Sorted, merged, disjoint, non-adjacent closed ranges of ints."""

    __slots__ = ("_hi", "_lo")

    def __init__(self) -> None:
        self._lo: list[int] = []
        self._hi: list[int] = []

    def add(self, lo: int, hi: int | None = None) -> None:
        """Add ``[lo, hi]`` (``[lo, lo]`` if ``hi`` is None), merging overlapping and adjacent ranges."""
        if hi is None:
            hi = lo
        elif hi < lo:
            raise ValueError(f"empty range [{lo}, {hi}]")
        los, his = self._lo, self._hi
        if not his or lo > his[-1] + 1:  # common case: beyond every range
            los.append(lo)
            his.append(hi)
            return
        i = bisect_left(his, lo - 1)  # first range that ends at or after lo - 1
        j = bisect_right(los, hi + 1)  # ranges before j start at or before hi + 1
        if i < j:
            lo = min(lo, los[i])
            hi = max(hi, his[j - 1])
        los[i:j] = [lo]
        his[i:j] = [hi]

    def __contains__(self, x: int) -> bool:
        los = self._lo
        if not los:
            return False
        i = bisect_right(los, x) - 1
        return i >= 0 and self._hi[i] >= x

    def remove_below(self, x: int) -> None:
        """Drop every int below ``x``; a range straddling ``x`` is trimmed to start at ``x``."""
        los, his = self._lo, self._hi
        if not los or los[0] >= x:
            return
        i = bisect_left(his, x)  # first range that ends at or after x
        del los[:i], his[:i]
        if los and los[0] < x:
            los[0] = x

    def clear(self) -> None:
        self._lo.clear()
        self._hi.clear()

    def gaps(self, lo: int, hi: int) -> list[tuple[int, int]]:
        """The ranges of ``[lo, hi]`` not covered, in order (work in the ranges met, not the span)."""
        out: list[tuple[int, int]] = []
        los, his = self._lo, self._hi
        i = bisect_left(his, lo)  # the first range that ends at or after lo
        at = lo
        while at <= hi:
            if i < len(los) and los[i] <= hi:
                if los[i] > at:
                    out.append((at, los[i] - 1))
                at = max(at, his[i] + 1)
                i += 1
            else:
                out.append((at, hi))
                break
        return out

    def first(self) -> tuple[int, int] | None:
        return (self._lo[0], self._hi[0]) if self._lo else None

    def ranges(self) -> list[tuple[int, int]]:
        return list(zip(self._lo, self._hi, strict=True))

    def __len__(self) -> int:
        return len(self._lo)

    def count(self) -> int:
        """Number of ints covered."""
        return sum(self._hi) - sum(self._lo) + len(self._lo)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, RangeSet):
            return NotImplemented
        return self._lo == other._lo and self._hi == other._hi

    def __repr__(self) -> str:
        return f"RangeSet({self.ranges()})"


class Cursor:
    """Acked offsets of one (subscription, topic, partition)."""

    __slots__ = ("acked", "mark_delete")

    def __init__(self, mark_delete: int = 0) -> None:
        if mark_delete < 0:
            raise ValueError(f"mark_delete must be >= 0, got {mark_delete}")
        self.mark_delete = mark_delete
        self.acked = RangeSet()

    def is_acked(self, offset: int) -> bool:
        return offset < self.mark_delete or offset in self.acked

    def ack(self, offset: int) -> bool:
        """Individual ack; False if ``offset`` was already acked."""
        md = self.mark_delete
        if offset < md or offset in self.acked:
            return False
        if offset == md and not self.acked:  # in-order acks: the hot path
            self.mark_delete = md + 1
            return True
        self.acked.add(offset)
        self._absorb()
        return True

    def ack_range(self, lo: int, hi: int) -> None:
        """Every offset in ``[lo, hi]`` is acked (records the reader skipped: markers, aborted)."""
        md = self.mark_delete
        if hi < md:
            return
        if lo <= md and not self.acked:  # the hot path: the skipped records follow the acked ones
            self.mark_delete = hi + 1
            return
        self.acked.add(max(lo, md), hi)
        self._absorb()

    def ack_cumulative(self, offset: int) -> None:
        """Every offset up to and including ``offset`` is acked."""
        if offset < self.mark_delete:
            return
        self.mark_delete = offset + 1
        self.acked.remove_below(offset + 1)
        self._absorb()

    def reset(self, mark_delete: int) -> None:
        """Seek: everything below ``mark_delete`` acked, nothing at or above it."""
        if mark_delete < 0:
            raise ValueError(f"mark_delete must be >= 0, got {mark_delete}")
        self.mark_delete = mark_delete
        self.acked.clear()

    def _absorb(self) -> None:
        first = self.acked.first()
        if first is not None and first[0] <= self.mark_delete:
            self.mark_delete = max(self.mark_delete, first[1] + 1)
            self.acked.remove_below(self.mark_delete)

    # ------------------------------------------------------------------ commit metadata
    def encode_ranges(self, max_chars: int = 3500) -> tuple[str, int]:
        """The individually acked ranges as commit metadata of at most ``max_chars`` characters, and
        how many ranges (the latest ones) did not fit and were dropped: those offsets will be
        redelivered after a restart, never lost."""
        los, his = self.acked._lo, self.acked._hi
        n = len(los)
        if n == 0:
            return "", 0
        md = self.mark_delete
        tokens: list[str] = []
        size = len(_TAG_RANGES) - 1
        for lo, hi in zip(los, his, strict=True):
            token = str(lo - md) if lo == hi else f"{lo - md}-{hi - md}"
            size += 1 + len(token)
            if size > max_chars:
                break
            tokens.append(token)
        k = len(tokens)
        plain = _TAG_RANGES + ",".join(tokens) if k else ""
        if k == n and len(plain) < _Z_MIN_CHARS:
            return plain, 0

        packer = _Packer(los, his, md)

        def zipped(m: int) -> str:
            return _TAG_ZLIB + base64.b64encode(zlib.compress(packer.prefix(m), 9)).decode("ascii")

        if k == n:
            z = zipped(n)
            return (z, 0) if len(z) < len(plain) else (plain, 0)
        # The longest prefix whose compressed form fits (sizes grow with the prefix): gallop, then
        # bisect, so the work stays proportional to what fits rather than to every range.
        lo, hi, step = k, n + 1, max(k, 16)
        while True:
            probe = min(lo + step, n)
            if len(zipped(probe)) > max_chars:
                hi = probe
                break
            lo, step = probe, step * 2
            if lo == n:
                break
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if len(zipped(mid)) <= max_chars:
                lo = mid
            else:
                hi = mid
        return (zipped(lo), n - lo) if lo > k else (plain, n - k)

    def unpersisted_from(self, dropped: int) -> int | None:
        """With ``dropped`` ranges left out by ``encode_ranges``: the first offset whose ack that
        metadata lacks (every acked offset below it is persisted); None if nothing was left out."""
        if dropped <= 0:
            return None
        los = self.acked._lo
        return los[max(0, len(los) - dropped)]

    @classmethod
    def decode(cls, mark_delete: int, metadata: str | None) -> Cursor:
        """The cursor committed as ``mark_delete`` with ``metadata`` from ``encode_ranges``.
        Raises ValueError on metadata it cannot read (the caller falls back to ``Cursor(mark_delete)``)."""
        cursor = cls(mark_delete)
        if not metadata:
            return cursor
        if metadata.startswith(_TAG_RANGES):
            rel = _parse_text(metadata[len(_TAG_RANGES) :])
        elif metadata.startswith(_TAG_ZLIB):
            rel = _parse_zlib(metadata[len(_TAG_ZLIB) :])
        else:
            raise ValueError(
                f"cursor metadata has an unknown format tag (expected {_TAG_RANGES!r} or {_TAG_ZLIB!r}): "
                f"{metadata[:40]!r}"
            )
        for lo, hi in rel:
            if mark_delete + hi > _MAX_OFFSET:
                raise ValueError(
                    f"cursor metadata range {lo}-{hi} above mark_delete {mark_delete} is out of range"
                )
            cursor.acked.add(mark_delete + lo, mark_delete + hi)
        cursor._absorb()
        return cursor

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Cursor):
            return NotImplemented
        return self.mark_delete == other.mark_delete and self.acked == other.acked

    def __repr__(self) -> str:
        return f"Cursor(mark_delete={self.mark_delete}, acked={self.acked.ranges()})"


class _Packer:
    """Varint (gap, length) pairs of ranges relative to ``base``, packed on demand."""

    def __init__(self, los: list[int], his: list[int], base: int) -> None:
        self._los, self._his, self._base = los, his, base
        self._out = bytearray()
        self._ends: list[int] = []  # byte length after each packed range
        self._prev = -1

    def prefix(self, m: int) -> bytearray:
        """The packed form of the first ``m`` ranges."""
        out, ends, base, prev = self._out, self._ends, self._base, self._prev
        for i in range(len(ends), m):
            lo, hi = self._los[i] - base, self._his[i] - base
            for v in (lo - prev - 1, hi - lo):
                while v > 0x7F:
                    out.append((v & 0x7F) | 0x80)
                    v >>= 7
                out.append(v)
            prev = hi
            ends.append(len(out))
        self._prev = prev
        return out[: ends[m - 1]]


def _parse_text(body: str) -> list[tuple[int, int]]:
    rel: list[tuple[int, int]] = []
    if not body:
        return rel
    for token in body.split(","):
        m = _TOKEN.fullmatch(token)
        if m is None:
            raise ValueError(f"cursor metadata: bad range {token[:40]!r} (expected like '3-5' or '9')")
        lo = int(m.group(1))
        hi = lo if m.group(2) is None else int(m.group(2))
        if hi < lo:
            raise ValueError(f"cursor metadata: range {token!r} ends before it starts")
        rel.append((lo, hi))
    return rel


def _parse_zlib(body: str) -> list[tuple[int, int]]:
    try:
        data = base64.b64decode(body, validate=True)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(data, _MAX_INFLATED)
    except (ValueError, zlib.error) as exc:  # binascii.Error is a ValueError
        raise ValueError(f"cursor metadata: corrupt z1 payload ({exc})") from exc
    if inflater.unconsumed_tail:
        raise ValueError(f"cursor metadata: z1 payload inflates beyond {_MAX_INFLATED} bytes")
    if not inflater.eof or inflater.unused_data:
        raise ValueError("cursor metadata: z1 payload is truncated or has trailing data")
    values: list[int] = []
    v = shift = 0
    for b in raw:
        v |= (b & 0x7F) << shift
        if b & 0x80:
            shift += 7
            if shift > 63:
                raise ValueError("cursor metadata: z1 varint too long")
        else:
            values.append(v)
            v = shift = 0
    if shift or len(values) % 2:
        raise ValueError("cursor metadata: z1 payload ends inside a range")
    rel: list[tuple[int, int]] = []
    prev = -1
    for i in range(0, len(values), 2):
        lo = prev + 1 + values[i]
        prev = lo + values[i + 1]
        rel.append((lo, prev))
    return rel
