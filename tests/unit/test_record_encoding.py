"""The producer's record encoding (proto/record_encoding.py): compiled by setup.py and writing exactly the bytes
its source writes, for every record the producer can hand it, past 64-bit deltas and batch limits included."""
from __future__ import annotations

import functools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from proto import compiled, record_encoding, records
from proto.records import iter_batches

_header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20)))
#: timestamps around the batch's first, and far from it: deltas past 2**63 wrap as Kafka's varlong does
_timestamp = st.one_of(st.integers(-100, 10**6), st.integers(-(2**70), 2**70))
_record = st.tuples(_timestamp, st.one_of(st.none(), st.binary(max_size=300)),
                    st.one_of(st.none(), st.binary(max_size=9000)), st.lists(_header, max_size=3))

interpreted_builder = functools.cache(lambda: compiled.from_source(record_encoding, "BatchBuilder"))


def test_setup_compiled_the_record_encoding_and_the_producer_uses_it():
    # scripts/setup.sh builds it with mypyc; where no C compiler was at hand this says why sending is slower
    assert records.RECORD_ENCODING_COMPILED, f"{record_encoding.__file__} is not the mypyc build: run bash scripts/setup.sh"
    assert records.BatchBuilder is record_encoding.BatchBuilder


@settings(max_examples=300, deadline=None)
@given(st.lists(_record, min_size=1, max_size=30), st.integers(0, 2**41), st.sampled_from([100, 2000, 16384, 1 << 62]),
       st.integers(-1, 2**40), st.integers(-1, 2**15 - 1), st.integers(-1, 2**31 - 1), st.booleans())
def test_the_build_writes_what_its_source_writes(batch_records, base_timestamp, max_bytes, producer_id,
                                                 producer_epoch, base_sequence, transactional):
    built, source = records.BatchBuilder(base_timestamp, max_bytes), interpreted_builder()(base_timestamp, max_bytes)
    for timestamp, key, value, headers in batch_records:
        answers = [builder.try_append(base_timestamp + timestamp, key, value, tuple(headers))
                   for builder in (built, source)]
        assert answers[0] == answers[1]  # the same offset delta, or the same -1 for a record past max_bytes
        assert (built.count, built.size, built.max_timestamp) == (source.count, source.size, source.max_timestamp)
    fields = dict(producer_id=producer_id, producer_epoch=producer_epoch, base_sequence=base_sequence,
                  transactional=transactional)
    try:
        expected = source.build(**fields)
    except struct.error:  # a timestamp outside int64 does not fit the batch header
        with pytest.raises(struct.error):
            built.build(**fields)
        return
    raw = built.build(**fields)
    assert raw == expected
    (batch,) = iter_batches(raw)  # and the batch is whole: its CRC checks out
    assert batch.crc_ok() and batch.header.records_count == built.count


def test_keys_and_values_are_bytes_or_none_for_the_build():
    # the producer converts bytearray and memoryview to bytes before they get here (send() and its tests)
    builder = records.BatchBuilder(0)
    with pytest.raises(TypeError):
        builder.try_append(0, bytearray(b"key"), b"value")
    assert builder.count == 0 and builder.size == records.HEADER_SIZE
