"""``python -m tests.jepsen [--seconds S] [--seed N] [--workdir DIR] [--bootstrap-servers H:P]``: one
Jepsen-style run (``tests/jepsen/run.py``) on an embedded broker started here (or on the given Kafka);
prints the report; exit status 1 if the checker found an anomaly, a client died of an untyped error
or the transfers did not drain (then lost inputs cannot be checked)."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from kafka_store import KafkaConfig, LocalBroker
from tests.jepsen.run import run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.jepsen")
    ap.add_argument("--seconds", type=float, default=60.0, help="length of the fault phase")
    ap.add_argument("--seed", type=int, default=1, help="the nemesis's and the clients' random seed")
    ap.add_argument("--workdir", type=Path, help="histories, logs and the report (default: a temp dir)")
    ap.add_argument("--bootstrap-servers", help="an existing Kafka (default: an embedded broker)")
    ap.add_argument(
        "--idle-fetch-backoff-ms",
        type=int,
        help="the clients' idle gate (default: the embedded broker's, LocalBroker.kafka_config; 0 with "
        "--bootstrap-servers)",
    )
    ap.add_argument(
        "--end-txn-reply",
        choices=("after_markers", "after_decision"),
        default="after_markers",
        help="when the coordinator answers END_TXN (default: once the markers are written, as Pulsar)",
    )
    args = ap.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="pulsar-txn-jepsen-"))
    workdir.mkdir(parents=True, exist_ok=True)
    broker = None
    gate = {} if args.idle_fetch_backoff_ms is None else {"idle_fetch_backoff_ms": args.idle_fetch_backoff_ms}
    if args.bootstrap_servers is None:
        broker = LocalBroker(workdir / "broker")
        broker.start()
        kafka = broker.kafka_config(**gate)
    else:
        kafka = KafkaConfig(bootstrap_servers=args.bootstrap_servers, **gate)
    try:
        result = run(
            kafka,
            workdir,
            seconds=args.seconds,
            seed=args.seed,
            end_txn_reply=args.end_txn_reply,
        )
    finally:
        if broker is not None:
            broker.stop()
    print(result.summary())
    return 0 if result.passed else 1


if __name__ == "__main__":
    sys.exit(main())
