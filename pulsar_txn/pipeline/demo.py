"""``pulsar-txn demo``, the main job: an embedded broker and coordinator, an input topic being filled,
and the exactly-once pipeline run as a separate process that is SIGKILLed mid-work and restarted.
The output is then checked against the input: each input exactly once, in per-partition order."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from kafka_store import LocalBroker, end_offsets
from pulsar_txn.admin import TransactionsAdmin
from pulsar_txn.client import Client
from pulsar_txn.config import CoordinatorConfig
from pulsar_txn.coordinator.embedded import EmbeddedCoordinator
from pulsar_txn.errors import PulsarTxnError, TransactionNotFound
from pulsar_txn.naming import TopicName
from pulsar_txn.pipeline.app import upper
from pulsar_txn.pipeline.fencing import open_in_output
from pulsar_txn.pipeline.verify import verify_exactly_once
from pulsar_txn.txnid import TxnID

INPUT, OUTPUT, PARTITIONS = "demo-input", "demo-output", 3


_LAST_RUN_S = 300.0  # the last (unkilled) run drains the rest of the input and exits when idle


def run_pipeline_demo(data_dir: Path, *, messages: int = 20_000, kills: int = 2) -> int:
    print(f"starting the embedded Kafka broker (data in {data_dir}) ...", flush=True)
    broker = LocalBroker(data_dir / "broker")
    bootstrap = broker.start()
    try:
        kafka = broker.kafka_config()
        config = CoordinatorConfig(num_tcs=4, ownership="static", static_tc_ids=(0, 1, 2, 3), port=0)
        with EmbeddedCoordinator(kafka, config) as coordinator:
            assert coordinator.url is not None
            print(f"coordinator serving the Pulsar protocol at {coordinator.url}", flush=True)
            with Client(coordinator.url, kafka=kafka, num_tcs=config.num_tcs) as client:
                return _run(client, coordinator.url, bootstrap, messages, kills)
    finally:
        broker.stop()


def _run(client: Client, url: str, bootstrap: str, messages: int, kills: int) -> int:
    client.create_topic(INPUT, PARTITIONS)
    client.create_topic(OUTPUT, PARTITIONS)
    # A data dir used before holds that run's input too: the check expects it as well.
    before = sum(end_offsets(client.kafka, [(INPUT, p) for p in range(PARTITIONS)]).values())
    producer = client.create_producer(INPUT)
    half = messages // 2

    def publish(i: int) -> None:
        producer.send_async(f"order {i:06d} " + "x" * 64, partition_key=f"customer-{i % 97}")

    for i in range(half):
        publish(i)
    producer.flush()
    print(f"published {half} input messages; the rest arrive while the pipeline runs", flush=True)

    def publish_rest() -> None:
        for i in range(half, messages):
            publish(i)
            if i % 50 == 0:  # paced over ~8 s, so that every run (and kill) has input to work on
                time.sleep(0.04)
        producer.flush()

    feeder = threading.Thread(target=publish_rest, daemon=True)
    feeder.start()
    args = [sys.executable, "-m", "pulsar_txn.cli", "pipeline", "--service-url", url]
    args += ["--bootstrap-servers", bootstrap, "--input", INPUT, "--output", OUTPUT, "--num-tcs", "4"]
    args += ["--idle-fetch-backoff-ms", str(client.kafka.idle_fetch_backoff_ms)]  # the embedded broker's
    # The killed runs do a little work per message (0.5 ms), as a real transform would: the pipeline
    # is then busy with open transactions when the SIGKILL comes (without it, it outran the input
    # and each kill found it idle, with nothing left open for its successor to abort).
    killed_args = [*args, "--work-ms", "0.5"]
    started = time.monotonic()
    proc: subprocess.Popen[str] | None = None
    try:
        for n in range(kills):
            proc = subprocess.Popen(killed_args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
            echo = _echo_until(proc, progress_lines=2)
            open_txn = _pause_in_a_transaction(client, proc)
            where = f"in open transaction {open_txn}" if open_txn else "(idle: no transaction open)"
            print(f"[demo] SIGKILL the pipeline {where} ({n + 1}/{kills}); restarting it ...", flush=True)
            proc.send_signal(signal.SIGKILL)
            proc.wait(30)
            echo.join(10)  # the pipe ends with the process
            assert proc.stdout is not None
            proc.stdout.close()
        feeder.join(120)
        proc = subprocess.Popen(
            [*args, "--idle-exit", "3"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        _echo_until(proc, progress_lines=None, timeout=_LAST_RUN_S)
        if proc.poll() is None:
            print(f"[demo] the last run did not finish in {_LAST_RUN_S:.0f} s; stopping it", flush=True)
            proc.kill()
        code = proc.wait(30)
    finally:
        if proc is not None and proc.poll() is None:  # interrupted (Ctrl-C, SIGTERM): no orphan left
            proc.kill()
            proc.wait(30)
        if proc is not None and proc.stdout is not None:
            proc.stdout.close()
    elapsed = time.monotonic() - started
    print("\nchecking the output against the input ...", flush=True)
    verdict = verify_exactly_once(client, INPUT, OUTPUT, upper)
    print("summary")
    print(
        f"  pipeline runs: {kills + 1} ({kills} killed with SIGKILL mid-work), exit code of the last {code}"
    )
    print(f"  {verdict}")
    print(f"  wall time {elapsed:.1f} s for {verdict.inputs} inputs, including restarts")
    if before:
        print(f"  ({before} of the inputs were published by an earlier demo in this data dir)")
    ok = verdict.ok and code == 0 and verdict.inputs == before + messages
    print("demo OK" if ok else "demo FAILED")
    return 0 if ok else 1


def _pause_in_a_transaction(
    client: Client, proc: subprocess.Popen[str], within_s: float = 5.0
) -> TxnID | None:
    """Stop ``proc`` (SIGSTOP) at a moment it has a transaction open with messages in the output, so
    that the SIGKILL to come leaves its successor one to abort; None if no such moment was found
    (the pipeline idle, waiting for input). A kill at a random moment could find it between two
    transactions; stopped, it can neither commit nor abort what the check saw."""
    admin = TransactionsAdmin(client)
    output = TopicName.parse(OUTPUT)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.2)  # an END_TXN already on its way reaches the coordinator
        try:
            for txn in sorted(open_in_output(client, output, ""), key=str):
                try:
                    if admin.transaction_status(txn) == "OPEN":
                        return txn
                except TransactionNotFound:
                    continue
        except PulsarTxnError as exc:  # the kill goes ahead anyway; only its timing is not checked
            print(f"[demo] could not look for an open transaction ({exc}); killing it as it is", flush=True)
            return None
        proc.send_signal(signal.SIGCONT)
        time.sleep(0.1)
    return None


def _echo_until(
    proc: subprocess.Popen[str], progress_lines: int | None, timeout: float = 15.0
) -> threading.Thread:
    """Show the pipeline's output; return after ``progress_lines`` progress lines (or ``timeout``
    seconds: a fast pipeline may have run out of input and print no more), or, with None, at exit
    (or ``timeout``)."""
    assert proc.stdout is not None
    stdout = proc.stdout
    enough = threading.Event()

    def pump() -> None:
        seen = 0
        try:
            for line in stdout:
                if " INFO " in line and "fencing" not in line:
                    continue  # keep the demo readable: progress, fencing and warnings only
                print(f"[pipeline] {line.rstrip()}", flush=True)
                if line.startswith("processed "):
                    seen += 1
                    if progress_lines is not None and seen >= progress_lines:
                        enough.set()
        except ValueError:  # the demo closed the pipe after killing the process
            pass
        enough.set()

    echo = threading.Thread(target=pump, name="demo-echo", daemon=True)
    echo.start()
    if progress_lines is None:
        echo.join(timeout)
    else:
        enough.wait(timeout)
    return echo
