"""Child process for crash tests: subscribe, receive N, ack them in one transaction (each
``acknowledge`` returning once its pending ack is stored), print the TxnID, then wait to be killed
(SIGKILL) before anyone ends the transaction."""

from __future__ import annotations

import json
import sys
import time

from pulsar_txn.client import Client


def main() -> None:
    cfg = json.loads(sys.argv[1])
    client = Client(
        cfg["url"],
        bootstrap_servers=cfg["bootstrap"],
        num_tcs=cfg["num_tcs"],
        snapshot_topic=cfg["snapshot_topic"],
    )
    consumer = client.subscribe(
        cfg["topic"], cfg["subscription"], initial_position="Earliest", instance_id=cfg.get("instance_id")
    )
    txn = client.transaction(600)
    for _ in range(cfg["n"]):
        # Returns once the pending ack is stored: killed right after, the acks still count when
        # another process commits the transaction by its id.
        consumer.acknowledge(consumer.receive(10_000), txn=txn)
    print(json.dumps({"txn": str(txn.txn_id)}), flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
