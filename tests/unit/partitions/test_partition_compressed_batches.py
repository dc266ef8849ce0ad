"""Compressed batches are inflated and checked at append as Kafka's LogValidator does: a bad one is refused
whole, and a good one is stored as sent and read back by every reader."""
from __future__ import annotations

import struct
import zlib

import cramjam
import crc32c
import pytest

from proto import compression, records
from proto.compression import Codec
from proto.errors import CorruptMessageError, UnsupportedCompressionTypeError
from proto.records import HEADER_SIZE
from proto.structs import IsolationLevel

UNCOMMITTED = IsolationLevel.READ_UNCOMMITTED
CODECS = [Codec.GZIP, Codec.SNAPPY, Codec.LZ4, Codec.ZSTD]


def batch_of(values: list[bytes], codec: Codec) -> bytes:
    return records.encode_batch([(1000 + i, b"k%d" % i, v, (("h", b"x"),)) for i, v in enumerate(values)],
                                codec=codec)


def with_payload(batch: bytes, payload: bytes, *, attributes: int | None = None, count: int | None = None) -> bytes:
    """The batch's header over another records block, with a valid CRC: only a decoder can tell it is wrong."""
    raw = bytearray(batch[:HEADER_SIZE]) + payload
    struct.pack_into(">i", raw, 8, len(raw) - records.LOG_OVERHEAD)
    if attributes is not None:
        struct.pack_into(">h", raw, 21, attributes)
    if count is not None:
        struct.pack_into(">i", raw, 23, count - 1)  # lastOffsetDelta
        struct.pack_into(">i", raw, 57, count)      # recordsCount
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


def xerial(data: bytes, block: int = 100) -> bytes:
    """snappy in xerial's framing, as Java clients write it: a 16-byte header, then length-prefixed blocks."""
    out = bytearray(b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1))
    for start in range(0, len(data), block):
        chunk = bytes(cramjam.snappy.compress_raw(data[start:start + block]))
        out += struct.pack(">i", len(chunk)) + chunk
    return bytes(out)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_compressed_batch_is_stored_as_sent_and_decoded_by_readers(open_log, codec):
    log = open_log()
    batch = batch_of([b"one", b"two", b"three"], codec)
    log.append(batch)
    stored = log.read(0, 1 << 20, UNCOMMITTED).records
    assert stored[16:] == batch[16:]  # byte for byte but the offset and leader epoch the log assigned
    (read,) = records.iter_batches(stored)
    assert [(r.offset, r.key, r.value, r.headers) for r in read.records()] == [
        (0, b"k0", b"one", (("h", b"x"),)), (1, b"k1", b"two", (("h", b"x"),)), (2, b"k2", b"three", (("h", b"x"),))]
    assert log.offset_for_timestamp(1001, UNCOMMITTED) == (1, 1001)  # found inside the compressed batch


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_garbage_behind_a_valid_crc_is_corrupt_and_stores_nothing(open_log, codec):
    log = open_log()
    log.append(batch_of([b"before"], Codec.NONE))
    bad = with_payload(batch_of([b"x"], codec), b"not compressed at all" * 5)
    with pytest.raises(CorruptMessageError, match="do not decompress"):
        log.append(bad)
    assert log.log_end_offset == 1 and log.high_watermark == 1


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_batch_claiming_more_records_than_it_holds_is_corrupt(open_log, codec):
    """The batch that once moved a high watermark from 12 to 2,147,483,659."""
    log = open_log()
    honest = batch_of([b"a", b"b"], codec)
    inflated = compression.decompress(codec, honest[HEADER_SIZE:])
    lying = with_payload(honest, compression.compress(codec, inflated), count=2**31 - 1)
    with pytest.raises(CorruptMessageError, match="2147483647 records"):
        log.append(lying)
    assert log.log_end_offset == 0


@pytest.mark.parametrize("codec_id", [5, 6, 7])
def test_codec_ids_kafka_never_assigned_are_unsupported(open_log, codec_id):
    log = open_log()
    batch = batch_of([b"x"], Codec.NONE)
    with pytest.raises(UnsupportedCompressionTypeError, match=f"codec id {codec_id}"):
        log.append(with_payload(batch, batch[HEADER_SIZE:], attributes=codec_id))
    assert log.log_end_offset == 0


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_inflating_past_the_limit_is_refused_without_inflating_it_all(codec):
    bomb = compression.compress(codec, bytes(100_000))
    with pytest.raises(CorruptMessageError, match="past 1000|inflate to 100000"):
        compression.decompress(codec, bomb, limit=1000)
    assert compression.decompress(codec, bomb, limit=100_000) == bytes(100_000)  # exactly at the limit is fine


def test_a_gzip_bomb_over_the_node_limit_is_refused_at_append(open_log):
    """65 KiB of gzip that would inflate to 65 MiB: refused once 64 MiB are out, nothing kept."""
    log = open_log()
    compressor = zlib.compressobj(9, zlib.DEFLATED, 31)
    bomb = compressor.compress(bytes(65 << 20)) + compressor.flush()
    batch = with_payload(batch_of([b"x"], Codec.GZIP), bomb)
    with pytest.raises(CorruptMessageError, match="inflate past"):
        log.append(batch)
    assert log.log_end_offset == 0


def test_snappy_in_xerial_framing_as_java_clients_write_it_is_read():
    plain = batch_of([b"java " * 50, b"client"], Codec.NONE)
    batch = with_payload(plain, xerial(plain[HEADER_SIZE:]), attributes=int(Codec.SNAPPY))
    (parsed,) = records.iter_batches(batch)
    assert [r.value for r in parsed.records()] == [b"java " * 50, b"client"]
    with pytest.raises(CorruptMessageError, match="snappy block"):
        compression.decompress(Codec.SNAPPY, xerial(plain[HEADER_SIZE:])[:-5] + b"\x7f\xff\xff\xff")


def test_a_reader_of_a_damaged_compressed_batch_is_told_why():
    bad = with_payload(batch_of([b"x"], Codec.LZ4), b"garbage" * 4)
    (parsed,) = records.iter_batches(bad)
    with pytest.raises(CorruptMessageError, match="lz4"):
        list(parsed.records())
