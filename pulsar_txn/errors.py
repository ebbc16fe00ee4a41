"""Errors with Pulsar's names. One root, ``PulsarTxnError``; each says whether it is retriable and
which Pulsar ``ServerError`` code it travels as on the wire."""

from __future__ import annotations

from enum import IntEnum


class ServerError(IntEnum):
    """Pulsar protocol ServerError codes (PulsarApi.proto, protocol v20)."""

    UnknownError = 0
    MetadataError = 1
    PersistenceError = 2
    AuthenticationError = 3
    AuthorizationError = 4
    ConsumerBusy = 5
    ServiceNotReady = 6
    ProducerBlockedQuotaExceededError = 7
    ProducerBlockedQuotaExceededException = 8
    ChecksumError = 9
    UnsupportedVersionError = 10
    TopicNotFound = 11
    SubscriptionNotFound = 12
    ConsumerNotFound = 13
    TooManyRequests = 14
    TopicTerminatedError = 15
    ProducerBusy = 16
    InvalidTopicName = 17
    IncompatibleSchema = 18
    ConsumerAssignError = 19
    TransactionCoordinatorNotFound = 20
    InvalidTxnStatus = 21
    NotAllowedError = 22
    TransactionConflict = 23
    TransactionNotFound = 24
    ProducerFenced = 25


class PulsarTxnError(Exception):
    """Root of every error this library raises to applications."""

    retriable: bool = False
    server_error: ServerError = ServerError.UnknownError

    def __init__(self, message: str = "", *, retriable: bool | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if retriable is not None:
            self.retriable = retriable


class UnknownError(PulsarTxnError):
    pass


class ConfigError(PulsarTxnError, ValueError):
    """Bad configuration: names the setting and why."""

    server_error = ServerError.NotAllowedError


class PersistenceError(PulsarTxnError):
    """Kafka did not store something we needed stored."""

    retriable = True
    server_error = ServerError.PersistenceError


class DataLossError(PulsarTxnError):
    """Records a reader was asked for are gone (deleted by retention, or the partition shrank)."""


class AuthenticationError(PulsarTxnError):
    server_error = ServerError.AuthenticationError


class AuthorizationError(PulsarTxnError):
    server_error = ServerError.AuthorizationError


class ConsumerBusy(PulsarTxnError):
    server_error = ServerError.ConsumerBusy


class ServiceNotReady(PulsarTxnError):
    """The coordinator is starting or recovering; retry shortly."""

    retriable = True
    server_error = ServerError.ServiceNotReady


class UnsupportedVersionError(PulsarTxnError):
    server_error = ServerError.UnsupportedVersionError


class TopicNotFound(PulsarTxnError):
    server_error = ServerError.TopicNotFound


class InvalidTopicName(PulsarTxnError, ValueError):
    server_error = ServerError.InvalidTopicName


class TooManyRequests(PulsarTxnError):
    retriable = True
    server_error = ServerError.TooManyRequests


class TransactionCoordinatorNotFoundError(PulsarTxnError):
    """This endpoint does not own the TC (any more); look the owner up again and retry."""

    retriable = True
    server_error = ServerError.TransactionCoordinatorNotFound

    def __init__(self, message: str = "", *, owner_url: str | None = None) -> None:
        super().__init__(message)
        self.owner_url = owner_url


class InvalidTxnStatusError(PulsarTxnError):
    """An operation that the transaction's current status does not allow."""

    server_error = ServerError.InvalidTxnStatus


class NotAllowedError(PulsarTxnError):
    server_error = ServerError.NotAllowedError


class TransactionConflict(PulsarTxnError):
    server_error = ServerError.TransactionConflict


class TransactionNotFound(PulsarTxnError):
    server_error = ServerError.TransactionNotFound


class ProducerFenced(PulsarTxnError):
    server_error = ServerError.ProducerFenced


class CoordinatorFencedError(ProducerFenced):
    """A coordinator instance lost ownership of a TC while acting on it; the owner decides now.

    Retriable from a client's point of view: look the owner up again.
    """

    retriable = True
    server_error = ServerError.TransactionCoordinatorNotFound


class Timeout(PulsarTxnError):
    """No answer within the operation timeout."""

    retriable = True


class TransactionHasOperationFailed(PulsarTxnError):
    """A send or ack inside the transaction failed, so commit aborted it instead."""


class ProtocolError(PulsarTxnError):
    """A malformed or unexpected Pulsar protocol frame."""


class ConnectionClosed(PulsarTxnError):
    retriable = True


class IncompatibleSchema(PulsarTxnError, ValueError):
    """Data whose shape the operation cannot take (e.g. a DataFrame without a ``value`` column)."""

    server_error = ServerError.IncompatibleSchema


_BY_CODE: dict[ServerError, type[PulsarTxnError]] = {
    ServerError.PersistenceError: PersistenceError,
    ServerError.AuthenticationError: AuthenticationError,
    ServerError.AuthorizationError: AuthorizationError,
    ServerError.ConsumerBusy: ConsumerBusy,
    ServerError.ServiceNotReady: ServiceNotReady,
    ServerError.UnsupportedVersionError: UnsupportedVersionError,
    ServerError.TopicNotFound: TopicNotFound,
    ServerError.InvalidTopicName: InvalidTopicName,
    ServerError.IncompatibleSchema: IncompatibleSchema,
    ServerError.TooManyRequests: TooManyRequests,
    ServerError.TransactionCoordinatorNotFound: TransactionCoordinatorNotFoundError,
    ServerError.InvalidTxnStatus: InvalidTxnStatusError,
    ServerError.NotAllowedError: NotAllowedError,
    ServerError.TransactionConflict: TransactionConflict,
    ServerError.TransactionNotFound: TransactionNotFound,
    ServerError.ProducerFenced: ProducerFenced,
}


def error_from_server(code: int, message: str) -> PulsarTxnError:
    """The exception a client raises for a ServerError code received on the wire."""
    try:
        server_error = ServerError(code)
    except ValueError:
        return UnknownError(f"server error {code}: {message}")
    cls = _BY_CODE.get(server_error, UnknownError)
    err = cls(message)
    if cls is UnknownError:
        err.server_error = server_error
    return err
