"""The pure parts of issue 14's scenarios: /proc readers, the commit benchmark's linearity verdict and the
read-process-write exactly-once check, on made-up figures (the scenarios themselves run in
tests/integration/test_bench_*.py)."""
from __future__ import annotations

import os

from txnsim.bench import commit_bench, rpw_bench
from txnsim.bench.proc_stats import process_cpu_s, process_rss_bytes


def test_proc_readers_see_this_process_and_zero_for_a_gone_one():
    assert process_rss_bytes(os.getpid()) > 1024 * 1024
    assert process_cpu_s(os.getpid()) >= 0
    gone = 2 ** 22 + 1  # above Linux's largest pid_max
    assert process_cpu_s(gone) == 0.0 and process_rss_bytes(gone) == 0


def _latencies(ms_by_partitions: dict[int, float]) -> commit_bench.Latencies:
    return {n: ([ms / 1000] * 5, [ms / 1000] * 5, [ms / 1000] * 5) for n, ms in ms_by_partitions.items()}


def _linear_verdicts(latencies: commit_bench.Latencies) -> list[bool]:
    return [v.met for v in commit_bench.verdicts(latencies) if "linear" in v.target]


def test_commit_cost_linear_in_partitions_is_met_and_superlinear_is_missed():
    assert _linear_verdicts(_latencies({1: 1.0, 4: 1.3, 16: 2.5, 64: 7.3})) == [True, True]  # 0.1 ms each
    assert _linear_verdicts(_latencies({1: 1.0, 4: 1.3, 16: 2.5, 64: 40.0})) == [False, False]


def test_the_targets_at_four_partitions():
    met = {v.target: v.met for v in commit_bench.verdicts(_latencies({1: 1.0, 4: 2.0, 16: 3.0, 64: 4.0}))}
    assert [m for t, m in met.items() if "at 4 partitions" in t] == [True, True]
    slow = commit_bench.verdicts(_latencies({1: 1.0, 4: 6.0, 16: 7.0, 64: 8.0}))
    assert [v.met for v in slow if "at 4 partitions" in v.target] == [False, False]


def test_exactly_once_needs_every_input_record_once_in_every_run():
    def run(output: int, distinct: int) -> rpw_bench.LoopRun:
        return rpw_bench.LoopRun(100, 2, 1.0, 0.5, (0.1, 0.1, 0.1, 0.1), output, distinct)

    baseline = [rpw_bench.LoopRun(100, 2, 0.5, 0.5, (0.1, 0.1, 0.1, 0.1))]
    ok = rpw_bench.verdicts({rpw_bench.ALO: baseline, rpw_bench.EOS: [run(100, 100)]}, 100)
    assert [v.met for v in ok] == [False, True]  # half the baseline's rate: the 2x target missed
    duplicated = rpw_bench.verdicts({rpw_bench.ALO: baseline, rpw_bench.EOS: [run(101, 100)]}, 100)
    assert not duplicated[1].met
