"""The proto2 codec, the command set and the frame codec, without any network."""

from __future__ import annotations

import contextlib
import struct

import crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pulsar_txn.errors import ProtocolError, ServerError
from pulsar_txn.protocol import (
    BaseCommand,
    CommandAddPartitionToTxn,
    CommandAddPartitionToTxnResponse,
    CommandAddSubscriptionToTxn,
    CommandAddSubscriptionToTxnResponse,
    CommandConnect,
    CommandConnected,
    CommandEndTxn,
    CommandEndTxnResponse,
    CommandError,
    CommandLookupTopic,
    CommandLookupTopicResponse,
    CommandNewTxn,
    CommandNewTxnResponse,
    CommandPing,
    CommandPong,
    CommandTcClientConnectRequest,
    CommandTcClientConnectResponse,
    CommandType,
    FeatureFlags,
    FrameDecoder,
    FrameTooLargeError,
    LookupType,
    Message,
    Subscription,
    encode_command,
    encode_payload_command,
    parse_tc_assign_topic,
    tc_assign_topic,
    wrap,
)
from pulsar_txn.txnid import TxnAction

U64_MAX = (1 << 64) - 1

SAMPLES: list[Message] = [
    CommandConnect(
        client_version="2.11.0",
        auth_method=0,
        auth_data=b"\x00token\xff",
        protocol_version=20,
        auth_method_name="token",
        proxy_to_broker_url="pulsar://b:6650",
        original_principal="p",
        original_auth_data="d",
        original_auth_method="m",
        feature_flags=FeatureFlags(
            supports_auth_refresh=True,
            supports_broker_entry_metadata=True,
            supports_partial_producer=True,
            supports_topic_watchers=True,
        ),
    ),
    CommandConnected(
        server_version="pulsar-txn-0.1",
        protocol_version=20,
        max_message_size=5 * 1024 * 1024,
        feature_flags=FeatureFlags(supports_auth_refresh=True),
    ),
    CommandError(request_id=7, error=ServerError.TransactionConflict, message="conflict ü"),
    CommandPing(),
    CommandPong(),
    CommandLookupTopic(
        topic=tc_assign_topic(3),
        request_id=U64_MAX,
        authoritative=True,
        original_principal="p",
        original_auth_data="d",
        original_auth_method="m",
        advertised_listener_name="internal",
    ),
    CommandLookupTopicResponse(
        broker_service_url="pulsar://a:6650",
        broker_service_url_tls="pulsar+ssl://a:6651",
        response=LookupType.Failed,
        request_id=9,
        authoritative=True,
        error=ServerError.ServiceNotReady,
        message="not yet",
        proxy_through_service_url=True,
    ),
    CommandTcClientConnectRequest(request_id=1, tc_id=4),
    CommandTcClientConnectResponse(
        request_id=1, error=ServerError.TransactionCoordinatorNotFound, message="x"
    ),
    CommandNewTxn(request_id=2, txn_ttl_seconds=60, tc_id=1),
    CommandNewTxnResponse(
        request_id=2, txnid_least_bits=U64_MAX, txnid_most_bits=1, error=None, message=None
    ),
    CommandAddPartitionToTxn(
        request_id=3, txnid_least_bits=5, txnid_most_bits=1, partitions=["persistent://t/n/a-partition-0", ""]
    ),
    CommandAddPartitionToTxnResponse(request_id=3, txnid_least_bits=5, txnid_most_bits=1),
    CommandAddSubscriptionToTxn(
        request_id=4,
        txnid_least_bits=5,
        txnid_most_bits=1,
        subscription=[Subscription(topic="a", subscription="s1"), Subscription(topic="b", subscription="s2")],
    ),
    CommandAddSubscriptionToTxnResponse(
        request_id=4,
        txnid_least_bits=5,
        txnid_most_bits=1,
        error=ServerError.TransactionNotFound,
        message="gone",
    ),
    CommandEndTxn(request_id=5, txnid_least_bits=5, txnid_most_bits=1, txn_action=TxnAction.ABORT),
    CommandEndTxnResponse(
        request_id=5,
        txnid_least_bits=5,
        txnid_most_bits=1,
        error=ServerError.InvalidTxnStatus,
        message="ended",
    ),
]


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips_alone_and_inside_a_frame(msg: Message) -> None:
    assert type(msg).decode(msg.encode()) == msg
    base = wrap(msg)
    frames = FrameDecoder().feed(encode_command(base))
    assert len(frames) == 1
    assert frames[0].command == base
    assert frames[0].command.inner() == msg


def test_subscription_round_trips() -> None:
    sub = Subscription(topic="persistent://public/default/t", subscription="sub")
    assert Subscription.decode(sub.encode()) == sub


def test_new_txn_encodes_to_hand_computed_bytes() -> None:
    cmd = CommandNewTxn(request_id=1, txn_ttl_seconds=60, tc_id=2)
    assert cmd.encode() == bytes.fromhex("0801 103c 1802")
    # BaseCommand: type=50 (08 32), then field 50 length-delimited: key 50<<3|2 = 402 = varint 92 03.
    assert wrap(cmd).encode() == bytes.fromhex("0832 9203 06 0801103c1802")


def test_ping_frame_matches_hand_computed_bytes() -> None:
    # total 9, command 5: type=18 (08 12), field 18 empty message (key 146 = 92 01, length 00).
    assert encode_command(wrap(CommandPing())) == bytes.fromhex("00000009 00000005 0812 9201 00")


def test_new_txn_frame_matches_hand_computed_bytes() -> None:
    frame = encode_command(wrap(CommandNewTxn(request_id=1, txn_ttl_seconds=60, tc_id=2)))
    assert frame == bytes.fromhex("0000000f 0000000b 0832920306 0801103c1802")


def test_negative_int32_is_a_ten_byte_varint() -> None:
    cmd = CommandConnect(client_version="c", protocol_version=-1)
    assert cmd.encode() == bytes.fromhex("0a0163") + bytes.fromhex("20 ffffffffffffffffff01")
    assert CommandConnect.decode(cmd.encode()).protocol_version == -1


def test_large_uint64_values_round_trip() -> None:
    cmd = CommandNewTxnResponse(request_id=U64_MAX, txnid_least_bits=1 << 63, txnid_most_bits=U64_MAX)
    assert len(cmd.encode()) == 3 * (1 + 10)
    assert CommandNewTxnResponse.decode(cmd.encode()) == cmd


def test_optional_defaults_apply_when_fields_are_absent() -> None:
    decoded = CommandNewTxn.decode(bytes.fromhex("0801"))
    assert decoded == CommandNewTxn(request_id=1, txn_ttl_seconds=0, tc_id=0)
    assert CommandEndTxn.decode(bytes.fromhex("0801")).txn_action is None


def test_unknown_fields_of_every_skippable_wire_type_are_ignored() -> None:
    known = CommandNewTxn(request_id=1, txn_ttl_seconds=60, tc_id=2)
    unknown = (
        bytes.fromhex("a006 ffffffffffffffffff01")  # field 100 varint (10 bytes)
        + bytes.fromhex("a106 0102030405060708")  # field 100 fixed64
        + bytes.fromhex("a206 03 616263")  # field 100 length-delimited
        + bytes.fromhex("a506 01020304")  # field 100 fixed32
    )
    assert CommandNewTxn.decode(unknown + known.encode() + unknown) == known


def test_unknown_enum_values_are_kept_as_plain_ints() -> None:
    data = CommandError(request_id=1, error=99, message="future").encode()
    decoded = CommandError.decode(data)
    assert decoded.error == 99
    assert not isinstance(decoded.error, ServerError)
    assert isinstance(CommandError.decode(SAMPLES[2].encode()).error, ServerError)
    assert BaseCommand.decode(BaseCommand(type=99).encode()).type == 99


def test_the_last_occurrence_of_a_scalar_field_wins() -> None:
    assert CommandNewTxn.decode(bytes.fromhex("0801 0802")).request_id == 2


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "request_id is required"),
        (bytes.fromhex("1001"), "request_id is required"),
        (bytes.fromhex("08"), "truncated varint"),
        (bytes.fromhex("08ff"), "truncated varint"),
        (bytes.fromhex("08 ffffffffffffffffffff01"), "longer than 10 bytes"),
        (bytes.fromhex("0a 00"), "wire type"),  # request_id sent length-delimited
        (bytes.fromhex("0801 a206 05 6162"), "past the end"),  # unknown field too long
        (bytes.fromhex("0801 a306"), "wire type 3"),  # groups are not supported
        (bytes.fromhex("0801 0001"), "field number 0"),
    ],
)
def test_malformed_messages_raise_protocol_error(data: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        CommandNewTxn.decode(data)


def test_invalid_utf8_in_a_string_field_raises_protocol_error() -> None:
    data = bytes.fromhex("0801 1001 1a 02 c328")
    with pytest.raises(ProtocolError, match="invalid UTF-8"):
        CommandError.decode(data)


def test_string_length_past_the_buffer_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="past the end"):
        CommandError.decode(bytes.fromhex("0801 1001 1a 09 6162"))


def test_missing_required_field_in_a_nested_message_raises_protocol_error() -> None:
    # BaseCommand NEW_TXN whose CommandNewTxn lacks request_id.
    with pytest.raises(ProtocolError, match=r"CommandNewTxn\.request_id"):
        BaseCommand.decode(bytes.fromhex("0832 9203 02 1001"))


def test_encoding_rejects_missing_required_fields_and_out_of_range_values() -> None:
    cmd = CommandError(request_id=1, error=ServerError.UnknownError, message="m")
    cmd.message = None  # type: ignore[assignment]
    with pytest.raises(ProtocolError, match="message is required"):
        cmd.encode()
    with pytest.raises(ProtocolError, match="uint64"):
        CommandNewTxn(request_id=-1).encode()
    with pytest.raises(ProtocolError, match="uint64"):
        CommandNewTxn(request_id=1 << 64).encode()
    with pytest.raises(ProtocolError, match="int32"):
        CommandConnect(client_version="c", protocol_version=1 << 31).encode()
    with pytest.raises(ProtocolError, match="expected str"):
        CommandError(request_id=1, error=0, message=b"bytes").encode()  # type: ignore[arg-type]


def test_repr_hides_credentials() -> None:
    text = repr(wrap(CommandConnect(client_version="c", auth_data=b"s3cret-token", auth_method_name="token")))
    assert "s3cret" not in text
    assert "auth_data=<hidden>" in text


def test_tc_assign_topic_names_parse_back() -> None:
    assert parse_tc_assign_topic(tc_assign_topic(12)) == 12
    assert parse_tc_assign_topic("persistent://pulsar/system/transaction_coordinator_assign") is None
    assert parse_tc_assign_topic(tc_assign_topic(1) + "x") is None
    assert parse_tc_assign_topic("persistent://public/default/t-partition-1") is None


# -- frames -----------------------------------------------------------------------------------------


def test_payload_frame_round_trips_with_a_valid_crc32c() -> None:
    base = wrap(CommandPing())
    data = encode_payload_command(base, b"meta", b"payload bytes")
    cmd = base.encode()
    checked = struct.pack(">I", 4) + b"meta" + b"payload bytes"
    expected = (
        struct.pack(">II", 4 + len(cmd) + 6 + len(checked), len(cmd))
        + cmd
        + struct.pack(">HI", 0x0E01, crc32c.crc32c(checked))
        + checked
    )
    assert data == expected
    (frame,) = FrameDecoder().feed(data)
    assert (frame.command, frame.metadata, frame.payload) == (base, b"meta", b"payload bytes")


def test_payload_frame_with_a_wrong_checksum_raises_protocol_error() -> None:
    data = bytearray(encode_payload_command(wrap(CommandPing()), b"meta", b"payload"))
    data[-1] ^= 0x01
    with pytest.raises(ProtocolError, match="checksum"):
        FrameDecoder().feed(bytes(data))


def test_payload_frame_with_a_wrong_magic_raises_protocol_error() -> None:
    data = bytearray(encode_payload_command(wrap(CommandPing()), b"meta", b"payload"))
    data[8 + 5] = 0x0F  # first magic byte, after the 5-byte PING command
    with pytest.raises(ProtocolError, match="magic"):
        FrameDecoder().feed(bytes(data))


def test_frames_split_at_every_byte_are_reassembled_in_order() -> None:
    commands = [wrap(CommandNewTxn(request_id=i, txn_ttl_seconds=i, tc_id=i % 3)) for i in range(5)]
    stream = b"".join(encode_command(c) for c in commands)
    stream += encode_payload_command(wrap(CommandPong()), b"m", b"p")
    decoder = FrameDecoder()
    frames = []
    for i in range(len(stream)):
        frames.extend(decoder.feed(stream[i : i + 1]))
    assert [f.command for f in frames[:5]] == commands
    assert frames[5].payload == b"p"
    assert decoder.buffered == 0


def test_oversize_frame_is_refused_from_its_header_alone() -> None:
    decoder = FrameDecoder(max_frame_size=1024)
    with pytest.raises(FrameTooLargeError, match="1025"):
        decoder.feed(struct.pack(">I", 1025))
    assert issubclass(FrameTooLargeError, ProtocolError)


def test_frame_sizes_that_cannot_hold_a_command_raise_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="below 4"):
        FrameDecoder().feed(struct.pack(">I", 3) + b"abc")
    with pytest.raises(ProtocolError, match="command size"):
        FrameDecoder().feed(struct.pack(">II", 6, 3) + b"ab")


def test_a_frame_whose_command_has_no_type_raises_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="type is required"):
        FrameDecoder().feed(struct.pack(">II", 4, 0))


# -- fuzzing ----------------------------------------------------------------------------------------

_FUZZ = settings(max_examples=300, deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow])
_VALID = [encode_command(wrap(m)) for m in SAMPLES]


@_FUZZ
@given(st.binary(max_size=200))
def test_decoding_random_bytes_raises_only_protocol_error(data: bytes) -> None:
    for cls in (BaseCommand, CommandConnect, CommandLookupTopicResponse, CommandAddSubscriptionToTxn):
        with contextlib.suppress(ProtocolError):
            cls.decode(data)


@_FUZZ
@given(st.binary(max_size=300), st.integers(min_value=1, max_value=64))
def test_frame_decoder_on_random_bytes_raises_only_protocol_error(data: bytes, chunk: int) -> None:
    decoder = FrameDecoder(max_frame_size=4096)
    try:
        for i in range(0, len(data), chunk):
            decoder.feed(data[i : i + chunk])
    except ProtocolError:
        pass


@_FUZZ
@given(
    st.sampled_from(_VALID),
    st.lists(st.tuples(st.integers(min_value=0, max_value=10_000), st.integers(0, 255)), max_size=6),
)
def test_frame_decoder_on_mutated_valid_frames_raises_only_protocol_error(
    frame: bytes, edits: list[tuple[int, int]]
) -> None:
    data = bytearray(frame)
    for position, value in edits:
        data[position % len(data)] = value
    try:
        for parsed in FrameDecoder().feed(bytes(data)):
            assert parsed.command.type is not None
    except ProtocolError:
        pass


def test_command_type_numbers_match_the_protocol() -> None:
    numbers = {t.name: int(t) for t in CommandType}
    assert numbers["NEW_TXN"] == 50
    assert numbers["TC_CLIENT_CONNECT_RESPONSE"] == 63
    assert numbers["LOOKUP"] == 23
    assert numbers["LOOKUP_RESPONSE"] == 24
    assert numbers["END_TXN_ON_SUBSCRIPTION_RESPONSE"] == 61
