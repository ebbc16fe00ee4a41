"""Errors with Pulsar's names. One root, ``PulsarTxnError``; each says whether it is retriable and
which Pulsar ``ServerError`` code it travels as on the wire."""

from __future__ import annotations

from enum import IntEnum, StrEnum

from kafka_store.errors import (
    BrokerUnavailableError,
    ClientConfigError,
    RecordTooLargeError,
    StoreError,
    TopicNotFoundError,
)


class Result(StrEnum):
    """pulsar-client's ``Result`` codes. A native ``send_async`` callback gets ``Result.Ok`` as its
    first argument on success and the typed ``PulsarTxnError`` on failure; the compat layer's gets
    the failure's code (``exc.error()``), as pulsar-client's does."""

    Ok = "Ok"
    UnknownError = "UnknownError"
    InvalidConfiguration = "InvalidConfiguration"
    Timeout = "Timeout"
    LookupError = "LookupError"
    ConnectError = "ConnectError"
    ReadError = "ReadError"
    AuthenticationError = "AuthenticationError"
    AuthorizationError = "AuthorizationError"
    ErrorGettingAuthenticationData = "ErrorGettingAuthenticationData"
    BrokerMetadataError = "BrokerMetadataError"
    BrokerPersistenceError = "BrokerPersistenceError"
    ChecksumError = "ChecksumError"
    ConsumerBusy = "ConsumerBusy"
    NotConnected = "NotConnected"
    AlreadyClosed = "AlreadyClosed"
    InvalidMessage = "InvalidMessage"
    ConsumerNotInitialized = "ConsumerNotInitialized"
    ProducerNotInitialized = "ProducerNotInitialized"
    ProducerBusy = "ProducerBusy"
    TooManyLookupRequestException = "TooManyLookupRequestException"
    InvalidTopicName = "InvalidTopicName"
    InvalidUrl = "InvalidUrl"
    ServiceUnitNotReady = "ServiceUnitNotReady"
    OperationNotSupported = "OperationNotSupported"
    ProducerBlockedQuotaExceededError = "ProducerBlockedQuotaExceededError"
    ProducerBlockedQuotaExceededException = "ProducerBlockedQuotaExceededException"
    ProducerQueueIsFull = "ProducerQueueIsFull"
    MessageTooBig = "MessageTooBig"
    TopicNotFound = "TopicNotFound"
    SubscriptionNotFound = "SubscriptionNotFound"
    ConsumerNotFound = "ConsumerNotFound"
    UnsupportedVersionError = "UnsupportedVersionError"
    TopicTerminated = "TopicTerminated"
    CryptoError = "CryptoError"
    IncompatibleSchema = "IncompatibleSchema"
    ConsumerAssignError = "ConsumerAssignError"
    CumulativeAcknowledgementNotAllowedError = "CumulativeAcknowledgementNotAllowedError"
    TransactionCoordinatorNotFoundError = "TransactionCoordinatorNotFoundError"
    InvalidTxnStatusError = "InvalidTxnStatusError"
    NotAllowedError = "NotAllowedError"
    TransactionConflict = "TransactionConflict"
    TransactionNotFound = "TransactionNotFound"
    ProducerFenced = "ProducerFenced"
    MemoryBufferIsFull = "MemoryBufferIsFull"
    Interrupted = "Interrupted"


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
    """Root of every error this library raises to applications.

    ``retriable`` says whether repeating the same operation may succeed (``Timeout``,
    ``ServiceNotReady``, ...); when it is False, retry only at a higher level (a new transaction).
    ``server_error`` is the Pulsar protocol code the error travels as; ``error()`` the
    pulsar-client ``Result`` code.
    """

    retriable: bool = False
    server_error: ServerError = ServerError.UnknownError
    result: Result = Result.UnknownError  # pulsar-client's code for this failure

    def __init__(self, message: str = "", *, retriable: bool | None = None) -> None:
        super().__init__(message or self.__class__.__name__)
        if retriable is not None:
            self.retriable = retriable

    def error(self) -> Result:
        """pulsar-client's ``Result`` code of this failure (``PulsarException.error()``)."""
        return self.result


class UnknownError(PulsarTxnError):
    """An error the library cannot classify (an unknown server code)."""


class ConfigError(PulsarTxnError, ValueError):
    """Bad configuration: names the setting and why."""

    result = Result.InvalidConfiguration
    server_error = ServerError.NotAllowedError


class PersistenceError(PulsarTxnError):
    """Kafka did not store something we needed stored."""

    result = Result.BrokerPersistenceError
    retriable = True
    server_error = ServerError.PersistenceError


class ConnectError(PulsarTxnError):
    """Kafka did not answer in time: a dead broker, a wrong address, a network partition (Pulsar's
    ``ConnectError``)."""

    result = Result.ConnectError
    retriable = True
    server_error = ServerError.ServiceNotReady


class MessageTooBig(PulsarTxnError):
    """A message is larger than the producer or the broker accepts (Pulsar's ``MessageTooBig``)."""

    result = Result.MessageTooBig


class DataLossError(PulsarTxnError):
    """Records a reader was asked for are gone (deleted by retention, or the partition shrank)."""

    result = Result.ReadError


class AuthenticationError(PulsarTxnError):
    """The coordinator rejected the client's credentials."""

    result = Result.AuthenticationError
    server_error = ServerError.AuthenticationError


class AuthorizationError(PulsarTxnError):
    """The credentials are valid but do not allow this operation."""

    result = Result.AuthorizationError
    server_error = ServerError.AuthorizationError


class ConsumerBusy(PulsarTxnError):
    """An Exclusive subscription already has a consumer."""

    result = Result.ConsumerBusy
    server_error = ServerError.ConsumerBusy


class ProducerBusy(PulsarTxnError):
    """A producer of this name is already open on the topic (checked within one client)."""

    result = Result.ProducerBusy
    server_error = ServerError.ProducerBusy


class ServiceNotReady(PulsarTxnError):
    """The coordinator is starting or recovering; retry shortly."""

    result = Result.ServiceUnitNotReady
    retriable = True
    server_error = ServerError.ServiceNotReady


class UnsupportedVersionError(PulsarTxnError):
    """The peer speaks a protocol version this library does not support."""

    result = Result.UnsupportedVersionError
    server_error = ServerError.UnsupportedVersionError


class TopicNotFound(PulsarTxnError):
    """The topic (or the partition) does not exist; create it first (``Client.create_topic``)."""

    result = Result.TopicNotFound
    server_error = ServerError.TopicNotFound


class SubscriptionNotFound(PulsarTxnError):
    """The topic has no such subscription (no consumer group with its cursor or members, no
    pending-ack log)."""

    result = Result.SubscriptionNotFound
    server_error = ServerError.SubscriptionNotFound


class InvalidTopicName(PulsarTxnError, ValueError):
    """A topic name Pulsar would not accept."""

    result = Result.InvalidTopicName
    server_error = ServerError.InvalidTopicName


class InvalidTxnID(PulsarTxnError, ValueError):
    """Text that is not a TxnID's printed form ``(0,3)``, or bytes that are not a TxnID."""

    result = Result.InvalidConfiguration


class TooManyRequests(PulsarTxnError):
    """The coordinator is overloaded; retry after a pause."""

    result = Result.TooManyLookupRequestException
    retriable = True
    server_error = ServerError.TooManyRequests


class TransactionCoordinatorNotFoundError(PulsarTxnError):
    """This endpoint does not own the TC (any more); look the owner up again and retry."""

    result = Result.TransactionCoordinatorNotFoundError
    retriable = True
    server_error = ServerError.TransactionCoordinatorNotFound

    def __init__(
        self, message: str = "", *, owner_url: str | None = None, retriable: bool | None = None
    ) -> None:
        super().__init__(message, retriable=retriable)  # not retriable: the TC does not exist at all
        self.owner_url = owner_url


class InvalidTxnStatusError(PulsarTxnError):
    """An operation that the transaction's current status does not allow."""

    result = Result.InvalidTxnStatusError
    server_error = ServerError.InvalidTxnStatus


class NotAllowedError(PulsarTxnError):
    """The operation is not allowed here (e.g. a closed consumer, a partition no longer assigned, a
    Shared subscription)."""

    result = Result.NotAllowedError
    server_error = ServerError.NotAllowedError


class AlreadyClosed(NotAllowedError):
    """The client, producer, consumer or reader was closed (pulsar-client's ``AlreadyClosed``); a
    ``NotAllowedError`` too, as it was before it had a class of its own."""

    result = Result.AlreadyClosed


class TransactionConflict(PulsarTxnError):
    """Another transaction holds a pending ack on that message (or it is already acknowledged).

    Not retriable as an operation: abort the transaction and start a new one."""

    result = Result.TransactionConflict
    server_error = ServerError.TransactionConflict


class TransactionNotFound(PulsarTxnError):
    """The coordinator does not know the TxnID (never existed, or ended beyond the retention window)."""

    result = Result.TransactionNotFound
    server_error = ServerError.TransactionNotFound


class ProducerFenced(PulsarTxnError):
    """A newer owner took over; this one may no longer act."""

    result = Result.ProducerFenced
    server_error = ServerError.ProducerFenced


class CoordinatorFencedError(ProducerFenced):
    """A coordinator instance lost ownership of a TC while acting on it; the owner decides now.

    Retriable from a client's point of view: look the owner up again.
    """

    result = Result.TransactionCoordinatorNotFoundError
    retriable = True
    server_error = ServerError.TransactionCoordinatorNotFound


class Timeout(PulsarTxnError):
    """No answer within the operation timeout."""

    result = Result.Timeout
    retriable = True


class TransactionHasOperationFailed(PulsarTxnError):
    """A send or ack inside the transaction failed, so commit aborted it instead."""


class ProtocolError(PulsarTxnError):
    """A malformed or unexpected Pulsar protocol frame."""


class ConnectionClosed(PulsarTxnError):
    """The connection to the coordinator closed; the client reconnects on the next call."""

    result = Result.AlreadyClosed
    retriable = True


class IncompatibleSchema(PulsarTxnError, ValueError):
    """Data whose shape the reader or writer cannot take: a message written with a schema the
    reader's schema cannot decode (another schema type, or an Avro writer schema with another
    fingerprint; never a misread: the bytes are kept, ``msg.data()`` still returns them), or a
    DataFrame without a ``value`` column."""

    result = Result.IncompatibleSchema
    server_error = ServerError.IncompatibleSchema


class SchemaSerializationError(PulsarTxnError, ValueError):
    """A value could not be encoded with the schema, or a payload could not be decoded (Pulsar
    Java's ``SchemaSerializationException``)."""

    result = Result.InvalidMessage


_BY_CODE: dict[ServerError, type[PulsarTxnError]] = {
    ServerError.PersistenceError: PersistenceError,
    ServerError.AuthenticationError: AuthenticationError,
    ServerError.AuthorizationError: AuthorizationError,
    ServerError.ConsumerBusy: ConsumerBusy,
    ServerError.ProducerBusy: ProducerBusy,
    ServerError.ServiceNotReady: ServiceNotReady,
    ServerError.UnsupportedVersionError: UnsupportedVersionError,
    ServerError.TopicNotFound: TopicNotFound,
    ServerError.SubscriptionNotFound: SubscriptionNotFound,
    ServerError.InvalidTopicName: InvalidTopicName,
    ServerError.IncompatibleSchema: IncompatibleSchema,
    ServerError.TooManyRequests: TooManyRequests,
    ServerError.TransactionCoordinatorNotFound: TransactionCoordinatorNotFoundError,
    ServerError.InvalidTxnStatus: InvalidTxnStatusError,
    ServerError.NotAllowedError: NotAllowedError,
    ServerError.TransactionConflict: TransactionConflict,
    ServerError.TransactionNotFound: TransactionNotFound,
    ServerError.ProducerFenced: ProducerFenced,
    ServerError.IncompatibleSchema: IncompatibleSchema,
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


def from_store_error(exc: StoreError, context: str = "") -> PulsarTxnError:
    """The application-facing error for a storage-layer one (the caller chains ``exc`` as its cause):
    the storage layer never raises to applications directly. ``context`` prefixes the message."""
    message = f"{context}: {exc}" if context else str(exc)
    if isinstance(exc, ClientConfigError):
        return ConfigError(message)
    if isinstance(exc, BrokerUnavailableError):
        return ConnectError(message)
    if isinstance(exc, TopicNotFoundError):
        return TopicNotFound(message)
    if isinstance(exc, RecordTooLargeError):
        return MessageTooBig(message)
    return PersistenceError(message, retriable=exc.retriable)


def store_failure(error: StoreError | None, what: str) -> PulsarTxnError:
    """``from_store_error`` for a write whose delivery report failed (``error`` None: it came back
    without an offset), with the storage error chained as its cause."""
    if error is None:
        return PersistenceError(f"{what}: no offset")
    failure = from_store_error(error, what)
    failure.__cause__ = error
    return failure
