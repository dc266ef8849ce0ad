"""The records of an uncompressed v2 batch, decoded: every consumer's and reader's Python work per record.

setup.py compiles this module with mypyc (as partitions/framing.py): the same source, several times
faster. Where no C compiler was at hand it runs interpreted with the same answers; proto.records says
which one is loaded (RECORD_DECODING_COMPILED). Keep it to plain functions over bytes, ints and tuples,
which mypyc compiles well, and free of imports from the rest of txnsim (proto.records imports it).
"""
from __future__ import annotations

#: one record's fields: (offset, timestamp, key, value, headers), as proto.records.Record holds them
Fields = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


class _VarintTooLong(Exception):
    pass


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos` (IndexError past the end); the one-byte case, by far the commonest, first."""
    value = raw[pos]
    pos += 1
    if value < 0x80:
        return (value >> 1) ^ -(value & 1), pos
    value &= 0x7F
    shift = 7
    while True:
        byte = raw[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return (value >> 1) ^ -(value & 1), pos
        shift += 7
        if shift > 63:
            raise _VarintTooLong()


def decode_records(raw: bytes, pos: int, count: int, base_offset: int,
                   base_timestamp: int) -> tuple[list[Fields], str | None]:
    """The first `count` records from `pos` on, with their absolute offsets and timestamps, and what
    stopped the walk early (None if nothing did): the records before a damaged one are still returned,
    in order, as a lazy decoder would have handed them out before it failed."""
    out: list[Fields] = []
    batch_end = len(raw)
    try:
        for _ in range(count):
            length, pos = _varint(raw, pos)
            end = pos + length
            if length < 0 or end > batch_end:
                return out, "record runs past the end of its batch"
            timestamp_delta, pos = _varint(raw, pos + 1)  # after the attributes byte
            offset_delta, pos = _varint(raw, pos)
            key_length, pos = _varint(raw, pos)
            key: bytes | None = None
            if key_length >= 0:
                if pos + key_length > batch_end:
                    return out, "record field runs past the end of its batch"
                key = raw[pos:pos + key_length]
                pos += key_length
            value_length, pos = _varint(raw, pos)
            value: bytes | None = None
            if value_length >= 0:
                if pos + value_length > batch_end:
                    return out, "record field runs past the end of its batch"
                value = raw[pos:pos + value_length]
                pos += value_length
            header_count, pos = _varint(raw, pos)
            headers: tuple[tuple[str, bytes | None], ...] = ()
            if header_count > 0:
                decoded: list[tuple[str, bytes | None]] = []
                for _h in range(header_count):
                    name_length, pos = _varint(raw, pos)
                    name = b""
                    if name_length >= 0:
                        if pos + name_length > batch_end:
                            return out, "record field runs past the end of its batch"
                        name = raw[pos:pos + name_length]
                        pos += name_length
                    header_length, pos = _varint(raw, pos)
                    header_value: bytes | None = None
                    if header_length >= 0:
                        if pos + header_length > batch_end:
                            return out, "record field runs past the end of its batch"
                        header_value = raw[pos:pos + header_length]
                        pos += header_length
                    decoded.append((name.decode("utf-8", "replace"), header_value))
                headers = tuple(decoded)
            if pos != end:
                return out, "record length does not match its fields"
            out.append((base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, headers))
    except IndexError:
        return out, "record is truncated inside a varint"
    except _VarintTooLong:
        return out, "varint is too long"
    return out, None
