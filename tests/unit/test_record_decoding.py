"""Every reader's record decoding (proto/record_decoding.py): compiled by setup.py, answering exactly as its
source does, and handing back what the encoder wrote, headers and null keys and values included."""
from __future__ import annotations

import functools

from hypothesis import given, settings
from hypothesis import strategies as st

from partitions.validation import framing_problem
from proto import compiled, record_decoding, records
from proto.errors import CorruptMessageError
from proto.records import HEADER_SIZE, iter_batches
from tests.helpers import damage_records

_header = st.tuples(st.text(max_size=8), st.one_of(st.none(), st.binary(max_size=20)))
_record = st.tuples(st.integers(0, 10**6), st.one_of(st.none(), st.binary(max_size=300)),
                    st.one_of(st.none(), st.binary(max_size=300)), st.lists(_header, max_size=3))

interpreted_decode_records = functools.cache(lambda: compiled.from_source(record_decoding, "decode_records"))


def test_setup_compiled_the_record_decoding_and_readers_use_it():
    # scripts/setup.sh builds it with mypyc; where no C compiler was at hand this says why reading is slower
    assert records.RECORD_DECODING_COMPILED, f"{record_decoding.__file__} is not the mypyc build: run bash scripts/setup.sh"
    assert records.decode_records is record_decoding.decode_records


@settings(max_examples=200, deadline=None)
@given(st.lists(_record, min_size=1, max_size=40), st.integers(0, 2**40), st.integers(0, 2**40))
def test_a_batch_decodes_to_what_was_encoded(batch_records, base_offset, base_timestamp):
    raw = records.set_base_offset(records.encode_batch([(base_timestamp + ts, k, v, tuple(h))
                                                        for ts, k, v, h in batch_records]), base_offset, 0)
    (batch,) = iter_batches(raw)
    decoded = list(batch.records())
    assert [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in decoded] == [
        (base_offset + i, base_timestamp + ts, k, v, tuple(h)) for i, (ts, k, v, h) in enumerate(batch_records)]
    assert batch.decoded() == ([tuple(r) for r in decoded], None)


@settings(max_examples=300, deadline=None)
@given(st.lists(_record, min_size=1, max_size=12), st.data())
def test_damaged_records_decode_as_the_source_says_and_fail_where_the_framing_check_fails(batch_records, data):
    raw = bytearray(records.encode_batch([(ts, k, v, tuple(h)) for ts, k, v, h in batch_records]))
    damaged = damage_records(raw, data)
    count = len(batch_records)
    answer = records.decode_records(damaged, HEADER_SIZE, count, 100, 1000)
    assert answer == interpreted_decode_records()(damaged, HEADER_SIZE, count, 100, 1000)
    decoded, problem = answer
    if framing_problem(damaged, count) is None:  # what the node accepts, every reader can read back whole
        assert problem is None and len(decoded) == count
    if problem is not None:  # a reader of records() gets those before the damaged one, then the error
        header = records.read_header(damaged)
        got = []
        try:
            for record in records.RecordBatch(header, damaged).records():
                got.append(tuple(record))
        except CorruptMessageError as error:
            assert str(error) == problem
        else:
            raise AssertionError("records() ended without the decoding error")
        assert got == records.decode_records(damaged, HEADER_SIZE, count, header.base_offset,
                                             header.base_timestamp)[0]
