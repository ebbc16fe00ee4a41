"""The public API surface: curated ``__all__``, a docstring on every public name, typed errors with
a retriable flag, and an API reference that builds without warnings."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pulsar_txn
from pulsar_txn import errors

PUBLIC = {
    "pulsar_txn": pulsar_txn.__all__,
    "pulsar_txn.asyncio": importlib.import_module("pulsar_txn.asyncio").__all__,
    "pulsar_txn.schema": importlib.import_module("pulsar_txn.schema").__all__,
    "pulsar_txn.compat": importlib.import_module("pulsar_txn.compat").__all__,
    "pulsar_txn.compat.schema": importlib.import_module("pulsar_txn.compat.schema").__all__,
}


def _undocumented() -> list[str]:
    missing = []
    for module_name, names in PUBLIC.items():
        module = importlib.import_module(module_name)
        for name in names:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not inspect.getdoc(obj):
                missing.append(f"{module_name}.{name}")
            if not inspect.isclass(obj) or issubclass(obj, BaseException):
                continue
            for attr, member in vars(obj).items():
                if attr.startswith("_") or not (inspect.isfunction(member) or isinstance(member, property)):
                    continue
                if not inspect.getdoc(getattr(obj, attr)):  # an override inherits its base's doc
                    missing.append(f"{module_name}.{name}.{attr}")
    return missing


def test_every_public_class_function_and_method_has_a_docstring() -> None:
    assert _undocumented() == []


def test_all_lists_only_existing_names_without_duplicates() -> None:
    for module_name, names in PUBLIC.items():
        module = importlib.import_module(module_name)
        assert len(names) == len(set(names)), module_name
        assert [n for n in names if not hasattr(module, n)] == []


def test_the_issue_error_names_are_exported_under_one_root_with_a_retriable_flag() -> None:
    names = [
        "TransactionConflict",
        "TransactionNotFound",
        "InvalidTxnStatusError",
        "TransactionCoordinatorNotFoundError",
        "NotAllowedError",
        "ConsumerBusy",
        "Timeout",
        "ProducerFenced",
        "TransactionHasOperationFailed",
        "IncompatibleSchema",
        "SchemaSerializationError",
    ]
    for name in names:
        cls = getattr(pulsar_txn, name)
        assert issubclass(cls, pulsar_txn.PulsarTxnError) and isinstance(cls.retriable, bool), name
    retriable = {n for n in names if getattr(pulsar_txn, n).retriable}
    assert retriable == {"TransactionCoordinatorNotFoundError", "Timeout"}


def test_every_error_class_is_documented_and_every_server_code_maps_to_its_pulsar_name() -> None:
    for cls in vars(errors).values():
        if inspect.isclass(cls) and issubclass(cls, errors.PulsarTxnError):
            assert inspect.getdoc(cls), cls.__name__
    for code in errors.ServerError:
        err = errors.error_from_server(int(code), "m")
        assert isinstance(err, errors.PulsarTxnError) and err.server_error is code


def test_api_reference_builds_without_warnings(tmp_path: Path) -> None:
    from pulsar_txn._apidoc import build

    assert build(tmp_path) == []
    pages = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*.html")}
    assert {"pulsar_txn.html", "pulsar_txn/asyncio.html", "pulsar_txn/schema.html"} <= pages
