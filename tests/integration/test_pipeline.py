"""The exactly-once pipeline in-process: output holds each input once, in per-partition order, also when
transactions fail midway and when a run is abandoned with a transaction open."""

from __future__ import annotations

import subprocess
import sys
import threading
import urllib.request
from collections.abc import Callable

import pytest

from pulsar_txn.errors import ConfigError
from pulsar_txn.message import Message
from pulsar_txn.pipeline import ExactlyOncePipeline, PipelineSettings, verify_exactly_once
from pulsar_txn.pipeline.app import upper
from tests.conftest import REPO, Cluster, wait_until

pytestmark = pytest.mark.integration


def _fill(c: Cluster, topic: str, n: int, partitions: int = 3) -> None:
    c.client.create_topic(topic, partitions)
    producer = c.client.create_producer(topic)
    for i in range(n):
        producer.send_async(f"msg-{i:05d}", partition_key=f"k{i % 17}")
    producer.flush()


def _settings(uid: str, **kw: object) -> PipelineSettings:
    base: dict[str, object] = {"subscription": f"pipe_{uid}", "instance_id": f"p-{uid}", "idle_exit_s": 2.0}
    base.update(kw)
    return PipelineSettings(f"in_{uid}", f"out_{uid}", **base)  # type: ignore[arg-type]


def test_pipeline_output_holds_each_input_exactly_once_in_partition_order(cluster, uid: str) -> None:
    c = cluster()
    _fill(c, f"in_{uid}", 1000)
    c.client.create_topic(f"out_{uid}", 3)
    pipeline = ExactlyOncePipeline(c.client, _settings(uid, batch_size=100))
    progress = pipeline.run()
    pipeline.close()
    assert progress.processed == 1000 and progress.failed_batches == 0
    verdict = verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper)
    assert verdict.ok, str(verdict)


def test_failed_batches_are_aborted_and_redone_once(cluster, uid: str) -> None:
    c = cluster()
    _fill(c, f"in_{uid}", 600)
    c.client.create_topic(f"out_{uid}", 3)
    fail_at = {150, 420, 421}  # the transform fails on these inputs' first attempt

    def flaky(msg: Message) -> bytes:
        n = int(msg.data.decode().split("-")[1])
        if n in fail_at:
            fail_at.discard(n)
            raise TransformFailed(n)
        return upper(msg)

    pipeline = ExactlyOncePipeline(c.client, _settings(uid, batch_size=50), transform=flaky)
    failures = 0
    for _ in range(5):  # an application error ends run() (the caller decides); the next run redoes it
        try:
            pipeline.run()
            break
        except TransformFailed:
            failures += 1
    pipeline.close()
    assert failures == 3
    verdict = verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper)
    assert verdict.ok, str(verdict)


class TransformFailed(Exception):
    pass


def test_restarted_pipeline_fences_the_transaction_its_predecessor_left_open(cluster, uid: str) -> None:
    c = cluster()
    _fill(c, f"in_{uid}", 300)
    c.client.create_topic(f"out_{uid}", 3)
    # A first run that dies mid-batch: it produced and acked inside a transaction nobody ends.
    stuck = threading.Event()

    def die_midway(msg: Message) -> bytes:
        if int(msg.data.decode().split("-")[1]) == 200:
            stuck.set()
            raise SystemExit  # like a crash: the open transaction is abandoned, not aborted
        return upper(msg)

    settings = _settings(uid, batch_size=40, transaction_timeout_s=600)
    first = ExactlyOncePipeline(c.client, settings, die_midway)
    first._process = _no_abort(first._process)  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        first.run()
    assert stuck.is_set()
    # A new run with the same instance id aborts the leftover at once (its timeout is 10 minutes).
    second = ExactlyOncePipeline(c.client, _settings(uid, batch_size=40))
    progress = second.run()
    second.close()
    assert progress.fenced >= 1
    verdict = verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper)
    assert verdict.ok, str(verdict)


def _no_abort(process):  # type: ignore[no-untyped-def]
    """Wrap ``_process`` so that a crash leaves its transaction open, as a SIGKILL would."""
    from pulsar_txn.transaction import Transaction

    def run(consumer, batch, *rest):  # type: ignore[no-untyped-def]
        original = Transaction.abort
        Transaction.abort = lambda self: None  # type: ignore[method-assign, assignment]
        try:
            return process(consumer, batch, *rest)
        finally:
            Transaction.abort = original  # type: ignore[method-assign]

    return run


def test_an_output_topic_with_fewer_partitions_than_the_input_is_a_config_error_not_a_retry_loop(
    cluster, uid: str
) -> None:
    c = cluster()
    _fill(c, f"in_{uid}", 30)
    c.client.create_topic(f"out_{uid}", 1)
    pipeline = ExactlyOncePipeline(c.client, _settings(uid, batch_size=10))
    with pytest.raises(ConfigError, match="as many partitions as the input"):
        pipeline.run()
    pipeline.close()


def test_a_missing_output_topic_is_a_config_error_not_a_retry_loop(cluster, uid: str) -> None:
    c = cluster()
    _fill(c, f"in_{uid}", 10)
    pipeline = ExactlyOncePipeline(c.client, _settings(uid, retry_backoff_s=0.05))
    with pytest.raises(ConfigError, match="does not exist: create it with as many partitions"):
        pipeline.run()
    assert pipeline.progress.sessions == 1
    pipeline.close()


def test_pipeline_rejects_same_input_and_output() -> None:
    with pytest.raises(ConfigError):
        PipelineSettings("t", "t")


def test_pipeline_command_serves_its_progress_as_prometheus_metrics(cluster, uid: str) -> None:
    c = cluster()
    _fill(c, f"in_{uid}", 300)
    cmd = [sys.executable, "-m", "pulsar_txn.cli", "pipeline", "--service-url", c.coordinator.url]
    cmd += ["--bootstrap-servers", c.client.kafka.bootstrap_servers, "--input", f"in_{uid}"]
    cmd += ["--output", f"out_{uid}", "--subscription", f"pipe_{uid}", "--instance-id", f"p-{uid}"]
    cmd += ["--num-tcs", str(c.config.num_tcs), "--snapshot-topic", c.config.snapshot_topic]
    cmd += ["--idle-exit", "4", "--metrics-port", "0", "--quiet"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=REPO, text=True)
    drain: threading.Thread | None = None
    try:
        assert proc.stdout is not None
        lines = []
        while not (lines and lines[-1].startswith("metrics: http://")) and len(lines) < 50:
            lines.append(proc.stdout.readline())  # log lines first (created topics...)
            assert lines[-1], f"the pipeline exited before serving metrics: {lines}"
        url = lines[-1].split(" ", 1)[1].strip()
        out = proc.stdout
        drain = threading.Thread(target=lambda: lines.extend(out), daemon=True)  # never let the pipe fill
        drain.start()
        lbl = f'{{instance_id="p-{uid}",input="in_{uid}",output="out_{uid}"}}'

        def processed() -> str | None:
            with urllib.request.urlopen(url, timeout=5) as response:
                text = response.read().decode()
            return text if f"pulsar_txn_pipeline_processed_total{lbl} 300" in text else None

        text = wait_until(processed, 60, what="all 300 inputs committed")
        assert f"pulsar_txn_pipeline_failed_batches_total{lbl} 0" in text
        assert f"pulsar_txn_pipeline_last_commit_timestamp_seconds{lbl} " in text
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if drain is not None:
            drain.join(10)  # ends at EOF, now that the process is gone
        if proc.stdout is not None:
            proc.stdout.close()
    verdict = verify_exactly_once(c.client, f"in_{uid}", f"out_{uid}", upper)
    assert verdict.ok, str(verdict)


def test_a_pipeline_whose_credentials_are_refused_stops_instead_of_restarting_for_ever(
    cluster: Callable[..., Cluster], uid: str
) -> None:
    """A wrong token made every session fail and restart (47 sessions in 40 s, never ending); it is
    a failure no new session fixes, so the run ends with AuthenticationError."""
    from pulsar_txn.client import Client
    from pulsar_txn.errors import AuthenticationError

    c = cluster(auth_token="the-right-token")
    _fill(c, f"in_{uid}", 20, partitions=1)
    c.client.create_topic(f"out_{uid}", 1)
    assert c.coordinator.url is not None
    wrong = Client(
        c.coordinator.url,
        kafka=c.client.kafka,
        num_tcs=c.config.num_tcs,
        log_topic=c.config.log_topic,
        snapshot_topic=c.config.snapshot_topic,
        authentication="a-wrong-token",
        operation_timeout_seconds=10,
    )
    pipeline = ExactlyOncePipeline(wrong, _settings(uid, batch_size=10, retry_backoff_s=0.2))
    try:
        with pytest.raises(AuthenticationError):
            pipeline.run()
        assert pipeline.progress.sessions == 1
    finally:
        pipeline.close()
        wrong.close()


def test_a_second_sigint_stops_the_pipeline_at_once_while_the_coordinator_does_not_answer(
    coordinator_process, coord_config, kafka, uid: str, tmp_path
) -> None:
    """docs/pipeline.md: the second SIGINT/SIGTERM stops it at once (exit 130), e.g. when the
    coordinator does not answer. It used to wait for the commits in flight (and swallow further
    Ctrl-Cs) until the TC connection's keep-alive gave up, ~60 s (review, session 34)."""
    import signal
    import time

    from pulsar_txn.client import Client

    cfg = coord_config(tb_service_enabled=False)
    coordinator = coordinator_process(cfg).start()
    with Client(
        coordinator.url,
        kafka=kafka,
        num_tcs=cfg.num_tcs,
        snapshot_topic=cfg.snapshot_topic,
        log_topic=cfg.log_topic,
    ) as client:
        client.create_topic(f"in_{uid}", 1)
        client.create_topic(f"out_{uid}", 1)
        producer = client.create_producer(f"in_{uid}")
        for i in range(5000):
            producer.send_async(f"m{i}")
        producer.flush()
    cmd = [sys.executable, "-m", "pulsar_txn.cli", "pipeline", "--service-url", coordinator.url]
    cmd += ["--bootstrap-servers", kafka.bootstrap_servers, "--input", f"in_{uid}", "--output", f"out_{uid}"]
    cmd += ["--subscription", f"s_{uid}", "--instance-id", f"p-{uid}", "--num-tcs", str(cfg.num_tcs)]
    cmd += ["--snapshot-topic", cfg.snapshot_topic, "--work-ms", "1", "--batch-size", "20", "--quiet"]
    with open(tmp_path / "pipeline.log", "w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=REPO)
    assert coordinator.proc is not None
    try:
        time.sleep(5)  # committing batches
        coordinator.proc.send_signal(signal.SIGSTOP)
        time.sleep(1.0)
        proc.send_signal(signal.SIGINT)  # the first: finish what is in flight (which cannot end)
        time.sleep(1.0)
        started = time.monotonic()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(30)
        took = time.monotonic() - started
    finally:
        coordinator.proc.send_signal(signal.SIGCONT)
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert code == 130, (tmp_path / "pipeline.log").read_text()[-2000:]
    assert took < 5, took
