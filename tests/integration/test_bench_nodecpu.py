"""`txnsim bench nodecpu` with a small run: the nodes' CPU per written and per served record is positive and
every record written was acknowledged. Speed is not judged here."""
from __future__ import annotations

import pytest

from txnsim.bench import nodecpu_bench


@pytest.mark.slow
def test_node_cpu_per_record_is_measured_for_writing_and_reading():
    # /proc counts CPU in 10 ms ticks: serving 5,000 records (about 3 ms of node CPU) can read as 0 ticks
    result = nodecpu_bench.run(records=100_000, repeat=1)

    (table,) = result.tables
    columns = {name: i for i, name in enumerate(table.columns)}
    assert [row[0] for row in table.rows] == list(nodecpu_bench.PHASES)
    for row in table.rows:
        assert float(row[columns["node CPU µs/record (3 nodes)"]]) > 0
        assert len(row[columns["per node µs/record"]].split(" / ")) == 3
        assert float(row[columns["records/s"]].replace(",", "")) > 0
    (acknowledged,) = result.verdicts
    assert acknowledged.met, acknowledged.line()
