"""Pulsar frames on a byte stream: encoding, and an incremental decoder for whatever ``read()`` returns.

Simple frame:  ``[u32 total_size][u32 command_size][BaseCommand]`` with total_size = 4 + command_size.
Payload frame: the simple frame followed by ``[u16 0x0e01][u32 CRC32C][u32 metadata_size][metadata]
[payload]``, the checksum covering everything after itself; total_size counts all of it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import crc32c

from pulsar_txn.errors import ProtocolError
from pulsar_txn.protocol.commands import BaseCommand

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "MAGIC_CRC32C",
    "Frame",
    "FrameDecoder",
    "FrameTooLargeError",
    "encode_command",
    "encode_payload_command",
]

DEFAULT_MAX_FRAME_SIZE = 5 * 1024 * 1024
MAGIC_CRC32C = 0x0E01

_U32 = struct.Struct(">I")
_SIZES = struct.Struct(">II")
_MAGIC_CRC = struct.Struct(">HI")
_PAYLOAD_HEADER = 2 + 4 + 4  # magic, checksum, metadata_size


class FrameTooLargeError(ProtocolError):
    """A frame announced a total size above the limit; nothing of its body was buffered."""


@dataclass(frozen=True, slots=True)
class Frame:
    command: BaseCommand
    metadata: bytes | None = None
    """MessageMetadata bytes of a payload frame; None for a simple frame."""
    payload: bytes | None = None
    size: int = 0
    """Bytes of the frame as received (decoded frames; 0 for frames made here)."""


def encode_command(base: BaseCommand) -> bytes:
    cmd = base.encode()
    return _SIZES.pack(4 + len(cmd), len(cmd)) + cmd


def encode_payload_command(base: BaseCommand, metadata: bytes, payload: bytes) -> bytes:
    cmd = base.encode()
    checked = _U32.pack(len(metadata)) + metadata + payload
    total = 4 + len(cmd) + 6 + len(checked)
    return b"".join(
        (_SIZES.pack(total, len(cmd)), cmd, _MAGIC_CRC.pack(MAGIC_CRC32C, crc32c.crc32c(checked)), checked)
    )


class FrameDecoder:
    """Splits a byte stream into frames. After it raises, the stream is unusable: close the connection."""

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        self._max = max_frame_size
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[Frame]:
        buf = self._buf
        buf += data
        frames: list[Frame] = []
        pos = 0
        end = len(buf)
        while end - pos >= 4:
            (total,) = _U32.unpack_from(buf, pos)
            # Checked on the header alone, so an oversized frame is refused before its body arrives.
            if total > self._max:
                raise FrameTooLargeError(f"frame of {total} bytes exceeds the {self._max}-byte limit")
            if total < 4:
                raise ProtocolError(f"frame total size {total} is below 4")
            if end - pos - 4 < total:
                break
            frames.append(_decode_frame(bytes(buf[pos + 4 : pos + 4 + total])))
            pos += 4 + total
        if pos:
            del buf[:pos]
        return frames

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a whole frame."""
        return len(self._buf)


def _decode_frame(body: bytes) -> Frame:
    """``body`` is a frame without its total_size field."""
    (cmd_size,) = _U32.unpack_from(body, 0)
    if cmd_size > len(body) - 4:
        raise ProtocolError(f"command size {cmd_size} exceeds the frame")
    cmd_end = 4 + cmd_size
    command = BaseCommand._decode(body, 4, cmd_end)
    if cmd_end == len(body):
        return Frame(command, size=len(body) + 4)
    if len(body) - cmd_end < _PAYLOAD_HEADER:
        raise ProtocolError("trailing bytes after the command are too short for a payload header")
    magic, checksum = _MAGIC_CRC.unpack_from(body, cmd_end)
    if magic != MAGIC_CRC32C:
        raise ProtocolError(f"bad payload magic 0x{magic:04x}")
    checked = memoryview(body)[cmd_end + 6 :]
    if crc32c.crc32c(checked) != checksum:
        raise ProtocolError("payload checksum mismatch")
    (meta_size,) = _U32.unpack_from(body, cmd_end + 6)
    meta_start = cmd_end + _PAYLOAD_HEADER
    if meta_size > len(body) - meta_start:
        raise ProtocolError(f"metadata size {meta_size} exceeds the frame")
    return Frame(
        command, body[meta_start : meta_start + meta_size], body[meta_start + meta_size :], size=len(body) + 4
    )
