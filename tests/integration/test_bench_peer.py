"""`txnsim bench peer` end to end with tiny sizes: librdkafka's mock cluster and txnsim (through confluent-kafka
and through txnsim's own producer) each run the peer workload, every transaction commits, and the table names
all three. Speed is not judged here."""
from __future__ import annotations

from txnsim.bench import peer_bench


def test_the_peer_workload_runs_against_the_mock_and_txnsim_side_by_side():
    result = peer_bench.run(seconds=0.3, repeat=1)

    (table,) = result.tables
    assert [row[0] for row in table.rows] == [peer_bench.MOCK, peer_bench.TXNSIM, peer_bench.OWN]
    columns = {name: i for i, name in enumerate(table.columns)}
    for row in table.rows:
        assert float(row[columns["committed records/s"]].replace(",", "")) > 0
    assert table.rows[0][columns["ratio to the mock"]].startswith("1.000")
    for row in table.rows[1:]:
        assert float(row[columns["node CPU µs/record (3 nodes)"]]) > 0, "the nodes did the work"
    assert len(result.verdicts) == 4
