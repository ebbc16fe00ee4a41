"""Streaming offsets: ``{"topic": {"partition": next offset}}`` as Spark's Kafka source writes them,
and the ``maxOffsetsPerTrigger`` share-out. Pure functions."""

from __future__ import annotations

import math
from typing import Any

from pulsar_txn.errors import ConfigError
from spark._options import TopicPartition

Offsets = dict[TopicPartition, int]


def to_json(offsets: Offsets) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        out.setdefault(topic, {})[str(partition)] = int(offset)
    return out


def from_json(data: dict[str, Any]) -> Offsets:
    try:
        return {(str(t), int(p)): int(o) for t, parts in data.items() for p, o in parts.items()}
    except (AttributeError, TypeError, ValueError):
        raise ConfigError(f"not a pulsar_txn stream offset: {data!r}") from None


def rate_limit(starts: Offsets, ends: Offsets, max_offsets: int) -> Offsets:
    """Cap the batch at ``max_offsets`` offsets, shared in proportion to what each partition has
    (as Spark's Kafka source: a share below 1 rounds up so every partition with data moves)."""
    sizes = {tp: max(0, end - starts.get(tp, 0)) for tp, end in ends.items()}
    total = sum(sizes.values())
    if total <= max_offsets:
        return dict(ends)
    out = {}
    for tp, end in ends.items():
        begin = starts.get(tp, 0)
        share = max_offsets * sizes[tp] / total
        step = math.ceil(share) if share < 1 else math.floor(share)
        out[tp] = min(end, begin + step) if sizes[tp] else end
    return out
