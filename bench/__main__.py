"""``python -m bench SUITE [--quick]``: a small registry of benchmark suites."""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
from collections.abc import Callable
from types import FrameType

# suite name -> (module, one-line description). Each module exposes ``run(quick: bool) -> int``.
SUITES: dict[str, tuple[str, str]] = {
    "coordinator": ("bench.coordinator", "TC throughput/latency, batching, memory, Kafka baselines"),
    "buffer": ("bench.buffer", "transaction buffer: produce, read-committed read, recovery, reader memory"),
    "acks": ("bench.acks", "acks/s: plain individual/cumulative, transactional, Kafka commit baselines"),
    "spark": ("bench.spark", "Spark batch read rows/s: pulsar_txn source, filter on vs off, plain consumer"),
}


def _sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # run the suites' cleanup (finally blocks) on SIGTERM too


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument(
        "suite", choices=sorted(SUITES), help="; ".join(f"{k}: {v[1]}" for k, v in SUITES.items())
    )
    parser.add_argument("--quick", action="store_true", help="shorter measurement windows")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    signal.signal(signal.SIGTERM, _sigterm)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even when started with SIGINT ignored
    run: Callable[[bool], int] = importlib.import_module(SUITES[args.suite][0]).run
    try:
        return run(args.quick)
    except KeyboardInterrupt:
        print("interrupted; everything started was stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
