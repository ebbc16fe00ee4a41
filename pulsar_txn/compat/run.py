"""The migration harness's runner: run a program written for pulsar-client, unchanged, on Kafka.

``pulsar-txn migrate-run [--bootstrap-servers B --service-url U] program.py [args...]`` makes
``import pulsar`` (and ``pulsar.asyncio``, ``pulsar.schema``, ``pulsar.exceptions``) give
``pulsar_txn.compat`` inside the program, points every ``pulsar.Client(...)`` it makes at one
deployment, and runs the program as ``__main__``. Without ``--service-url`` the deployment is a
coordinator started here, against ``--bootstrap-servers`` or, if none is given, an embedded broker;
both are stopped when the program ends. The checker's findings are printed first (``--no-check``
skips them). The exit status is the program's.

This is for trying a program before changing it; the lasting change is the import line
(``import pulsar_txn.compat as pulsar``) and saying where Kafka is.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import runpy
import sys
import traceback
import types
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from pulsar_txn import client as _native_client
from pulsar_txn import compat
from pulsar_txn.compat import asyncio as compat_asyncio
from pulsar_txn.compat import check as _check
from pulsar_txn.compat import schema as compat_schema
from pulsar_txn.config import CoordinatorConfig

_MODULES = ("pulsar", "pulsar.asyncio", "pulsar.schema", "pulsar.exceptions")


def _record_types() -> dict[str, Any]:
    """pulsar-client's record classes (``Record``, ``String``...), if it is installed: programs
    define their schemas with them, and compat's Avro / JSON schemas take them."""
    try:
        real_schema = importlib.import_module("pulsar.schema")
    except ImportError:
        return {}
    return {n: getattr(real_schema, n) for n in _check.RECORD_NAMES if hasattr(real_schema, n)}


def _client_class(base: Any, service_url: str, defaults: dict[str, Any]) -> type:
    """``base`` (compat's Client, sync or asyncio) with the deployment filled in."""

    def __init__(self: Any, _service_url: str = service_url, *args: Any, **kwargs: Any) -> None:
        kwargs.pop("service_url", None)  # whatever the program names, it gets this deployment
        for name, value in defaults.items():
            kwargs.setdefault(name, value)
        base.__init__(self, service_url, *args, **kwargs)

    return type("Client", (base,), {"__init__": __init__, "__doc__": base.__doc__})


def _module(name: str, source: types.ModuleType, **overrides: Any) -> types.ModuleType:
    """A module ``name`` holding ``source``'s public names, with ``overrides`` on top."""
    module = types.ModuleType(name, source.__doc__)
    module.__dict__.update({n: getattr(source, n) for n in source.__all__})
    module.__dict__.update(overrides)
    return module


@contextlib.contextmanager
def pulsar_modules(service_url: str, defaults: dict[str, Any]) -> Iterator[types.ModuleType]:
    """While inside, ``import pulsar`` gives ``pulsar_txn.compat`` with its ``Client`` pointed at
    ``service_url`` and ``defaults`` (``bootstrap_servers=``...); the modules are restored after."""
    records = _record_types()  # before the real pulsar-client's modules are hidden
    saved = {name: sys.modules.get(name) for name in _MODULES}
    top = _module("pulsar", compat, Client=_client_class(compat.Client, service_url, defaults))
    top.__path__ = []  # a package, so that ``import pulsar.schema`` looks in sys.modules
    aio = _module(
        "pulsar.asyncio", compat_asyncio, Client=_client_class(compat_asyncio.Client, service_url, defaults)
    )
    sch = _module("pulsar.schema", compat_schema, **records)
    exc = _module("pulsar.exceptions", compat.exceptions)
    top.asyncio, top.schema, top.exceptions = aio, sch, exc  # type: ignore[attr-defined]
    sys.modules.update({"pulsar": top, "pulsar.asyncio": aio, "pulsar.schema": sch, "pulsar.exceptions": exc})
    try:
        yield top
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


def run_program(path: str, args: Sequence[str], service_url: str, defaults: dict[str, Any]) -> int:
    """Run ``path`` as ``__main__`` with ``pulsar_modules``; its exit status (1 if it raised)."""
    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *args]
    # As ``python path`` does: the program's own directory first, so its sibling modules import.
    sys.path.insert(0, str(Path(path).resolve().parent))
    try:
        with pulsar_modules(service_url, defaults):
            runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None or isinstance(code, int):
            return code or 0
        print(code, file=sys.stderr)  # as Python does with sys.exit("message")
        return 1
    except Exception:  # the program's own failure: report it as Python would, exit 1
        traceback.print_exc()
        return 1
    finally:
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pulsar-txn migrate-run",
        description="Run a program written for pulsar-client, unchanged, on pulsar_txn.compat.",
    )
    parser.add_argument("--service-url", help="an existing coordinator (default: one started here)")
    parser.add_argument("--bootstrap-servers", help="Kafka (default: an embedded broker started here)")
    parser.add_argument("--no-check", action="store_true", help="do not print the checker's findings first")
    parser.add_argument("program", help="the Python program")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the program's arguments")
    opts = parser.parse_args(argv)
    if not Path(opts.program).is_file():
        parser.error(f"no such program: {opts.program}")
    if not opts.no_check:
        findings = [f for f in _check.check_paths([opts.program]) if f.kind not in ("import", "change")]
        for finding in findings:
            print(f"migrate-check: {finding}", file=sys.stderr)
        if any(f.kind in _check.FAILING for f in findings):
            print("migrate-check: the program will probably fail here; running it anyway", file=sys.stderr)
    if opts.service_url:
        if not opts.bootstrap_servers:
            parser.error("--service-url needs --bootstrap-servers (where Kafka is)")
        return run_program(
            opts.program, opts.args, opts.service_url, {"bootstrap_servers": opts.bootstrap_servers}
        )
    config = CoordinatorConfig(port=0, num_tcs=4, ownership="static", static_tc_ids=(0, 1, 2, 3))
    if opts.bootstrap_servers and _has_deployment(opts.bootstrap_servers, config.log_topic):
        # A coordinator of the run's own would hand out TxnIDs that the deployment's coordinators
        # hand out too, and its markers in shared topics would end the deployment's transactions.
        print(
            f"migrate-run: {opts.bootstrap_servers} holds a pulsar-txn deployment ({config.log_topic}): "
            "pass its coordinator with --service-url",
            file=sys.stderr,
        )
        return 2
    if opts.bootstrap_servers:
        # Someone else's Kafka: the run's coordinator keeps to topics and groups of its own. With the
        # default names it claimed TCs 0-3 of the deployment's transaction log from its coordinators.
        run = f"migrate_{uuid.uuid4().hex[:8]}"
        config = config.model_copy(
            update={
                "log_topic": f"__pulsar_txn_log_{run}",
                "owners_topic": f"__pulsar_txn_tc_owners_{run}",
                "snapshot_topic": f"__transaction_buffer_snapshot_{run}",
                "coordinator_group": f"pulsar-txn-coordinators-{run}",
                "tb_group": f"pulsar-txn-tb-{run}",
                "tb_service_enabled": False,  # it would load every topic of the cluster
            }
        )
    with _native_client.Client.embedded(
        bootstrap_servers=opts.bootstrap_servers, coordinator=config
    ) as holder:
        defaults = {
            "kafka": holder.kafka,
            "num_tcs": config.num_tcs,
            "log_topic": config.log_topic,
            "snapshot_topic": config.snapshot_topic,
        }
        print(
            f"migrate-run: coordinator {holder.service_url}, Kafka {holder.kafka.bootstrap_servers}",
            file=sys.stderr,
        )
        return run_program(opts.program, opts.args, holder.service_url, defaults)


def _has_deployment(bootstrap_servers: str, log_topic: str) -> bool:
    from kafka_store import KafkaConfig, TopicAdmin

    return TopicAdmin(KafkaConfig(bootstrap_servers=bootstrap_servers)).topic_exists(log_topic)


if __name__ == "__main__":
    sys.exit(main())
