"""`txnsim bench sim`: the simulator's speed per seed, with the median and the issue's target as a verdict
(the figure itself is measured in the benchmark, never asserted here)."""
from __future__ import annotations

from txnsim.bench import sim_bench


def test_the_simulator_benchmark_times_whole_seeds_and_states_the_target():
    result = sim_bench.run(repeat=1)
    (table,) = result.tables
    seed, median = table.rows
    assert seed[0] == "1" and median[0] == "median"
    assert float(seed[1]) > 0 and float(seed[3]) > 0  # simulated seconds, and per wall second
    assert seed[-1] == "held"
    targets = {v.target: v for v in result.verdicts}
    assert any("simulated seconds per wall second" in t for t in targets)
    assert targets["every seed held every invariant"].met
