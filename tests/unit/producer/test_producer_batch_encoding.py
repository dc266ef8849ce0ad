"""The producer's batch encoder (records written straight into the batch buffer, from lookup tables in
the common case) against the existing decoder and the node's framing check: every record comes back
exactly as sent, whichever path encoded it."""
from __future__ import annotations

import random

import pytest

from partitions.validation import framing_problem
from producer.accumulator import RecordAccumulator
from proto.records import HEADER_SIZE, BatchBuilder, Record, iter_batches
from proto.structs import TopicPartition

BASE_TS = 1_700_000_000_000


def reference_varint(n: int) -> bytes:
    """Zigzag varint as KAFKA-REFERENCE §6 describes it, written the slow, obvious way."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def reference_record(offset_delta: int, timestamp_delta: int, key: bytes | None, value: bytes | None,
                     headers: list[tuple[str, bytes | None]]) -> bytes:
    def field(data: bytes | None) -> bytes:
        return reference_varint(-1) if data is None else reference_varint(len(data)) + data

    body = b"\x00" + reference_varint(timestamp_delta) + reference_varint(offset_delta) + field(key) + field(value)
    body += reference_varint(len(headers)) + b"".join(field(k.encode()) + field(v) for k, v in headers)
    return reference_varint(len(body)) + body


def random_record(rng: random.Random, index: int) -> tuple[int, bytes | None, bytes | None, list]:
    timestamp = BASE_TS + rng.choice([0, 1, 63, 64, 5_000, -1, -70_000, 2**40])
    key = rng.choice([None, b"", b"k%d" % index, b"K" * 7_999, b"K" * 8_200])
    value = rng.choice([None, b"", b"v" * 100, b"%d" % index, b"V" * 7_999, b"V" * 9_000])
    headers = rng.choice([[], [], [("trace", b"abc")], [("h\u00e9", None), ("big", b"x" * 300)]])
    return timestamp, key, value, headers


@pytest.mark.parametrize("seed", range(5))
def test_every_record_decodes_as_sent_and_matches_the_reference_bytes(seed):
    rng = random.Random(seed)
    builder = BatchBuilder(BASE_TS, max_bytes=1 << 30)
    sent, expected_body = [], b""
    for index in range(rng.randrange(1, 600)):
        timestamp, key, value, headers = random_record(rng, index)
        assert builder.try_append(timestamp, key, value, headers) == index
        sent.append(Record(1000 + index, timestamp, key, value, tuple(headers)))
        expected_body += reference_record(index, timestamp - BASE_TS, key, value, headers)
    payload = builder.build(producer_id=42, producer_epoch=3, base_sequence=17, transactional=True, base_offset=1000)

    assert payload[HEADER_SIZE:] == expected_body
    (batch,) = iter_batches(payload)  # checks the CRC
    assert framing_problem(batch.raw, batch.header.records_count) is None  # what the node checks on append
    assert list(batch.records()) == sent
    header = batch.header
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (42, 3, 17)
    assert header.is_transactional and header.records_count == len(sent)
    assert header.last_offset_delta == len(sent) - 1
    assert header.max_timestamp == max(r.timestamp for r in sent)


def test_thousands_of_small_records_cross_every_varint_width():
    """Offset deltas past 63 and 8191 take 2 and 3 bytes; the table-driven path must switch over correctly."""
    builder = BatchBuilder(BASE_TS, max_bytes=1 << 30)
    values = [b"%d" % i for i in range(20_000)]
    for i, value in enumerate(values):
        assert builder.try_append(BASE_TS + i % 100, None, value) == i
    (batch,) = iter_batches(builder.build())
    records = list(batch.records())
    assert [r.value for r in records] == values
    assert [r.offset for r in records] == list(range(20_000))
    assert [r.timestamp for r in records] == [BASE_TS + i % 100 for i in range(20_000)]


def test_try_append_refuses_exactly_what_has_room_for_refuses_and_writes_nothing():
    rng = random.Random(7)
    for _ in range(200):
        builder = BatchBuilder(BASE_TS, max_bytes=rng.choice([200, 1_000, 16_384]))
        while True:
            timestamp, key, value, headers = random_record(rng, builder.count)
            fits = builder.has_room_for(key, value)
            size_before, count_before = builder.size, builder.count
            delta = builder.try_append(timestamp, key, value, headers)
            if not fits:
                assert delta == -1 and (builder.size, builder.count) == (size_before, count_before)
                break
            assert delta == count_before
        (batch,) = iter_batches(builder.build())
        assert len(list(batch.records())) == builder.count


def test_records_sent_through_the_accumulator_come_back_from_the_built_batch():
    tp = TopicPartition("orders", 2)
    accumulator = RecordAccumulator(batch_size=16_384, linger_ms=5, buffer_memory=1 << 24)
    sent = [(BASE_TS + i // 10, b"key-%d" % i if i % 3 else None, b"value-%d" % i) for i in range(1_000)]
    futures = [accumulator.append(tp, ts, key, value, [], max_block_s=1.0) for ts, key, value in sent]
    batches = accumulator.incomplete_batches()
    decoded = []
    for batch in sorted(batches, key=lambda b: b.created):
        accumulator.close_for_send(batch)
        (built,) = iter_batches(batch.build(producer_id=1, producer_epoch=0, base_sequence=len(decoded),
                                            transactional=False))
        decoded += [(r.timestamp, r.key, r.value) for r in built.records()]
    assert decoded == sent
    assert len(batches) > 1 and all(b.builder.size <= 16_384 for b in batches)
    assert all(f is not None for f in futures)
