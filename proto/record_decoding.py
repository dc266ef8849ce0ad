"""The records of an uncompressed v2 batch, decoded: every consumer's and reader's Python work per record.

setup.py compiles this module with mypyc (as partitions/framing.py): the same source, several times
faster. Where no C compiler was at hand it runs interpreted with the same answers; proto.records says
which one is loaded (RECORD_DECODING_COMPILED). Keep it to plain functions over bytes, ints and tuples,
which mypyc compiles well, and free of imports from the rest of txnsim (proto.records imports it).
"""
from __future__ import annotations

#: one record's fields: (offset, timestamp, key, value, headers), as proto.records.Record holds them
Fields = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


class _Damaged(Exception):
    """Stops the walk; its text says what is wrong (the words proto.records has always used)."""


def _varint(raw: bytes, pos: int) -> tuple[int, int]:
    """A zigzag varint at `pos` (IndexError past the end); the one-byte case, by far the commonest, first.
    partitions/framing.py has the same reader: each compiled module keeps its own, so that the calls of
    its hot loop stay native calls within the module."""
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
            raise _Damaged("varint is too long")


def _field(raw: bytes, pos: int) -> tuple[bytes | None, int]:
    """A length-prefixed field at `pos` (a negative length: null) and the position after it."""
    length, pos = _varint(raw, pos)
    if length < 0:
        return None, pos
    end = pos + length
    if end > len(raw):
        raise _Damaged("record field runs past the end of its batch")
    return raw[pos:end], end


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
            key, pos = _field(raw, pos)
            value, pos = _field(raw, pos)
            header_count, pos = _varint(raw, pos)
            if header_count > end - pos:  # each header takes two bytes at least; and no count past 64 bits
                return out, "record length does not match its fields"
            headers: tuple[tuple[str, bytes | None], ...] = ()
            if header_count > 0:
                decoded: list[tuple[str, bytes | None]] = []
                for _h in range(header_count):
                    name, pos = _field(raw, pos)
                    header_value, pos = _field(raw, pos)
                    decoded.append(((name or b"").decode("utf-8", "replace"), header_value))
                headers = tuple(decoded)
            if pos != end:
                return out, "record length does not match its fields"
            out.append((base_offset + offset_delta, base_timestamp + timestamp_delta, key, value, headers))
    except IndexError:
        return out, "record is truncated inside a varint"
    except _Damaged as damage:
        return out, str(damage)
    return out, None
