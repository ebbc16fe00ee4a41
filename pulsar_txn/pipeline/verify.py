"""Checking a pipeline's output against its input: no loss, no duplicate, per-partition order."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pulsar_txn.errors import Timeout
from pulsar_txn.message import Message
from pulsar_txn.pipeline.app import SOURCE_PROPERTY

if TYPE_CHECKING:
    from pulsar_txn.client import Client


@dataclass
class Verdict:
    inputs: int = 0
    outputs: int = 0
    missing: list[str] = field(default_factory=list)  # input ids with no output
    duplicated: list[str] = field(default_factory=list)  # input ids with more than one output
    out_of_order: list[str] = field(default_factory=list)  # outputs behind an output of a later input
    wrong_value: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.inputs == self.outputs and not (
            self.missing or self.duplicated or self.out_of_order or self.wrong_value
        )

    def __str__(self) -> str:
        state = "exactly once, in order" if self.ok else "VIOLATED"
        text = (
            f"{self.inputs} inputs, {self.outputs} outputs: {state} (missing {len(self.missing)}, "
            f"duplicated {len(self.duplicated)}, out of order {len(self.out_of_order)}, "
            f"wrong value {len(self.wrong_value)})"
        )
        for name, ids in (
            ("missing", self.missing),
            ("duplicated", self.duplicated),
            ("out of order", self.out_of_order),
            ("wrong value", self.wrong_value),
        ):
            if ids:  # a few examples, so that a failed run can be looked into
                text += f"\n    {name}: {', '.join(ids[:10])}{' ...' if len(ids) > 10 else ''}"
        return text


def read_committed(client: Client, topic: str, quiet_ms: int = 2000) -> list[Message[bytes]]:
    """Every committed message of ``topic`` (all partitions) until the topic has been quiet a while."""
    reader = client.create_reader(topic)
    out: list[Message[bytes]] = []
    try:
        while True:
            out.append(reader.read_next(quiet_ms))
    except Timeout:
        return out
    finally:
        reader.close()


def verify_exactly_once(
    client: Client,
    input_topic: str,
    output_topic: str,
    transform: Callable[[Message[bytes]], bytes | str | None] | None = None,
) -> Verdict:
    inputs = read_committed(client, input_topic)
    outputs = read_committed(client, output_topic)
    by_id = {str(m.message_id): m for m in inputs}
    verdict = Verdict(inputs=len(inputs), outputs=len(outputs))
    seen: Counter[str] = Counter()
    last_offset: dict[int, int] = {}
    for out in sorted(outputs, key=lambda m: (m.message_id.partition, m.message_id.offset)):
        source = out.properties.get(SOURCE_PROPERTY, "")
        seen[source] += 1
        src = by_id.get(source)
        if src is None:
            verdict.wrong_value.append(f"{out.message_id}: unknown source {source!r}")
            continue
        # Output partition p holds input partition p's messages, in input order.
        if src.message_id.partition != out.message_id.partition or src.message_id.offset <= last_offset.get(
            out.message_id.partition, -1
        ):
            verdict.out_of_order.append(source)
        last_offset[out.message_id.partition] = max(
            last_offset.get(out.message_id.partition, -1), src.message_id.offset
        )
        if transform is not None:
            expected = transform(src)
            if expected is None:  # a tombstone, and an empty payload is not one
                if not out.has_null_value:
                    verdict.wrong_value.append(source)
            elif out.has_null_value or out.data != (
                expected.encode() if isinstance(expected, str) else expected
            ):
                verdict.wrong_value.append(source)
    verdict.missing = [i for i in by_id if seen[i] == 0]
    verdict.duplicated = [i for i, n in seen.items() if n > 1]
    return verdict
