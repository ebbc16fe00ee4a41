"""The subset of Pulsar's ``pulsar.proto`` commands the transaction coordinator speaks (protocol v20).

Attribute names are snake_case; wire numbers match Pulsar's. Enum fields are typed ``int``: known
numbers decode to the IntEnum member, unknown ones stay plain ints (see ``_proto``).
"""

from __future__ import annotations

import re
from enum import IntEnum

from pulsar_txn.errors import ServerError
from pulsar_txn.protocol._proto import Kind, Message, message, pb
from pulsar_txn.txnid import TxnAction

PROTOCOL_VERSION = 20
"""The newest protocol version we speak."""

TC_CONNECT_MIN_PROTOCOL_VERSION = 19

TC_ASSIGN_TOPIC = "persistent://pulsar/system/transaction_coordinator_assign"
"""Partition N of this topic stands for TC N in lookups."""

_TC_PARTITION = re.compile(re.escape(TC_ASSIGN_TOPIC) + r"-partition-(0|[1-9][0-9]{0,9})")


def tc_assign_topic(tc_id: int) -> str:
    return f"{TC_ASSIGN_TOPIC}-partition-{tc_id}"


def parse_tc_assign_topic(topic: str) -> int | None:
    """The TC id a lookup topic names, or None when it is not a TC-assign partition."""
    match = _TC_PARTITION.fullmatch(topic)
    return int(match.group(1)) if match else None


class CommandType(IntEnum):
    """BaseCommand.Type."""

    CONNECT = 2
    CONNECTED = 3
    SUBSCRIBE = 4
    PRODUCER = 5
    SEND = 6
    SEND_RECEIPT = 7
    SEND_ERROR = 8
    MESSAGE = 9
    ACK = 10
    FLOW = 11
    UNSUBSCRIBE = 12
    SUCCESS = 13
    ERROR = 14
    CLOSE_PRODUCER = 15
    CLOSE_CONSUMER = 16
    PRODUCER_SUCCESS = 17
    PING = 18
    PONG = 19
    REDELIVER_UNACKNOWLEDGED_MESSAGES = 20
    PARTITIONED_METADATA = 21
    PARTITIONED_METADATA_RESPONSE = 22
    LOOKUP = 23
    LOOKUP_RESPONSE = 24
    SEEK = 28
    GET_LAST_MESSAGE_ID = 29
    GET_LAST_MESSAGE_ID_RESPONSE = 30
    AUTH_CHALLENGE = 36
    AUTH_RESPONSE = 37
    ACK_RESPONSE = 38
    NEW_TXN = 50
    NEW_TXN_RESPONSE = 51
    ADD_PARTITION_TO_TXN = 52
    ADD_PARTITION_TO_TXN_RESPONSE = 53
    ADD_SUBSCRIPTION_TO_TXN = 54
    ADD_SUBSCRIPTION_TO_TXN_RESPONSE = 55
    END_TXN = 56
    END_TXN_RESPONSE = 57
    END_TXN_ON_PARTITION = 58
    END_TXN_ON_PARTITION_RESPONSE = 59
    END_TXN_ON_SUBSCRIPTION = 60
    END_TXN_ON_SUBSCRIPTION_RESPONSE = 61
    TC_CLIENT_CONNECT_REQUEST = 62
    TC_CLIENT_CONNECT_RESPONSE = 63


class LookupType(IntEnum):
    """CommandLookupTopicResponse.LookupType."""

    Redirect = 0
    Connect = 1
    Failed = 2


# -- connection -------------------------------------------------------------------------------------


@message
class FeatureFlags(Message):
    supports_auth_refresh: bool = pb(1, Kind.BOOL, default=False)
    supports_broker_entry_metadata: bool = pb(2, Kind.BOOL, default=False)
    supports_partial_producer: bool = pb(3, Kind.BOOL, default=False)
    supports_topic_watchers: bool = pb(4, Kind.BOOL, default=False)


@message
class CommandConnect(Message):
    client_version: str = pb(1, Kind.STRING)
    auth_method: int | None = pb(2, Kind.ENUM, default=None)
    auth_data: bytes | None = pb(3, Kind.BYTES, default=None, secret=True)
    protocol_version: int = pb(4, Kind.INT32, default=0)
    auth_method_name: str | None = pb(5, Kind.STRING, default=None)
    proxy_to_broker_url: str | None = pb(6, Kind.STRING, default=None)
    original_principal: str | None = pb(7, Kind.STRING, default=None)
    original_auth_data: str | None = pb(8, Kind.STRING, default=None, secret=True)
    original_auth_method: str | None = pb(9, Kind.STRING, default=None)
    feature_flags: FeatureFlags | None = pb(10, Kind.MESSAGE, default=None, msg_type=FeatureFlags)


@message
class CommandConnected(Message):
    server_version: str = pb(1, Kind.STRING)
    protocol_version: int = pb(2, Kind.INT32, default=0)
    max_message_size: int | None = pb(3, Kind.INT32, default=None)
    feature_flags: FeatureFlags | None = pb(4, Kind.MESSAGE, default=None, msg_type=FeatureFlags)


@message
class CommandError(Message):
    request_id: int = pb(1, Kind.UINT64)
    error: int = pb(2, Kind.ENUM, enum_type=ServerError)
    message: str = pb(3, Kind.STRING)


@message
class CommandPing(Message):
    pass


@message
class CommandPong(Message):
    pass


# -- lookup -----------------------------------------------------------------------------------------


@message
class CommandLookupTopic(Message):
    topic: str = pb(1, Kind.STRING)
    request_id: int = pb(2, Kind.UINT64)
    authoritative: bool = pb(3, Kind.BOOL, default=False)
    original_principal: str | None = pb(4, Kind.STRING, default=None)
    original_auth_data: str | None = pb(5, Kind.STRING, default=None, secret=True)
    original_auth_method: str | None = pb(6, Kind.STRING, default=None)
    advertised_listener_name: str | None = pb(7, Kind.STRING, default=None)


@message
class CommandLookupTopicResponse(Message):
    broker_service_url: str | None = pb(1, Kind.STRING, default=None)
    broker_service_url_tls: str | None = pb(2, Kind.STRING, default=None)
    response: int | None = pb(3, Kind.ENUM, default=None, enum_type=LookupType)
    request_id: int = pb(4, Kind.UINT64)
    authoritative: bool = pb(5, Kind.BOOL, default=False)
    error: int | None = pb(6, Kind.ENUM, default=None, enum_type=ServerError)
    message: str | None = pb(7, Kind.STRING, default=None)
    proxy_through_service_url: bool = pb(8, Kind.BOOL, default=False)


class PartitionedMetadataResult(IntEnum):
    """CommandPartitionedTopicMetadataResponse.LookupType."""

    Success = 0
    Failed = 1


@message
class CommandPartitionedTopicMetadata(Message):
    topic: str = pb(1, Kind.STRING)
    request_id: int = pb(2, Kind.UINT64)
    original_principal: str | None = pb(3, Kind.STRING, default=None)
    original_auth_data: str | None = pb(4, Kind.STRING, default=None, secret=True)
    original_auth_method: str | None = pb(5, Kind.STRING, default=None)


@message
class CommandPartitionedTopicMetadataResponse(Message):
    partitions: int | None = pb(1, Kind.UINT32, default=None)
    request_id: int = pb(2, Kind.UINT64)
    response: int | None = pb(3, Kind.ENUM, default=None, enum_type=PartitionedMetadataResult)
    error: int | None = pb(4, Kind.ENUM, default=None, enum_type=ServerError)
    message: str | None = pb(5, Kind.STRING, default=None)


# -- transactions -----------------------------------------------------------------------------------


@message
class CommandTcClientConnectRequest(Message):
    request_id: int = pb(1, Kind.UINT64)
    tc_id: int = pb(2, Kind.UINT64)


@message
class CommandTcClientConnectResponse(Message):
    request_id: int = pb(1, Kind.UINT64)
    error: int | None = pb(2, Kind.ENUM, default=None, enum_type=ServerError)
    message: str | None = pb(3, Kind.STRING, default=None)


@message
class CommandNewTxn(Message):
    request_id: int = pb(1, Kind.UINT64)
    txn_ttl_seconds: int = pb(2, Kind.UINT64, default=0)
    tc_id: int = pb(3, Kind.UINT64, default=0)


@message
class CommandNewTxnResponse(Message):
    request_id: int = pb(1, Kind.UINT64)
    txnid_least_bits: int = pb(2, Kind.UINT64, default=0)
    txnid_most_bits: int = pb(3, Kind.UINT64, default=0)
    error: int | None = pb(4, Kind.ENUM, default=None, enum_type=ServerError)
    message: str | None = pb(5, Kind.STRING, default=None)


@message
class CommandAddPartitionToTxn(Message):
    request_id: int = pb(1, Kind.UINT64)
    txnid_least_bits: int = pb(2, Kind.UINT64, default=0)
    txnid_most_bits: int = pb(3, Kind.UINT64, default=0)
    partitions: list[str] = pb(4, Kind.STRING, repeated=True, default_factory=list)


@message
class CommandAddPartitionToTxnResponse(Message):
    request_id: int = pb(1, Kind.UINT64)
    txnid_least_bits: int = pb(2, Kind.UINT64, default=0)
    txnid_most_bits: int = pb(3, Kind.UINT64, default=0)
    error: int | None = pb(4, Kind.ENUM, default=None, enum_type=ServerError)
    message: str | None = pb(5, Kind.STRING, default=None)


@message
class Subscription(Message):
    topic: str = pb(1, Kind.STRING)
    subscription: str = pb(2, Kind.STRING)


@message
class CommandAddSubscriptionToTxn(Message):
    request_id: int = pb(1, Kind.UINT64)
    txnid_least_bits: int = pb(2, Kind.UINT64, default=0)
    txnid_most_bits: int = pb(3, Kind.UINT64, default=0)
    subscription: list[Subscription] = pb(
        4, Kind.MESSAGE, repeated=True, default_factory=list, msg_type=Subscription
    )


@message
class CommandAddSubscriptionToTxnResponse(Message):
    request_id: int = pb(1, Kind.UINT64)
    txnid_least_bits: int = pb(2, Kind.UINT64, default=0)
    txnid_most_bits: int = pb(3, Kind.UINT64, default=0)
    error: int | None = pb(4, Kind.ENUM, default=None, enum_type=ServerError)
    message: str | None = pb(5, Kind.STRING, default=None)


@message
class CommandEndTxn(Message):
    request_id: int = pb(1, Kind.UINT64)
    txnid_least_bits: int = pb(2, Kind.UINT64, default=0)
    txnid_most_bits: int = pb(3, Kind.UINT64, default=0)
    txn_action: int | None = pb(4, Kind.ENUM, default=None, enum_type=TxnAction)
    # Ours, not Pulsar's (a field number Pulsar does not use; its clients never send it): the
    # committing handle's token, so a COMMIT repeated by another handle is not taken as its retry.
    end_token: bytes | None = pb(1001, Kind.BYTES, default=None)


@message
class CommandEndTxnResponse(Message):
    request_id: int = pb(1, Kind.UINT64)
    txnid_least_bits: int = pb(2, Kind.UINT64, default=0)
    txnid_most_bits: int = pb(3, Kind.UINT64, default=0)
    error: int | None = pb(4, Kind.ENUM, default=None, enum_type=ServerError)
    message: str | None = pb(5, Kind.STRING, default=None)


# -- the envelope -----------------------------------------------------------------------------------


@message
class BaseCommand(Message):
    type: int = pb(1, Kind.ENUM, enum_type=CommandType)
    connect: CommandConnect | None = pb(2, Kind.MESSAGE, default=None, msg_type=CommandConnect)
    connected: CommandConnected | None = pb(3, Kind.MESSAGE, default=None, msg_type=CommandConnected)
    error: CommandError | None = pb(14, Kind.MESSAGE, default=None, msg_type=CommandError)
    ping: CommandPing | None = pb(18, Kind.MESSAGE, default=None, msg_type=CommandPing)
    pong: CommandPong | None = pb(19, Kind.MESSAGE, default=None, msg_type=CommandPong)
    partition_metadata: CommandPartitionedTopicMetadata | None = pb(
        21, Kind.MESSAGE, default=None, msg_type=CommandPartitionedTopicMetadata
    )
    partition_metadata_response: CommandPartitionedTopicMetadataResponse | None = pb(
        22, Kind.MESSAGE, default=None, msg_type=CommandPartitionedTopicMetadataResponse
    )
    lookup_topic: CommandLookupTopic | None = pb(23, Kind.MESSAGE, default=None, msg_type=CommandLookupTopic)
    lookup_topic_response: CommandLookupTopicResponse | None = pb(
        24, Kind.MESSAGE, default=None, msg_type=CommandLookupTopicResponse
    )
    new_txn: CommandNewTxn | None = pb(50, Kind.MESSAGE, default=None, msg_type=CommandNewTxn)
    new_txn_response: CommandNewTxnResponse | None = pb(
        51, Kind.MESSAGE, default=None, msg_type=CommandNewTxnResponse
    )
    add_partition_to_txn: CommandAddPartitionToTxn | None = pb(
        52, Kind.MESSAGE, default=None, msg_type=CommandAddPartitionToTxn
    )
    add_partition_to_txn_response: CommandAddPartitionToTxnResponse | None = pb(
        53, Kind.MESSAGE, default=None, msg_type=CommandAddPartitionToTxnResponse
    )
    add_subscription_to_txn: CommandAddSubscriptionToTxn | None = pb(
        54, Kind.MESSAGE, default=None, msg_type=CommandAddSubscriptionToTxn
    )
    add_subscription_to_txn_response: CommandAddSubscriptionToTxnResponse | None = pb(
        55, Kind.MESSAGE, default=None, msg_type=CommandAddSubscriptionToTxnResponse
    )
    end_txn: CommandEndTxn | None = pb(56, Kind.MESSAGE, default=None, msg_type=CommandEndTxn)
    end_txn_response: CommandEndTxnResponse | None = pb(
        57, Kind.MESSAGE, default=None, msg_type=CommandEndTxnResponse
    )
    tc_client_connect_request: CommandTcClientConnectRequest | None = pb(
        62, Kind.MESSAGE, default=None, msg_type=CommandTcClientConnectRequest
    )
    tc_client_connect_response: CommandTcClientConnectResponse | None = pb(
        63, Kind.MESSAGE, default=None, msg_type=CommandTcClientConnectResponse
    )

    def inner(self) -> Message | None:
        """The sub-command that ``type`` names, or None when it is absent or not one we know."""
        name = _FIELD_OF_TYPE.get(self.type)
        return None if name is None else getattr(self, name)


# Each sub-command's BaseCommand field has the same number as its CommandType.
_FIELD_OF_TYPE: dict[int, str] = {f.number: f.name for f in BaseCommand._FIELDS if f.number != 1}
_TYPE_OF_CLASS: dict[type[Message], CommandType] = {
    f.msg_type: CommandType(f.number) for f in BaseCommand._FIELDS if f.msg_type is not None
}


def wrap(command: Message) -> BaseCommand:
    """Put a sub-command into a BaseCommand with the matching ``type``."""
    command_type = _TYPE_OF_CLASS[type(command)]
    base = BaseCommand(type=command_type)
    setattr(base, _FIELD_OF_TYPE[command_type], command)
    return base


def type_name(command_type: int) -> str:
    """``NEW_TXN`` for 50; the number itself for types we do not know."""
    try:
        return CommandType(command_type).name
    except ValueError:
        return str(command_type)
