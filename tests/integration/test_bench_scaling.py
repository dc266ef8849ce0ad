"""`txnsim bench scaling` with two small clusters and short runs: 100 transactional ids commit on each, the
table has a row per node count with the nodes' and the client's CPU, and every transaction committed.
Speed is not judged here."""
from __future__ import annotations

import pytest

from txnsim.bench import scaling_bench


@pytest.mark.slow
def test_one_hundred_ids_commit_on_each_cluster_size():
    result = scaling_bench.run(seconds=0.5, repeat=1, processes=1, node_counts=(1, 2))

    (table,) = result.tables
    columns = {name: i for i, name in enumerate(table.columns)}
    assert [row[0] for row in table.rows] == ["1 node", "2 nodes"]
    for row in table.rows:
        assert float(row[columns["txns/s"]].replace(",", "")) > 0
        assert float(row[columns["node CPU (cores)"]]) > 0, "the nodes did the work"
        assert float(row[columns["client CPU (cores)"]]) > 0
        assert float(row[columns["txns per marker request"]]) >= 1, "the coordinators' marker requests were counted"
    assert len(table.rows[1][columns["per node (cores)"]].split(" / ")) == 2
    assert table.rows[0][columns["ratio to 1 node"]].startswith("1.000")
    (committed,) = result.verdicts
    assert committed.met, committed.line()
