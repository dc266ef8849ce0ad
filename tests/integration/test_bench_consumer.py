"""`txnsim bench consumer` with tiny sizes: the committed, 10%-aborted and 50%-aborted topics are read at both
isolation levels without a record of an aborted transaction leaking, and a read_committed consumer behind an
open transaction is handed nothing while its RSS is sampled. Speed is not judged here."""
from __future__ import annotations

import pytest

from txnsim.bench import consumer_bench


@pytest.mark.slow
def test_half_aborted_reads_and_the_memory_behind_an_open_transaction():
    result = consumer_bench.run(records=2_000, txn_size=100, repeat=1, behind_records=5_000)

    committed, tenth, half, memory = result.tables
    columns = {name: i for i, name in enumerate(half.columns)}
    by_level = {row[0].removesuffix(" (baseline)"): row for row in half.rows}
    assert by_level["read_uncommitted"][columns["records returned"]] == "2,000"
    assert by_level["read_committed"][columns["records returned"]] == "1,000"
    assert by_level["read_committed"][columns["of aborted txns"]] == "0"
    assert len(memory.rows) == 11
    assert all(float(row[memory.columns.index("consumer RSS MiB")]) > 0 for row in memory.rows)
    verdicts = {v.target: v for v in result.verdicts}
    assert any("half the transactions aborted" in target for target in verdicts)
    assert next(v for t, v in verdicts.items() if "no record of an aborted" in t).met
    assert next(v for t, v in verdicts.items() if "nothing behind the open transaction" in t).met
    assert any("memory stays flat" in target for target in verdicts)
