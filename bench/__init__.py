"""Benchmarks of pulsar-txn, run with ``python -m bench SUITE`` (see ``bench/README.md``)."""
