"""The compression codecs of Kafka's v2 batches (attribute bits 0-2), both ways, with a bound on inflation.

Kafka compresses a batch's records as one block after the 61-byte header: gzip (1), snappy (2, raw or in
xerial's framing, which Java clients write), lz4 (3, the frame format) and zstd (4). cramjam does all four
in Rust. Inflating is bounded: the output goes into an anonymous mapping of `limit` bytes (the kernel
zeroes pages only as they are written, so a large bound costs nothing unused) and anything that would run
past it is refused, so a small batch claiming gigabytes of records cannot exhaust a node's memory.
"""
from __future__ import annotations

import enum
import mmap
import struct

import cramjam

from proto.errors import CorruptMessageError, UnsupportedCompressionTypeError

#: attribute bits 0-2 of a batch: its codec
CODEC_MASK = 0x07
#: how far one batch's records may inflate: 64 MiB, 64 times Kafka's default message.max.bytes (a batch
#: of Java's default batch.size inflates to 16 KiB, librdkafka's to 1 MiB)
INFLATE_LIMIT = 64 * 1024 * 1024

#: xerial's snappy-java stream header (SnappyCodec.MAGIC_HEADER), then version and compatible version
_XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = 16
_BLOCK_LENGTH = struct.Struct(">i")


class Codec(enum.IntEnum):
    """Kafka's CompressionType ids."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def of_attributes(cls, attributes: int) -> Codec:
        """The codec of a batch's attributes; UNSUPPORTED_COMPRESSION_TYPE for ids 5-7, which Kafka has not
        assigned."""
        codec_id = attributes & CODEC_MASK
        try:
            return cls(codec_id)
        except ValueError:
            raise UnsupportedCompressionTypeError(
                f"compression codec id {codec_id} is not one of Kafka's "
                "(0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd)") from None


_CRAMJAM = {Codec.GZIP: cramjam.gzip, Codec.LZ4: cramjam.lz4, Codec.ZSTD: cramjam.zstd}
#: what cramjam says when the output buffer is full (std::io::Write's WriteZero; snappy's own wording)
_OVERFLOW = ("failed to write whole buffer", "smaller than required")


def compress(codec: Codec, data: bytes) -> bytes:
    """`data` compressed as Kafka clients write it (snappy raw, as librdkafka writes it)."""
    if codec is Codec.NONE:
        return data
    if codec is Codec.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    return bytes(_CRAMJAM[codec].compress(data))


def decompress(codec: Codec, payload: bytes, limit: int = INFLATE_LIMIT) -> bytes:
    """The records block of a compressed batch; CORRUPT_MESSAGE if it does not inflate, or inflates past
    `limit` bytes."""
    if codec is Codec.NONE:
        return payload
    try:
        if codec is Codec.SNAPPY:
            return _snappy(payload, limit)
        return _bounded(codec, payload, limit)
    except cramjam.DecompressionError as error:
        raise CorruptMessageError(f"the {codec.name.lower()} records do not decompress: "
                                  f"{error}") from None


def _bounded(codec: Codec, payload: bytes, limit: int) -> bytes:
    out = mmap.mmap(-1, limit + 1)  # one byte more: filling it whole means the limit was passed
    try:
        try:
            size = _CRAMJAM[codec].decompress_into(payload, out)
        except cramjam.DecompressionError as error:
            if any(words in str(error) for words in _OVERFLOW):
                size = limit + 1
            else:
                raise
        if size > limit:
            raise CorruptMessageError(f"the {codec.name.lower()} records inflate past "
                                      f"{limit} bytes, the most one batch may hold here")
        return out[:size]
    finally:
        out.close()


def _snappy(payload: bytes, limit: int) -> bytes:
    """Raw snappy (librdkafka) or xerial's framing (Java clients): blocks of a 4-byte length and raw
    snappy. Each raw block states its inflated length first, so the bound is checked before inflating."""
    if not payload.startswith(_XERIAL_MAGIC):
        _check_snappy_length(cramjam.snappy.decompress_raw_len(payload), limit)
        return bytes(cramjam.snappy.decompress_raw(payload))
    blocks, total, pos = [], 0, _XERIAL_HEADER_SIZE
    while pos < len(payload):
        if pos + 4 > len(payload):
            raise CorruptMessageError("a snappy block's length is cut off")
        (length,) = _BLOCK_LENGTH.unpack_from(payload, pos)
        pos += 4
        if length < 0 or pos + length > len(payload):
            raise CorruptMessageError(f"a snappy block claims {length} bytes, "
                                      f"{len(payload) - pos} remain")
        block = payload[pos:pos + length]
        pos += length
        total += cramjam.snappy.decompress_raw_len(block)
        _check_snappy_length(total, limit)
        blocks.append(bytes(cramjam.snappy.decompress_raw(block)))
    return b"".join(blocks)


def _check_snappy_length(length: int, limit: int) -> None:
    if length > limit:
        raise CorruptMessageError(f"the snappy records inflate to {length} bytes, past "
                                  f"{limit}, the most one batch may hold here")
