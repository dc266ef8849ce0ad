"""`txnsim bench rpw` with tiny sizes: both read-process-write loops process every input record on a real
cluster, the exactly-once run's output holds each input record once, and the target's verdict is printed.
Speed is not judged here."""
from __future__ import annotations

import pytest

from txnsim.bench import rpw_bench


@pytest.mark.slow
def test_both_loops_process_every_record_and_the_exactly_once_output_is_exact():
    result = rpw_bench.run(records=2_000, repeat=1)

    (table,) = result.tables
    columns = {name: i for i, name in enumerate(table.columns)}
    assert [row[0].removesuffix(" (baseline)") for row in table.rows] == [rpw_bench.ALO, rpw_bench.EOS]
    for row in table.rows:
        assert float(row[columns["records/s"]].replace(",", "")) > 0
        assert float(row[columns["commits/s"]].replace(",", "")) > 0
        assert 0 < float(row[columns["records per poll"]].replace(",", "")) <= 500
    assert table.rows[1][columns["output read back / distinct"]] == "2,000 / 2,000"
    target, exact = result.verdicts
    assert "2x or more of at-least-once" in target.line()
    assert exact.met, exact.line()
