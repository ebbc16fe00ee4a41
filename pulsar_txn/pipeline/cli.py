"""``pulsar-txn pipeline``: run the exactly-once pipeline against a deployment, showing progress."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import threading
import time

from pulsar_txn import _args, _prometheus
from pulsar_txn.admin_http import AdminHttpServer, AdminHttpThread, TextBody
from pulsar_txn.message import Message
from pulsar_txn.naming import TopicName
from pulsar_txn.pipeline.app import ExactlyOncePipeline, PipelineProgress, PipelineSettings, upper
from pulsar_txn.pipeline.fencing import PipelineFenced


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--service-url", required=True, help="coordinator, e.g. pulsar://127.0.0.1:6650")
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (or [kafka] in --config)")
    p.add_argument(
        "--config",
        help="JSON or TOML file with a [kafka] section (SASL/SSL settings; passwords from "
        "PULSAR_TXN_SASL_PASSWORD / PULSAR_TXN_SSL_KEY_PASSWORD) and optionally [coordinator]",
    )
    p.add_argument("--input", required=True, help="input topic")
    p.add_argument("--output", required=True, help="output topic (created like the input if missing)")
    p.add_argument("--subscription", default="pulsar-txn-pipeline")
    p.add_argument("--instance-id", default="pipeline-0", help="reuse it on restart: it fences the old run")
    p.add_argument("--batch-size", type=int, default=100, help="input messages per transaction")
    p.add_argument("--txn-timeout", type=float, default=30.0, help="transaction timeout, seconds")
    p.add_argument("--idle-exit", type=float, help="exit after this many seconds without input")
    p.add_argument("--num-tcs", type=int, help="the cluster's number of TCs (default: read from Kafka)")
    p.add_argument("--snapshot-topic", help="transaction-buffer snapshot topic, if not the default")
    p.add_argument(
        "--log-topic",
        help="the coordinators' transaction log topic, if not the default (outcomes are looked up there)",
    )
    p.add_argument("--work-ms", type=_work_ms, default=0.0, help="simulated processing time per message")
    p.add_argument("--quiet", action="store_true", help="no progress line")
    p.add_argument(
        "--metrics-port",
        type=port_number,
        help="serve GET /metrics (Prometheus) on this port (0: any free one); bearer token from "
        "PULSAR_TXN_METRICS_TOKEN, else PULSAR_TXN_AUTH_TOKEN, if set",
    )
    p.add_argument("--metrics-host", default="127.0.0.1", help="address for --metrics-port")
    p.add_argument(
        "--idle-fetch-backoff-ms",
        type=int,
        help="idle gate of the input's tailing readers (KafkaConfig.idle_fetch_backoff_ms): 5 on a broker "
        "that answers empty fetches at once, such as the embedded one; 0 (off, the default unless the "
        "config file sets it) for Apache Kafka",
    )


def run(args: argparse.Namespace) -> int:
    from pulsar_txn.client import Client

    # Checked before anything starts, as the coordinator checks its own: a token with a line break
    # (as secret files end) could never match, and the endpoint would answer every scrape 401.
    for name in ("PULSAR_TXN_AUTH_TOKEN", "PULSAR_TXN_METRICS_TOKEN"):
        if os.environ.get(name):
            _args.bearer_token(os.environ[name], name)
    from pulsar_txn.cli import build_configs

    # As every other command reads Kafka: the file's [kafka] (a SASL or SSL cluster), secrets from
    # the environment (empty means unset), then the flags.
    kafka, coordinator = build_configs(args)
    if args.idle_fetch_backoff_ms is not None:
        kafka = type(kafka)(**{**kafka.model_dump(), "idle_fetch_backoff_ms": args.idle_fetch_backoff_ms})
    marker, token = coordinator.marker_secret, coordinator.auth_token
    client = Client(
        args.service_url,
        kafka=kafka,
        num_tcs=args.num_tcs,
        authentication=token.get_secret_value() if token else None,
        marker_secret=marker.get_secret_value() if marker else None,
        snapshot_topic=args.snapshot_topic or coordinator.snapshot_topic,
        log_topic=args.log_topic or coordinator.log_topic,
    )
    settings = PipelineSettings(
        args.input,
        args.output,
        subscription=args.subscription,
        instance_id=args.instance_id,
        batch_size=args.batch_size,
        transaction_timeout_s=args.txn_timeout,
        idle_exit_s=args.idle_exit,
    )
    stop = threading.Event()

    def on_signal(signum: int, _frame: object) -> None:
        if stop.is_set():
            # A second Ctrl-C / SIGTERM: stop now, whatever is being waited for. An exception
            # unwinding through the closes still waited on a coordinator that does not answer (~60 s);
            # the pipeline is safe to kill anywhere (the next run fences what is left).
            print(f"signal {signum} again: stopping now, without waiting", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(130)
        stop.set()  # the first: finish the batches in flight, then stop

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    with client:
        client.create_topic(args.output, client._partition_count(TopicName.parse(args.input)))
        shown = [0.0]

        def show(progress: PipelineProgress) -> None:
            now = time.monotonic()
            if not args.quiet and now - shown[0] >= 1.0:
                shown[0] = now
                print(_line(progress), flush=True)

        transform = upper
        if args.work_ms > 0:

            def transform(msg: Message[bytes]) -> bytes | None:
                time.sleep(args.work_ms / 1000)
                return upper(msg)

        pipeline = ExactlyOncePipeline(client, settings, transform, on_progress=show)
        metrics: AdminHttpThread | None = None
        try:
            metrics = _metrics_server(args, pipeline)
            progress = pipeline.run(stop)
        except PipelineFenced as exc:
            print(f"stopped: {exc}; " + _line(pipeline.progress), flush=True)
            return 1
        finally:
            if metrics is not None:
                metrics.stop()
            pipeline.close()
    print("done: " + _line(progress), flush=True)
    return 0


# Argparse types: a value out of range is a usage error. A work time of inf crashed the transform,
# nan and negatives were silently taken as 0; a port out of range was a traceback from bind().
_work_ms = _args.cli_number(float, "work time (ms)", 0.0, 60_000.0)
port_number = _args.cli_number(int, "port", 0, 65535)  # 0: any free one


def _metrics_server(args: argparse.Namespace, pipeline: ExactlyOncePipeline) -> AdminHttpThread | None:
    """``GET /metrics`` with the pipeline's progress, if ``--metrics-port`` was given."""
    if args.metrics_port is None:
        return None
    labels = {"instance_id": args.instance_id, "input": args.input, "output": args.output}
    metrics_token = os.environ.get("PULSAR_TXN_METRICS_TOKEN") or None

    def metrics() -> TextBody:
        progress = dataclasses.asdict(pipeline.progress)
        return TextBody(_prometheus.render_pipeline(progress, labels), _prometheus.CONTENT_TYPE)

    server = AdminHttpServer(
        {"/metrics": metrics},
        host=args.metrics_host,
        port=args.metrics_port,
        # As the coordinator's /metrics: the client's token, and a scraper's read-only one if given.
        auth_token=os.environ.get("PULSAR_TXN_AUTH_TOKEN") or None,
        path_tokens={"/metrics": metrics_token} if metrics_token else None,
    )
    thread = AdminHttpThread(server)
    print(f"metrics: {thread.start()}/metrics", flush=True)
    return thread


def _line(p: PipelineProgress) -> str:
    return (
        f"processed {p.processed} ({p.rate:,.0f} msg/s), transactions {p.transactions}, "
        f"failed batches {p.failed_batches}, sessions {p.sessions}, fenced {p.fenced}"
        + (f", foreign restarts {p.foreign_restarts}" if p.foreign_restarts else "")
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="pulsar-txn pipeline")
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))
