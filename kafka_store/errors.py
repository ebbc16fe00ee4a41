"""Typed errors of the storage layer. Each says whether retrying may help."""

from __future__ import annotations


class StoreError(Exception):
    """Root of every error raised by ``kafka_store``."""

    retriable: bool = False

    def __init__(self, message: str, *, retriable: bool | None = None) -> None:
        super().__init__(message)
        if retriable is not None:
            self.retriable = retriable


class BrokerUnavailableError(StoreError):
    """The Kafka cluster did not answer in time (dead broker, wrong address)."""

    retriable = True

    @classmethod
    def no_answer(cls, what: str, timeout_s: float) -> BrokerUnavailableError:
        """For a request that timed out without any error from the client (e.g. an admin future's
        own ``TimeoutError``, which is not a ``KafkaException``)."""
        return cls(f"{what}: no answer in {timeout_s:g} s")


class ClientConfigError(StoreError):
    """The Kafka client refused a setting (an unknown or Java-only property, a bad value)."""


class TopicNotFoundError(StoreError):
    """A topic or partition that the operation needs does not exist."""


class GroupNotEmptyError(StoreError):
    """A consumer group cannot be deleted while it has members."""

    retriable = True


class RecordTooLargeError(StoreError):
    """A record is larger than the broker or producer accepts."""


class ProduceError(StoreError):
    """Kafka refused or failed to store a record."""


class BrokerStartError(StoreError):
    """The embedded broker could not be started or stopped."""


class CodecError(StoreError):
    """An internal record could not be encoded or decoded."""


class CorruptRecordError(CodecError):
    """Bytes that do not form a valid internal record (truncated, bad magic, bad body)."""


class UnknownRecordKindError(CodecError):
    """A record of a kind this build does not know."""


class UnsupportedRecordVersionError(CodecError):
    """A record of a known kind, written with a schema version this build cannot read."""
