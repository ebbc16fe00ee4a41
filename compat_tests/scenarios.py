"""The scenarios of SCENARIOS.md: number, Pulsar's behaviour, ours (how we do it or differ).

The result column of the README table comes from a real run (``_report.py``), never from here.
"""

from __future__ import annotations

SCENARIOS: list[tuple[str, str, str]] = [
    (
        "P1",
        "2 txns interleave 1000 msgs: none visible before commit, all 1000 after, in publish order",
        "same; the first txn's commit releases only what lies below the second's first message",
    ),
    ("P2", "aborted msgs never delivered; the subscription moves past them and the marker", "same"),
    (
        "P3",
        "10 plain, 10 in an open txn, 10 plain: first 10 only; after commit the other 20, in order",
        "same (maxReadPosition holds back later plain messages)",
    ),
    (
        "P4",
        "maxReadPosition follows plain publishes, pinned by an open txn, moves past the marker on commit",
        "same; seen through `get_last_message_ids` and `TransactionsAdmin.transaction_buffer_stats`",
    ),
    (
        "P5",
        "one marker of the matching type per partition the txn produced to; markers never delivered",
        "same; markers are Kafka records with a control header, counted in transaction-buffer stats",
    ),
    ("P6", "10 txns x 1000 msgs keep publish order per partition", "same"),
    ("P7", "a txn over 3 topics: all visible after commit, none after abort", "same"),
    ("P8", "transactional messages carry their TxnID", "same (`Message.txn_id`, printed `(tc,seq)`)"),
    (
        "A1",
        "1000 acks in a txn: not redelivered while pending; abort redelivers all; commit: never again",
        "same, also after a consumer restart (pending acks are a per-subscription Kafka log)",
    ),
    (
        "A2",
        "pending-ack count 10 after 10 acks; commit -> 0 without redelivery; abort -> 0 with it",
        "same (`Consumer.stats()`; durable view in `TransactionsAdmin.pending_ack_stats`)",
    ),
    ("A3", "txn B acking what txn A acked -> TransactionConflict; abort A -> redelivered, ackable", "same"),
    (
        "A4",
        "repeated cumulative ack at same/lower position in one txn -> conflict; several ids -> NotAllowed",
        "same",
    ),
    (
        "A5",
        "txn A cumulative-acks msg 3, txn B acks it -> conflict; abort A + redeliver -> all 5 again",
        "same",
    ),
    ("A6", "acking a committed-acked msg -> conflict; an aborted txn's positions are ackable again", "same"),
    (
        "A7",
        "one txn acks on 2 subscriptions: the TC records 2 subscriptions; both commit together",
        "same (`TransactionsAdmin.transaction_metadata`)",
    ),
    (
        "A8",
        "consume-process-produce; crash before commit: nothing visible, input redelivered; exactly once",
        "same; a crash is a client closed without ending its txn (the TC aborts it at its timeout)",
    ),
    (
        "E1",
        "send, ack or commit on a committed txn -> InvalidTxnStatusError",
        "same; repeating commit on a *new handle* of a committed txn succeeds (idempotent end)",
    ),
    ("E2", "client-side timeout (1 s) -> TIME_OUT; send and ack -> InvalidTxnStatusError", "same"),
    (
        "E3",
        "coordinator timeout aborts; commit then fails clearly, client state ERROR; timeout count + 1",
        "same (InvalidTxnStatusError naming the timeout)",
    ),
    ("E4", "ack in a 3 s txn that never ends: redelivered only after the timeout abort", "same"),
    ("E5", "commit waits for every in-flight send and ack (30 threads); an empty txn commits", "same"),
    ("E6", "a failed send makes commit abort and raise TransactionHasOperationFailed", "same"),
    (
        "E7",
        "TxnIDs: most bits = TC id, least bits +1 each time, increasing across a TC restart",
        "same (per TC; the client spreads new txns over TCs round-robin)",
    ),
    ("E8", "client states OPEN, COMMITTING, COMMITTED, ABORTING, ABORTED, TIME_OUT, ERROR", "same"),
    ("E9", "topic stats after 1 committed, 1 aborted, 1 open txn -> 1 / 1 / 1", "same"),
    (
        "R1",
        "TC restart: open txns keep their timeouts; COMMITTING txns complete without the client",
        "same; the commit is finished by the restarted coordinator's recovery",
    ),
    (
        "R2",
        "TB recovery after restart: same maxReadPosition and aborted set, from the latest snapshot",
        "same; recovery = latest snapshot + scan of what follows it",
    ),
    (
        "R3",
        "pending acks survive a consumer restart; other txns conflict; committed never redelivered",
        "same (a closing consumer writes the acks of still-open transactions first)",
    ),
    (
        "R4",
        "1000 txns with 2 s timeouts all abort; mixed timeouts abort in deadline order; across restart",
        "same: one timer per TC fires in deadline order (seen as each txn's end time, 250 ms tolerance)",
    ),
    (
        "R5",
        "TC not ready (recovering): retriable error, the client retries",
        "same (ServiceNotReady, connection refused: retried within the operation timeout)",
    ),
]
