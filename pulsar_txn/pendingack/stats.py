"""``pending-ack-stats``: a subscription's durable state, computed from Kafka without joining it.

It is exactly what a consumer taking the partition over would recover: the cursor from the group's
committed offset and metadata, then the pending-ack log replayed from the recorded start.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, NamedTuple

from kafka_store import TopicNotFoundError, describe_group, group_offsets, read_range, watermark_offsets
from pulsar_txn.buffer.reader import UNKNOWN_NUM_TCS
from pulsar_txn.errors import PulsarTxnError, SubscriptionNotFound
from pulsar_txn.naming import TopicName, pending_ack_topic
from pulsar_txn.pendingack.log import PendingAckFold
from pulsar_txn.pendingack.state import PendingAckState
from pulsar_txn.subscription.cursor import Cursor

if TYPE_CHECKING:
    from pulsar_txn.client import Client

log = logging.getLogger(__name__)
_STALE_ATTEMPTS = 5  # reads of the cursors, each raced by the owner's trim (at most every 10 s)


class CursorMetadata(NamedTuple):
    """What a subscription's commit metadata holds besides the mark-delete (the committed offset)."""

    replay_start: int
    """Replaying the pending-ack log from here rebuilds every unfinished transaction's acks."""
    ranges: str | None
    """The individually acked ranges (``Cursor.encode_ranges``)."""
    read_from: int
    """Where recovery reads the log from (<= ``replay_start``): also the records of the committed
    transactions whose acks lie above the mark-delete, so the recovered consumer knows them as the
    committing one did (their ranges may later be pushed out of the metadata; see ``replay_start``)."""
    partitions: int | None = None
    """The topic's partition count when the subscription began on it (None: written before session
    44): a partition at or above it was added later, and starts at its beginning."""


def join_metadata(replay_start: int, read_from: int, ranges: str, partitions: int | None = None) -> str:
    """``<replay start>;<ranges>``, then ``;k<read from>`` when it lies below the replay start, else
    ``;n<partitions>``. The suffixes come last so that a build before session 31 still reads the
    replay start: it cannot read the ranges then (it recovers without them and redelivers their
    messages, never skips one). Never both: a build of sessions 31-43 reads ``;k`` only as the whole
    rest (``;k7;n4`` would lose the read-from position, which keeps committed acks from coming
    back); the partition count is in the cursors of the topic's other partitions, or in this one's
    next commit."""
    if read_from < replay_start:
        tail = f";k{read_from}"
    elif partitions is not None:
        tail = f";n{partitions}"
    else:
        tail = ""
    return f"{replay_start};{ranges}{tail}"


def split_metadata(metadata: str | None) -> CursorMetadata:
    """Read ``join_metadata``'s form (metadata without a read-from position reads from the replay
    start, as every consumer before session 31 did; a read-from position outside 0..replay start is
    taken as the replay start; a field it does not know is skipped)."""
    if not metadata:
        return CursorMetadata(0, None, 0)
    head, _, rest = metadata.partition(";")
    ranges, _, tail = rest.partition(";")
    try:
        replay = int(head)
    except ValueError:
        return CursorMetadata(0, metadata, 0)
    read_from = replay
    partitions: int | None = None
    for field in tail.split(";") if tail else ():
        tag, value = field[:1], field[1:]
        if not (value.isascii() and value.isdigit()):  # '²' passes isdigit() alone, not int()
            continue
        if tag == "k":
            read_from = int(value)
        elif tag == "n" and int(value) > 0:
            partitions = int(value)
    if not 0 <= read_from <= replay:
        read_from = replay
    return CursorMetadata(replay, ranges or None, read_from, partitions)


class StaleCursor(Exception):
    """The pending-ack log was trimmed past the replay start of the cursor read: its owner committed
    a newer cursor meanwhile. Read the cursor again."""


def recover_partition(
    client: Client,
    name: TopicName,
    subscription: str,
    partition: int,
    committed: tuple[int, str | None] | None,
    default_start: int,
    *,
    cursor_may_be_stale: bool = False,
) -> PendingAckFold:
    """The cursor and pending-ack state of one partition as stored in Kafka. ``cursor_may_be_stale``:
    ``committed`` was read by an observer while the subscription may be live (admin stats); a log
    trimmed past its replay start then raises ``StaleCursor`` instead of giving a state that never
    existed (the newer cursor's acks without the records of the transactions behind them)."""
    pa_low = replay_start = 0
    if committed is not None:
        replay_start, ranges, pa_low, _partitions = split_metadata(committed[1])
        try:
            cursor = Cursor.decode(committed[0], ranges)
        except ValueError:
            cursor = Cursor(committed[0])
    else:
        cursor = Cursor(default_start)
    pa_topic = pending_ack_topic(name, subscription)
    opts = client._buffer_options()
    fold = PendingAckFold(
        PendingAckState(cursor),
        pa_topic,
        partition,
        marker_secret=opts.marker_secret,
        num_tcs=opts.num_tcs if opts.num_tcs != UNKNOWN_NUM_TCS else None,
        owner=(name.base.kafka_topic, subscription),
    )
    fold.next_offset = pa_low
    try:
        for rec in read_range(client.kafka, pa_topic, partition, pa_low):
            fold.apply(rec)
        log_start = watermark_offsets(client.kafka, [(pa_topic, partition)])[(pa_topic, partition)][0]
    except TopicNotFoundError:
        return fold
    if committed is None:
        return fold
    fold.settle_ended_before(replay_start)
    if log_start > replay_start:
        if cursor_may_be_stale:
            raise StaleCursor(f"{pa_topic}[{partition}] starts at {log_start}, past {replay_start}")
        # The owner trims only below what its committed cursor needs: this is time-based retention
        # (a log created before trimming existed) having deleted records a replay needed.
        log.warning(
            "%s[%d]: the pending-ack log starts at %d, past the cursor's replay start %d (deleted by "
            "retention?): acks recorded only there are lost and their messages come back",
            pa_topic,
            partition,
            log_start,
            replay_start,
        )
    elif log_start > pa_low:  # retention again, or a trim racing this read: nothing lost
        log.info(
            "%s[%d]: the pending-ack log starts at %d, past the cursor's read start %d: committed "
            "transactions there are known only by the cursor's acked ranges",
            pa_topic,
            partition,
            log_start,
            pa_low,
        )
    return fold


def recover_subscription(client: Client, topic: str, subscription: str) -> dict[str, PendingAckFold]:
    """Per partition of ``topic`` (or the one partition it names), keyed by full partition name: the
    subscription's recovered cursor and pending acks."""
    name = TopicName.parse(topic)
    count = client._partition_count(name, refresh=True)  # the topic may have grown since
    parts = [name.partition] if name.partition is not None else list(range(count))
    previous: dict[tuple[str, int], tuple[int, str | None]] | None = None
    for _attempt in range(_STALE_ATTEMPTS):
        committed = group_offsets(client.kafka, subscription, [(name.kafka_topic, p) for p in parts])
        if not committed and not _exists(client, name, subscription):
            raise SubscriptionNotFound(f"{topic} has no subscription {subscription!r}")
        # The owner trims only after committing a newer cursor: the same cursors read again mean the
        # log start is past their replay start for good (retention on a log made before trimming
        # existed), not a race. Recover from the log as it is, as a consumer would.
        stale_ok, previous = committed == previous, committed
        try:
            return {
                str(name.base.with_partition(p)): recover_partition(
                    client,
                    name.base,
                    subscription,
                    p,
                    committed.get((name.kafka_topic, p)),
                    0,
                    cursor_may_be_stale=not stale_ok,
                )
                for p in parts
            }
        except StaleCursor as exc:
            log.info("%s/%s: %s; reading the cursors again", topic, subscription, exc)
    raise PulsarTxnError(
        f"{topic}/{subscription}: the pending-ack log was trimmed under every read of the cursors "
        f"({_STALE_ATTEMPTS} attempts); try again",
        retriable=True,
    )


def _exists(client: Client, name: TopicName, subscription: str) -> bool:
    """A subscription with no cursor committed yet still exists while its consumers are in the
    group, or once it has a pending-ack log (as Pulsar's subscription exists from its creation)."""
    if client._admin.topic_exists(pending_ack_topic(name.base, subscription)):
        return True
    return bool(describe_group(client.kafka, subscription))


def pending_ack_stats(client: Client, topic: str, subscription: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for partition_name, fold in recover_subscription(client, topic, subscription).items():
        out[partition_name] = {
            **fold.state.stats(),
            "acked_ranges": fold.state.cursor.acked.ranges(),
            "pending_ack_log_replay_start": fold.replay_start(),
            "recovery_state": "Ready",
        }
    return out
