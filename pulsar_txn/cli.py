"""``pulsar-txn``: standalone, coordinator, stats and metrics, delete-topic, pipeline and demo commands."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import signal
import sys
import tempfile
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from kafka_store import BrokerStartError, KafkaConfig, LocalBroker, StoreError
from pulsar_txn import _loops
from pulsar_txn._admin_cli import add_commands as add_admin_commands
from pulsar_txn._gc import tune_for_service
from pulsar_txn.config import CoordinatorConfig, validation_problems
from pulsar_txn.errors import ConfigError, PulsarTxnError
from pulsar_txn.pipeline.cli import add_arguments as pipeline_args
from pulsar_txn.pipeline.cli import port_number

if TYPE_CHECKING:
    from pulsar_txn.client import Client

log = logging.getLogger("pulsar_txn.cli")

_SECRET_ENV = {
    "auth_token": "PULSAR_TXN_AUTH_TOKEN",
    "marker_secret": "PULSAR_TXN_MARKER_SECRET",
    "metrics_token": "PULSAR_TXN_METRICS_TOKEN",
}
_KAFKA_SECRET_ENV = {
    "sasl_password": "PULSAR_TXN_SASL_PASSWORD",
    "ssl_key_password": "PULSAR_TXN_SSL_KEY_PASSWORD",  # the file says secrets never go in it
}


def _load_file(path: str | None) -> dict[str, Any]:
    if not path:
        return {}
    text = Path(path).read_bytes()
    try:
        data: Any = tomllib.loads(text.decode()) if path.endswith(".toml") else json.loads(text)
    except (ValueError, RecursionError) as exc:  # TOMLDecodeError, JSONDecodeError, UnicodeDecodeError,
        # or nesting deeper than the parser recurses
        kind = "TOML" if path.endswith(".toml") else "JSON"
        raise ConfigError(f"{path}: not valid {kind}: {exc}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a table with 'kafka' and/or 'coordinator' sections")
    # A misspelt section was dropped unread: e.g. [coordinater] lost auth_token and marker_secret,
    # and the coordinator served without them.
    unknown = sorted(set(data) - {"kafka", "coordinator"})
    if unknown:
        raise ConfigError(f"{path}: unknown section(s) {unknown}; only 'kafka' and 'coordinator' exist")
    for section in ("kafka", "coordinator"):
        if not isinstance(data.get(section, {}), dict):
            raise ConfigError(f"{path}: [{section}] must be a table of settings, not a single value")
    return data


def build_configs(
    args: argparse.Namespace, bootstrap: str | None = None
) -> tuple[KafkaConfig, CoordinatorConfig]:
    """Config file, then environment (secrets only), then flags; pydantic validates the result."""
    data = _load_file(getattr(args, "config", None))
    kafka: dict[str, Any] = dict(data.get("kafka", {}))
    coord: dict[str, Any] = dict(data.get("coordinator", {}))
    if bootstrap or getattr(args, "bootstrap_servers", None):
        kafka["bootstrap_servers"] = bootstrap or args.bootstrap_servers
    for settings, names in ((kafka, _KAFKA_SECRET_ENV), (coord, _SECRET_ENV)):
        for field, env in names.items():
            value = os.environ.get(env)
            if value:
                settings[field] = value
            elif value is not None and field not in settings:
                # Unset, not refused: docker compose passes `${VAR:-}` as an empty value. Said aloud,
                # since an empty secret file would otherwise turn authentication off silently.
                log.warning("%s is set but empty: taken as unset (no %s)", env, field)
    for flag in ("host", "port", "advertised_url", "num_tcs", "admin_port", "ownership", "group_instance_id"):
        value = getattr(args, flag, None)
        if value is not None:
            coord[flag] = value
    if getattr(args, "tc_ids", None):
        coord["ownership"] = "static"
        try:
            coord["static_tc_ids"] = tuple(int(x) for x in args.tc_ids.split(","))
        except ValueError:
            raise ConfigError(f"--tc-ids: comma-separated integers, not {args.tc_ids!r:.80}") from None
    problems = []  # both sections checked, each named: one's errors must not hide the other's
    try:
        kafka_config = KafkaConfig(**kafka)
    except ValidationError as exc:
        problems.append(f"[kafka] {validation_problems(exc)}")
    try:
        coordinator_config = CoordinatorConfig(**coord)
    except ValidationError as exc:
        problems.append(f"[coordinator] {validation_problems(exc)}")
    if problems:
        raise ConfigError(f"bad configuration: {'; '.join(problems)}")
    return kafka_config, coordinator_config


def tool_client(kafka: KafkaConfig, config: CoordinatorConfig, service_url: str | None = None) -> Client:
    """The client of an admin command. Its TC count is the one configured only if the config (file
    or flag) names it; else the transaction log's partition count, as every reader of a deployment
    must use (CoordinatorConfig's default of 16 would misread a cluster of another size)."""
    from pulsar_txn.client import Client

    return Client(
        service_url or "pulsar://unused:6650",
        kafka=kafka,
        num_tcs=config.num_tcs if "num_tcs" in config.model_fields_set else None,
        marker_secret=config.marker_secret.get_secret_value() if config.marker_secret else None,
        snapshot_topic=config.snapshot_topic,
        log_topic=config.log_topic,
        # build_configs already merged PULSAR_TXN_AUTH_TOKEN into the config's auth_token.
        authentication=config.auth_token.get_secret_value() if config.auth_token else None,
    )


async def _serve_forever(
    kafka: KafkaConfig,
    config: CoordinatorConfig,
    ready_file: str | None,
    broker: LocalBroker | None = None,
) -> None:
    """Serve until SIGINT/SIGTERM; with ``broker`` (standalone's own), until it exits too
    (``BrokerStartError``): a coordinator without its Kafka only logged connection failures."""
    from pulsar_txn.node import start_node

    node = await start_node(kafka, config)
    waits: list[asyncio.Future[Any]] = []
    try:  # from here on, whatever ends this (a signal, a bad ready file) stops the node cleanly
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        ready = asyncio.ensure_future(node.service.wait_ready(config.recovery_timeout_ms / 1000))
        stopped = asyncio.ensure_future(stop.wait())
        waits += [ready, stopped]
        if broker is not None:
            waits.append(asyncio.ensure_future(_watch_broker(broker, stop)))
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        if stopped.done():  # stopped while recovering: never announced as ready
            ready.cancel()
            return
        if not ready.result():
            log.warning(
                "no TC ready after %d ms; serving anyway (clients get ServiceNotReady)",
                config.recovery_timeout_ms,
            )
        info = {
            "url": node.url,
            "admin_url": node.admin_url,
            "bootstrap_servers": kafka.bootstrap_servers,
            "event_loop": _loops.loop_kind(loop),
        }
        if ready_file:
            # Written whole, then renamed: a watcher that sees the file can read it. Before the
            # ready line, so that a ready file that cannot be written is not announced as ready.
            tmp = Path(f"{ready_file}.tmp")
            tmp.write_text(json.dumps(info))
            os.replace(tmp, ready_file)
        print(json.dumps(info), flush=True)
        await stopped
    finally:
        for wait in waits:
            wait.cancel()
        log.info("stopping coordinator")
        await node.stop()
    if broker is not None and not broker.alive():
        raise BrokerStartError(
            f"the embedded broker exited (its log is in {broker.data_dir}); the coordinator stopped"
        )


async def _watch_broker(broker: LocalBroker, stop: asyncio.Event) -> None:
    while broker.alive():
        await asyncio.sleep(1.0)
    log.error("the embedded broker exited: stopping")
    stop.set()


def cmd_coordinator(args: argparse.Namespace) -> int:
    kafka, config = build_configs(args)
    _stop_cleanly_on_sigterm()  # until the node's loop takes SIGTERM over (in a container: PID 1)
    tune_for_service()
    _loops.run(_serve_forever(kafka, config, args.ready_file))
    return 0


def cmd_standalone(args: argparse.Namespace) -> int:
    data_dir = Path(args.data_dir)
    broker = LocalBroker(data_dir / "broker", port=args.kafka_port)
    _stop_cleanly_on_sigterm()  # a SIGTERM while the broker starts must not leave it behind
    bootstrap = broker.start()
    try:
        kafka, config = build_configs(args, bootstrap)
        print(f"embedded Kafka broker: {bootstrap}  (data in {data_dir})", flush=True)
        tune_for_service()
        _loops.run(_serve_forever(kafka, config, args.ready_file, broker))
    finally:
        broker.stop()
        print("standalone stopped", flush=True)
    return 0


def cmd_tb_stats(args: argparse.Namespace) -> int:
    """Computed from Kafka (latest snapshot + scan), so it works with or without a coordinator."""
    from pulsar_txn._admin_cli import _with_admin

    return _with_admin(args, lambda admin: admin.transaction_buffer_stats(args.topic))


def cmd_delete_topic(args: argparse.Namespace) -> int:
    """``pulsar-admin topics delete``: the topic, its subscriptions, their pending-ack logs and its
    TB snapshots; prints what was deleted and kept as JSON."""
    kafka, config = build_configs(args)
    client = tool_client(kafka, config)
    try:
        deleted = client.delete_topic(args.topic, force=args.force)
    finally:
        client.close()
    print(json.dumps(dataclasses.asdict(deleted), indent=2, sort_keys=True))
    return 0


def _at_least(minimum: int) -> Callable[[str], int]:
    """An argparse type: an integer not below ``minimum`` (argparse reports the rest, exit 2)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


def _interrupt(signum: int, _frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _stop_cleanly_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C: the demos' ``finally`` blocks stop the pipeline process and
    the embedded broker they started (left running before)."""
    signal.signal(signal.SIGTERM, _interrupt)


def cmd_demo(args: argparse.Namespace) -> int:
    from pulsar_txn.pipeline.demo import run_pipeline_demo

    _stop_cleanly_on_sigterm()
    with _demo_dir(args.data_dir) as data_dir:
        return run_pipeline_demo(data_dir, messages=args.messages, kills=args.kills)


def cmd_tc_demo(args: argparse.Namespace) -> int:
    from pulsar_txn.demo import run_demo

    _stop_cleanly_on_sigterm()
    with _demo_dir(args.data_dir) as data_dir:
        return run_demo(data_dir, transactions=args.transactions)


@contextlib.contextmanager
def _demo_dir(given: str | None) -> Iterator[Path]:
    """The data dir given (kept), or a temporary one removed afterwards (~25 MB per demo run)."""
    if given:
        yield Path(given)
        return
    with tempfile.TemporaryDirectory(prefix="pulsar-txn-demo-") as made:
        yield Path(made)


def cmd_migrate_check(args: argparse.Namespace) -> int:
    from pulsar_txn.compat.check import main as check_main

    return check_main([*args.paths, *(["--json"] if args.json else [])])


def cmd_migrate_run(args: argparse.Namespace) -> int:
    from pulsar_txn.compat.run import main as run_main

    _stop_cleanly_on_sigterm()  # the embedded broker and coordinator started for the run are stopped
    return run_main(args.rest)


def cmd_pipeline(args: argparse.Namespace) -> int:
    from pulsar_txn.pipeline.cli import run

    tune_for_service()
    return run(args)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="JSON or TOML file with [kafka] and [coordinator] sections")
    p.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=int, help="Pulsar-protocol port (default 6650; 0 = any free port)")
    p.add_argument("--advertised-url", help="pulsar://host:port that clients should use for this instance")
    p.add_argument("--admin-port", type=int, help="serve stats over HTTP on this port")
    p.add_argument("--num-tcs", type=int, help="number of TCs (log partitions) when initialising a cluster")
    p.add_argument("--ownership", choices=["group", "static"], help="how TC ids are shared among instances")
    p.add_argument("--tc-ids", help="comma-separated TC ids to own (implies --ownership static)")
    p.add_argument(
        "--group-instance-id",
        help="static group membership: a restart with the same id takes its TCs and TB partitions back"
        " at once (unique per instance)",
    )
    p.add_argument("--ready-file", help="write the listening URLs here as JSON once ready")


def parser() -> argparse.ArgumentParser:
    root = argparse.ArgumentParser(prog="pulsar-txn", description=__doc__)
    root.add_argument("-v", "--verbose", action="store_true")
    sub = root.add_subparsers(dest="command", required=True)

    p = sub.add_parser("coordinator", help="run a coordinator instance against a Kafka cluster")
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (or [kafka] in --config)")
    _add_common(p)
    p.set_defaults(func=cmd_coordinator)

    p = sub.add_parser("standalone", help="embedded Kafka broker + coordinator in the foreground")
    p.add_argument("--data-dir", default=".noida", help="where the embedded broker keeps its data")
    p.add_argument("--kafka-port", type=port_number, help="Kafka port (default: a free port)")
    _add_common(p)
    p.set_defaults(func=cmd_standalone)

    add_admin_commands(sub)

    p = sub.add_parser("transaction-buffer-stats", help="a topic's transaction-buffer state as JSON")
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (or [kafka] in --config)")
    p.add_argument("--config", help="JSON or TOML file with [kafka] and [coordinator] sections")
    p.add_argument("--topic", required=True, help="topic or topic-partition-N")
    p.set_defaults(func=cmd_tb_stats)

    p = sub.add_parser("delete-topic", help="delete a topic with its subscriptions and pending-ack logs")
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap servers (or [kafka] in --config)")
    p.add_argument("--config", help="JSON or TOML file with [kafka] and [coordinator] sections")
    p.add_argument("--force", action="store_true", help="even if a subscription has connected consumers")
    p.add_argument("topic")
    p.set_defaults(func=cmd_delete_topic)

    p = sub.add_parser("pipeline", help="the exactly-once pipeline: consume, transform, produce, ack")
    pipeline_args(p)
    p.set_defaults(func=cmd_pipeline)

    p = sub.add_parser("demo", help="the main job: the exactly-once pipeline, killed and restarted, checked")
    p.add_argument("--data-dir", help="broker data dir (default: a new temporary dir)")
    p.add_argument("--messages", type=_at_least(1), default=20_000, help="input messages")
    p.add_argument("--kills", type=_at_least(0), default=2, help="how many times the pipeline is SIGKILLed")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser(
        "migrate-check", help="what a program written for pulsar-client does on pulsar_txn.compat"
    )
    p.add_argument("paths", nargs="+", help="Python files or directories")
    p.add_argument("--json", action="store_true", help="print the findings as JSON")
    p.set_defaults(func=cmd_migrate_check)

    p = sub.add_parser(
        "migrate-run",
        help="run a program written for pulsar-client, unchanged, on pulsar_txn.compat",
        add_help=False,
    )
    p.add_argument(
        "rest", nargs=argparse.REMAINDER, help="[--service-url U --bootstrap-servers B] program.py [args]"
    )
    p.set_defaults(func=cmd_migrate_run)

    p = sub.add_parser("tc-demo", help="standalone + a scripted series of raw coordinator transactions")
    p.add_argument("--data-dir", help="broker data dir (default: a new temporary dir)")
    p.add_argument("--transactions", type=_at_least(1), default=200)
    p.set_defaults(func=cmd_tc_demo)
    return root


def _log_setup(verbose: bool) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    verbose = 0  # the root's own flag may come first: ``pulsar-txn -v migrate-run --no-check x.py``
    while argv[verbose : verbose + 1] in (["-v"], ["--verbose"]):
        verbose += 1
    if argv[verbose : verbose + 1] == ["migrate-run"]:
        # Its own options come before the program's arguments; argparse's REMAINDER would not
        # pass a leading option (``--no-check``) through, so it parses its command line itself.
        from pulsar_txn.compat.run import main as run_main

        # The embedded broker and coordinator started for the run are stopped on SIGTERM too (this
        # path bypasses cmd_migrate_run, and a SIGTERM used to leave the broker running).
        _stop_cleanly_on_sigterm()
        if verbose:  # else the program's own logging setup stands, as when run by python
            _log_setup(True)
        try:
            return run_main(argv[verbose + 1 :])
        except (PulsarTxnError, StoreError, OSError) as exc:  # starting Kafka or the coordinator
            print(f"pulsar-txn migrate-run: error: {exc}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            return 130
    args = parser().parse_args(argv)
    _log_setup(args.verbose)
    try:
        code: int = args.func(args)
        return code
    except (PulsarTxnError, StoreError, OSError) as exc:
        print(f"pulsar-txn: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
