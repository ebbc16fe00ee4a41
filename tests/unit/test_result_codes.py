"""Every error carries pulsar-client's ``Result`` code (``exc.error()``), and the compat layer's
exceptions answer with the code their pulsar-client namesake stands for."""

from __future__ import annotations

import pulsar as real_pulsar
import pulsar.exceptions as real_exceptions
import pytest

import pulsar_txn.compat as compat
from pulsar_txn import errors


def _real_exception_names() -> list[str]:
    return sorted(n for n in dir(real_exceptions) if n[0].isupper() and n != "PulsarException")


def test_result_has_every_code_of_pulsar_client() -> None:
    real = {n for n in dir(real_pulsar.Result) if n[0].isupper()}
    assert real == set(errors.Result.__members__)


@pytest.mark.parametrize("name", _real_exception_names())
def test_compat_exception_error_names_its_result(name: str) -> None:
    exc = getattr(compat, name)("boom")
    assert isinstance(exc, compat.PulsarException)
    assert exc.error() is compat.Result[name]


def test_every_error_class_has_a_result_code() -> None:
    root = errors.PulsarTxnError
    classes = [c for c in vars(errors).values() if isinstance(c, type) and issubclass(c, root)]
    unmapped = {c.__name__ for c in classes if c("x").error() is errors.Result.UnknownError}
    # Failures pulsar-client has no code for keep UnknownError.
    assert unmapped == {"PulsarTxnError", "UnknownError", "TransactionHasOperationFailed", "ProtocolError"}


def test_server_errors_keep_their_code_through_the_wire_mapping() -> None:
    err = errors.error_from_server(errors.ServerError.TransactionConflict, "taken")
    assert err.error() is errors.Result.TransactionConflict
    assert errors.error_from_server(999, "new").error() is errors.Result.UnknownError
